/* libFuzzer: the LLaMA importer's model directory (llama_hf_inspect,
 * llama_hf_configure, llama_hf_import: what llama --init-from DIR reads).
 * An input is a directory: its first two bytes (little-endian) are the
 * length of config.json, which follows; the rest is model.safetensors.
 * A directory whose config makes a small model (at most 2 layers, width
 * 64, MLP width 256, vocabulary 512, 64 positions) is configured, built,
 * compiled and imported into the step, or refused with a message; a
 * refused import leaves every parameter as it was (its promise: every
 * tensor is checked before any is written).
 *
 * Any input must give a result or a message, never a crash, a leak or a
 * broken promise (abort). Seeds: corpus/llama_dir. */
#include "fuzz_import.h"
#include "llama_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static char dir[64];

static void put(const char *name, const unsigned char *p, size_t n) {
    char path[96];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void import(void) {
    llama_hf_info info;
    mpmd_error err;
    err.msg[0] = '\0';
    if (llama_hf_inspect(dir, &info, &err) != MPMD_OK) {
        if (!err.msg[0]) abort();
        return;
    }
    if (info.layers < 1 || info.layers > 2 || info.width < 1 || info.width > 64 || info.hidden > 256 ||
        info.vocab < 1 || info.vocab > 512)
        return; /* a model too large to build for every input */
    gpt_config c = gpt_config_default();
    c.arch = GPT_ARCH_LLAMA;
    c.seq = 16, c.batch = 2, c.microbatches = 1;
    gpt_hf_given given;
    memset(&given, 0, sizeof given);
    err.msg[0] = '\0';
    if (llama_hf_configure(dir, &info, &given, &c, &err) != MPMD_OK) {
        if (!err.msg[0]) abort();
        return;
    }
    fuzz_import_into_step(&c, dir, llama_hf_import);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/mpmd_fuzz_llama_dir_%d", (int)getpid());
        if (mkdir(dir, 0700) && access(dir, W_OK)) abort();
    }
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2) n = size - 2;
    put("config.json", data + 2, n);
    put("model.safetensors", data + 2 + n, size - 2 - n);
    import();
    return 0;
}
