/* mpmd_exec: the unpipelined loop, as a step whose plan has one stage on
 * one rank.
 *
 * The plan (mpmd_compile_loop) runs the before-loop ops, then the body once
 * per microbatch in microbatch order (folding into the loop reductions as
 * results appear), then the after-loop ops: the reference every schedule is
 * compared with bit for bit. Set-up, the planned arena, inputs, reads,
 * digests and profiles are the step's (src/runtime/); this file checks the
 * executor's arguments and names its calls in errors.
 *
 * Loop reductions (mpmd_loop_reduce) accumulate in a fixed order:
 * acc = x_0, then acc = acc + x_m (or max) for m = 1..n-1, elementwise;
 * concat writes x_m at rows m*b .. (m+1)*b-1.
 */
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

struct mpmd_exec {
    mpmd_step *st;
    char err[MPMD_ERROR_MSG_MAX];
};

mpmd_step *mpmd_exec_step(mpmd_exec *ex) { return ex->st; }

void mpmd_exec_free(mpmd_exec *ex) {
    if (!ex) return;
    mpmd_step_free(ex->st);
    free(ex);
}

mpmd_exec *mpmd_exec_new(const mpmd_graph *g, const mpmd_exec_opts *opts, mpmd_error *err) {
    if (!g) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_new: graph is NULL");
        return NULL;
    }
    if (g->status != MPMD_OK) {
        mpmd_error_set(err, g->status, "mpmd_exec_new: the graph has an error: %s", g->err);
        return NULL;
    }
    if (mpmd_loop_open(g)) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_exec_new: the microbatch loop is still open (call mpmd_loop_end)");
        return NULL;
    }
    mpmd_exec_opts o = opts ? *opts : MPMD_EXEC_DEFAULTS;
    if (o.threads < 0) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_exec_new: threads = %d; use 0 (all cores) or a positive count", o.threads);
        return NULL;
    }
    const mpmd_backend *be = mpmd_backend_get(o.backend);
    if (!be) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_new: unknown backend \"%s\"; this build has: %s",
                       o.backend, mpmd_backend_names());
        return NULL;
    }
    char why[512];
    if (be->device.available(why, sizeof why)) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_new: the %s backend cannot run here: %s", be->name,
                       why);
        return NULL;
    }
    mpmd_exec *ex = calloc(1, sizeof *ex);
    if (!ex) {
        mpmd_error_set(err, MPMD_ERR_NOMEM, "mpmd_exec_new: out of memory");
        return NULL;
    }
    mpmd_error e;
    mpmd_plan *pl = mpmd_compile_loop(g, be, 1, 0, 0, &e);
    if (pl) ex->st = mpmd_step_new_plan(pl, o.threads, o.seed, &e);
    if (!ex->st) { /* the compiler's and the runtime's messages, under this call's name */
        mpmd_error_set(err, e.code, "mpmd_exec_new: %s", e.msg);
        free(ex);
        return NULL;
    }
    return ex;
}

/* The step's message, under this call's name. */
static mpmd_status named(mpmd_exec *ex, mpmd_status rc, const char *who) {
    if (rc) snprintf(ex->err, sizeof ex->err, "%s: %s", who, mpmd_step_error(ex->st));
    return rc;
}

mpmd_status mpmd_exec_run(mpmd_exec *ex) {
    if (!ex) return MPMD_ERR_INVALID;
    mpmd_status rc = mpmd_step_run(ex->st);
    /* a failing op's message names the op and the microbatch; say it as is */
    if (rc) snprintf(ex->err, sizeof ex->err, "%s", mpmd_step_error(ex->st));
    return rc;
}

mpmd_status mpmd_exec_set_input(mpmd_exec *ex, mpmd_value input, const void *data, size_t bytes) {
    if (!ex) return MPMD_ERR_INVALID;
    return named(ex, mpmd_step_set_input(ex->st, input, data, bytes), "mpmd_exec_set_input");
}

mpmd_status mpmd_exec_read(mpmd_exec *ex, mpmd_value v, void *dst, size_t bytes) {
    if (!ex) return MPMD_ERR_INVALID;
    return named(ex, mpmd_step_read(ex->st, v, dst, bytes), "mpmd_exec_read");
}

mpmd_status mpmd_exec_write(mpmd_exec *ex, mpmd_value v, const void *src, size_t bytes) {
    if (!ex) return MPMD_ERR_INVALID;
    return named(ex, mpmd_step_write(ex->st, v, src, bytes), "mpmd_exec_write");
}

/* Without an executor (NULL) these answer nothing (NULL, 0, an empty hash)
 * instead of crashing, as the step's accessors do. */
void *mpmd_exec_var_data(mpmd_exec *ex, mpmd_value v) { return ex ? mpmd_step_var_data(ex->st, 0, v) : NULL; }
const char *mpmd_exec_backend(const mpmd_exec *ex) { return ex ? mpmd_step_backend(ex->st) : NULL; }
const char *mpmd_exec_error(const mpmd_exec *ex) { return ex ? ex->err : "no executor (NULL)"; }
const mpmd_graph *mpmd_exec_graph(const mpmd_exec *ex) { return ex ? ex->st->plan->g : NULL; }
size_t mpmd_exec_arena_bytes(const mpmd_exec *ex) { return ex ? ex->st->plan->mem[0].arena_bytes : 0; }
void mpmd_exec_print_plan(const mpmd_exec *ex, FILE *f) {
    if (ex && f) mpmd_plan_print_memory(ex->st->plan, 0, f);
}
void mpmd_exec_params_sha256(mpmd_exec *ex, char hex[65]) {
    mpmd_step_params_sha256(ex ? ex->st : NULL, hex);
}

mpmd_status mpmd_exec_set_profiling(mpmd_exec *ex, int on) {
    if (!ex) return MPMD_ERR_INVALID;
    return named(ex, mpmd_step_set_profiling(ex->st, on), "mpmd_exec_set_profiling");
}

void mpmd_exec_print_profile(const mpmd_exec *ex, FILE *f) { mpmd_step_print_profile(ex ? ex->st : NULL, f); }
