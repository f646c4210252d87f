/* Checkpoints: the file is the safetensors format byte for byte (checked by
 * a reader written here, independent of the library's); state round-trips
 * bitwise; a checkpoint moves between pipeline layouts (4 ranks, 2 ranks,
 * one-rank executor) and training goes on with the same bits as a run that
 * never stopped; every truncation and byte flip of a file, and a long list
 * of malformed headers, are clear errors that leave the target unchanged; a
 * checkpoint of another model lists every mismatch; a failed save leaves the
 * previous file intact and no temporary file behind; a snapshot written on
 * another thread, after the step trained on or was freed, is the file a
 * save at the snapshot's moment writes.
 *
 * `test_checkpoint --write-sample PATH` writes the sample checkpoint that
 * tests/checkpoint_check.py decodes with Python's json module; the modes
 * --mpi-save, --mpi-resume, --local-save and --straight serve
 * tests/checkpoint_mpi.sh (saving and resuming under mpirun).
 */
#include "gpt_model.h"
#include "mpmd_checkpoint.h"
#include "testutil.h"
#include "util/half.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* The first occurrence of needle in hay (memmem is not in C11/POSIX). */
static void *find_bytes(void *hay, size_t len, const char *needle, size_t nl) {
    for (size_t i = 0; i + nl <= len; i++)
        if (memcmp((char *)hay + i, needle, nl) == 0) return (char *)hay + i;
    return NULL;
}

/* ---- files ------------------------------------------------------------------ */

static char tmpdir[256];

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", tmpdir, name); }

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc((size_t)n + 1);
    if (d && fread(d, 1, (size_t)n, f) != (size_t)n) {
        free(d);
        d = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return d;
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", path);
        abort();
    }
    fclose(f);
}

/* Entries of a directory whose name contains ".tmp." */
static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += has(e->d_name, ".tmp.");
    closedir(d);
    return n;
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[600];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            chmod(p, 0755);
            rm_tree(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

/* ---- state digests ------------------------------------------------------------- */

typedef struct {
    const char *name;
    mpmd_value v;
} named;

static int named_cmp(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* SHA-256 over (name, bytes) of every state value in name order, read from
 * the executor or from the first holder of the step; for a step also checks
 * that every holder's copy is the same. */
static void state_digest(const mpmd_graph *g, mpmd_exec *ex, mpmd_step *st, char hex[65]) {
    int n = mpmd_graph_state(g, NULL, 0);
    mpmd_value *vs = malloc((size_t)n * sizeof *vs);
    named *ns = malloc((size_t)n * sizeof *ns);
    mpmd_graph_state(g, vs, n);
    for (int i = 0; i < n; i++)
        ns[i] = (named){mpmd_value_name(g, vs[i]), vs[i]};
    qsort(ns, (size_t)n, sizeof *ns, named_cmp);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        mpmd_type t = mpmd_value_type(g, ns[i].v);
        total += strlen(ns[i].name) + 1 + mpmd_type_bytes(&t);
    }
    uint8_t *buf = malloc(total + 1), *p = buf;
    for (int i = 0; i < n; i++) {
        mpmd_type t = mpmd_value_type(g, ns[i].v);
        size_t bytes = mpmd_type_bytes(&t);
        memcpy(p, ns[i].name, strlen(ns[i].name) + 1);
        p += strlen(ns[i].name) + 1;
        const void *src = NULL;
        if (ex) {
            src = mpmd_exec_var_data(ex, ns[i].v);
        } else {
            int ranks[16];
            int nr = mpmd_step_where(st, ns[i].v, ranks, 16);
            src = nr > 0 ? mpmd_step_var_data(st, ranks[0], ns[i].v) : NULL;
            for (int k = 1; k < nr && src; k++) {
                const void *o = mpmd_step_var_data(st, ranks[k], ns[i].v);
                CHECK(o && memcmp(o, src, bytes) == 0, "\"%s\": rank %d's copy differs from rank %d's",
                      ns[i].name, ranks[k], ranks[0]);
            }
        }
        CHECK(src != NULL, "no storage for \"%s\"", ns[i].name);
        if (src)
            memcpy(p, src, bytes);
        else
            memset(p, 0, bytes);
        p += bytes;
    }
    uint8_t d[32];
    mpmd_sha256(buf, total, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    free(buf), free(ns), free(vs);
}

/* ---- the sample: four named tensors with known values ---------------------- */

#define ODD_NAME "quote\"back\\slash/\xc3\xa9"

typedef struct {
    mpmd_graph *g;
    mpmd_exec *ex;
} sample;

static sample sample_new(float base) {
    sample s;
    s.g = mpmd_graph_new();
    mpmd_param(s.g, "w", MPMD_SHAPE(2, 3), MPMD_ZEROS);
    mpmd_scope_push(s.g, "enc");
    mpmd_param(s.g, "b", MPMD_SHAPE(3), MPMD_ZEROS);
    mpmd_scope_pop(s.g);
    mpmd_variable(s.g, "count", MPMD_I32, 0, NULL, MPMD_ZEROS);
    mpmd_variable(s.g, ODD_NAME, MPMD_F32, MPMD_SHAPE(2), MPMD_ZEROS);
    s.ex = tu_exec(s.g, 1);
    float *w = mpmd_exec_var_data(s.ex, mpmd_lookup(s.g, "w"));
    float *b = mpmd_exec_var_data(s.ex, mpmd_lookup(s.g, "enc/b"));
    int32_t *c = mpmd_exec_var_data(s.ex, mpmd_lookup(s.g, "count"));
    float *q = mpmd_exec_var_data(s.ex, mpmd_lookup(s.g, ODD_NAME));
    for (int i = 0; i < 6; i++)
        w[i] = base + 0.5f * (float)i - 1.0f;
    for (int i = 0; i < 3; i++)
        b[i] = base + 100.0f + (float)i;
    *c = -7 - (int32_t)base;
    q[0] = 1.5f + base, q[1] = -2.25f;
    return s;
}

static void sample_free(sample *s) {
    mpmd_exec_free(s->ex);
    mpmd_graph_free(s->g);
}

static mpmd_checkpoint_info sample_info(void) {
    mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
    info.step = 12;
    info.seed = 34;
    info.rng_state[0] = 1, info.rng_state[1] = 2, info.rng_state[2] = 3, info.rng_state[3] = UINT64_MAX;
    snprintf(info.config, sizeof info.config, "layers=1 \"q\"\n");
    return info;
}

/* Find `key` in the header text and return the 64 characters after it. */
static int hex_after(const char *hdr, const char *key, char out[65]) {
    const char *p = strstr(hdr, key);
    if (!p) return 0;
    memcpy(out, p + strlen(key), 64);
    out[64] = '\0';
    return 1;
}

static void hex_of(const uint8_t d[32], char hex[65]) {
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* The file read by hand, as a tool that knows only the format would. */
static void test_sample_format(void) {
    char path[400];
    path_in(path, sizeof path, "sample.safetensors");
    sample s = sample_new(0.0f);
    mpmd_checkpoint_info info = sample_info();
    mpmd_error err;
    CHECK(mpmd_exec_save(s.ex, path, &info, &err) == MPMD_OK, "%s", err.msg);
    size_t len;
    uint8_t *f = read_file(path, &len);
    CHECK(f && len >= 8, "cannot read back %s", path);
    if (!f) return;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f[i];
    CHECK(n % 8 == 0 && n + 8 + 48 == len, "header length %llu, file %zu bytes (data is 48 bytes)",
          (unsigned long long)n, len);
    char *hdr = malloc(n + 1);
    memcpy(hdr, f + 8, n);
    hdr[n] = '\0';
    CHECK(hdr[0] == '{', "header starts with %c", hdr[0]);
    size_t end = strlen(hdr);
    while (end && hdr[end - 1] == ' ')
        end--;
    CHECK(end && hdr[end - 1] == '}' && n - end < 8, "header ends with '}' and fewer than 8 spaces");
    /* tensors in name order, data contiguous in that order */
    const char *want[] = {
        "\"count\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}",
        "\"enc/b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,16]}",
        "\"quote\\\"back\\\\slash/\xc3\xa9\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}",
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,48]}",
        "\"__metadata__\":{",
        "\"format\":\"mpmd-checkpoint\"",
        "\"version\":\"1\"",
        "\"step\":\"12\"",
        "\"seed\":\"34\"",
        "\"rng_state\":\"1,2,3,18446744073709551615\"",
        "\"config\":\"layers=1 \\\"q\\\"\\u000a\"",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(has(hdr, want[i]), "header lacks %s:\n%s", want[i], hdr);
    /* data bytes: little-endian, this host's order */
    const uint8_t *data = f + 8 + n;
    int32_t c = -7;
    float b[3] = {100, 101, 102}, q[2] = {1.5f, -2.25f}, w[6] = {-1, -0.5f, 0, 0.5f, 1, 1.5f};
    CHECK(memcmp(data, &c, 4) == 0 && memcmp(data + 4, b, 12) == 0 && memcmp(data + 16, q, 8) == 0 &&
              memcmp(data + 24, w, 24) == 0,
          "data bytes differ");
    /* the checksums, recomputed as docs/checkpoints.md describes */
    char got[65], mine[65];
    uint8_t d[32];
    CHECK(hex_after(hdr, "\"sha256\":\"", got), "no sha256");
    mpmd_sha256(data, 48, d);
    hex_of(d, mine);
    CHECK(strcmp(got, mine) == 0, "sha256 %s, data hashes to %s", got, mine);
    CHECK(hex_after(hdr, "\"header_sha256\":\"", got), "no header_sha256");
    uint8_t *blank = malloc(8 + n);
    memcpy(blank, f, 8 + n);
    char *at = strstr((char *)blank + 8, got);
    if (at) memset(at, '0', 64);
    mpmd_sha256(blank, 8 + n, d);
    hex_of(d, mine);
    CHECK(at && strcmp(got, mine) == 0, "header_sha256 %s, header hashes to %s", got, mine);
    free(blank);

    /* back into a fresh executor, bit for bit, with the metadata */
    sample t = sample_new(50.0f);
    char h0[65], h1[65];
    state_digest(s.g, s.ex, NULL, h0);
    mpmd_checkpoint_info back;
    memset(&back, 0x55, sizeof back);
    CHECK(mpmd_exec_load(t.ex, path, &back, &err) == MPMD_OK, "%s", err.msg);
    state_digest(t.g, t.ex, NULL, h1);
    CHECK(strcmp(h0, h1) == 0, "state differs after the round trip");
    CHECK(back.version == 1 && back.step == 12 && back.seed == 34 && back.rng_state[0] == 1 &&
              back.rng_state[3] == UINT64_MAX && strcmp(back.config, info.config) == 0,
          "info: version %d step %lld seed %llu config \"%s\"", back.version, (long long)back.step,
          (unsigned long long)back.seed, back.config);
    mpmd_checkpoint_info ri;
    CHECK(mpmd_checkpoint_read_info(path, &ri, &err) == MPMD_OK && ri.step == 12 && ri.rng_state[2] == 3,
          "read_info: %s", err.msg);
    char *listing = NULL;
    size_t ll = 0;
    FILE *mf = open_memstream(&listing, &ll);
    CHECK(mpmd_checkpoint_verify(path, mf, &err) == MPMD_OK, "verify: %s", err.msg);
    fclose(mf);
    CHECK(listing && has(listing, "count I32[] 4\n") && has(listing, "w F32[2,3] 24\n") &&
              has(listing, "enc/b F32[3] 12\n"),
          "listing:\n%s", listing ? listing : "");
    free(listing);
    sample_free(&t);
    sample_free(&s);
    free(hdr);
    free(f);
}

/* ---- corruption: every truncation, byte flips, malformed headers -------------- */

/* Load `path` into t and expect failure with `want` in the message (NULL:
 * any), the path named, and t's state unchanged. */
static void expect_fail(sample *t, const char *path, const char *want, const char *label) {
    char before[65], after[65];
    state_digest(t->g, t->ex, NULL, before);
    mpmd_error err;
    err.msg[0] = '\0';
    mpmd_status rc = mpmd_exec_load(t->ex, path, NULL, &err);
    state_digest(t->g, t->ex, NULL, after);
    CHECK(rc != MPMD_OK, "%s: loaded", label);
    if (rc == MPMD_OK) return;
    CHECK(has(err.msg, path), "%s: message does not name the file: %s", label, err.msg);
    CHECK(!want || has(err.msg, want), "%s: expected \"%s\" in: %s", label, want, err.msg);
    CHECK(strcmp(before, after) == 0, "%s: a failed load changed the state", label);
}

static void test_truncation_and_flips(void) {
    char path[400], bad[400];
    path_in(path, sizeof path, "good.safetensors");
    path_in(bad, sizeof bad, "bad.safetensors");
    sample s = sample_new(1.0f), t = sample_new(7.0f);
    mpmd_checkpoint_info info = sample_info();
    mpmd_error err;
    CHECK(mpmd_exec_save(s.ex, path, &info, &err) == MPMD_OK, "%s", err.msg);
    size_t len;
    uint8_t *f = read_file(path, &len);
    if (!f) return;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f[i];
    int fails = tu_failures;
    for (size_t k = 0; k < len && tu_failures == fails; k++) {
        write_file(bad, f, k);
        char label[64];
        snprintf(label, sizeof label, "truncated to %zu of %zu bytes", k, len);
        expect_fail(&t, bad, k < 8 ? "too short" : "truncated", label);
    }
    /* every byte, several flips: header flips fail the header checksum (or
     * parsing), data flips the data checksum */
    const uint8_t masks[] = {0x01, 0x20, 0x80, 0xFF};
    for (size_t k = 0; k < len && tu_failures == fails; k++)
        for (size_t m = 0; m < sizeof masks; m++) {
            if (tu_quick() && m != (k % sizeof masks)) continue;
            f[k] ^= masks[m];
            write_file(bad, f, len);
            f[k] ^= masks[m];
            char label[96];
            snprintf(label, sizeof label, "byte %zu of %zu xor 0x%02x", k, len, masks[m]);
            expect_fail(&t, bad, k >= 8 + n ? "data checksum mismatch" : NULL, label);
            mpmd_checkpoint_info ri;
            mpmd_status rc = mpmd_checkpoint_verify(bad, NULL, &err);
            CHECK(rc == MPMD_ERR_FORMAT, "%s: verify gives %d: %s", label, rc, err.msg);
            if (k < 8 + n)
                CHECK(mpmd_checkpoint_read_info(bad, &ri, &err) == MPMD_ERR_FORMAT, "%s: read_info", label);
        }
    /* a flip inside a metadata value is caught by the header checksum */
    char *step = (char *)find_bytes(f, len, "\"step\":\"12\"", 11);
    CHECK(step != NULL, "no step in the header");
    if (step) {
        step[9] = '3';
        write_file(bad, f, len);
        step[9] = '2';
        expect_fail(&t, bad, "header checksum mismatch", "step 12 -> 13");
    }
    expect_fail(&t, tmpdir, "not a regular file", "a directory");
    char missing[420];
    snprintf(missing, sizeof missing, "%s/no-such-file", tmpdir);
    expect_fail(&t, missing, "cannot open", "a missing file");
    free(f);
    sample_free(&s);
    sample_free(&t);
}

/* Write prefix + json (+ spaces to pad) + data_len bytes of data. */
static void craft(const char *path, const char *json, size_t pad, size_t data_len, uint64_t claimed_n) {
    size_t jl = strlen(json), n = jl + pad;
    size_t total = 8 + n + data_len;
    uint8_t *b = malloc(total);
    uint64_t N = claimed_n ? claimed_n : n;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(N >> (8 * i));
    memcpy(b + 8, json, jl);
    memset(b + 8 + jl, ' ', pad);
    for (size_t i = 0; i < data_len; i++)
        b[8 + n + i] = (uint8_t)(i * 7 + 1);
    write_file(path, b, total);
    free(b);
}

/* Put real checksums into a crafted header: "sha256" over the data, then
 * "header_sha256" over the prefix and header with its own digits as '0's. */
static void seal(const char *path) {
    size_t len;
    uint8_t *f = read_file(path, &len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f[i];
    uint8_t d[32];
    char hex[65];
    char *hs = (char *)find_bytes(f, 8 + n, "\"sha256\":\"", 10);
    char *hh = (char *)find_bytes(f, 8 + n, "\"header_sha256\":\"", 17);
    if (hs) {
        mpmd_sha256(f + 8 + n, len - 8 - n, d);
        hex_of(d, hex);
        memcpy(hs + 10, hex, 64);
    }
    if (hh) {
        memset(hh + 17, '0', 64);
        mpmd_sha256(f, 8 + n, d);
        hex_of(d, hex);
        memcpy(hh + 17, hex, 64);
    }
    write_file(path, f, len);
    free(f);
}

typedef struct {
    const char *json;
    size_t data_len;
    const char *want;
} crafted;

#define A_OK "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define B_OK "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[8,12]}"
#define Z64 "0000000000000000000000000000000000000000000000000000000000000000"
#define MPMD_META(version, step)                                                                             \
    "\"__metadata__\":{\"format\":\"mpmd-checkpoint\",\"version\":\"" version "\",\"step\":\"" step          \
    "\",\"seed\":\"1\",\"rng_state\":\"0,0,0,0\",\"sha256\":\"" Z64 "\",\"header_sha256\":\"" Z64 "\"}"
#define WEIGHTS_META(version, dtype)                                                                         \
    "\"__metadata__\":{\"format\":\"mpmd-weights\",\"version\":\"" version "\",\"dtype\":\"" dtype           \
    "\",\"sha256\":\"" Z64 "\",\"header_sha256\":\"" Z64 "\"}"

static void test_malformed(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_param(g, "a", MPMD_SHAPE(2), MPMD_ONES);
    mpmd_variable(g, "b", MPMD_I32, 0, NULL, MPMD_ZEROS);
    sample t = {g, tu_exec(g, 1)};
    char path[400];
    path_in(path, sizeof path, "crafted.safetensors");
    mpmd_error err;

    /* valid plain files (as PyTorch or JAX would write them) load */
    craft(path, "{" A_OK "," B_OK "}", 3, 12, 0);
    mpmd_checkpoint_info info;
    CHECK(mpmd_exec_load(t.ex, path, &info, &err) == MPMD_OK && info.version == 0 && info.step == 0,
          "plain file: %s", err.msg);
    const float *a = mpmd_exec_var_data(t.ex, mpmd_lookup(g, "a"));
    const uint8_t *ab = (const uint8_t *)a;
    CHECK(ab[0] == 1 && ab[7] == 50, "plain file's bytes: %d %d", ab[0], ab[7]);
    craft(path,
          "{\n  \"__metadata__\": {\"format\": \"pt\"},\n  \"\\u0061\" : {\"shape\": [ 2 ], \"dtype\": "
          "\"F32\", "
          "\"data_offsets\": [0, 8]},\n  \"b\": {\"data_offsets\": [8, 12], \"dtype\": \"I32\", \"shape\": "
          "[]}\n}",
          0, 12, 0);
    CHECK(mpmd_exec_load(t.ex, path, NULL, &err) == MPMD_OK, "whitespace and escapes: %s", err.msg);
    craft(path,
          "{\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
          5, 12, 0);
    CHECK(mpmd_exec_load(t.ex, path, NULL, &err) == MPMD_OK, "data in another order: %s", err.msg);
    const int32_t *bv = mpmd_exec_var_data(t.ex, mpmd_lookup(g, "b"));
    CHECK(((const uint8_t *)bv)[0] == 1 && ab[0] == 29, "tensors read from their own offsets");
    craft(path, "{" MPMD_META("1", "5") "," A_OK "," B_OK "}", 0, 12, 0);
    seal(path);
    CHECK(mpmd_exec_load(t.ex, path, &info, &err) == MPMD_OK && info.version == 1 && info.step == 5,
          "sealed by the documented recipe: %s", err.msg);

    /* 16-bit floats (2-byte elements) load into an f32 value, widened */
    craft(path,
          "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]}}",
          1, 8, 0);
    CHECK(mpmd_exec_load(t.ex, path, &info, &err) == MPMD_OK && !info.weights_only, "plain BF16: %s",
          err.msg);
    uint32_t au[2];
    memcpy(au, a, 8);
    CHECK(au[0] == 0x08010000u && au[1] == 0x160f0000u && ((const uint8_t *)bv)[0] == 29,
          "BF16 0x0801 0x160f widened to 0x%08x 0x%08x", au[0], au[1]);
    craft(path,
          "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]}}",
          2, 8, 0);
    CHECK(mpmd_exec_load(t.ex, path, NULL, &err) == MPMD_OK, "plain F16: %s", err.msg);
    /* f16 0x0801 = 2^-13 (1 + 1/1024), 0x160f = 2^-10 (1 + 0x20f/1024) */
    CHECK(a[0] == ldexpf(1.0f + 1.0f / 1024, -13) && a[1] == ldexpf(1.0f + 527.0f / 1024, -10),
          "F16 widened to %.9g %.9g", a[0], a[1]);
    /* a weights file: the parameter alone, the variable stays */
    craft(path,
          "{" WEIGHTS_META("1", "BF16") ",\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
          0, 4, 0);
    seal(path);
    int32_t b_before = *bv;
    CHECK(mpmd_exec_load(t.ex, path, &info, &err) == MPMD_OK && info.weights_only == 1 && info.version == 1,
          "crafted weights file: %s", err.msg);
    memcpy(au, a, 8);
    CHECK(au[0] == 0x08010000u && au[1] == 0x160f0000u && *bv == b_before, "crafted weights file's values");

    static const crafted cases[] = {
        {"{" A_OK "," A_OK "," B_OK "}", 12, "tensor \"a\" appears twice"},
        {"{" A_OK ",\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]}}", 8, "overlaps"},
        {"{" A_OK ",\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[12,16]}}", 16, "unused bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}," B_OK "}", 12,
         "hold 8 bytes but F32[3] needs 12"},
        {"{" A_OK "," B_OK "}", 10, "truncated"},
        {"{" A_OK "," B_OK "}", 16, "4 bytes follow the last tensor"},
        {"{\xff" A_OK "," B_OK "}", 12, "not valid UTF-8"},
        {"{\"a\xc0\xaf\":{}}", 0, "not valid UTF-8"},
        {"hello", 0, "must begin with '{'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}," B_OK "}", 12, "fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,8]}," B_OK "}", 12, "negative"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}," B_OK "}", 12,
         "unknown dtype \"F33\""},
        {"{\"__metadata__\":{\"step\":3}," A_OK "," B_OK "}", 12, "not a string"},
        {"{" A_OK "," B_OK "}x", 12, "unexpected bytes after"},
        {"{" A_OK "," B_OK "}}", 12, "unexpected bytes after"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}," B_OK "}", 12,
         "unknown field \"x\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}," B_OK "}", 12, "lacks its \"data_offsets\" field"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8,
         "expected a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32", 0, "unterminated string"},
        {"{\"a\\q\":{}}", 0, "unknown escape"},
        {"{\"a\\u0000\":{}}", 0, "NUL"},
        {"{\"a\\ud800\":{}}", 0, "surrogate"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8,
         "too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}", 8,
         "too large for any file"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
         4, "too many entries"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "too many entries"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "end before they begin"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "\"__metadata__\" appears twice"},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "key \"k\" appears twice"},
        {"{\"a\":5}", 0, "expected '{'"},
        {"{\"a\" {}}", 0, "expected ':'"},
        {"{" A_OK " " B_OK "}", 12, "expected '}'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "expected a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}," B_OK, 12, "expected '}'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"I32\",\"shape\":"
         "[],"
         "\"data_offsets\":[8,12]},\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
         16, "1 unexpected"},
        {"{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}," B_OK "}", 12,
         "1 with another dtype or shape (file vs model); \"a\" I32[2] vs F32[2]"},
        {"{" MPMD_META("2", "5") "," A_OK "," B_OK "}", 12, "newer mpmd"},
        {"{" MPMD_META("1", "-1") "," A_OK "," B_OK "}", 12, "not a step count"},
        {"{" MPMD_META("x", "1") "," A_OK "," B_OK "}", 12, "not a version number"},
        {"{\"__metadata__\":{\"format\":\"mpmd-checkpoint\",\"version\":\"1\"}," A_OK "," B_OK "}", 12,
         "lacks \"header_sha256\""},
        /* dtypes: known to the format but not loadable, unknown, mis-sized */
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[16,20]}}",
         20, "tensor \"a\" has dtype F64, which mpmd cannot load"},
        {"{\"a\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[2,6]}}",
         6, "tensor \"a\" has dtype I8, which mpmd cannot load"},
        {"{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[2,6]}}",
         6, "tensor \"a\" has dtype F8_E4M3, which mpmd cannot load"},
        {"{\"a\":{\"dtype\":\"FP8\",\"shape\":[2],\"data_offsets\":[0,2]}," B_OK "}", 6,
         "tensor \"a\" has unknown dtype \"FP8\""},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}," B_OK "}", 12,
         "hold 8 bytes but BF16[2] needs 4"},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]}}",
         8, "hold 4 bytes but F16[3] needs 6"},
        {"{" A_OK ",\"b\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[8,10]}}", 10,
         "1 with another dtype or shape (file vs model); \"b\" F16[] vs I32[]"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
         "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[6,10]}}",
         10, "\"a\" BF16[3] vs F32[2]"},
        /* weights files */
        {"{" WEIGHTS_META("1", "BF16") ",\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
         16, "tensor \"a\" has dtype F64"},
        {"{" WEIGHTS_META("2", "BF16") ",\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         "weights file version 2 was written by a newer mpmd"},
        {"{" WEIGHTS_META("1", "F64") ",\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         "not F32, BF16 or F16"},
        {"{" WEIGHTS_META("1", "BF16") ",\"c\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         "1 missing, 1 unexpected"},
        {"{\"__metadata__\":{\"format\":\"mpmd-weights\",\"version\":\"1\",\"sha256\":\"" Z64
         "\",\"header_sha256\":\"" Z64 "\"}," A_OK "}",
         8, "weights file lacks \"dtype\""},
        {"{\"__metadata__\":{\"format\":\"mpmd-weights\",\"version\":\"1\",\"dtype\":\"F32\"}," A_OK "}", 8,
         "lacks \"header_sha256\" (an mpmd weights file always has it)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        craft(path, cases[i].json, i % 3, cases[i].data_len, 0);
        if (has(cases[i].json, "header_sha256\":\"0")) seal(path);
        char label[64];
        snprintf(label, sizeof label, "crafted case %zu", i);
        expect_fail(&t, path, cases[i].want, label);
    }
    /* a sealed mpmd header whose data was changed afterwards */
    craft(path, "{" MPMD_META("1", "5") "," A_OK "," B_OK "}", 0, 12, 0);
    seal(path);
    size_t len;
    uint8_t *f = read_file(path, &len);
    f[len - 1] ^= 4;
    write_file(path, f, len);
    free(f);
    expect_fail(&t, path, "data checksum mismatch", "sealed, data changed");
    /* header lengths that cannot be right */
    craft(path, "{" A_OK "," B_OK "}", 0, 12, 100000);
    expect_fail(&t, path, "header length is 100000 bytes but the file has only",
                "header longer than the file");
    craft(path, "{" A_OK "," B_OK "}", 0, 12, (uint64_t)1 << 40);
    expect_fail(&t, path, "beyond the format's limit", "absurd header length");
    craft(path, "", 0, 0, 0);
    expect_fail(&t, path, "too short to be a JSON object", "empty header");
    write_file(path, "", 0);
    expect_fail(&t, path, "too short", "empty file");
    sample_free(&t);
}

/* ---- the GPT across layouts ----------------------------------------------------- */

enum { TOTAL_STEPS = 6, SPLIT = 3 };

static gpt_config tiny_cfg(int stages) {
    gpt_config c = gpt_config_default();
    c.vocab = 64;
    c.seq = 8;
    c.width = 16;
    c.heads = 2;
    c.layers = 4;
    c.stages = stages;
    c.microbatches = 4;
    c.batch = 8;
    c.tie_embeddings = 1; /* wte lives on the first and the last rank */
    c.adam.weight_decay = 0.01f;
    return c;
}

/* A training run: a one-rank executor (ranks 0) or a Std1F1B pipeline with
 * one rank per stage. */
/* How runner_new compiles pipelines: in-process ranks or MPI processes,
 * and data-parallel replicas. */
static mpmd_runtime_kind g_runtime = MPMD_RUNTIME_LOCAL;
static int g_replicas = 1;

typedef struct runner {
    gpt_model m;
    mpmd_exec *ex;
    mpmd_step *st;
    int ranks;
    int32_t *tok, *tgt;
    size_t nb;
} runner;

static int runner_new(runner *r, const gpt_config *cfg, int ranks, uint64_t seed) {
    memset(r, 0, sizeof *r);
    mpmd_error err;
    if (gpt_build(cfg, 1, &r->m, &err) != MPMD_OK) {
        CHECK(0, "gpt_build: %s", err.msg);
        return 0;
    }
    r->ranks = ranks;
    if (ranks) {
        mpmd_schedule *s = NULL;
        CHECK(mpmd_schedule_std1f1b(ranks, cfg->microbatches, &s, &err) == MPMD_OK, "%s", err.msg);
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.threads_per_rank = 1;
        so.seed = seed;
        so.runtime = g_runtime;
        so.data_parallel = g_replicas;
        r->st = s ? mpmd_jit_with_loop(r->m.g, s, &so, &err) : NULL;
        CHECK(r->st != NULL, "jit: %s", err.msg);
        mpmd_schedule_free(s);
    } else {
        mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
        eo.threads = 1;
        eo.seed = seed;
        r->ex = mpmd_exec_new(r->m.g, &eo, &err);
        CHECK(r->ex != NULL, "exec: %s", err.msg);
    }
    r->nb = (size_t)(cfg->batch * cfg->seq) * sizeof(int32_t);
    r->tok = malloc(r->nb);
    r->tgt = malloc(r->nb);
    return r->ex || r->st;
}

static void runner_free(runner *r) {
    mpmd_exec_free(r->ex);
    mpmd_step_free(r->st);
    gpt_model_free(&r->m);
    free(r->tok), free(r->tgt);
    memset(r, 0, sizeof *r);
}

/* Run training step `step` (1-based; its batch is a function of the step)
 * and return the loss. */
static float runner_step(runner *r, int64_t step) {
    const gpt_config *c = &r->m.cfg;
    gpt_random_batch(c->vocab, c->batch, c->seq, 5, (uint64_t)step, r->tok, r->tgt);
    float loss = NAN;
    if (r->ex) {
        mpmd_exec_set_input(r->ex, r->m.tokens, r->tok, r->nb);
        mpmd_exec_set_input(r->ex, r->m.targets, r->tgt, r->nb);
        CHECK(mpmd_exec_run(r->ex) == MPMD_OK, "%s", mpmd_exec_error(r->ex));
        mpmd_exec_read(r->ex, r->m.loss, &loss, sizeof loss);
    } else {
        mpmd_step_set_input(r->st, r->m.tokens, r->tok, r->nb);
        mpmd_step_set_input(r->st, r->m.targets, r->tgt, r->nb);
        CHECK(mpmd_step_run(r->st) == MPMD_OK, "%s", mpmd_step_error(r->st));
        mpmd_step_gather(r->st, r->m.loss, &loss, sizeof loss); /* collective under MPI */
    }
    return loss;
}

static void runner_hash(runner *r, char hex[65]) {
    if (r->ex)
        mpmd_exec_params_sha256(r->ex, hex);
    else
        mpmd_step_params_sha256(r->st, hex);
}

static void runner_digest(runner *r, char hex[65]) { state_digest(r->m.g, r->ex, r->st, hex); }

static mpmd_status runner_save(runner *r, const char *path, int64_t step, mpmd_error *err) {
    mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
    info.step = step;
    info.seed = 7;
    snprintf(info.config, sizeof info.config, "layers=%d stages=%d", r->m.cfg.layers, r->m.cfg.stages);
    return r->ex ? mpmd_exec_save(r->ex, path, &info, err) : mpmd_step_save(r->st, path, &info, err);
}

static mpmd_status runner_load(runner *r, const char *path, mpmd_checkpoint_info *info, mpmd_error *err) {
    return r->ex ? mpmd_exec_load(r->ex, path, info, err) : mpmd_step_load(r->st, path, info, err);
}

static const char *layout_name(int ranks) {
    return ranks == 0 ? "one-rank exec" : ranks == 2 ? "2-rank Std1F1B" : "4-rank Std1F1B";
}

/* The uninterrupted run: loss and parameter hash after every step. */
static float ref_loss[TOTAL_STEPS + 1];
static char ref_hash[TOTAL_STEPS + 1][65], ref_digest[65];

static void compare_step(runner *r, int64_t step, const char *what) {
    float l = runner_step(r, step);
    char h[65];
    runner_hash(r, h);
    CHECK(memcmp(&l, &ref_loss[step], sizeof l) == 0, "%s, step %lld: loss %.9g, uninterrupted %.9g", what,
          (long long)step, l, ref_loss[step]);
    CHECK(strcmp(h, ref_hash[step]) == 0, "%s, step %lld: params differ from the uninterrupted run", what,
          (long long)step);
}

static void test_layouts(void) {
    runner ref;
    gpt_config c1 = tiny_cfg(1), c2 = tiny_cfg(2), c4 = tiny_cfg(4);
    if (!runner_new(&ref, &c1, 0, 7)) return;
    for (int64_t s = 1; s <= TOTAL_STEPS; s++) {
        ref_loss[s] = runner_step(&ref, s);
        runner_hash(&ref, ref_hash[s]);
    }
    runner_digest(&ref, ref_digest);
    runner_free(&ref);

    /* the first SPLIT steps on each layout, saved */
    const int layouts[3] = {4, 2, 0};
    const gpt_config *cfgs[3] = {&c4, &c2, &c1};
    char files[3][400], digest[3][65];
    for (int i = 0; i < 3; i++) {
        runner r;
        if (!runner_new(&r, cfgs[i], layouts[i], 7)) return;
        char what[64];
        snprintf(what, sizeof what, "%s before the save", layout_name(layouts[i]));
        for (int64_t s = 1; s <= SPLIT; s++)
            compare_step(&r, s, what);
        snprintf(what, sizeof what, "from-%d.safetensors", layouts[i]);
        path_in(files[i], sizeof files[i], what);
        mpmd_error err;
        CHECK(runner_save(&r, files[i], SPLIT, &err) == MPMD_OK, "save: %s", err.msg);
        runner_digest(&r, digest[i]);
        runner_free(&r);
    }
    /* the file does not depend on the layout it came from */
    size_t l0, l1, l2;
    uint8_t *f0 = read_file(files[0], &l0), *f1 = read_file(files[1], &l1), *f2 = read_file(files[2], &l2);
    mpmd_checkpoint_info i0;
    CHECK(mpmd_checkpoint_read_info(files[0], &i0, NULL) == MPMD_OK && i0.step == SPLIT &&
              strcmp(i0.config, "layers=4 stages=4") == 0,
          "info of the 4-rank file: step %lld config \"%s\"", (long long)i0.step, i0.config);
    CHECK(f0 && f1 && f2 && l0 == l1 && l1 == l2, "checkpoint sizes %zu %zu %zu", l0, l1, l2);
    /* the data sections are equal; the headers differ only in "config" */
    CHECK(strcmp(digest[0], digest[1]) == 0 && strcmp(digest[1], digest[2]) == 0,
          "state after %d steps differs", SPLIT);
    if (f0 && f1 && f2 && l0 == l1 && l1 == l2) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | f0[i];
        CHECK(memcmp(f0 + 8 + n, f1 + 8 + n, l0 - 8 - n) == 0 &&
                  memcmp(f0 + 8 + n, f2 + 8 + n, l0 - 8 - n) == 0,
              "data sections differ between layouts");
    }
    free(f0), free(f1), free(f2);

    /* resume from every file on every layout, a fresh seed so that the load
     * is what makes the state right */
    for (int from = 0; from < 3; from++)
        for (int to = 0; to < 3; to++) {
            if (tu_quick() && from == to && from != 0) continue;
            runner r;
            if (!runner_new(&r, cfgs[to], layouts[to], 1000 + (uint64_t)to)) return;
            mpmd_checkpoint_info info;
            mpmd_error err;
            CHECK(runner_load(&r, files[from], &info, &err) == MPMD_OK, "load: %s", err.msg);
            CHECK(info.step == SPLIT && info.seed == 7, "info step %lld seed %llu", (long long)info.step,
                  (unsigned long long)info.seed);
            char d[65];
            runner_digest(&r, d);
            CHECK(strcmp(d, digest[from]) == 0, "%s -> %s: state differs right after the load",
                  layout_name(layouts[from]), layout_name(layouts[to]));
            char what[96];
            snprintf(what, sizeof what, "saved on %s, resumed on %s", layout_name(layouts[from]),
                     layout_name(layouts[to]));
            for (int64_t s = info.step + 1; s <= TOTAL_STEPS; s++)
                compare_step(&r, s, what);
            runner_digest(&r, d);
            CHECK(strcmp(d, ref_digest) == 0, "%s: final state (optimizer included) differs", what);
            runner_free(&r);
        }
}

/* Loading into data-parallel replicas fills every replica's copy. With the
 * same batch on both replicas, the mean of two equal gradients is that
 * gradient, so the step is the uninterrupted run's step. */
static void test_data_parallel_load(void) {
    char path[400];
    path_in(path, sizeof path, "from-4.safetensors");
    gpt_config c = tiny_cfg(2);
    runner r;
    g_replicas = 2;
    int ok = runner_new(&r, &c, 2, 99);
    g_replicas = 1;
    if (!ok) return;
    mpmd_error err;
    mpmd_checkpoint_info info;
    CHECK(mpmd_step_load(r.st, path, &info, &err) == MPMD_OK, "%s", err.msg);
    char h0[65], h1[65];
    mpmd_step_replica_params_sha256(r.st, 0, h0);
    mpmd_step_replica_params_sha256(r.st, 1, h1);
    CHECK(strcmp(h0, ref_hash[SPLIT]) == 0 && strcmp(h1, ref_hash[SPLIT]) == 0,
          "replicas after the load: %.12s %.12s, saved %.12s", h0, h1, ref_hash[SPLIT]);
    compare_step(&r, SPLIT + 1, "2 ranks x 2 replicas, same batch on both");
    mpmd_step_replica_params_sha256(r.st, 1, h1);
    CHECK(strcmp(h1, ref_hash[SPLIT + 1]) == 0, "replica 1 after a step differs");
    runner_free(&r);
}

/* Stop after SPLIT steps, throw every object away, build everything again
 * from scratch, load, finish: the same bits as never stopping. */
static void test_resume_fresh(void) {
    for (int k = 0; k < 2; k++) {
        int ranks = k == 0 ? 0 : 4;
        gpt_config c = tiny_cfg(ranks ? 4 : 1);
        char path[400];
        path_in(path, sizeof path, "resume.safetensors");
        float curve[TOTAL_STEPS + 1];
        char straight[65], resumed[65];
        runner r;
        if (!runner_new(&r, &c, ranks, 7)) return;
        for (int64_t s = 1; s <= TOTAL_STEPS; s++)
            curve[s] = runner_step(&r, s);
        runner_digest(&r, straight);
        runner_free(&r);

        if (!runner_new(&r, &c, ranks, 7)) return;
        for (int64_t s = 1; s <= SPLIT; s++)
            runner_step(&r, s);
        mpmd_error err;
        CHECK(runner_save(&r, path, SPLIT, &err) == MPMD_OK, "%s", err.msg);
        runner_free(&r);

        if (!runner_new(&r, &c, ranks, 12345)) return;
        mpmd_checkpoint_info info;
        CHECK(runner_load(&r, path, &info, &err) == MPMD_OK, "%s", err.msg);
        for (int64_t s = info.step + 1; s <= TOTAL_STEPS; s++) {
            float l = runner_step(&r, s);
            CHECK(memcmp(&l, &curve[s], sizeof l) == 0, "%s: resumed step %lld loss %.9g, straight %.9g",
                  layout_name(ranks), (long long)s, l, curve[s]);
        }
        runner_digest(&r, resumed);
        CHECK(strcmp(straight, resumed) == 0, "%s: state after resuming differs from the straight run",
              layout_name(ranks));
        runner_free(&r);
    }
}

/* ---- snapshots ---------------------------------------------------------------------- */

typedef struct snap_job {
    const mpmd_checkpoint_snapshot *snap;
    const char *path;
    mpmd_status rc;
    mpmd_error err;
} snap_job;

static void *snap_write_main(void *arg) {
    snap_job *j = arg;
    j->rc = mpmd_checkpoint_snapshot_write(j->snap, j->path, &j->err);
    return NULL;
}

static int same_file(const char *a, const char *b) {
    size_t la, lb;
    uint8_t *x = read_file(a, &la), *y = read_file(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x), free(y);
    return same;
}

/* A snapshot is the file mpmd_step_save writes at its moment, whether it
 * is written on another thread while the step trains on, or after the step
 * is freed; in a 2-rank pipeline (the tied embedding on both ranks) and a
 * one-rank executor. */
static void test_snapshot(void) {
    for (int k = 0; k < 2; k++) {
        int ranks = k == 0 ? 2 : 0;
        gpt_config c = tiny_cfg(ranks ? 2 : 1);
        runner r;
        if (!runner_new(&r, &c, ranks, 7)) return;
        for (int64_t s = 1; s <= SPLIT; s++)
            runner_step(&r, s);
        char saved[400], early[400], late[400], after[400];
        path_in(saved, sizeof saved, "snap_saved.safetensors");
        path_in(early, sizeof early, "snap_thread.safetensors");
        path_in(late, sizeof late, "snap_freed.safetensors");
        path_in(after, sizeof after, "snap_after.safetensors");
        mpmd_error err;
        CHECK(runner_save(&r, saved, SPLIT, &err) == MPMD_OK, "%s", err.msg);
        mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
        info.step = SPLIT;
        info.seed = 7;
        snprintf(info.config, sizeof info.config, "layers=%d stages=%d", r.m.cfg.layers, r.m.cfg.stages);
        mpmd_checkpoint_snapshot *snap = NULL;
        mpmd_status rc = r.ex ? mpmd_exec_snapshot(r.ex, &info, &snap, &err)
                              : mpmd_step_snapshot(r.st, &info, &snap, &err);
        CHECK(rc == MPMD_OK && snap, "%s: snapshot: %s", layout_name(ranks), err.msg);
        if (!snap) {
            runner_free(&r);
            return;
        }
        /* the state: parameters and both moments of each, and optim/step */
        int64_t want = 0;
        mpmd_value vals[256];
        int n = mpmd_graph_state(r.m.g, vals, 256);
        for (int i = 0; i < n; i++) {
            mpmd_type t = mpmd_value_type(r.m.g, vals[i]);
            want += (int64_t)mpmd_type_bytes(&t);
        }
        CHECK(mpmd_checkpoint_snapshot_bytes(snap) >= want &&
                  mpmd_checkpoint_snapshot_bytes(snap) < want + 8 * n,
              "%s: the snapshot holds %lld bytes for %lld of state", layout_name(ranks),
              (long long)mpmd_checkpoint_snapshot_bytes(snap), (long long)want);
        /* written on a thread while the step runs on */
        snap_job job = {snap, early, MPMD_OK, {0}};
        pthread_t th;
        int started = pthread_create(&th, NULL, snap_write_main, &job) == 0;
        CHECK(started, "pthread_create");
        for (int64_t s = SPLIT + 1; s <= TOTAL_STEPS; s++)
            runner_step(&r, s);
        if (started) pthread_join(th, NULL);
        CHECK(job.rc == MPMD_OK, "%s: snapshot write: %s", layout_name(ranks), job.err.msg);
        CHECK(same_file(saved, early),
              "%s: the snapshot written on a thread differs from mpmd_step_save's file", layout_name(ranks));
        CHECK(runner_save(&r, after, TOTAL_STEPS, &err) == MPMD_OK, "%s", err.msg);
        CHECK(!same_file(saved, after), "%s: training on changed nothing (the test would prove nothing)",
              layout_name(ranks));
        runner_free(&r);
        /* the step is gone; the snapshot still writes */
        CHECK(mpmd_checkpoint_snapshot_write(snap, late, &err) == MPMD_OK, "%s: %s", layout_name(ranks),
              err.msg);
        CHECK(same_file(saved, late), "%s: the snapshot written after the step was freed differs",
              layout_name(ranks));
        /* a failed write: the error of a save, nothing left behind */
        rc = mpmd_checkpoint_snapshot_write(snap, "/nonexistent/dir/x.safetensors", &err);
        CHECK(rc == MPMD_ERR_IO &&
                  has(err.msg, "mpmd_checkpoint_snapshot_write: cannot write /nonexistent/dir/x.safetensors"),
              "%s: a write into a missing directory: %d %s", layout_name(ranks), (int)rc, err.msg);
        mpmd_checkpoint_snapshot_free(snap);
        unlink(saved), unlink(early), unlink(late), unlink(after);
    }
    CHECK(count_tmp(tmpdir) == 0, "snapshots left temporary files");
    mpmd_error err;
    mpmd_checkpoint_snapshot *snap = (mpmd_checkpoint_snapshot *)&err; /* set to NULL on failure */
    CHECK(mpmd_exec_snapshot(NULL, NULL, &snap, &err) == MPMD_ERR_INVALID && snap == NULL, "no executor");
    CHECK(mpmd_checkpoint_snapshot_write(NULL, "x", &err) == MPMD_ERR_INVALID && has(err.msg, "no snapshot"),
          "a NULL snapshot: %s", err.msg);
    CHECK(mpmd_checkpoint_snapshot_bytes(NULL) == 0, "bytes of NULL");
    mpmd_checkpoint_snapshot_free(NULL);
    gpt_config c = tiny_cfg(1);
    runner r;
    if (!runner_new(&r, &c, 0, 7)) return;
    mpmd_checkpoint_info bad = MPMD_CHECKPOINT_INFO_INIT;
    bad.step = -1;
    CHECK(mpmd_exec_snapshot(r.ex, &bad, &snap, &err) == MPMD_ERR_INVALID && snap == NULL &&
              has(err.msg, "info.step is -1"),
          "a negative step: %s", err.msg);
    runner_free(&r);
    /* one process: mpmd_mpi_any is each flag as 0 or 1 */
    int flags[3] = {5, 0, -1};
    CHECK(mpmd_mpi_any(flags, 3, &err) == MPMD_OK && flags[0] == 1 && flags[1] == 0 && flags[2] == 1,
          "mpmd_mpi_any without MPI: %d %d %d", flags[0], flags[1], flags[2]);
    CHECK(mpmd_mpi_any(NULL, 2, &err) == MPMD_ERR_INVALID, "mpmd_mpi_any(NULL, 2)");
}

/* ---- a checkpoint of another model ------------------------------------------------ */

static void expect_mismatch(const char *path, gpt_config c, int with_opt, int ranks, const char *const *want,
                            int nwant, const char *label) {
    runner r;
    memset(&r, 0, sizeof r);
    mpmd_error err;
    if (gpt_build(&c, with_opt, &r.m, &err) != MPMD_OK) {
        CHECK(0, "%s: %s", label, err.msg);
        return;
    }
    mpmd_schedule *s = NULL;
    if (ranks) {
        mpmd_schedule_std1f1b(ranks, c.microbatches, &s, &err);
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.threads_per_rank = 1;
        r.st = mpmd_jit_with_loop(r.m.g, s, &so, &err);
    } else {
        mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
        eo.threads = 1;
        r.ex = mpmd_exec_new(r.m.g, &eo, &err);
    }
    mpmd_schedule_free(s);
    CHECK(r.ex || r.st, "%s: %s", label, err.msg);
    if (!r.ex && !r.st) {
        gpt_model_free(&r.m);
        return;
    }
    char before[65], after[65];
    runner_digest(&r, before);
    mpmd_status rc = runner_load(&r, path, NULL, &err);
    runner_digest(&r, after);
    CHECK(rc == MPMD_ERR_SHAPE, "%s: load gave %d: %s", label, rc, rc ? err.msg : "ok");
    if (rc) {
        CHECK(has(err.msg, path) && has(err.msg, "does not fit this model"), "%s: %s", label, err.msg);
        for (int i = 0; i < nwant; i++)
            CHECK(has(err.msg, want[i]), "%s: expected \"%s\" in: %s", label, want[i], err.msg);
        CHECK(strlen(err.msg) < sizeof err.msg - 1 || has(err.msg, "more"), "%s: message cut without a count",
              label);
    }
    CHECK(strcmp(before, after) == 0, "%s: a failed load changed the state", label);
    mpmd_exec_free(r.ex);
    mpmd_step_free(r.st);
    gpt_model_free(&r.m);
}

static void test_other_model(void) {
    char path[400];
    path_in(path, sizeof path, "gpt-w16-l4.safetensors");
    runner r;
    gpt_config c = tiny_cfg(1);
    if (!runner_new(&r, &c, 0, 7)) return;
    mpmd_error err;
    CHECK(runner_save(&r, path, 0, &err) == MPMD_OK, "%s", err.msg);
    runner_free(&r);

    gpt_config wide = tiny_cfg(1);
    wide.width = 32;
    const char *w1[] = {"0 missing, 0 unexpected", "\"block_0/attn/out/bias\" F32[16] vs F32[32]",
                        "... and "};
    expect_mismatch(path, wide, 1, 0, w1, 3, "width 32");
    gpt_config shallow = tiny_cfg(2);
    shallow.layers = 2;
    const char *w2[] = {"0 missing, 72 unexpected, 0 with another",
                        "unexpected \"block_2/attn/out/bias\" F32[16]"};
    expect_mismatch(path, shallow, 1, 2, w2, 2, "2 layers on 2 ranks");
    gpt_config untied = tiny_cfg(4);
    untied.tie_embeddings = 0;
    const char *w3[] = {"3 missing, 0 unexpected", "missing \"lm_head/kernel\" F32[16,64]",
                        "missing \"optim/mu/lm_head/kernel\""};
    expect_mismatch(path, untied, 1, 4, w3, 3, "untied on 4 ranks");
    const char *w4[] = {"0 missing, 105 unexpected", "unexpected \"optim/mu/block_0/attn/out/bias\" F32[16]"};
    expect_mismatch(path, tiny_cfg(1), 0, 0, w4, 2, "no optimizer");
    gpt_config seq = tiny_cfg(1);
    seq.seq = 16;
    /* wpe and its two moments */
    const char *w6[] = {"3 with another dtype or shape", "\"wpe/embedding\" F32[8,16] vs F32[16,16]",
                        "\"optim/nu/wpe/embedding\" F32[8,16] vs F32[16,16]"};
    expect_mismatch(path, seq, 1, 0, w6, 3, "seq 16");
}

/* ---- atomic saves ----------------------------------------------------------------- */

static void test_atomic(void) {
    char dir[400], path[500], sub[500], adir[500];
    path_in(dir, sizeof dir, "atomic");
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    sample s = sample_new(3.0f);
    mpmd_checkpoint_info info = sample_info();
    mpmd_error err;
    CHECK(mpmd_exec_save(s.ex, path, &info, &err) == MPMD_OK, "%s", err.msg);
    size_t la, lb;
    uint8_t *a = read_file(path, &la), *b;
    float *w = mpmd_exec_var_data(s.ex, mpmd_lookup(s.g, "w"));
    w[0] = 1234.5f; /* a save that succeeded would change the file */

    snprintf(sub, sizeof sub, "%s/missing/ck.safetensors", dir);
    mpmd_status rc = mpmd_exec_save(s.ex, sub, &info, &err);
    CHECK(rc == MPMD_ERR_IO && has(err.msg, "cannot write") && has(err.msg, sub), "missing directory: %s",
          err.msg);

    snprintf(adir, sizeof adir, "%s/adir", dir);
    mkdir(adir, 0755);
    rc = mpmd_exec_save(s.ex, adir, &info, &err);
    struct stat sb;
    CHECK(rc == MPMD_ERR_IO && has(err.msg, "renaming"), "path is a directory: %s", err.msg);
    CHECK(stat(adir, &sb) == 0 && S_ISDIR(sb.st_mode), "the directory was replaced");
    CHECK(count_tmp(dir) == 0, "temporary file left after a failed rename");

    /* a write that fails half way: the file-size limit makes write() fail */
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    for (rlim_t lim = 16; lim < la; lim += la / 5) {
        struct rlimit small = old;
        small.rlim_cur = lim;
        setrlimit(RLIMIT_FSIZE, &small);
        rc = mpmd_exec_save(s.ex, path, &info, &err);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK(rc == MPMD_ERR_IO && has(err.msg, "the temporary file") && has(err.msg, "was left as it was"),
              "file-size limit %llu: %s", (unsigned long long)lim, rc ? err.msg : "saved");
        b = read_file(path, &lb);
        CHECK(b && la == lb && memcmp(a, b, la) == 0, "limit %llu: the previous checkpoint changed",
              (unsigned long long)lim);
        free(b);
        CHECK(count_tmp(dir) == 0, "limit %llu: temporary file left behind", (unsigned long long)lim);
    }
    signal(SIGXFSZ, SIG_DFL);

    if (geteuid() != 0) {
        chmod(dir, 0555);
        rc = mpmd_exec_save(s.ex, path, &info, &err);
        chmod(dir, 0755);
        CHECK(rc == MPMD_ERR_IO && has(err.msg, "creating"), "read-only directory: %s", err.msg);
        b = read_file(path, &lb);
        CHECK(b && la == lb && memcmp(a, b, la) == 0, "read-only directory: the previous checkpoint changed");
        free(b);
    } else {
        printf(
            "test_checkpoint: running as root, the read-only directory case is covered by the size limit\n");
    }
    info.step = -1;
    CHECK(mpmd_exec_save(s.ex, path, &info, &err) == MPMD_ERR_INVALID && has(err.msg, "info.step"), "%s",
          err.msg);
    info.step = 13;
    CHECK(mpmd_exec_save(s.ex, path, &info, &err) == MPMD_OK, "%s", err.msg);
    b = read_file(path, &lb);
    CHECK(b && (la != lb || memcmp(a, b, la) != 0), "a successful save did not replace the file");
    free(b);
    CHECK(count_tmp(dir) == 0, "temporary file left after a successful save");
    mpmd_checkpoint_info ri;
    CHECK(mpmd_checkpoint_read_info(path, &ri, &err) == MPMD_OK && ri.step == 13, "%s", err.msg);
    CHECK(mpmd_exec_save(NULL, path, &info, &err) == MPMD_ERR_INVALID, "NULL executor accepted");
    CHECK(mpmd_exec_load(s.ex, NULL, NULL, &err) == MPMD_ERR_INVALID, "NULL path accepted");
    free(a);
    sample_free(&s);
}

/* ---- weights exports ----------------------------------------------------------------- */

/* The sample's parameters set to values whose rounding matters (by their
 * f32 bits): ties to even in bf16 both ways, a subnormal, values that
 * overflow f16, a negative zero. */
static const uint32_t W_BITS[6] = {0x3eaaaaab, 0x3f808000, 0x3f818000, 0xc02df84d, 0x000116c2, 0x7f61b1e6};
static const uint32_t B_BITS[3] = {0x80000000, 0x42c83333, 0x477fe000};
/* ... their round-to-nearest-even bf16 and f16 bits, worked out by hand
 * (and by Python's struct 'e' format for f16), not by src/util/half.h */
static const uint16_t W_BF16[6] = {0x3eab, 0x3f80, 0x3f82, 0xc02e, 0x0001, 0x7f62};
static const uint16_t B_BF16[3] = {0x8000, 0x42c8, 0x4780};
static const uint16_t W_F16[6] = {0x3555, 0x3c04, 0x3c0c, 0xc170, 0x0000, 0x7c00};
static const uint16_t B_F16[3] = {0x8000, 0x5642, 0x7bff};

static void set_weights_values(sample *s) {
    float *w = mpmd_exec_var_data(s->ex, mpmd_lookup(s->g, "w"));
    float *b = mpmd_exec_var_data(s->ex, mpmd_lookup(s->g, "enc/b"));
    memcpy(w, W_BITS, sizeof W_BITS);
    memcpy(b, B_BITS, sizeof B_BITS);
}

static uint64_t header_len(const uint8_t *f) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f[i];
    return n;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Export the sample as `dtype` and check the file by hand: header entries,
 * sizes, metadata, checksums and every 16-bit pattern. */
static void check_sample_export(const sample *s, mpmd_dtype dtype, const char *name) {
    char path[400];
    path_in(path, sizeof path, name);
    mpmd_error err;
    CHECK(mpmd_exec_export_weights(s->ex, path, dtype, &err) == MPMD_OK, "%s", err.msg);
    size_t len;
    uint8_t *f = read_file(path, &len);
    CHECK(f && len >= 8, "cannot read back %s", path);
    if (!f) return;
    uint64_t n = header_len(f);
    int es = dtype == MPMD_F32 ? 4 : 2;
    const char *dn = dtype == MPMD_F32 ? "F32" : dtype == MPMD_BF16 ? "BF16" : "F16";
    CHECK(n % 8 == 0 && 8 + n + 9 * (size_t)es == len,
          "%s: header %llu, file %zu bytes, expected 9 x %d data", dn, (unsigned long long)n, len, es);
    char *hdr = malloc(n + 1);
    memcpy(hdr, f + 8, n);
    hdr[n] = '\0';
    char want[3][160];
    snprintf(want[0], sizeof want[0], "\"enc/b\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%d]}",
             dn, 3 * es);
    snprintf(want[1], sizeof want[1], "\"w\":{\"dtype\":\"%s\",\"shape\":[2,3],\"data_offsets\":[%d,%d]}", dn,
             3 * es, 9 * es);
    snprintf(want[2], sizeof want[2],
             "\"__metadata__\":{\"format\":\"mpmd-weights\",\"version\":\"1\",\"dtype\":\"%s\",\"sha256\":\"",
             dn);
    for (int i = 0; i < 3; i++)
        CHECK(has(hdr, want[i]), "%s export lacks %s:\n%s", dn, want[i], hdr);
    CHECK(!has(hdr, "count") && !has(hdr, "quote") && !has(hdr, "\"step\""),
          "%s export holds more than the parameters:\n%s", dn, hdr);
    char got[65], mine[65];
    uint8_t d[32];
    const uint8_t *data = f + 8 + n;
    CHECK(hex_after(hdr, "\"sha256\":\"", got), "no sha256");
    mpmd_sha256(data, len - 8 - n, d);
    hex_of(d, mine);
    CHECK(strcmp(got, mine) == 0, "%s export: sha256 %s, data hashes to %s", dn, got, mine);
    if (len == 8 + n + 9 * (size_t)es) {
        if (dtype == MPMD_F32) {
            CHECK(memcmp(data, B_BITS, 12) == 0 && memcmp(data + 12, W_BITS, 24) == 0,
                  "F32 export: bytes are not the f32 values");
        } else {
            const uint16_t *wb = dtype == MPMD_BF16 ? W_BF16 : W_F16,
                           *bb = dtype == MPMD_BF16 ? B_BF16 : B_F16;
            for (int i = 0; i < 3; i++)
                CHECK(le16(data + 2 * i) == bb[i], "%s enc/b[%d]: 0x%04x, expected 0x%04x", dn, i,
                      le16(data + 2 * i), bb[i]);
            for (int i = 0; i < 6; i++)
                CHECK(le16(data + 6 + 2 * i) == wb[i], "%s w[%d] (f32 0x%08x): 0x%04x, expected 0x%04x", dn,
                      i, W_BITS[i], le16(data + 6 + 2 * i), wb[i]);
        }
    }
    mpmd_checkpoint_info ri;
    memset(&ri, 0x55, sizeof ri);
    CHECK(mpmd_checkpoint_read_info(path, &ri, &err) == MPMD_OK && ri.weights_only == 1 && ri.version == 1 &&
              ri.step == 0 && ri.seed == 0 && ri.config[0] == '\0',
          "%s read_info: weights_only %d version %d step %lld: %s", dn, ri.weights_only, ri.version,
          (long long)ri.step, err.msg);
    char *listing = NULL;
    size_t ll = 0;
    FILE *mf = open_memstream(&listing, &ll);
    CHECK(mpmd_checkpoint_verify(path, mf, &err) == MPMD_OK, "verify: %s", err.msg);
    fclose(mf);
    char line[64];
    snprintf(line, sizeof line, "w %s[2,3] %d\n", dn, 6 * es);
    CHECK(listing && has(listing, line), "listing lacks %s:\n%s", line, listing ? listing : "");
    free(listing);
    free(hdr);
    free(f);
}

/* Load an export of `dtype` into a fresh sample: the parameters become the
 * widened 16-bit values (or the f32 bits), the variables stay. */
static void check_sample_load(mpmd_dtype dtype, const char *name) {
    char path[400];
    path_in(path, sizeof path, name);
    sample t = sample_new(50.0f);
    const int32_t *c = mpmd_exec_var_data(t.ex, mpmd_lookup(t.g, "count"));
    const float *q = mpmd_exec_var_data(t.ex, mpmd_lookup(t.g, ODD_NAME));
    int32_t c0 = *c;
    float q0[2] = {q[0], q[1]};
    mpmd_checkpoint_info info;
    memset(&info, 0x55, sizeof info);
    mpmd_error err;
    CHECK(mpmd_exec_load(t.ex, path, &info, &err) == MPMD_OK, "%s", err.msg);
    CHECK(info.weights_only == 1 && info.version == 1 && info.step == 0 && info.seed == 0,
          "info after loading weights: weights_only %d version %d step %lld", info.weights_only, info.version,
          (long long)info.step);
    const float *w = mpmd_exec_var_data(t.ex, mpmd_lookup(t.g, "w"));
    const float *b = mpmd_exec_var_data(t.ex, mpmd_lookup(t.g, "enc/b"));
    for (int i = 0; i < 9; i++) {
        uint32_t src = i < 3 ? B_BITS[i] : W_BITS[i - 3], got;
        memcpy(&got, i < 3 ? &b[i] : &w[i - 3], 4);
        uint32_t want = src;
        if (dtype == MPMD_BF16) want = (uint32_t)(i < 3 ? B_BF16[i] : W_BF16[i - 3]) << 16;
        if (dtype == MPMD_F16) {
            float x = mpmd_f16_to_f32(i < 3 ? B_F16[i] : W_F16[i - 3]);
            memcpy(&want, &x, 4);
        }
        CHECK(got == want, "%s load, value %d: f32 0x%08x, expected 0x%08x (from 0x%08x)",
              mpmd_dtype_name(dtype), i, got, want, src);
    }
    CHECK(*c == c0 && memcmp(q, q0, sizeof q0) == 0, "loading weights changed a variable");
    sample_free(&t);
}

/* The state values that are not parameters, copied from the executor in
 * state order. */
static uint8_t *non_params(const mpmd_graph *g, mpmd_exec *ex, size_t *len) {
    int n = mpmd_graph_state(g, NULL, 0), np = mpmd_graph_params(g, NULL, 0);
    mpmd_value *vs = malloc((size_t)n * sizeof *vs), *ps = malloc((size_t)np * sizeof *ps);
    mpmd_graph_state(g, vs, n);
    mpmd_graph_params(g, ps, np);
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *buf = pass ? malloc(total + 1) : NULL;
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            int param = 0;
            for (int k = 0; k < np && !param; k++)
                param = ps[k].id == vs[i].id;
            if (param) continue;
            mpmd_type t = mpmd_value_type(g, vs[i]);
            size_t bytes = mpmd_type_bytes(&t);
            if (buf) memcpy(buf + at, mpmd_exec_var_data(ex, vs[i]), bytes);
            at += bytes;
        }
        total = at;
        if (pass) {
            free(vs), free(ps);
            *len = total;
            return buf;
        }
    }
    return NULL;
}

/* Every parameter of a runner equals widen(bf16(the source's value)), on
 * every holder of a step. src holds the source's parameters in
 * mpmd_graph_params order. */
static void check_params_bf16(runner *r, float *const *src, const char *label) {
    const mpmd_graph *g = r->m.g;
    int np = mpmd_graph_params(g, NULL, 0);
    mpmd_value *ps = malloc((size_t)np * sizeof *ps);
    mpmd_graph_params(g, ps, np);
    int bad = 0, holders = 0;
    for (int i = 0; i < np; i++) {
        mpmd_type t = mpmd_value_type(g, ps[i]);
        int64_t numel = mpmd_type_numel(&t);
        const float *copies[16];
        int nc = 0;
        if (r->ex) {
            copies[nc++] = mpmd_exec_var_data(r->ex, ps[i]);
        } else {
            int ranks[16];
            int nr = mpmd_step_where(r->st, ps[i], ranks, 16);
            for (int k = 0; k < nr; k++)
                copies[nc++] = mpmd_step_var_data(r->st, ranks[k], ps[i]);
        }
        holders += nc;
        for (int k = 0; k < nc; k++)
            for (int64_t j = 0; j < numel && copies[k]; j++) {
                float want = mpmd_bf16_to_f32(mpmd_f32_to_bf16(src[i][j]));
                if (memcmp(&copies[k][j], &want, 4) != 0 && bad++ < 3)
                    CHECK(0, "%s: \"%s\"[%lld] is %.9g, expected %.9g (bf16 of %.9g)", label,
                          mpmd_value_name(g, ps[i]), (long long)j, copies[k][j], want, src[i][j]);
            }
    }
    CHECK(bad == 0 && holders >= np, "%s: %d values differ (%d holders of %d parameters)", label, bad,
          holders, np);
    free(ps);
}

static void test_weights_export(void) {
    /* the sample in every dtype, by hand */
    sample s = sample_new(0.0f);
    set_weights_values(&s);
    check_sample_export(&s, MPMD_F32, "w-f32.safetensors");
    check_sample_export(&s, MPMD_BF16, "w-bf16.safetensors");
    check_sample_export(&s, MPMD_F16, "w-f16.safetensors");
    check_sample_load(MPMD_F32, "w-f32.safetensors");
    check_sample_load(MPMD_BF16, "w-bf16.safetensors");
    check_sample_load(MPMD_F16, "w-f16.safetensors");
    size_t l32, l16;
    char p32[400], p16[400], path[400];
    path_in(p32, sizeof p32, "w-f32.safetensors");
    path_in(p16, sizeof p16, "w-bf16.safetensors");
    uint8_t *a = read_file(p32, &l32), *b = read_file(p16, &l16);
    CHECK(a && b && l32 - 8 - header_len(a) == 36 && l16 - 8 - header_len(b) == 18,
          "data sections: f32 %zu, bf16 %zu bytes", a ? l32 - 8 - (size_t)header_len(a) : 0,
          b ? l16 - 8 - (size_t)header_len(b) : 0);
    free(a);

    /* bad arguments: no file appears */
    mpmd_error err;
    path_in(path, sizeof path, "w-i32.safetensors");
    CHECK(mpmd_exec_export_weights(s.ex, path, MPMD_I32, &err) == MPMD_ERR_INVALID && has(err.msg, "i32") &&
              has(err.msg, "f32, bf16 and f16"),
          "export as i32: %s", err.msg);
    struct stat sb;
    CHECK(stat(path, &sb) != 0, "a refused export wrote a file");
    CHECK(mpmd_exec_export_weights(NULL, path, MPMD_BF16, &err) == MPMD_ERR_INVALID,
          "NULL executor accepted");
    CHECK(mpmd_exec_export_weights(s.ex, NULL, MPMD_BF16, &err) == MPMD_ERR_INVALID, "NULL path accepted");
    char missing[500];
    snprintf(missing, sizeof missing, "%s/no-dir/w.safetensors", tmpdir);
    CHECK(mpmd_exec_export_weights(s.ex, missing, MPMD_BF16, &err) == MPMD_ERR_IO &&
              has(err.msg, "cannot write"),
          "export into a missing directory: %s", err.msg);
    CHECK(count_tmp(tmpdir) == 0, "temporary file left behind");

    /* every truncation of the bf16 export is an error that changes nothing */
    sample t = sample_new(9.0f);
    char bad[400];
    path_in(bad, sizeof bad, "w-bad.safetensors");
    int fails = tu_failures;
    for (size_t k = 0; b && k < l16 && tu_failures == fails; k++) {
        write_file(bad, b, k);
        char label[64];
        snprintf(label, sizeof label, "bf16 export truncated to %zu of %zu bytes", k, l16);
        expect_fail(&t, bad, k < 8 ? "too short" : "truncated", label);
    }
    /* a flipped data byte fails the checksum */
    if (b) {
        b[l16 - 1] ^= 1;
        write_file(bad, b, l16);
        b[l16 - 1] ^= 1;
        expect_fail(&t, bad, "data checksum mismatch", "bf16 export, last byte flipped");
        /* the metadata dtype is covered by the header checksum */
        char *dt = (char *)find_bytes(b, l16, "\"dtype\":\"BF16\"", 14);
        CHECK(dt != NULL, "no dtype in the metadata");
        if (dt) {
            dt[10] = 'C';
            write_file(bad, b, l16);
            dt[10] = 'B';
            expect_fail(&t, bad, "header checksum mismatch", "metadata dtype changed");
        }
    }
    free(b);

    /* a weights file of another model: missing parameters and shapes */
    mpmd_graph *g2 = mpmd_graph_new();
    mpmd_param(g2, "w", MPMD_SHAPE(3, 2), MPMD_ZEROS);
    mpmd_param(g2, "extra", MPMD_SHAPE(4), MPMD_ZEROS);
    sample u = {g2, tu_exec(g2, 1)};
    char before[65], after[65];
    state_digest(u.g, u.ex, NULL, before);
    mpmd_status rc = mpmd_exec_load(u.ex, p16, NULL, &err);
    state_digest(u.g, u.ex, NULL, after);
    CHECK(rc == MPMD_ERR_SHAPE && has(err.msg, "1 missing, 1 unexpected, 1 with another dtype or shape") &&
              has(err.msg, "missing \"extra\" F32[4]") && has(err.msg, "unexpected \"enc/b\" BF16[3]") &&
              has(err.msg, "\"w\" BF16[2,3] vs F32[3,2]"),
          "weights of another model: %d %s", rc, err.msg);
    CHECK(strcmp(before, after) == 0, "a failed weights load changed the state");
    sample_free(&u);
    sample_free(&t);
    sample_free(&s);
}

/* The GPT: export from a trained executor and from a 2-rank step (the same
 * bytes), load into an executor that has trained on (its optimizer state is
 * kept) and into a 4-rank step (every copy of the tied embedding). */
static void test_weights_gpt(void) {
    char from_ex[400], from_st[400];
    path_in(from_ex, sizeof from_ex, "gpt-ex.bf16.safetensors");
    path_in(from_st, sizeof from_st, "gpt-st.bf16.safetensors");
    gpt_config c1 = tiny_cfg(1), c2 = tiny_cfg(2), c4 = tiny_cfg(4);
    runner r;
    mpmd_error err;
    if (!runner_new(&r, &c1, 0, 7)) return;
    runner_step(&r, 1), runner_step(&r, 2);
    CHECK(mpmd_exec_export_weights(r.ex, from_ex, MPMD_BF16, &err) == MPMD_OK, "%s", err.msg);
    int np = mpmd_graph_params(r.m.g, NULL, 0);
    mpmd_value *ps = malloc((size_t)np * sizeof *ps);
    float **src = calloc((size_t)np, sizeof *src);
    mpmd_graph_params(r.m.g, ps, np);
    for (int i = 0; i < np; i++) {
        mpmd_type t = mpmd_value_type(r.m.g, ps[i]);
        src[i] = malloc(mpmd_type_bytes(&t));
        memcpy(src[i], mpmd_exec_var_data(r.ex, ps[i]), mpmd_type_bytes(&t));
    }
    runner_free(&r);

    if (runner_new(&r, &c2, 2, 7)) {
        runner_step(&r, 1), runner_step(&r, 2);
        CHECK(mpmd_step_export_weights(r.st, from_st, MPMD_BF16, &err) == MPMD_OK, "%s", err.msg);
        runner_free(&r);
        size_t la, lb;
        uint8_t *a = read_file(from_ex, &la), *b = read_file(from_st, &lb);
        CHECK(a && b && la == lb && memcmp(a, b, la) == 0,
              "the 2-rank step's export differs from the executor's");
        if (a) {
            uint64_t n = header_len(a);
            CHECK(!find_bytes(a, 8 + n, "optim/", 6), "the export holds optimizer state");
            CHECK(la - 8 - n == 2 * (size_t)gpt_param_count(&c1), "export data %zu bytes for %lld parameters",
                  la - 8 - (size_t)n, (long long)gpt_param_count(&c1));
        }
        free(a), free(b);
    }

    /* into an executor that trained on: the parameters change, the
     * optimizer state (moments, step counter) does not */
    if (runner_new(&r, &c1, 0, 99)) {
        runner_step(&r, 1);
        size_t l0, l1;
        uint8_t *s0 = non_params(r.m.g, r.ex, &l0);
        mpmd_checkpoint_info info;
        CHECK(mpmd_exec_load(r.ex, from_ex, &info, &err) == MPMD_OK && info.weights_only == 1, "%s", err.msg);
        uint8_t *s1 = non_params(r.m.g, r.ex, &l1);
        CHECK(l0 == l1 && l0 > 0 && memcmp(s0, s1, l0) == 0, "loading weights changed the optimizer state");
        const int32_t *step = mpmd_exec_var_data(r.ex, mpmd_lookup(r.m.g, "optim/step"));
        CHECK(step && *step == 1, "optim/step is %d after loading weights, expected 1", step ? *step : -1);
        check_params_bf16(&r, src, "executor");
        float loss = runner_step(&r, 3);
        CHECK(isfinite(loss), "a step after loading weights: loss %g", loss);
        free(s0), free(s1);
        runner_free(&r);
    }
    if (runner_new(&r, &c4, 4, 99)) {
        CHECK(mpmd_step_load(r.st, from_st, NULL, &err) == MPMD_OK, "%s", err.msg);
        check_params_bf16(&r, src, "4-rank step");
        runner_free(&r);
    }
    /* a checkpoint still holds the whole state: a weights file does not
     * replace it the other way round */
    for (int i = 0; i < np; i++)
        free(src[i]);
    free(src), free(ps);
}

/* ---- under mpirun (tests/checkpoint_mpi.sh) ----------------------------------------- */

/* The GPT on 2 ranks (MPI processes or in-process threads), steps first..last,
 * optionally loading before and saving after; prints the final line. */
static int mpi_run(const char *load, const char *save, int64_t first, int64_t last) {
    gpt_config c = tiny_cfg(2);
    runner r;
    if (!runner_new(&r, &c, 2, 7)) return 1;
    mpmd_error err;
    if (load) {
        mpmd_checkpoint_info info;
        CHECK(mpmd_step_load(r.st, load, &info, &err) == MPMD_OK && info.step == first - 1, "load: %s",
              err.msg);
    }
    float loss = NAN;
    for (int64_t s = first; s <= last; s++)
        loss = runner_step(&r, s);
    if (save) {
        CHECK(runner_save(&r, save, last, &err) == MPMD_OK, "save: %s", err.msg);
        /* the weights export, collective like the save; process 0 checks it
         * against an in-process export of the saved state */
        char wpath[600], ref[600];
        snprintf(wpath, sizeof wpath, "%s.bf16", save);
        snprintf(ref, sizeof ref, "%s.ref.bf16", save);
        CHECK(mpmd_step_export_weights(r.st, wpath, MPMD_BF16, &err) == MPMD_OK, "export: %s", err.msg);
        /* a snapshot, collective like the save: process 0's writes the
         * saved file's bytes, the others hold nothing and write nothing */
        char spath[600];
        snprintf(spath, sizeof spath, "%s.snap%d", save, mpmd_mpi_world_rank());
        mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
        info.step = last;
        info.seed = 7;
        snprintf(info.config, sizeof info.config, "layers=%d stages=%d", r.m.cfg.layers, r.m.cfg.stages);
        mpmd_checkpoint_snapshot *snap = NULL;
        CHECK(mpmd_step_snapshot(r.st, &info, &snap, &err) == MPMD_OK, "snapshot: %s", err.msg);
        int root = mpmd_mpi_world_rank() == 0;
        CHECK(root == (mpmd_checkpoint_snapshot_bytes(snap) > 0), "process %d: the snapshot holds %lld bytes",
              mpmd_mpi_world_rank(), (long long)mpmd_checkpoint_snapshot_bytes(snap));
        CHECK(mpmd_checkpoint_snapshot_write(snap, spath, &err) == MPMD_OK, "snapshot write: %s", err.msg);
        mpmd_checkpoint_snapshot_free(snap);
        /* every process agrees on flags only some of them raise */
        int flags[3] = {mpmd_mpi_world_rank() == 1, 0, root ? 7 : 0}, mpi = g_runtime == MPMD_RUNTIME_MPI;
        CHECK(mpmd_mpi_any(flags, 3, &err) == MPMD_OK && flags[0] == mpi && flags[1] == 0 && flags[2] == 1,
              "process %d: mpmd_mpi_any gave %d %d %d", mpmd_mpi_world_rank(), flags[0], flags[1], flags[2]);
        if (root) {
            size_t la, lb;
            uint8_t *a = read_file(save, &la), *b = read_file(spath, &lb);
            CHECK(a && b && la == lb && memcmp(a, b, la) == 0,
                  "the snapshot's file differs from the saved one");
            free(a), free(b);
            unlink(spath);
        } else {
            CHECK(access(spath, F_OK) != 0, "process %d wrote %s", mpmd_mpi_world_rank(), spath);
        }
        if (mpmd_mpi_world_rank() == 0) {
            gpt_config c1 = tiny_cfg(1);
            runner one;
            if (runner_new(&one, &c1, 0, 1)) {
                CHECK(mpmd_exec_load(one.ex, save, NULL, &err) == MPMD_OK, "reload: %s", err.msg);
                CHECK(mpmd_exec_export_weights(one.ex, ref, MPMD_BF16, &err) == MPMD_OK, "export: %s",
                      err.msg);
                size_t la, lb;
                uint8_t *a = read_file(wpath, &la), *b = read_file(ref, &lb);
                CHECK(a && b && la == lb && memcmp(a, b, la) == 0,
                      "the 2-rank step's weights export differs from the one-rank executor's");
                free(a), free(b);
                runner_free(&one);
            }
            unlink(wpath), unlink(ref);
        }
    }
    char h[65];
    mpmd_step_params_sha256(r.st, h); /* collective under MPI */
    if (mpmd_mpi_world_rank() == 0) printf("final_loss=%.9g params_sha256=%s\n", loss, h);
    runner_free(&r);
    return tu_failures ? 1 : 0;
}

/* Modes for tests/checkpoint_mpi.sh; -1 when argv is none of them. */
static int mpi_modes(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--mpi-available")) return mpmd_mpi_available() ? 0 : 77;
    if (argc == 2 && !strcmp(argv[1], "--straight")) return mpi_run(NULL, NULL, 1, TOTAL_STEPS);
    if (argc == 3 && !strcmp(argv[1], "--local-save")) return mpi_run(NULL, argv[2], 1, SPLIT);
    int save = argc == 3 && !strcmp(argv[1], "--mpi-save"),
        resume = argc == 3 && !strcmp(argv[1], "--mpi-resume");
    if (!save && !resume) return -1;
    mpmd_error err;
    if (mpmd_mpi_init(&argc, &argv, &err) != MPMD_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    g_runtime = MPMD_RUNTIME_MPI;
    int rc = save ? mpi_run(NULL, argv[2], 1, SPLIT) : mpi_run(argv[2], NULL, SPLIT + 1, TOTAL_STEPS);
    if (rc) fprintf(stderr, "process %d: %d checks failed\n", mpmd_mpi_world_rank(), tu_failures);
    mpmd_mpi_finalize();
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        sample s = sample_new(0.0f);
        mpmd_checkpoint_info info = sample_info();
        mpmd_error err;
        mpmd_status rc = mpmd_exec_save(s.ex, argv[2], &info, &err);
        if (rc) fprintf(stderr, "%s\n", err.msg);
        sample_free(&s);
        return rc ? 1 : 0;
    }
    if (argc == 3 && strcmp(argv[1], "--write-weights-sample") == 0) {
        sample s = sample_new(0.0f);
        set_weights_values(&s);
        mpmd_error err;
        mpmd_status rc = mpmd_exec_export_weights(s.ex, argv[2], MPMD_BF16, &err);
        if (rc) fprintf(stderr, "%s\n", err.msg);
        sample_free(&s);
        return rc ? 1 : 0;
    }
    int mode = mpi_modes(argc, argv);
    if (mode >= 0) return mode;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/mpmd_ckpt_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    test_sample_format();
    test_truncation_and_flips();
    test_malformed();
    test_atomic();
    test_other_model();
    test_layouts();
    test_data_parallel_load();
    test_resume_fresh();
    test_snapshot();
    test_weights_export();
    test_weights_gpt();
    rm_tree(tmpdir);
    return tu_report("test_checkpoint");
}
