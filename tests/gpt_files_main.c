/* gpt_files - write the test files of gpt_files.h from the command line, for
 * the shell test of the gpt program (gpt_files.sh):
 *
 *   gpt_files hf PATH [--prefix P] [--dtype F32|BF16|F16] [--layers N] [--width N]
 *                     [--vocab N] [--positions N] [--seed N]
 *   gpt_files tokens PATH --n N --vocab V [--magic M] [--version V] [--count C]
 *                     [--bad-at K] [--seed S]
 *
 * A token file holds n ids below vocab, from seed; --bad-at K puts the id
 * `vocab` at position K; --magic, --version and --count override the
 * header's fields (by default 20240520, 1 and n). */
#include "gpt_files.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: gpt_files hf PATH [options] | gpt_files tokens PATH --n N --vocab V [options]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *kind = argv[1], *path = argv[2];
    tu_hf_opts o = tu_hf_defaults();
    long long n = -1, vocab = -1, magic = 20240520, version = 1, count = -1, bad_at = -1, seed = 1;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        long long x = strtoll(v, NULL, 10);
        if (!strcmp(k, "--prefix"))
            o.prefix = v;
        else if (!strcmp(k, "--dtype"))
            o.dtype = v;
        else if (!strcmp(k, "--layers"))
            o.layers = (int)x;
        else if (!strcmp(k, "--width"))
            o.width = x;
        else if (!strcmp(k, "--vocab"))
            o.vocab = vocab = x;
        else if (!strcmp(k, "--positions"))
            o.positions = x;
        else if (!strcmp(k, "--seed"))
            o.seed = (uint64_t)(seed = x);
        else if (!strcmp(k, "--n"))
            n = x;
        else if (!strcmp(k, "--magic"))
            magic = x;
        else if (!strcmp(k, "--version"))
            version = x;
        else if (!strcmp(k, "--count"))
            count = x;
        else if (!strcmp(k, "--bad-at"))
            bad_at = x;
        else
            return usage();
    }
    if (!strcmp(kind, "hf")) {
        mpmd_error err;
        if (tu_hf_write(path, &o, &err)) {
            fprintf(stderr, "gpt_files: %s\n", err.msg);
            return 1;
        }
        return 0;
    }
    if (strcmp(kind, "tokens") || n < 0 || vocab < 1 || vocab > 65536) return usage();
    uint16_t *ids = malloc((size_t)n * sizeof *ids + 1);
    if (!ids) return 1;
    for (long long k = 0; k < n; k++)
        ids[k] = (uint16_t)(tu_mix64((uint64_t)seed * 1000003u + (uint64_t)k) % (uint64_t)vocab);
    if (bad_at >= 0 && bad_at < n) ids[bad_at] = (uint16_t)vocab;
    int rc =
        tu_tokens_write(path, ids, n, (int32_t)magic, (int32_t)version, (int32_t)(count < 0 ? n : count));
    free(ids);
    if (rc) fprintf(stderr, "gpt_files: cannot write %s\n", path);
    return rc ? 1 : 0;
}
