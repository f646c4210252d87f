/* GPT-2 weights in Hugging Face's layout into the GPT model
 * (examples/models/gpt_import.h), from files this test writes (gpt_files.h:
 * 2 layers, width 16, 2 heads, vocab 64, 32 positions, random values):
 *
 * - the shape read from the file, and the configuration made from it: the
 *   options a user set checked against it, each mismatch naming the tensor
 *   and both shapes;
 * - every parameter after the import, bit for bit, against what was
 *   written, by a name map written out here independently of the
 *   importer's (Conv1D [in, out] = our kernel [in, out], no transposes; the
 *   first seq rows of wpe); in the one-rank loop and in a two-stage
 *   pipeline, where the tied wte lives on both ranks (every copy checked);
 * - "transformer." names, BF16 and F16 files (widened exactly), an
 *   lm_head.weight equal to wte.weight;
 * - a model split over 2 model ranks (tensor parallelism): the file's
 *   whole tensors against the parameters' whole shapes, every parameter
 *   read back whole bit for bit (each rank got its part);
 * - errors that name the tensor: missing, mis-shaped, of dtype I32, an
 *   lm_head that differs from wte, an untied model, a file without wte;
 *   after a refused import the parameters are as they were. */
#include "gpt_files.h"
#include "gpt_import.h"
#include "gpt_model.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char path[256];

/* Our parameter name -> Hugging Face's (without the prefix). */
static int expected_name(const char *ours, char *hf, size_t len) {
    static const char *const map[][2] = {
        {"wte/embedding", "wte.weight"},
        {"wpe/embedding", "wpe.weight"},
        {"ln_f/scale", "ln_f.weight"},
        {"ln_f/bias", "ln_f.bias"},
        {"/ln_0/scale", "ln_1.weight"},
        {"/ln_0/bias", "ln_1.bias"},
        {"/attn/qkv/kernel", "attn.c_attn.weight"},
        {"/attn/qkv/bias", "attn.c_attn.bias"},
        {"/attn/out/kernel", "attn.c_proj.weight"},
        {"/attn/out/bias", "attn.c_proj.bias"},
        {"/ln_1/scale", "ln_2.weight"},
        {"/ln_1/bias", "ln_2.bias"},
        {"/mlp/dense_0/kernel", "mlp.c_fc.weight"},
        {"/mlp/dense_0/bias", "mlp.c_fc.bias"},
        {"/mlp/dense_1/kernel", "mlp.c_proj.weight"},
        {"/mlp/dense_1/bias", "mlp.c_proj.bias"},
    };
    int block;
    const char *rest = ours;
    if (sscanf(ours, "block_%d", &block) == 1) rest = strchr(ours, '/');
    for (size_t k = 0; rest && k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(rest, map[k][0])) {
            if (rest == ours)
                snprintf(hf, len, "%s", map[k][1]);
            else
                snprintf(hf, len, "h.%d.%s", block, map[k][1]);
            return 1;
        }
    return 0;
}

static gpt_config small_config(int seq) {
    gpt_config c = gpt_config_default();
    c.layers = 2, c.width = 16, c.heads = 2, c.vocab = 64, c.seq = seq;
    c.batch = 4, c.microbatches = 2, c.tie_embeddings = 1;
    return c;
}

static mpmd_step *compile(const gpt_model *m, int stages) {
    mpmd_error err;
    mpmd_schedule *s = NULL;
    if (stages > 1) CHECK(mpmd_schedule_std1f1b(stages, 2, &s, &err) == MPMD_OK, "%s", err.msg);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_step *st = mpmd_jit_with_loop(m->g, s, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    mpmd_schedule_free(s);
    return st;
}

/* Every copy of every parameter against the file's values (of dtype). */
static int params_match(const gpt_model *m, mpmd_step *st, const char *dtype, uint64_t seed) {
    int bad = 0, copies = 0;
    for (int i = 0; i < m->n_params; i++) {
        const char *name = mpmd_value_name(m->g, m->params[i]);
        char hf[96];
        CHECK(expected_name(name, hf, sizeof hf), "no Hugging Face name for %s", name);
        mpmd_type t = mpmd_value_type(m->g, m->params[i]);
        int64_t n = 1;
        for (int d = 0; d < t.ndim; d++)
            n *= t.dim[d];
        int ranks[8];
        int nr = mpmd_step_where(st, m->params[i], ranks, 8);
        CHECK(nr >= 1, "%s is on no rank", name);
        for (int r = 0; r < nr; r++) {
            const float *p = mpmd_step_var_data(st, ranks[r], m->params[i]);
            CHECK(p != NULL, "%s: no host data on rank %d", name, ranks[r]);
            if (!p) return 0;
            copies++;
            for (int64_t k = 0; k < n; k++) {
                float want = tu_hf_stored(dtype, seed, hf, k);
                if (memcmp(&p[k], &want, sizeof want) != 0) {
                    if (bad++ < 5)
                        fprintf(stderr, "%s[%lld] on rank %d is %.9g; %s[%lld] is %.9g\n", name, (long long)k,
                                ranks[r], p[k], hf, (long long)k, want);
                }
            }
        }
    }
    CHECK(copies > m->n_params || mpmd_step_num_ranks(st) == 1, "the tied wte should have two copies");
    return bad == 0;
}

static void write_file(const tu_hf_opts *o) {
    mpmd_error err;
    CHECK(tu_hf_write(path, o, &err) == MPMD_OK, "%s", err.msg);
}

/* Import into a fresh loop step of config c and expect an error with
 * every one of the `needles` in its message; the parameters unchanged. */
static void expect_import_error(const gpt_config *c, const char *what, const char *const *needles, int n) {
    mpmd_error err;
    gpt_model m;
    CHECK(gpt_build(c, 1, &m, &err) == MPMD_OK, "%s", err.msg);
    mpmd_step *st = compile(&m, 1);
    char before[65], after[65];
    mpmd_step_params_sha256(st, before);
    err.msg[0] = '\0';
    mpmd_status rc = gpt_hf_import(path, &m, st, &err);
    CHECK(rc != MPMD_OK, "%s: the import succeeded", what);
    for (int k = 0; k < n; k++)
        CHECK(strstr(err.msg, needles[k]) != NULL, "%s: \"%s\" is not in the message: %s", what, needles[k],
              err.msg);
    CHECK(strstr(err.msg, path) != NULL, "%s: the file is not named: %s", what, err.msg);
    mpmd_step_params_sha256(st, after);
    CHECK(!strcmp(before, after), "%s: a refused import changed the parameters", what);
    mpmd_step_free(st);
    gpt_model_free(&m);
}

static void test_inspect_and_configure(void) {
    tu_hf_opts o = tu_hf_defaults();
    write_file(&o);
    mpmd_error err;
    gpt_hf_info info;
    CHECK(gpt_hf_inspect(path, &info, &err) == MPMD_OK, "%s", err.msg);
    CHECK(info.layers == 2 && info.width == 16 && info.vocab == 64 && info.positions == 32 &&
              !info.prefix[0] && !info.has_lm_head,
          "inspect: layers %d width %lld vocab %lld positions %lld prefix \"%s\"", info.layers,
          (long long)info.width, (long long)info.vocab, (long long)info.positions, info.prefix);

    /* nothing given but the heads: everything from the file, seq cut to 32 */
    gpt_config c = gpt_config_default();
    c.heads = 2;
    gpt_hf_given given = {0};
    given.heads = 1;
    CHECK(gpt_hf_configure(path, &info, &given, &c, &err) == MPMD_OK, "%s", err.msg);
    CHECK(c.layers == 2 && c.width == 16 && c.vocab == 64 && c.seq == 32 && c.heads == 2 && c.tie_embeddings,
          "configured: layers %d width %lld vocab %lld seq %lld heads %d tie %d", c.layers,
          (long long)c.width, (long long)c.vocab, (long long)c.seq, c.heads, c.tie_embeddings);

    /* heads not given: width/64, which 16 is not a multiple of */
    c = gpt_config_default();
    given.heads = 0;
    CHECK(gpt_hf_configure(path, &info, &given, &c, &err) != MPMD_OK && strstr(err.msg, "heads"),
          "heads of a width-16 file inferred: %s", err.msg);
    gpt_hf_info big = info;
    big.width = 768;
    c = gpt_config_default();
    CHECK(gpt_hf_configure(path, &big, &given, &c, &err) == MPMD_OK && c.heads == 12,
          "width 768: %d heads (GPT-2 small has 12)", c.heads);

    /* options given that the file contradicts */
    struct {
        const char *what;
        int layers, width, vocab, seq;
        const char *needle[3];
    } cases[] = {
        {"--width 32", 0, 32, 0, 0, {"wte.weight", "[64, 16]", "[64, 32]"}},
        {"--vocab 256", 0, 0, 256, 0, {"wte.weight", "[64, 16]", "[256, 16]"}},
        {"--seq 40", 0, 0, 0, 40, {"wpe.weight", "[32, 16]", "[40, 16]"}},
        {"--layers 3", 3, 0, 0, 0, {"h.2.ln_1.weight", "missing", "h.0 .. h.1"}},
        {"--layers 1", 1, 0, 0, 0, {"h.1.ln_1.weight", "2 blocks", "1 layers"}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        c = gpt_config_default();
        gpt_hf_given g = {0};
        g.heads = 1, c.heads = 2;
        if (cases[k].layers) c.layers = cases[k].layers, g.layers = 1;
        if (cases[k].width) c.width = cases[k].width, g.width = 1;
        if (cases[k].vocab) c.vocab = cases[k].vocab, g.vocab = 1;
        if (cases[k].seq) c.seq = cases[k].seq, g.seq = 1;
        err.msg[0] = '\0';
        CHECK(gpt_hf_configure(path, &info, &g, &c, &err) != MPMD_OK, "%s accepted", cases[k].what);
        for (int j = 0; j < 3; j++)
            CHECK(strstr(err.msg, cases[k].needle[j]) != NULL, "%s: \"%s\" not in: %s", cases[k].what,
                  cases[k].needle[j], err.msg);
    }
    /* options that agree are fine, and a seq below the positions is kept */
    c = gpt_config_default();
    gpt_hf_given g = {1, 1, 1, 1, 1, 0, 0, 0, 0};
    c.layers = 2, c.width = 16, c.heads = 2, c.vocab = 64, c.seq = 8;
    CHECK(gpt_hf_configure(path, &info, &g, &c, &err) == MPMD_OK && c.seq == 8, "agreeing options: %s",
          err.msg);
}

/* Every parameter bit for bit, in the loop and in a two-stage pipeline. */
static void test_import_bitwise(const char *prefix, const char *dtype, int lm_head) {
    tu_hf_opts o = tu_hf_defaults();
    o.prefix = prefix, o.dtype = dtype, o.lm_head = lm_head, o.seed = 7;
    write_file(&o);
    mpmd_error err;
    gpt_hf_info info;
    CHECK(gpt_hf_inspect(path, &info, &err) == MPMD_OK && !strcmp(info.prefix, prefix), "%s", err.msg);
    for (int stages = 1; stages <= 2; stages++) {
        gpt_config c = small_config(8); /* wpe: the first 8 of 32 rows */
        c.stages = stages;
        gpt_model m;
        CHECK(gpt_build(&c, 1, &m, &err) == MPMD_OK, "%s", err.msg);
        mpmd_step *st = compile(&m, stages);
        CHECK(gpt_hf_import(path, &m, st, &err) == MPMD_OK, "prefix \"%s\" %s: %s", prefix, dtype, err.msg);
        CHECK(params_match(&m, st, dtype, o.seed), "prefix \"%s\" %s, %d stage(s): parameters differ", prefix,
              dtype, stages);
        /* and it trains from there */
        int32_t tok[32], tgt[32];
        gpt_random_batch(64, 4, 8, 3, 1, tok, tgt);
        float loss = 0;
        CHECK(mpmd_step_set_input(st, m.tokens, tok, sizeof tok) == MPMD_OK &&
                  mpmd_step_set_input(st, m.targets, tgt, sizeof tgt) == MPMD_OK &&
                  mpmd_step_run(st) == MPMD_OK && mpmd_step_read(st, m.loss, &loss, sizeof loss) == MPMD_OK,
              "%s", mpmd_step_error(st));
        CHECK(loss > 0 && loss < 100, "loss after the import: %g", loss);
        mpmd_step_free(st);
        gpt_model_free(&m);
    }
}

/* Split over 2 model ranks, alone and on a two-stage pipeline: the import
 * checks whole shapes and writes each rank its part; read back whole (the
 * parts assembled), every parameter is the file's tensor bit for bit. */
static void test_import_split(void) {
    tu_hf_opts o = tu_hf_defaults();
    o.seed = 11;
    write_file(&o);
    mpmd_error err;
    for (int stages = 1; stages <= 2; stages++) {
        gpt_config c = small_config(8);
        c.stages = stages, c.tensor_parallel = 2;
        gpt_model m;
        CHECK(gpt_build(&c, 1, &m, &err) == MPMD_OK, "%s", err.msg);
        mpmd_step *st = compile(&m, stages);
        CHECK(gpt_hf_import(path, &m, st, &err) == MPMD_OK, "tensor parallel 2, %d stage(s): %s", stages,
              err.msg);
        int bad = 0, split = 0;
        for (int i = 0; i < m.n_params; i++) {
            const char *name = mpmd_value_name(m.g, m.params[i]);
            char hf[96];
            CHECK(expected_name(name, hf, sizeof hf), "no Hugging Face name for %s", name);
            mpmd_type t = mpmd_value_whole_type(m.g, m.params[i]), part = mpmd_value_type(m.g, m.params[i]);
            split += mpmd_type_numel(&part) < mpmd_type_numel(&t);
            int64_t n = mpmd_type_numel(&t);
            float *p = malloc((size_t)n * sizeof *p);
            CHECK(p && mpmd_step_read(st, m.params[i], p, (size_t)n * sizeof *p) == MPMD_OK, "%s: %s", name,
                  mpmd_step_error(st));
            for (int64_t k = 0; p && k < n; k++) {
                float want = tu_hf_stored("F32", o.seed, hf, k);
                if (memcmp(&p[k], &want, sizeof want) != 0 && bad++ < 5)
                    fprintf(stderr, "%s[%lld] is %.9g; %s[%lld] is %.9g\n", name, (long long)k, p[k], hf,
                            (long long)k, want);
            }
            free(p);
        }
        CHECK(bad == 0 && split > 0, "tensor parallel 2, %d stage(s): %d values differ (%d parameters split)",
              stages, bad, split);
        mpmd_step_free(st);
        gpt_model_free(&m);
    }
}

static void test_import_errors(void) {
    gpt_config c = small_config(8);
    tu_hf_opts o = tu_hf_defaults();

    o.drop = "h.0.attn.c_proj.bias";
    write_file(&o);
    const char *missing[] = {"h.0.attn.c_proj.bias", "missing", "block_0/attn/out/bias"};
    expect_import_error(&c, "a missing tensor", missing, 3);

    o = tu_hf_defaults();
    o.reshape = "h.1.mlp.c_fc.weight";
    write_file(&o);
    const char *shaped[] = {"h.1.mlp.c_fc.weight", "[16, 63]", "[16, 64]"};
    expect_import_error(&c, "a mis-shaped tensor", shaped, 3);

    o = tu_hf_defaults();
    o.reshape = "wpe.weight";
    write_file(&o);
    const char *wpe[] = {"wpe.weight", "[32, 15]", "[64, 16]"};
    mpmd_error err;
    gpt_hf_info info;
    CHECK(gpt_hf_inspect(path, &info, &err) != MPMD_OK, "wpe of another width inspected");
    for (int k = 0; k < 3; k++)
        CHECK(strstr(err.msg, wpe[k]) != NULL, "wpe of another width: \"%s\" not in: %s", wpe[k], err.msg);
    expect_import_error(&c, "wpe of another width", wpe, 1);

    o = tu_hf_defaults();
    o.prefix = "transformer.";
    o.as_i32 = "ln_f.bias";
    write_file(&o);
    const char *i32[] = {"transformer.ln_f.bias", "I32"};
    expect_import_error(&c, "an I32 tensor", i32, 2);

    o = tu_hf_defaults();
    o.lm_head = 2;
    write_file(&o);
    const char *head[] = {"lm_head.weight", "differs from wte.weight", "cannot be tied"};
    expect_import_error(&c, "an untied head", head, 3);

    o = tu_hf_defaults();
    write_file(&o);
    gpt_config untied = c;
    untied.tie_embeddings = 0;
    const char *tie[] = {"tie_embeddings"};
    expect_import_error(&untied, "an untied model", tie, 1);

    o = tu_hf_defaults();
    o.drop = "wte.weight";
    write_file(&o);
    CHECK(gpt_hf_inspect(path, &info, &err) != MPMD_OK && strstr(err.msg, "wte.weight") &&
              strstr(err.msg, "not GPT-2 weights"),
          "a file without wte: %s", err.msg);

    /* not a safetensors file at all */
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs("hello, world; not safetensors", f) >= 0 && fclose(f) == 0, "writing %s", path);
    CHECK(gpt_hf_inspect(path, &info, &err) != MPMD_OK && strstr(err.msg, path), "a text file: %s", err.msg);
}

int main(void) {
    snprintf(path, sizeof path, "test_gpt_import_%d.safetensors", (int)getpid());
    test_inspect_and_configure();
    test_import_bitwise("", "F32", 0);
    test_import_bitwise("transformer.", "BF16", 1);
    test_import_bitwise("transformer.", "F16", 0);
    test_import_split();
    test_import_errors();
    remove(path);
    return tu_report("test_gpt_import");
}
