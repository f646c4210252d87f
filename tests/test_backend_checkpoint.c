/* Checkpoints across backends: state saved by a step on the backend under
 * test (MPMD_TEST_BACKEND, the CPU by default) loads into the CPU and back
 * without changing a bit, a pipelined step on that backend loads it too,
 * and a resumed run equals one that never stopped. Also: a run-time error
 * found on the device (a label out of range) ends the run with a message
 * saying what, and the executor stays usable. */
#include "gpt_model.h"
#include "mpmd_checkpoint.h"
#include "testutil.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static gpt_config small_cfg(void) {
    gpt_config c = gpt_config_default();
    c.vocab = 40;
    c.seq = 8;
    c.width = 16;
    c.heads = 2;
    c.layers = 2;
    c.stages = 2;
    c.microbatches = 2;
    c.batch = 4;
    c.tie_embeddings = 1;
    return c;
}

static mpmd_exec *exec_on(const gpt_model *m, const char *backend) {
    mpmd_exec_opts o = MPMD_EXEC_DEFAULTS;
    o.threads = 1;
    o.seed = 5;
    o.backend = backend;
    mpmd_error err;
    mpmd_exec *ex = mpmd_exec_new(m->g, &o, &err);
    CHECK(ex != NULL, "exec on %s: %s", backend, err.msg);
    return ex;
}

static int run_steps(mpmd_exec *ex, const gpt_model *m, int from, int n) {
    const gpt_config *c = &m->cfg;
    size_t nb = (size_t)(c->batch * c->seq) * sizeof(int32_t);
    int32_t tok[64], tgt[64];
    for (int s = from; s < from + n; s++) {
        gpt_random_batch(c->vocab, c->batch, c->seq, 3, (uint64_t)s, tok, tgt);
        mpmd_exec_set_input(ex, m->tokens, tok, nb);
        mpmd_exec_set_input(ex, m->targets, tgt, nb);
        if (mpmd_exec_run(ex) != MPMD_OK) {
            CHECK(0, "step %d: %s", s, mpmd_exec_error(ex));
            return 1;
        }
    }
    return 0;
}

/* 1 when the two files have the same bytes. */
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_round_trip(const char *dir) {
    const char *be = tu_backend();
    gpt_config c = small_cfg();
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&c, 1, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    char a[512], b[512], d[512], e[512];
    snprintf(a, sizeof a, "%s/a.safetensors", dir);
    snprintf(b, sizeof b, "%s/b.safetensors", dir);
    snprintf(d, sizeof d, "%s/d.safetensors", dir);
    snprintf(e, sizeof e, "%s/e.safetensors", dir);
    mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
    info.step = 2;
    mpmd_exec *dev = exec_on(&m, be), *cpu = exec_on(&m, "cpu"), *dev2 = exec_on(&m, be);
    if (dev && cpu && dev2 && !run_steps(dev, &m, 0, 2)) {
        CHECK(mpmd_exec_save(dev, a, &info, &err) == MPMD_OK, "save on %s: %s", be, err.msg);
        /* into the CPU and out again: the same bytes */
        CHECK(mpmd_exec_load(cpu, a, NULL, &err) == MPMD_OK, "load on cpu: %s", err.msg);
        CHECK(mpmd_exec_save(cpu, b, &info, &err) == MPMD_OK, "save on cpu: %s", err.msg);
        CHECK(same_file(a, b), "%s -> cpu changed the checkpoint's bytes", be);
        /* and back onto the backend */
        CHECK(mpmd_exec_load(dev2, b, NULL, &err) == MPMD_OK, "load on %s: %s", be, err.msg);
        CHECK(mpmd_exec_save(dev2, d, &info, &err) == MPMD_OK, "save on %s: %s", be, err.msg);
        CHECK(same_file(a, d), "%s -> cpu -> %s changed the checkpoint's bytes", be, be);
        /* a resumed run equals the one that never stopped */
        char h1[65], h2[65];
        if (!run_steps(dev, &m, 2, 2) && !run_steps(dev2, &m, 2, 2)) {
            mpmd_exec_params_sha256(dev, h1);
            mpmd_exec_params_sha256(dev2, h2);
            CHECK(strcmp(h1, h2) == 0, "resumed on %s: parameters differ from the straight run", be);
        }
        /* a pipelined step on the backend loads the same state and saves it unchanged */
        mpmd_schedule *s = NULL;
        mpmd_step_opts so = MPMD_STEP_DEFAULTS;
        so.backend = be;
        so.seed = 9;
        if (mpmd_schedule_std1f1b(2, 2, &s, &err) == MPMD_OK) {
            mpmd_step *st = mpmd_jit_with_loop(m.g, s, &so, &err);
            CHECK(st != NULL, "jit on %s: %s", be, err.msg);
            if (st) {
                CHECK(mpmd_step_load(st, a, NULL, &err) == MPMD_OK, "step load on %s: %s", be, err.msg);
                CHECK(mpmd_step_save(st, e, &info, &err) == MPMD_OK, "step save on %s: %s", be, err.msg);
                CHECK(same_file(a, e), "a pipelined step on %s changed the checkpoint's bytes", be);
                char h3[65], h4[65];
                mpmd_step_params_sha256(st, h3);
                mpmd_exec_params_sha256(cpu, h4);
                CHECK(strcmp(h3, h4) == 0, "loaded parameters of the step differ from the cpu's");
                mpmd_step_free(st);
            }
            mpmd_schedule_free(s);
        }
    }
    mpmd_exec_free(dev), mpmd_exec_free(cpu), mpmd_exec_free(dev2);
    remove(a), remove(b), remove(d), remove(e);
    gpt_model_free(&m);
}

/* A label outside the vocabulary, found while the kernels run. */
static void test_device_error(void) {
    const char *be = tu_backend();
    gpt_config c = small_cfg();
    c.stages = 1;
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&c, 1, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mpmd_exec *ex = exec_on(&m, be);
    if (ex) {
        size_t nb = (size_t)(c.batch * c.seq) * sizeof(int32_t);
        int32_t tok[64], tgt[64];
        gpt_random_batch(c.vocab, c.batch, c.seq, 3, 0, tok, tgt);
        tgt[5] = 977;
        mpmd_exec_set_input(ex, m.tokens, tok, nb);
        mpmd_exec_set_input(ex, m.targets, tgt, nb);
        CHECK(mpmd_exec_run(ex) == MPMD_ERR_RUNTIME, "a label out of range ran on %s", be);
        CHECK(strstr(mpmd_exec_error(ex), "977") && strstr(mpmd_exec_error(ex), "cross_entropy"),
              "message: %s", mpmd_exec_error(ex));
        tgt[5] = 1;
        mpmd_exec_set_input(ex, m.targets, tgt, nb);
        CHECK(mpmd_exec_run(ex) == MPMD_OK, "after the error: %s", mpmd_exec_error(ex));
        mpmd_exec_free(ex);
    }
    gpt_model_free(&m);
}

int main(void) {
    tu_backend_or_skip("test_backend_checkpoint");
    char dir[] = "/tmp/mpmd-bck-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip(dir);
    test_device_error();
    rmdir(dir);
    return tu_report("test_backend_checkpoint");
}
