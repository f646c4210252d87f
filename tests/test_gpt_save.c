/* The checkpoints of a gpt run (examples/models/gpt_save.h): series names
 * and what is a member of a series; rotation keeps the newest files older
 * than the one just written and leaves later and foreign files alone; the
 * list --resume latest tries is newest first, a damaged file in its place
 * with why; the model a checkpoint records and every option of a run that
 * differs from it, named with both values.
 */
#include "gpt_model.h"
#include "gpt_save.h"
#include "testutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void touch(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL, "cannot create %s", p);
    if (f) fclose(f);
}

static int exists(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void test_names(void) {
    char out[256];
    CHECK(gpt_series_name("run.safetensors", 120, out, sizeof out) == 0 &&
              !strcmp(out, "run.step000120.safetensors"),
          "series name: %s", out);
    CHECK(gpt_series_name("a/b.c/run.ckpt", 7, out, sizeof out) == 0 &&
              !strcmp(out, "a/b.c/run.ckpt.step000007"),
          "series name without the extension: %s", out);
    CHECK(gpt_series_name("/x/.safetensors", 1234567, out, sizeof out) == 0 &&
              !strcmp(out, "/x/.safetensors.step1234567"),
          "a bare extension is a name: %s", out);
    CHECK(gpt_series_name("run.safetensors", 1, out, 10) == -1, "a name that does not fit");
    long long s = -1;
    CHECK(gpt_series_step("d/run.safetensors", "run.step000120.safetensors", &s) && s == 120, "member: %lld",
          s);
    CHECK(gpt_series_step("run.safetensors", "run.step5.safetensors", &s) && s == 5, "fewer digits: %lld", s);
    CHECK(gpt_series_step("run.ckpt", "run.ckpt.step000003", &s) && s == 3, "no extension: %lld", s);
    const char *not_members[] = {"run.safetensors",
                                 "run.step.safetensors",
                                 "run.step000120.safetensors.tmp.4242",
                                 "run.step00012x.safetensors",
                                 "other.step000120.safetensors",
                                 "run.step000120.safetensors.bak",
                                 "run.step-1.safetensors",
                                 "xrun.step000120.safetensors"};
    for (size_t i = 0; i < sizeof not_members / sizeof not_members[0]; i++)
        CHECK(!gpt_series_step("run.safetensors", not_members[i], &s), "%s is not a member", not_members[i]);
    CHECK(!gpt_series_step("run.ckpt", "run.ckpt.step000003.safetensors", &s), "another extension");
}

static void test_rotation(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    const char *files[] = {"run.step000002.safetensors",        "run.step000004.safetensors",
                           "run.step000006.safetensors",        "run.step000008.safetensors",
                           "run.step000100.safetensors",        "run.safetensors",
                           "run.step000003.safetensors.tmp.99", "notes.txt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        touch(files[i]);
    /* step 8 was just written; keep 2: 8 and 6 stay; 100 is a later run's */
    int n = gpt_series_rotate(path, 8, 2, stderr, "test");
    CHECK(n == 2, "deleted %d, want 2", n);
    CHECK(!exists("run.step000002.safetensors") && !exists("run.step000004.safetensors"),
          "the old ones are gone");
    CHECK(exists("run.step000006.safetensors") && exists("run.step000008.safetensors") &&
              exists("run.step000100.safetensors") && exists("run.safetensors") &&
              exists("run.step000003.safetensors.tmp.99") && exists("notes.txt"),
          "rotation deleted a file it must keep");
    n = gpt_series_rotate(path, 8, 1, stderr, "test");
    CHECK(n == 1 && !exists("run.step000006.safetensors") && exists("run.step000008.safetensors"),
          "keep 1: only the file just written (deleted %d)", n);
    n = gpt_series_rotate(path, 8, 5, stderr, "test");
    CHECK(n == 0, "nothing more to delete, deleted %d", n);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
}

/* A real checkpoint of a tiny one-rank model at `step`. */
static void save_at(mpmd_exec *ex, const char *name, long long step) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
    info.step = step;
    mpmd_error err;
    CHECK(mpmd_exec_save(ex, p, &info, &err) == MPMD_OK, "%s", err.msg);
}

static void test_list(void) {
    gpt_config c = gpt_config_default();
    c.vocab = 16, c.seq = 4, c.width = 8, c.heads = 2, c.layers = 1, c.batch = 2, c.microbatches = 1;
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&c, 1, &m, &err) != MPMD_OK) {
        CHECK(0, "gpt_build: %s", err.msg);
        return;
    }
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    mpmd_exec *ex = mpmd_exec_new(m.g, &eo, &err);
    CHECK(ex != NULL, "exec: %s", err.msg);
    if (!ex) {
        gpt_model_free(&m);
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    gpt_candidate *cand;
    int n = -1;
    CHECK(gpt_series_list(path, &cand, &n, &err) == MPMD_OK && n == 0, "an empty directory lists %d", n);
    gpt_candidates_free(cand, n);
    save_at(ex, "run.safetensors", 9); /* the final save of a finished run: newest */
    save_at(ex, "run.step000004.safetensors", 4);
    save_at(ex, "run.step000006.safetensors", 6);
    save_at(ex, "run.step000008.safetensors", 8);
    /* the newest series file damaged: a flipped byte of its header */
    char p[512];
    snprintf(p, sizeof p, "%s/run.step000008.safetensors", dir);
    FILE *f = fopen(p, "r+b");
    if (f) {
        fseek(f, 20, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, 20, SEEK_SET);
        fputc(ch ^ 0x01, f);
        fclose(f);
    }
    touch("run.step000007.safetensors.tmp.77"); /* a stray temporary file: not a candidate */
    CHECK(gpt_series_list(path, &cand, &n, &err) == MPMD_OK && n == 4, "listed %d, want 4", n);
    if (n == 4) {
        CHECK(strstr(cand[0].path, "/run.safetensors") && cand[0].step == 9 && !cand[0].bad, "first: %s %lld",
              cand[0].path, cand[0].step);
        CHECK(strstr(cand[1].path, "run.step000008") && cand[1].bad && cand[1].step == 8 &&
                  strstr(cand[1].why, "run.step000008.safetensors"),
              "second: the damaged one at its name's step: %s %lld bad %d (%s)", cand[1].path, cand[1].step,
              cand[1].bad, cand[1].why);
        CHECK(strstr(cand[2].path, "run.step000006") && cand[2].step == 6 && cand[2].info.step == 6,
              "third: %s", cand[2].path);
        CHECK(strstr(cand[3].path, "run.step000004") && cand[3].step == 4, "fourth: %s", cand[3].path);
    }
    gpt_candidates_free(cand, n);
    /* the path itself damaged: tried (and skipped) first */
    CHECK(truncate(path, 5) == 0, "truncate %s", path);
    CHECK(gpt_series_list(path, &cand, &n, &err) == MPMD_OK && n == 4 && cand[0].bad &&
              strstr(cand[0].path, "/run.safetensors"),
          "a damaged --save file is listed first");
    gpt_candidates_free(cand, n);
    snprintf(p, sizeof p, "%s/missing/run.safetensors", dir);
    CHECK(gpt_series_list(p, &cand, &n, &err) == MPMD_ERR_IO && strstr(err.msg, "cannot read the directory"),
          "a missing directory: %s", err.msg);
    const char *made[] = {"run.safetensors", "run.step000004.safetensors", "run.step000006.safetensors",
                          "run.step000008.safetensors", "run.step000007.safetensors.tmp.77"};
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, made[i]);
        unlink(p);
    }
    mpmd_exec_free(ex);
    gpt_model_free(&m);
}

static void expect_refusal(const gpt_config *run, const char *rec, const char *want) {
    mpmd_error err;
    err.msg[0] = '\0';
    mpmd_status rc = gpt_config_check_recorded(run, rec, "run.safetensors", &err);
    CHECK(rc != MPMD_OK && strstr(err.msg, want), "recorded \"%s\": %d \"%s\", want \"%s\"", rec, (int)rc,
          err.msg, want);
}

static void test_config(void) {
    gpt_config c = gpt_config_default();
    c.heads = 4;
    char rec[MPMD_CHECKPOINT_CONFIG_MAX];
    gpt_config_record(&c, rec, sizeof rec);
    CHECK(!strcmp(rec, "arch=gpt2 layers=4 width=128 heads=4 vocab=256 seq=64 tie-embeddings=0"),
          "gpt record: %s", rec);
    mpmd_error err;
    CHECK(gpt_config_check_recorded(&c, rec, "f", &err) == MPMD_OK, "its own record: %s", err.msg);
    /* what may change on resume */
    gpt_config d = c;
    d.lr = 1e-4f, d.batch = 32, d.microbatches = 8, d.stages = 4, d.compute = MPMD_BF16, d.dropout = 0.1f;
    d.remat = 1, d.fused_attention = 0, d.tensor_parallel = 2, d.clip = 1.0f;
    CHECK(gpt_config_check_recorded(&d, rec, "f", &err) == MPMD_OK, "training options changed: %s", err.msg);
    /* what may not */
    d = c, d.heads = 2;
    expect_refusal(&d, rec, "run.safetensors was trained with --heads 4; this run has --heads 2");
    d = c, d.layers = 6, d.width = 64;
    expect_refusal(
        &d, rec,
        "run.safetensors was trained with --layers 4, --width 128; this run has --layers 6, --width 64");
    d = c, d.vocab = 50257;
    expect_refusal(&d, rec, "with --vocab 256; this run has --vocab 50257");
    d = c, d.seq = 32;
    expect_refusal(&d, rec, "with --seq 64; this run has --seq 32");
    d = c, d.tie_embeddings = 1;
    expect_refusal(&d, rec,
                   "with no --tie-embeddings (an LM head of its own); this run has --tie-embeddings");
    gpt_config t = c;
    t.tie_embeddings = 1;
    gpt_config_record(&t, rec, sizeof rec);
    expect_refusal(&c, rec, "with --tie-embeddings; this run has no --tie-embeddings");
    /* llama: grouped-query heads, the SwiGLU width and the rotary base count; seq does not (no position
     * table) */
    gpt_config l = c;
    l.arch = GPT_ARCH_LLAMA, l.kv_heads = 2, l.rope_base = 500000.0f;
    gpt_config_record(&l, rec, sizeof rec);
    CHECK(!strcmp(rec, "arch=llama layers=4 width=128 heads=4 vocab=256 seq=64 tie-embeddings=0 kv-heads=2 "
                       "mlp-hidden=344 rope-base=500000 norm-eps=1e-05 rope-scaling=none"),
          "llama record: %s", rec);
    d = l, d.seq = 16;
    CHECK(gpt_config_check_recorded(&d, rec, "f", &err) == MPMD_OK, "llama, another seq: %s", err.msg);
    d = l, d.kv_heads = 0; /* all 4 */
    expect_refusal(&d, rec, "with --kv-heads 2; this run has --kv-heads 4");
    d = l, d.mlp_hidden = 256;
    expect_refusal(&d, rec, "with --mlp-hidden 344; this run has --mlp-hidden 256");
    d = l, d.rope_base = 10000.0f;
    expect_refusal(&d, rec, "with --rope-base 500000; this run has --rope-base 10000");
    expect_refusal(&c, rec,
                   "run.safetensors was trained with llama blocks (the llama program); this run builds gpt2");
    /* the RMS epsilon and Llama 3.1's rope scaling (from --init-from's config.json) count too */
    gpt_config s3 = l;
    s3.norm_eps = 1e-6f, s3.rope_scaling = (mpmd_rope_scaling){8.0f, 1.0f, 4.0f, 8192};
    char rec3[MPMD_CHECKPOINT_CONFIG_MAX];
    gpt_config_record(&s3, rec3, sizeof rec3);
    CHECK(strstr(rec3, " norm-eps=1e-06 rope-scaling=8,1,4,8192") != NULL, "llama 3.1 record: %s", rec3);
    CHECK(gpt_config_check_recorded(&s3, rec3, "f", &err) == MPMD_OK, "its own record: %s", err.msg);
    d = s3, d.norm_eps = 0; /* the default, 1e-5 */
    expect_refusal(&d, rec3, "with RMS norm epsilon 1e-06; this run has RMS norm epsilon 1e-05");
    d = s3, d.rope_scaling = MPMD_ROPE_NO_SCALING;
    expect_refusal(&d, rec3, "with rope scaling 8,1,4,8192; this run has rope scaling none");
    d = s3, d.rope_scaling.original_positions = 4096;
    expect_refusal(&d, rec3, "with rope scaling 8,1,4,8192; this run has rope scaling 8,1,4,4096");
    /* files that record no model load as before */
    const char *none[] = {"", "layers=4 stages=2", "free text for people"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        CHECK(gpt_config_check_recorded(&c, none[i], "f", &err) == MPMD_OK, "\"%s\" is not checked", none[i]);
    CHECK(gpt_config_check_recorded(&c, NULL, "f", &err) == MPMD_OK, "no config");
    CHECK(gpt_config_check_recorded(&c, "arch=gpt2 heads=four", "run.safetensors", &err) == MPMD_ERR_FORMAT &&
              strstr(err.msg, "run.safetensors records heads=four, not a number"),
          "a malformed record: %s", err.msg);
    CHECK(gpt_config_check_recorded(&l, "arch=llama rope-scaling=8,1", "run.safetensors", &err) ==
                  MPMD_ERR_FORMAT &&
              strstr(err.msg, "run.safetensors records rope-scaling=8,1, neither none nor"),
          "a malformed rope-scaling: %s", err.msg);
}

/* gpt_config_from_record: the model of a checkpoint, whatever the command line left out; what it gave
 * must agree */
static void test_from_record(void) {
    gpt_config l = gpt_config_default();
    l.arch = GPT_ARCH_LLAMA, l.layers = 3, l.width = 64, l.heads = 4, l.kv_heads = 2, l.vocab = 300,
    l.seq = 24;
    l.tie_embeddings = 1, l.mlp_hidden = 96, l.rope_base = 500000.0f, l.norm_eps = 1e-6f;
    l.rope_scaling = (mpmd_rope_scaling){8.0f, 1.0f, 4.0f, 64};
    char rec[MPMD_CHECKPOINT_CONFIG_MAX];
    gpt_config_record(&l, rec, sizeof rec);
    gpt_hf_given none, given;
    memset(&none, 0, sizeof none);
    mpmd_error err;
    /* nothing given: every model option from the record; the training options stay */
    gpt_config r = gpt_config_default();
    r.arch = GPT_ARCH_LLAMA, r.lr = 1e-4f, r.batch = 2, r.microbatches = 1;
    CHECK(gpt_config_from_record(&r, &none, rec, "run.safetensors", &err) == MPMD_OK, "from the record: %s",
          err.msg);
    CHECK(r.layers == 3 && r.width == 64 && r.heads == 4 && r.kv_heads == 2 && r.vocab == 300 &&
              r.seq == 24 && r.tie_embeddings == 1 && gpt_mlp_hidden(&r) == 96 && r.rope_base == 500000.0f &&
              r.norm_eps == 1e-6f && r.rope_scaling.factor == 8.0f &&
              r.rope_scaling.low_freq_factor == 1.0f && r.rope_scaling.high_freq_factor == 4.0f &&
              r.rope_scaling.original_positions == 64,
          "the record's model: layers %d width %lld heads %d kv %d vocab %lld seq %lld tied %d mlp %lld base "
          "%g "
          "eps %g scaling %g/%lld",
          r.layers, (long long)r.width, r.heads, r.kv_heads, (long long)r.vocab, (long long)r.seq,
          r.tie_embeddings, (long long)gpt_mlp_hidden(&r), (double)r.rope_base, (double)r.norm_eps,
          (double)r.rope_scaling.factor, (long long)r.rope_scaling.original_positions);
    CHECK(r.lr == 1e-4f && r.batch == 2 && r.microbatches == 1, "training options kept");
    /* options given that agree are fine; a llama run may give another seq (rotary positions) */
    r = gpt_config_default(), r.arch = GPT_ARCH_LLAMA, r.layers = 3, r.seq = 48;
    memset(&given, 0, sizeof given);
    given.layers = 1, given.seq = 1;
    CHECK(gpt_config_from_record(&r, &given, rec, "f", &err) == MPMD_OK && r.seq == 48 && r.width == 64,
          "agreeing options: %s (seq %lld)", err.msg, (long long)r.seq);
    /* options given that contradict it: refused with both values, c untouched */
    r = gpt_config_default(), r.arch = GPT_ARCH_LLAMA, r.layers = 4, r.kv_heads = 4;
    memset(&given, 0, sizeof given);
    given.layers = 1, given.kv_heads = 1;
    gpt_config before = r;
    CHECK(gpt_config_from_record(&r, &given, rec, "run.safetensors", &err) == MPMD_ERR_INVALID &&
              strstr(err.msg,
                     "run.safetensors was trained with --layers 3, --kv-heads 2; this run has --layers "
                     "4, --kv-heads 4"),
          "contradicting options: %s", err.msg);
    CHECK(!memcmp(&r, &before, sizeof r), "a refused record leaves the config as it was");
    /* an older record (no norm-eps, no rope-scaling): the defaults */
    r = gpt_config_default(), r.arch = GPT_ARCH_LLAMA;
    CHECK(gpt_config_from_record(&r, &none,
                                 "arch=llama layers=2 width=32 heads=4 vocab=256 seq=16 tie-embeddings=0 "
                                 "kv-heads=2 mlp-hidden=88 rope-base=10000",
                                 "old.safetensors", &err) == MPMD_OK &&
              r.layers == 2 && r.kv_heads == 2 && r.norm_eps == gpt_config_default().norm_eps &&
              r.rope_scaling.factor == 0.0f,
          "an older record: %s", err.msg);
    /* a gpt2 record: seq counts (the position table); a record of llama blocks is refused */
    gpt_config g = gpt_config_default();
    g.seq = 32;
    char grec[MPMD_CHECKPOINT_CONFIG_MAX];
    gpt_config_record(&g, grec, sizeof grec);
    r = gpt_config_default(), r.seq = 8;
    memset(&given, 0, sizeof given);
    given.seq = 1;
    CHECK(gpt_config_from_record(&r, &given, grec, "g.safetensors", &err) == MPMD_ERR_INVALID &&
              strstr(err.msg, "with --seq 32; this run has --seq 8"),
          "gpt2 seq: %s", err.msg);
    r = gpt_config_default();
    CHECK(gpt_config_from_record(&r, &none, grec, "g.safetensors", &err) == MPMD_OK && r.seq == 32,
          "gpt2 seq from the record: %s", err.msg);
    CHECK(gpt_config_from_record(&r, &none, rec, "l.safetensors", &err) == MPMD_ERR_INVALID &&
              strstr(err.msg, "l.safetensors was trained with llama blocks"),
          "llama record into gpt2: %s", err.msg);
    /* no record: nothing changes */
    r = gpt_config_default(), before = r;
    CHECK(gpt_config_from_record(&r, &none, "", "w.safetensors", &err) == MPMD_OK &&
              !memcmp(&r, &before, sizeof r),
          "no record");
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/mpmd_gpt_save_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
        return 1;
    }
    test_names();
    test_from_record();
    test_rotation();
    test_list();
    test_config();
    rmdir(dir);
    return tu_report("test_gpt_save");
}
