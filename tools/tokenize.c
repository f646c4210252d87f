/* mpmd tokenize: a text file to a token file in llm.c's format, with the
 * tokenizer of a Hugging Face model (include/mpmd_tokenizer.h).
 *
 * The token file is what llm.c's dev/data scripts write (data_common.py's
 * write_datafile): 256 little-endian int32 (magic, version, token count,
 * the rest 0), then the ids, little-endian:
 *   vocabularies up to 65536 ids: magic 20240520, version 1, uint16 ids
 *     (its "gpt-2" format, which llm.c's trainers read);
 *   larger ones (Llama 3's 128256): magic 20240801, version 7, uint32 ids
 *     (its "llama-3" format).
 * The file is written atomically: a temporary file beside it, synced, then
 * renamed over it, so a failed or interrupted run leaves no partial file.
 */
#include "tokenize.h"

#include "mpmd_tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2

static const char tokenize_help[] =
    "usage: mpmd tokenize IN -o OUT.bin --tokenizer tokenizer.json [--no-special] [--quiet]\n"
    "\n"
    "Encode the UTF-8 text of the file IN with the tokenizer of a Hugging Face model (its\n"
    "tokenizer.json: byte-level BPE such as GPT-2's, Llama 3's or Qwen's) and write the ids as a\n"
    "token file in llm.c's format, which gpt --tokens (and llm.c) read:\n"
    "  a header of 256 little-endian int32: magic, version, token count, zeros; then the ids.\n"
    "  Vocabularies of up to 65536 ids: magic 20240520, version 1, uint16 ids (llm.c's GPT-2\n"
    "  format); larger ones: magic 20240801, version 7, uint32 ids (llm.c's LLaMA 3 format).\n"
    "\n"
    "  -o, --output FILE      the token file (written atomically: a temporary file, then renamed)\n"
    "  -t, --tokenizer FILE   the tokenizer.json\n"
    "      --no-special       encode the text of special tokens (e.g. \"<|endoftext|>\") as plain\n"
    "                         text; by default they become their ids, as Hugging Face does\n"
    "  -q, --quiet            print nothing on success\n"
    "  -h, --help             this text\n"
    "\n"
    "IN may be - for standard input. At most 2 GiB of text and 2^31 - 1 tokens per file.\n"
    "\n"
    "exit status: 0 success; 2 a bad argument, a tokenizer.json mpmd cannot load or text that is\n"
    "not UTF-8 (the message on stderr); 1 a file that cannot be read or written.\n";

static int usage(const char *fmt, const char *arg) {
    fprintf(stderr, "mpmd tokenize: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `mpmd tokenize --help`)\n");
    return EXIT_USAGE;
}

/* The whole of a file (or standard input), at most `limit` bytes. Returns 0,
 * or 1 with the message printed. */
static int read_all(const char *path, size_t limit, char **out, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "mpmd tokenize: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    int too_big = 0;
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap > limit) {
            too_big = 1;
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int read_err = ferror(f), why = errno;
    if (f != stdin) fclose(f);
    if (!buf || read_err || too_big || n > limit) {
        if (!buf)
            fprintf(stderr, "mpmd tokenize: out of memory reading %s\n", path);
        else if (read_err)
            fprintf(stderr, "mpmd tokenize: cannot read %s: %s\n", path, strerror(why));
        else
            fprintf(stderr,
                    "mpmd tokenize: %s has more than %zu bytes; split it into files of at most 2 GiB\n", path,
                    limit);
        free(buf);
        return 1;
    }
    *out = buf;
    *len = n;
    return 0;
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
    p[3] = (unsigned char)(v >> 24);
}

/* Write the token file atomically; 0, or 1 with the message printed. */
static int write_tokens(const char *path, const int32_t *ids, size_t n, int wide) {
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    unsigned char *body = malloc(1024 + n * (wide ? 4 : 2));
    if (!tmp || !body) {
        free(tmp), free(body);
        fprintf(stderr, "mpmd tokenize: out of memory for %zu tokens\n", n);
        return 1;
    }
    memset(body, 0, 1024);
    put32(body, wide ? 20240801u : 20240520u);
    put32(body + 4, wide ? 7u : 1u);
    put32(body + 8, (uint32_t)n);
    unsigned char *p = body + 1024;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        if (wide)
            put32(p, v), p += 4;
        else
            p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p += 2;
    }
    size_t total = (size_t)(p - body);
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    int fail = fd < 0, why = errno;
    for (size_t off = 0; !fail && off < total;) {
        ssize_t w = write(fd, body + off, total - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            fail = 1, why = w < 0 ? errno : EIO;
        else
            off += (size_t)w;
    }
    if (!fail && fsync(fd) != 0) fail = 1, why = errno;
    if (fd >= 0 && close(fd) != 0 && !fail) fail = 1, why = errno;
    if (!fail && rename(tmp, path) != 0) fail = 1, why = errno;
    if (fail) {
        fprintf(stderr, "mpmd tokenize: cannot write %s (through %s): %s\n", path, tmp, strerror(why));
        if (fd >= 0) unlink(tmp);
    } else {
        /* the rename itself durable: sync the directory that holds it */
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
        int dfd = dir ? open(dir, O_RDONLY) : -1;
        if (dfd >= 0) fsync(dfd), close(dfd);
        free(dir);
    }
    free(tmp), free(body);
    return fail;
}

int tool_tokenize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *tok_path = NULL;
    unsigned flags = MPMD_TOKENIZE_SPECIAL;
    int quiet = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "-t") ||
                   !strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc || !*argv[i + 1]) return usage("%s needs a value", a);
            *(a[1] == 'o' || a[2] == 'o' ? &out : &tok_path) = argv[++i];
        } else if (!strncmp(a, "--output=", 9) || !strncmp(a, "--tokenizer=", 12)) {
            const char *v = strchr(a, '=') + 1;
            if (!*v) return usage("%s needs a value", a);
            *(a[2] == 'o' ? &out : &tok_path) = v;
        } else if (!strcmp(a, "--no-special")) {
            flags = 0;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-' && a[1]) {
            return usage("unknown option %s", a);
        } else if (in) {
            return usage("one input file, got a second: %s", a);
        } else {
            in = a;
        }
    }
    if (!in) return usage("%s", "no input file: mpmd tokenize IN -o OUT.bin --tokenizer tokenizer.json");
    if (!out) return usage("%s", "no output file: give -o OUT.bin");
    if (!tok_path)
        return usage("%s", "no tokenizer: give --tokenizer tokenizer.json (a Hugging Face model's)");

    mpmd_error err;
    mpmd_tokenizer *tok;
    if (mpmd_tokenizer_load(tok_path, &tok, &err)) {
        fprintf(stderr, "mpmd tokenize: %s\n", err.msg);
        return err.code == MPMD_ERR_IO || err.code == MPMD_ERR_NOMEM ? 1 : EXIT_USAGE;
    }
    char *text;
    size_t len;
    if (read_all(in, (size_t)INT32_MAX, &text, &len)) {
        mpmd_tokenizer_free(tok);
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int32_t *ids;
    size_t n;
    mpmd_status rc = mpmd_tokenizer_encode(tok, text, len, flags, &ids, &n, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(text);
    int status = 0;
    if (rc) {
        fprintf(stderr, "mpmd tokenize: %s: %s\n", in, err.msg);
        status = rc == MPMD_ERR_FORMAT ? EXIT_USAGE : 1;
    } else if (n > (size_t)INT32_MAX) {
        fprintf(stderr,
                "mpmd tokenize: %s gives %zu tokens, more than a token file's count holds (2^31 - 1)\n", in,
                n);
        status = EXIT_USAGE;
    } else {
        int wide = mpmd_tokenizer_vocab_size(tok) > 65536;
        status = write_tokens(out, ids, n, wide);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (!status && !quiet)
            printf("%s: %zu bytes -> %zu tokens (vocabulary %d) in %.3f s (%.1f MB/s); wrote %s (%s)\n", in,
                   len, n, (int)mpmd_tokenizer_vocab_size(tok), sec, sec > 0 ? (double)len / sec / 1e6 : 0.0,
                   out, wide ? "llm.c's LLaMA 3 format: uint32 ids" : "llm.c's GPT-2 format: uint16 ids");
    }
    free(ids);
    mpmd_tokenizer_free(tok);
    return status;
}
