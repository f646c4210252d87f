/* libFuzzer: the planner's descriptions. The input is read as a cluster
 * and as a model (include/mpmd_plan.h); each is a description or an error
 * that names where, never a crash, a leak or a hang. Where both parse, one
 * layout of the model on the cluster is predicted (the loop on one GPU,
 * the whole batch one microbatch, and 2 pipeline ranks when the model has
 * the layers): a prediction or a reason, with finite times and bytes.
 * Seeds: corpus/plan. */
#include <mpmd_plan.h>
#include <mpmd_schedule.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static void check(const mpmd_cluster *c, const mpmd_transformer *m, mpmd_run_layout l) {
    mpmd_run_prediction p;
    mpmd_error err;
    err.msg[0] = 0;
    if (mpmd_planner_predict(c, m, &l, 0, &p, NULL, NULL, &err) != MPMD_OK) {
        if (!err.msg[0]) abort(); /* an error says why */
        return;
    }
    if (!p.valid && !p.why[0]) abort(); /* an impossible layout says why */
    if (p.simulated && (!isfinite(p.step) || p.step < 0 || !(p.peak >= 0) || !isfinite(p.mfu))) abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0; /* the parsers read text: a NUL ends it */
    mpmd_cluster c;
    mpmd_transformer m;
    mpmd_error err;
    err.msg[0] = 0;
    int have_c = mpmd_cluster_parse(text, "fuzz", &c, &err) == MPMD_OK;
    if (!have_c && !err.msg[0]) abort();
    err.msg[0] = 0;
    int have_m = mpmd_transformer_parse(text, "fuzz", &m, &err) == MPMD_OK;
    if (!have_m && !err.msg[0]) abort();
    free(text);
    if (!have_m) return 0;
    if (!have_c) mpmd_cluster_preset("dgx-a100", &c, NULL);
    /* keep one prediction cheap: at most 2^16 microbatch-stage tasks */
    if (m.batch > 65536 || (double)m.layers * m.batch > 1e6) return 0;
    mpmd_run_layout loop = {
        1, 1, 1, MPMD_PLAN_FSDP_OFF, 1, MPMD_PLAN_LOOP, (int)m.batch, MPMD_PLAN_REMAT_BLOCK};
    check(&c, &m, loop);
    if (m.layers >= 2) {
        mpmd_run_layout pipe = {1, 2, 1, MPMD_PLAN_FSDP_OFF, 2, MPMD_SCHED_STD1F1B, 1, MPMD_PLAN_REMAT_NONE};
        check(&c, &m, pipe);
    }
    return 0;
}
