/* libFuzzer: the GPT example's readers of files made elsewhere. The first
 * byte of an input picks the reader, the rest is the file:
 *
 *   even: a token file in llm.c's format (gpt_corpus_load_tokens) under a
 *         vocabulary of 1 .. 256 (the first byte's high bits) and a
 *         minimum length of 1 .. 16: it loads, every id below the
 *         vocabulary and as many as its header says, or it is refused with
 *         a message;
 *   odd:  GPT-2 weights in Hugging Face's layout (gpt_hf_inspect,
 *         gpt_hf_configure, gpt_hf_import): a file whose shapes make a
 *         small model (at most 2 layers, width 64, vocabulary 512, 64
 *         positions) is configured, built, compiled and imported into the
 *         step, or refused with a message; a refused import leaves every
 *         parameter as it was (its promise: all tensors are checked before
 *         any is written).
 *
 * Any input must give a result or a message, never a crash, a leak or a
 * broken promise (abort). Seeds: corpus/gpt_files. */
#include "fuzz_import.h"
#include "gpt_import.h"
#include "gpt_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static char path[64];

static void tokens(unsigned mode) {
    const int64_t vocab = 1 + (int64_t)(mode >> 1) * 2, min_len = 1 + (int64_t)(mode >> 4);
    gpt_corpus c;
    memset(&c, 0, sizeof c);
    mpmd_error err;
    err.msg[0] = '\0';
    if (gpt_corpus_load_tokens(&c, path, vocab, min_len, &err) != MPMD_OK) {
        if (!err.msg[0] || c.ids || c.ids32 || c.bytes) abort(); /* refused: a message, nothing held */
        return;
    }
    if ((!c.ids && !c.ids32) || c.len < min_len) abort();
    for (int64_t i = 0; i < c.len; i++)
        if (gpt_corpus_id(&c, i) >= vocab || gpt_corpus_id(&c, i) < 0) abort();
    gpt_corpus_free(&c);
}

static void weights(void) {
    gpt_hf_info info;
    mpmd_error err;
    err.msg[0] = '\0';
    if (gpt_hf_inspect(path, &info, &err) != MPMD_OK) {
        if (!err.msg[0]) abort();
        return;
    }
    if (info.layers < 1 || info.layers > 2 || info.width < 1 || info.width > 64 || info.vocab < 1 ||
        info.vocab > 512 || info.positions < 1 || info.positions > 64)
        return; /* a model too large to build for every input */
    gpt_config c = gpt_config_default();
    c.batch = 2, c.microbatches = 1;
    gpt_hf_given given;
    memset(&given, 0, sizeof given);
    if (info.width % 8 == 0) c.heads = (int)(info.width / 8), given.heads = 1;
    if (gpt_hf_configure(path, &info, &given, &c, &err) != MPMD_OK) {
        if (!err.msg[0]) abort();
        return;
    }
    fuzz_import_into_step(&c, path, gpt_hf_import);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (!path[0]) snprintf(path, sizeof path, "/tmp/mpmd_fuzz_gpt_files_%d.bin", (int)getpid());
    if (size < 1) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1) abort();
    fclose(f);
    if (data[0] & 1)
        weights();
    else
        tokens(data[0]);
    return 0;
}
