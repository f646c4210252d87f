/* Token files in llm.c's format (gpt_corpus_load_tokens in
 * examples/models/gpt_model.h), written by this test:
 *
 * - a good file loads every id (up to 50256, GPT-2's last);
 * - a token corpus and a byte corpus holding the same ids give the same
 *   batches, which are windows of the corpus and their next-id shift;
 * - two training steps of a GPT on GPT-2's vocabulary from such a file, in
 *   the loop and pipelined (the same loss, bit for bit), the first loss
 *   near ln(50257);
 * - llm.c's uint32 format (Llama 3's vocabulary) loads its ids as they are;
 * - bad files are errors of the right kind that name the file and what is
 *   wrong: a wrong magic, a wrong version, a count that does not match the
 *   size (both ways), a token >= vocab, fewer than seq + 1 tokens, a short
 *   header, a missing file, a directory; and the byte corpus's own check
 *   against a vocabulary below 256. */
#include "gpt_files.h"
#include "gpt_model.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char path[256];

static void fill_ids(uint16_t *ids, int64_t n, uint32_t vocab, uint64_t seed) {
    for (int64_t k = 0; k < n; k++) {
        uint64_t s = tu_mix64(seed ^ (uint64_t)k);
        ids[k] = (uint16_t)(s % vocab);
    }
}

static void expect_error(mpmd_status want, int64_t vocab, int64_t min_len, const char *what,
                         const char *needle) {
    gpt_corpus c;
    mpmd_error err;
    err.msg[0] = '\0';
    mpmd_status rc = gpt_corpus_load_tokens(&c, path, vocab, min_len, &err);
    CHECK(rc == want, "%s: status %d, expected %d (%s)", what, rc, want, err.msg);
    CHECK(strstr(err.msg, path) != NULL, "%s: the file is not named: %s", what, err.msg);
    CHECK(strstr(err.msg, needle) != NULL, "%s: \"%s\" not in: %s", what, needle, err.msg);
    CHECK(c.ids == NULL && c.ids32 == NULL && c.bytes == NULL && c.len == 0,
          "%s: a failed load left a corpus", what);
}

static void test_load_and_sample(void) {
    enum { N = 3000 };
    static uint16_t ids[N];
    fill_ids(ids, N, GPT2_VOCAB, 1);
    ids[5] = GPT2_VOCAB - 1;
    CHECK(tu_tokens_write(path, ids, N, GPT_TOKENS_MAGIC, GPT_TOKENS_VERSION, N) == 0, "writing %s", path);
    gpt_corpus c;
    mpmd_error err;
    CHECK(gpt_corpus_load_tokens(&c, path, GPT2_VOCAB, 65, &err) == MPMD_OK, "%s", err.msg);
    CHECK(c.len == N && c.ids && !c.bytes && !memcmp(c.ids, ids, sizeof ids), "the ids read differ");
    gpt_corpus_free(&c);

    /* the same ids as bytes and as tokens: the same batches */
    static uint8_t bytes[N];
    for (int k = 0; k < N; k++)
        ids[k] = bytes[k] = (uint8_t)tu_mix64((uint64_t)k);
    gpt_corpus b = {bytes, NULL, N, NULL}, t = {NULL, ids, N, NULL};
    int32_t tb[4 * 16], gb[4 * 16], tt[4 * 16], gt[4 * 16];
    gpt_sample_batch(&b, 4, 16, 9, 3, tb, gb);
    gpt_sample_batch(&t, 4, 16, 9, 3, tt, gt);
    CHECK(!memcmp(tb, tt, sizeof tb) && !memcmp(gb, gt, sizeof gb), "bytes and tokens sample differently");
    int windows = 1;
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i + 1 < 16; i++)
            windows &= tt[r * 16 + i + 1] == gt[r * 16 + i];
        int found = 0; /* the row is a window of the corpus */
        for (int off = 0; off + 16 < N && !found; off++) {
            int same = 1;
            for (int i = 0; i < 16 && same; i++)
                same = tt[r * 16 + i] == ids[off + i] && gt[r * 16 + i] == ids[off + i + 1];
            found = same;
        }
        windows &= found;
    }
    CHECK(windows, "a batch row is not a window of the corpus with its next-id shift");
}

/* Two steps on a token file, GPT-2's vocabulary: the loop and std1f1b on
 * two stages give the same losses, bit for bit. */
static void test_train(void) {
    enum { N = 2000 };
    static uint16_t ids[N];
    fill_ids(ids, N, GPT2_VOCAB, 2);
    CHECK(tu_tokens_write(path, ids, N, GPT_TOKENS_MAGIC, GPT_TOKENS_VERSION, N) == 0, "writing %s", path);
    gpt_config cfg = gpt_config_default();
    cfg.vocab = GPT2_VOCAB, cfg.layers = 2, cfg.width = 16, cfg.heads = 2, cfg.seq = 16, cfg.batch = 4,
    cfg.microbatches = 2, cfg.tie_embeddings = 1;
    gpt_corpus corpus;
    mpmd_error err;
    CHECK(gpt_corpus_load_tokens(&corpus, path, cfg.vocab, cfg.seq + 1, &err) == MPMD_OK, "%s", err.msg);
    float losses[2][2] = {{0}};
    for (int stages = 1; stages <= 2; stages++) {
        cfg.stages = stages;
        gpt_model m;
        CHECK(gpt_build(&cfg, 1, &m, &err) == MPMD_OK, "%s", err.msg);
        mpmd_schedule *s = NULL;
        if (stages > 1) CHECK(mpmd_schedule_std1f1b(2, 2, &s, &err) == MPMD_OK, "%s", err.msg);
        mpmd_step_opts o = MPMD_STEP_DEFAULTS;
        o.threads_per_rank = 1;
        mpmd_step *st = mpmd_jit_with_loop(m.g, s, &o, &err);
        CHECK(st != NULL, "%s", err.msg);
        int32_t tok[4 * 16], tgt[4 * 16];
        for (int step = 1; st && step <= 2; step++) {
            gpt_sample_batch(&corpus, cfg.batch, cfg.seq, 0, (uint64_t)step, tok, tgt);
            CHECK(mpmd_step_set_input(st, m.tokens, tok, sizeof tok) == MPMD_OK &&
                      mpmd_step_set_input(st, m.targets, tgt, sizeof tgt) == MPMD_OK &&
                      mpmd_step_run(st) == MPMD_OK &&
                      mpmd_step_read(st, m.loss, &losses[stages - 1][step - 1], sizeof(float)) == MPMD_OK,
                  "%s", mpmd_step_error(st));
        }
        mpmd_step_free(st);
        mpmd_schedule_free(s);
        gpt_model_free(&m);
    }
    CHECK(fabsf(losses[0][0] - logf((float)GPT2_VOCAB)) < 0.5f, "first loss %g, ln(50257) = %g", losses[0][0],
          log((double)GPT2_VOCAB));
    CHECK(!memcmp(losses[0], losses[1], sizeof losses[0]), "loop %.9g %.9g, std1f1b %.9g %.9g", losses[0][0],
          losses[0][1], losses[1][0], losses[1][1]);
    gpt_corpus_free(&corpus);
}

/* llm.c's format for larger vocabularies: magic 20240801, version 7, uint32
 * ids, read as they are (an id past 2^31 is out of the vocabulary, not a
 * negative id). */
static void test_uint32(void) {
    enum { N = 64 };
    uint32_t ids[N];
    uint8_t file[1024 + 4 * N] = {0};
    const uint32_t head[3] = {GPT_TOKENS_MAGIC_WIDE, GPT_TOKENS_VERSION_WIDE, N};
    for (int i = 0; i < N; i++)
        ids[i] = 65536u + (uint32_t)(tu_mix64((uint64_t)i) % 70000u);
    ids[9] = 0;
    for (int i = 0; i < 3 + N; i++)
        for (int b = 0; b < 4; b++)
            file[(i < 3 ? 4 * i : 1024 + 4 * (i - 3)) + b] =
                (uint8_t)((i < 3 ? head[i] : ids[i - 3]) >> (8 * b));
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(file, 1, sizeof file, f) == sizeof file && fclose(f) == 0, "writing %s", path);
    gpt_corpus c;
    mpmd_error err;
    CHECK(gpt_corpus_load_tokens(&c, path, 65536 + 70000, 17, &err) == MPMD_OK, "%s", err.msg);
    CHECK(c.len == N && c.ids32 && !c.ids && !c.bytes, "a uint32 file: %lld ids", (long long)c.len);
    for (int i = 0; i < N; i++)
        CHECK(gpt_corpus_id(&c, i) == (int32_t)ids[i], "id %d: %d, want %u", i, gpt_corpus_id(&c, i), ids[i]);
    gpt_corpus tail = gpt_corpus_tail(&c, 60);
    CHECK(tail.len == 4 && gpt_corpus_id(&tail, 0) == (int32_t)ids[60], "the tail of a uint32 corpus");
    gpt_corpus_free(&c);
    expect_error(MPMD_ERR_FORMAT, 65536, 17, "uint32 ids past the vocabulary", "vocabulary of 65536");
    file[1024 + 4 * 5 + 3] = 0x80; /* id 5 past 2^31 */
    f = fopen(path, "wb");
    CHECK(f && fwrite(file, 1, sizeof file, f) == sizeof file && fclose(f) == 0, "writing %s", path);
    expect_error(MPMD_ERR_FORMAT, 1 << 24, 17, "an id past 2^31", "at position 5 is not an id");
}

static void test_bad_files(void) {
    enum { N = 100 };
    uint16_t ids[N];
    fill_ids(ids, N, 1000, 3);
    tu_tokens_write(path, ids, N, 20240326, 1, N); /* llm.c's model-file magic */
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "wrong magic", "magic number 20240326");
    tu_tokens_write(path, ids, N, 20240801, 7, N); /* llm.c's LLaMA-3 magic on uint16 ids: half the bytes */
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "uint16 ids under the uint32 magic",
                 "counts 100 tokens (400 bytes after the header) but the file has 200");
    tu_tokens_write(path, ids, N / 2, 20240801, 1, N / 2); /* the uint32 magic takes version 7 only */
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "uint32 magic, version 1",
                 "version 1; only version 7 (uint32 token ids) is read with magic 20240801");
    tu_tokens_write(path, ids, N, GPT_TOKENS_MAGIC, 2, N);
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "wrong version", "version 2");
    tu_tokens_write(path, ids, N, GPT_TOKENS_MAGIC, 1, N + 1);
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "count above the size", "counts 101 tokens (202 bytes");
    tu_tokens_write(path, ids, N, GPT_TOKENS_MAGIC, 1, N - 1);
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "count below the size", "has 200 bytes after it");
    tu_tokens_write(path, ids, N, GPT_TOKENS_MAGIC, 1, -5);
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "negative count", "counts -5 tokens");
    ids[77] = 1000;
    tu_tokens_write(path, ids, N, GPT_TOKENS_MAGIC, 1, N);
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "token >= vocab", "token 1000 at position 77");
    ids[77] = 999;
    tu_tokens_write(path, ids, 10, GPT_TOKENS_MAGIC, 1, 10);
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "too short for a window", "holds 10 tokens; at least 17");
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(ids, 1, 100, f) == 100 && fclose(f) == 0, "writing %s", path);
    expect_error(MPMD_ERR_FORMAT, 1000, 17, "a short header",
                 "100 bytes, too short for the 1024-byte header");
    remove(path);
    expect_error(MPMD_ERR_IO, 1000, 17, "a missing file", "cannot open");
    char dir[256];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(path, sizeof path, ".");
    expect_error(MPMD_ERR_IO, 1000, 17, "a directory", "not a regular file");
    snprintf(path, sizeof path, "%s", dir);

    /* a byte corpus against a vocabulary below 256 */
    gpt_corpus b;
    mpmd_error err;
    CHECK(gpt_corpus_generate(&b, 1000, 1, &err) == MPMD_OK, "%s", err.msg);
    CHECK(gpt_corpus_check_vocab(&b, 256, "the generated corpus", &err) == MPMD_OK, "%s", err.msg);
    CHECK(gpt_corpus_check_vocab(&b, 64, "the generated corpus", &err) == MPMD_ERR_FORMAT &&
              strstr(err.msg, "the generated corpus: byte ") && strstr(err.msg, "vocabulary of 64"),
          "bytes against vocab 64: %s", err.msg);
    gpt_corpus_free(&b);
}

int main(void) {
    snprintf(path, sizeof path, "test_gpt_tokens_%d.bin", (int)getpid());
    test_load_and_sample();
    test_train();
    test_uint32();
    test_bad_files();
    remove(path);
    return tu_report("test_gpt_tokens");
}
