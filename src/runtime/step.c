/* The public step API (include/mpmd.h): mpmd_jit_with_loop compiles the
 * graph and the schedule into a plan (compiler/, mpmd_compile) and sets up
 * the run state around it (run.c, mpmd_runtime_init); the mpmd_step_*
 * accessors, runs, reads and printouts. */
#include "runtime/launcher.h"
#include "schedule/schedule_internal.h"
#include "util/sha256.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mpmd_step_free(mpmd_step *st) {
    if (!st) return;
    mpmd_runtime_free(st);
    if (st->broken) return; /* a rank thread or a message may still use it: leave it be */
    if (st->inputs)
        for (int i = 0; i < st->plan->g->n_nodes; i++)
            free(st->inputs[i]);
    free(st->inputs);
    free(st->input_set);
    if (st->mutex_ready) pthread_mutex_destroy(&st->abort_mu);
    mpmd_plan_free((mpmd_plan *)st->plan); /* the step owns its plan */
    free(st);
}

/* ---- one thread at a time --------------------------------------------------
 * A step's calls are not synchronised: one thread uses a step at a time.
 * The calls that touch its state (runs, inputs, reads, writes, saves and
 * loads, summaries) hold it while they run, so a second thread's call
 * meanwhile fails at once, with a message its thread reads from
 * mpmd_step_error, instead of racing (two runs at once deadlock until the
 * watchdog). A call may make others on the same step (a save reads). */

static _Thread_local const mpmd_step *held[8]; /* this thread's holds, innermost last */
static _Thread_local int nheld;
static _Thread_local const mpmd_step *refused; /* the step of this thread's last refused call */
static _Thread_local char refused_msg[320];

int rt_step_enter(mpmd_step *st, const char *fn) {
    int mine = 0;
    for (int i = 0; i < nheld; i++)
        mine |= held[i] == st;
    int idle = 0;
    if (nheld == 8 ||
        (!mine && !__atomic_compare_exchange_n(&st->busy, &idle, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))) {
        snprintf(refused_msg, sizeof refused_msg,
                 "%s: the step is in use by another thread (%s); a step is used by one thread at a time", fn,
                 nheld == 8 ? "too many nested calls" : "mpmd_step_run, a read, a write, a save or a load");
        refused = st;
        return 1;
    }
    if (refused == st) refused = NULL;
    held[nheld++] = st;
    return 0;
}

void rt_step_leave(mpmd_step *st) {
    int mine = 0;
    for (int i = 0; i < nheld - 1; i++)
        mine |= held[i] == st;
    if (nheld > 0) nheld--;
    if (!mine) __atomic_store_n(&st->busy, 0, __ATOMIC_RELEASE);
}

mpmd_status mpmd_schedule_for_graph(const mpmd_graph *g, mpmd_schedule_kind kind, int num_ranks,
                                    int fuse_steady_state, mpmd_schedule **out, mpmd_error *err) {
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_schedule_for_graph: no place for the schedule (out is NULL)");
    *out = NULL;
    if (!g || g->status != MPMD_OK || g->n_micro < 1 || g->n_markers < 1)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_schedule_for_graph: the graph needs a microbatch loop with stage markers "
                              "(it has %d microbatches and %d markers)",
                              g ? g->n_micro : 0, g ? g->n_markers : 0);
    return mpmd_schedule_new(kind, g->n_markers, num_ranks, g->n_micro, fuse_steady_state, out, err);
}

static mpmd_status loop_check(const mpmd_graph *g, mpmd_error *err) {
    if (!g) return mpmd_error_set(err, MPMD_ERR_INVALID, "the graph is required");
    if (g->status != MPMD_OK) return mpmd_error_set(err, g->status, "the graph has an error: %s", g->err);
    if (mpmd_loop_open(g))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the microbatch loop is still open (call mpmd_loop_end)");
    return MPMD_OK;
}

/* The checks every compilation of g under s (NULL: the loop) with opts
 * makes, in this order: the graph against the schedule, the counts, the
 * backend's name. Fills *o, *be and *replicas. */
static mpmd_status step_options(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                                mpmd_step_opts *o, const mpmd_backend **be, int *replicas, mpmd_error *err) {
    mpmd_status rc = s ? mpmd_compile_check(g, s, err) : loop_check(g, err);
    if (rc) return rc;
    *o = opts ? *opts : MPMD_STEP_DEFAULTS;
    if (o->threads_per_rank < 0)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "threads_per_rank = %d; use 0 or a positive count",
                              o->threads_per_rank);
    if (o->data_parallel < 0)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "data_parallel = %d; use 1 (or 0) for none, or a "
                              "replica count",
                              o->data_parallel);
    *replicas = o->data_parallel > 1 ? o->data_parallel : 1;
    if (o->fsdp && *replicas < 2)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "fsdp shards the parameters over the data axis, but "
                              "data_parallel is %d: set data_parallel to the number of shards (2 or more)",
                              o->data_parallel);
    if (isnan(o->step_timeout))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "step_timeout is NaN; give seconds, 0 for the default or a "
                              "negative number (or INFINITY) for no watchdog");
    if (o->fsdp_gather != MPMD_GATHER_PER_TASK && o->fsdp_gather != MPMD_GATHER_PER_STEP)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "fsdp_gather = %d; use MPMD_GATHER_PER_TASK (0) or "
                              "MPMD_GATHER_PER_STEP (1)",
                              (int)o->fsdp_gather);
    if (!(*be = mpmd_backend_get(o->backend)))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "unknown backend \"%s\"; this build has: %s", o->backend,
                              mpmd_backend_names());
    return mpmd_launcher_check(o->runtime, err);
}

/* The plan itself (receives posted as the launcher's wire posts them). */
static mpmd_plan *plan_of(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_backend *be, int replicas,
                          const mpmd_step_opts *o, mpmd_error *err) {
    const int ahead = mpmd_launcher_recv_ahead(o->runtime);
    const int fsdp = !o->fsdp                                 ? MPMD_FSDP_OFF
                     : o->fsdp_gather == MPMD_GATHER_PER_STEP ? MPMD_FSDP_PER_STEP
                                                              : MPMD_FSDP_PER_TASK;
    return s ? mpmd_compile(g, s, be, replicas, fsdp, ahead, err)
             : mpmd_compile_loop(g, be, replicas, fsdp, ahead, err);
}

/* An error of a public call: its name before the message (the compiler's
 * and the runtime's messages name no call). */
static void named(mpmd_error *err, const char *fn) {
    if (!err || !err->msg[0]) return;
    char msg[MPMD_ERROR_MSG_MAX];
    memcpy(msg, err->msg, sizeof msg);
    const size_t n = strlen(fn);
    if (n + 2 >= sizeof err->msg) return;
    memcpy(err->msg, fn, n), memcpy(err->msg + n, ": ", 2);
    snprintf(err->msg + n + 2, sizeof err->msg - n - 2, "%.*s", (int)(sizeof err->msg - n - 3), msg);
}

static mpmd_step *jit(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                      mpmd_error *err);

mpmd_step *mpmd_jit_with_loop(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                              mpmd_error *err) {
    mpmd_error local;
    if (!err) err = &local;
    err->msg[0] = '\0';
    mpmd_step *st = jit(g, s, opts, err);
    if (!st) named(err, "mpmd_jit_with_loop");
    return st;
}

static mpmd_step *jit(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                      mpmd_error *err) {
    /* the graph against the schedule first, then the options; without a
     * schedule, the unpipelined loop on one rank */
    mpmd_step_opts o;
    const mpmd_backend *be = NULL;
    int replicas = 1;
    if (step_options(g, s, opts, &o, &be, &replicas, err)) return NULL;
    const int D = s ? s->num_ranks : 1;
    char why[512];
    if (g->model_parallel > 1 && (!be->kernels.model_combine || !be->kernels.model_local)) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "the graph is split over %d model ranks (mpmd_set_tensor_parallel), and "
                       "the %s backend has no collectives of the model axis",
                       g->model_parallel, be->name);
        return NULL;
    }
    if (be->device.available(why, sizeof why)) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "the %s backend cannot run here: %s", be->name, why);
        return NULL;
    }
    /* which point of the mesh this process runs; under MPI, the processes
     * compare what they built */
    const mpmd_launcher *la = mpmd_launcher_for(o.runtime); /* there is one: step_options checked */
    const int M = g->model_parallel > 1 ? g->model_parallel : 1;
    mpmd_point here;
    if (la->place(D, replicas, M, &here, err) || mpmd_step_agree(la, g, s, &o, err)) return NULL;
    mpmd_step *st = calloc(1, sizeof *st);
    if (!st) {
        mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
        return NULL;
    }
    st->la = la;
    st->wire = la->wire;
    st->here = here;
    st->threads_per_rank = o.threads_per_rank;
    st->seed = o.seed;
    st->timeout_opt = o.step_timeout;
    if (!(st->plan = plan_of(g, s, be, replicas, &o, err))) goto fail;
    if (mpmd_runtime_init(st, err)) goto fail;
    return st;
fail:
    mpmd_step_free(st);
    return NULL;
}

mpmd_step *mpmd_step_new_plan(mpmd_plan *pl, int threads, uint64_t seed, mpmd_error *err) {
    mpmd_step *st = calloc(1, sizeof *st);
    if (!st) {
        mpmd_plan_free(pl);
        mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
        return NULL;
    }
    st->plan = pl;
    st->la = mpmd_launcher_for(MPMD_RUNTIME_LOCAL);
    st->wire = st->la->wire;
    st->threads_per_rank = threads;
    st->seed = seed;
    if (mpmd_runtime_init(st, err)) {
        mpmd_step_free(st);
        return NULL;
    }
    return st;
}

/* The accessors below answer for no step (NULL) as for a rank out of
 * range: 0, -1 or NULL, never a crash; those that return a status return
 * MPMD_ERR_INVALID. */
int mpmd_step_num_ranks(const mpmd_step *st) { return st ? st->plan->num_ranks : 0; }
const char *mpmd_step_error(const mpmd_step *st) {
    return !st ? "no step (NULL)" : refused == st ? refused_msg : st->err;
}
int64_t mpmd_step_peak_bytes(const mpmd_step *st, int rank) {
    return st && rank >= 0 && rank < st->plan->num_ranks ? st->plan->prog[rank].peak_bytes : -1;
}

static mpmd_status set_input(mpmd_step *st, mpmd_value input, const void *data, size_t bytes) {
    if (!st) return MPMD_ERR_INVALID;
    if (!data) {
        snprintf(st->err, sizeof st->err, "mpmd_step_set_input: no data (NULL) for %%%d", (int)input.id);
        return MPMD_ERR_INVALID;
    }
    const mpmd_node *n = mpmd_node_of(st->plan->g, input);
    if (!n || n->op != &mpmd_op_input) {
        snprintf(st->err, sizeof st->err, "mpmd_step_set_input: %%%d is not an input", (int)input.id);
        return MPMD_ERR_INVALID;
    }
    size_t want = mpmd_type_bytes(&n->type), R = (size_t)st->plan->replicas;
    if (bytes != want && bytes != want * R) {
        char tb[160];
        if (R > 1)
            snprintf(st->err, sizeof st->err,
                     "mpmd_step_set_input: input \"%s\" is %s (%zu bytes) per replica, %zu bytes for all %zu "
                     "replicas; given %zu bytes",
                     n->name, mpmd_type_str(&n->type, tb, sizeof tb), want, want * R, R, bytes);
        else
            snprintf(st->err, sizeof st->err,
                     "mpmd_step_set_input: input \"%s\" is %s (%zu bytes), given %zu bytes", n->name,
                     mpmd_type_str(&n->type, tb, sizeof tb), want, bytes);
        return MPMD_ERR_SHAPE;
    }
    char *dst = st->inputs[input.id];
    if (!dst) return MPMD_OK; /* MPI: this process's rank does not read this input */
    for (size_t d = 0; d < R; d++) {
        if (!rt_whole(st) && (int)d != rt_here(st).replica) continue;
        /* the same data for every replica, or replica d's share */
        memcpy(dst + d * want, (const char *)data + (bytes == want ? 0 : d * want), want);
    }
    mpmd_status rc = mpmd_runtime_input_set(st, input.id);
    if (rc) return rc;
    st->input_set[input.id] = 1;
    return MPMD_OK;
}

mpmd_status mpmd_step_set_input(mpmd_step *st, mpmd_value input, const void *data, size_t bytes) {
    if (!st) return MPMD_ERR_INVALID;
    if (rt_step_enter(st, "mpmd_step_set_input")) return MPMD_ERR_INVALID;
    mpmd_status rc = set_input(st, input, data, bytes);
    rt_step_leave(st);
    return rc;
}

static mpmd_status step_run(mpmd_step *st) {
    if (!st) return MPMD_ERR_INVALID;
    const mpmd_graph *g = st->plan->g;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == &mpmd_op_input && st->plan->live[i] && st->inputs[i] && !st->input_set[i]) {
            snprintf(st->err, sizeof st->err, "input \"%s\" was not set (mpmd_step_set_input) before the run",
                     g->nodes[i].name);
            return MPMD_ERR_INVALID;
        }
    mpmd_status rc = mpmd_runtime_run(st);
    if (rc == MPMD_OK) st->ran = 1;
    return rc;
}

mpmd_status mpmd_step_run(mpmd_step *st) {
    if (!st) return MPMD_ERR_INVALID;
    if (rt_step_enter(st, "mpmd_step_run")) return MPMD_ERR_INVALID;
    mpmd_status rc = step_run(st);
    rt_step_leave(st);
    return rc;
}

int mpmd_step_where(const mpmd_step *st, mpmd_value v, int *ranks, int cap) {
    if (!st) return 0;
    v = mpmd_read_target(st->plan->g, v);
    const mpmd_node *n = mpmd_node_of(st->plan->g, v);
    if (!n || !st->plan->live[v.id]) return 0;
    int k = 0;
    for (int r = 0; r < st->plan->num_ranks; r++) {
        int holds =
            n->region == MPMD_REGION_BODY ? st->plan->home[v.id] == r : mpmd_runs_on(st->plan, v.id, r);
        if (!holds) continue;
        if (ranks && k < cap) ranks[k] = r;
        k++;
    }
    return k;
}

void *mpmd_step_var_data(mpmd_step *st, int rank, mpmd_value v) {
    if (!st) return NULL;
    const mpmd_node *n = mpmd_node_of(st->plan->g, v);
    if (!n || !mpmd_node_is_storage(n) || rank < 0 || rank >= st->plan->num_ranks ||
        !mpmd_runs_on(st->plan, v.id, rank))
        return NULL;
    return mpmd_runtime_value(st, rank, v.id);
}

const char *mpmd_step_backend(const mpmd_step *st) { return st ? st->plan->be->name : NULL; }

size_t mpmd_step_arena_bytes(const mpmd_step *st, int rank) {
    return st && rank >= 0 && rank < st->plan->num_ranks ? st->plan->mem[rank].arena_bytes : 0;
}

/* The planned fields of rank's memory stats (measured -1). */
static void planned_memory(const mpmd_plan *pl, int rank, mpmd_memory_stats *out) {
    memset(out, 0, sizeof *out);
    const mpmd_rank_memory *m = &pl->mem[rank];
    out->parameters = (int64_t)m->params_bytes;
    out->optimizer_state = (int64_t)m->state_bytes;
    out->inputs = (int64_t)m->input_bytes;
    out->arena = (int64_t)mpmd_backend_alloc_bytes(pl->be, m->arena_bytes ? m->arena_bytes : 64);
    out->workspace = m->scratch_bytes ? (int64_t)mpmd_backend_alloc_bytes(pl->be, m->scratch_bytes) : 0;
    out->planned = (int64_t)m->total_bytes;
    out->arena_live = (int64_t)m->live_peak;
    out->activations = (int64_t)m->live_activations;
    out->received = (int64_t)m->live_received;
    out->loop_results = (int64_t)m->live_loop_results;
    out->other = (int64_t)m->live_other;
    out->gathered = (int64_t)m->live_gathered;
    out->kept = (int64_t)m->kept_peak;
    out->measured = out->backend_own = -1;
}

mpmd_status mpmd_step_memory(const mpmd_step *st, int rank, mpmd_memory_stats *out) {
    if (!out) return MPMD_ERR_INVALID;
    memset(out, 0, sizeof *out);
    if (!st || rank < 0 || rank >= st->plan->num_ranks) return MPMD_ERR_INVALID;
    planned_memory(st->plan, rank, out);
    size_t peak = 0, own = 0;
    if (mpmd_runtime_backend_memory(st, rank, &peak, &own)) {
        out->measured = (int64_t)peak;
        out->backend_own = (int64_t)own;
    } else {
        out->measured = out->backend_own = -1;
    }
    return MPMD_OK;
}

void mpmd_prediction_free(mpmd_prediction *p) {
    if (!p) return;
    free(p->ranks);
    p->ranks = NULL;
}

/* Seconds per run of each node of `profiled`, over the rank states of this
 * process that run it (replicas count once); NULL when out of memory. */
static double *node_seconds(const mpmd_step *profiled) {
    const mpmd_plan *pl = profiled->plan;
    const int nn = pl->g->n_nodes;
    double *t = calloc((size_t)nn + 1, sizeof *t);
    int *holders = calloc((size_t)nn + 1, sizeof *holders);
    if (!t || !holders) {
        free(t), free(holders);
        return NULL;
    }
    for (int li = 0; li < profiled->num_local; li++) {
        const double *sec = mpmd_runtime_op_seconds(profiled, li);
        int r = profiled->rs[li].rank;
        for (int i = 0; sec && i < nn; i++) {
            int here = pl->g->nodes[i].region == MPMD_REGION_BODY ? pl->home[i] == r : mpmd_runs_on(pl, i, r);
            if (!here) continue;
            t[i] += sec[i];
            holders[i]++;
        }
    }
    for (int i = 0; i < nn; i++)
        if (holders[i]) t[i] /= (double)holders[i] * profiled->prof_runs;
    free(holders);
    return t;
}

static mpmd_status predict(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                           const mpmd_step *profiled, mpmd_prediction *out, mpmd_error *err);

mpmd_status mpmd_predict(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                         const mpmd_step *profiled, mpmd_prediction *out, mpmd_error *err) {
    mpmd_error local;
    if (!err) err = &local;
    err->msg[0] = '\0';
    mpmd_status rc = predict(g, s, opts, profiled, out, err);
    if (rc) named(err, "mpmd_predict");
    return rc;
}

static mpmd_status predict(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                           const mpmd_step *profiled, mpmd_prediction *out, mpmd_error *err) {
    if (!out) return mpmd_error_set(err, MPMD_ERR_INVALID, "no place for the prediction (out is NULL)");
    memset(out, 0, sizeof *out);
    out->step_ms = NAN;
    mpmd_step_opts o;
    const mpmd_backend *be = NULL;
    int replicas = 1;
    mpmd_status rc = step_options(g, s, opts, &o, &be, &replicas, err);
    if (rc) return rc;
    if (profiled && (profiled->plan->g != g || !profiled->profiling || profiled->prof_runs < 1))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the profiled step must be of the same graph, with a run after "
                              "mpmd_step_set_profiling(st, 1)");
    mpmd_plan *pl = plan_of(g, s, be, replicas, &o, err);
    if (!pl) return err ? err->code : MPMD_ERR_INVALID;
    const int D = pl->num_ranks, S = pl->num_stages, n = pl->num_micro > 0 ? pl->num_micro : 1;
    double *t = NULL, *stage_time = NULL, *pre = NULL, *post = NULL;
    out->num_ranks = D;
    if (!(out->ranks = calloc((size_t)D, sizeof *out->ranks))) goto nomem;
    for (int r = 0; r < D; r++) {
        planned_memory(pl, r, &out->ranks[r]);
        if (out->ranks[r].planned > out->peak) out->peak = out->ranks[r].planned;
        int64_t gathered = 0;
        for (int x = 0; x < pl->prog[r].n; x++) {
            int ng;
            if (pl->prog[r].ins[x].op != MPMD_I_GATHER) continue;
            const int32_t *list = mpmd_gather_list(pl, &pl->prog[r].ins[x], &ng);
            for (int q = 0; q < ng; q++)
                gathered += (int64_t)(pl->replicas - 1) * (int64_t)mpmd_held_bytes(&pl->mesh, list[q]);
        }
        if (gathered > out->gathered_bytes) out->gathered_bytes = gathered;
    }
    if (profiled) {
        t = node_seconds(profiled);
        stage_time = calloc((size_t)S * MPMD_TASK_KINDS + 1, sizeof *stage_time);
        pre = calloc((size_t)D + 1, sizeof *pre);
        post = calloc((size_t)D + 1, sizeof *post);
        if (!t || !stage_time || !pre || !post) goto nomem;
        /* a task: its ops for one microbatch; a rank's ends: its own ops */
        for (int k = 0; k < S * MPMD_TASK_KINDS; k++)
            for (int c = 0; c < pl->cl.count[k]; c++)
                stage_time[k] += t[pl->cl.nodes[k][c]] / n;
        double pre_max = 0, post_max = 0;
        for (int r = 0; r < D; r++) {
            for (int x = 0; x < pl->prog[r].n; x++) {
                const mpmd_instr *in = &pl->prog[r].ins[x];
                if (in->op == MPMD_I_RUN_PRE) pre[r] += t[in->node];
                if (in->op == MPMD_I_RUN_POST) post[r] += t[in->node];
            }
            if (pre[r] > pre_max) pre_max = pre[r];
            if (post[r] > post_max) post_max = post[r];
        }
        double span = 0;
        if (pl->sched) {
            mpmd_cost_model cost = MPMD_COST_DEFAULTS;
            cost.stage_latency = stage_time;
            mpmd_sim *sim = NULL;
            if ((rc = mpmd_schedule_simulate(pl->sched, &cost, &sim, err, NULL))) goto done;
            span = sim->makespan;
            out->bubble = sim->bubble;
            mpmd_sim_free(sim);
        } else {
            for (int k = 0; k < MPMD_TASK_KINDS; k++)
                span += stage_time[k] * n;
        }
        out->step_ms = 1e3 * (pre_max + span + post_max);
    }
    goto done;
nomem:
    rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
done:
    if (rc) mpmd_prediction_free(out);
    free(t), free(stage_time), free(pre), free(post);
    mpmd_plan_free(pl);
    return rc;
}

void mpmd_step_print_memory(const mpmd_step *st, int rank, FILE *f) {
    if (!st || !f) return;
    for (int r = 0; r < st->plan->num_ranks; r++)
        if (rank < 0 || rank == r) mpmd_plan_print_memory(st->plan, r, f);
}

mpmd_status mpmd_step_set_profiling(mpmd_step *st, int on) {
    if (!st) return MPMD_ERR_INVALID;
    if (mpmd_runtime_set_profiling(st, on)) {
        snprintf(st->err, sizeof st->err, "out of memory for the profile");
        return MPMD_ERR_NOMEM;
    }
    return MPMD_OK;
}

/* A value's bytes as the step's callers see it: a parameter split over the
 * model axis whole. */
static size_t whole_bytes(const mpmd_graph *g, int node) {
    mpmd_type t = mpmd_split_whole_type(g, node);
    return mpmd_type_bytes(&t);
}

static mpmd_status step_write(mpmd_step *st, mpmd_value v, const void *src, size_t bytes) {
    if (!st) return MPMD_ERR_INVALID;
    if (!src) {
        snprintf(st->err, sizeof st->err, "mpmd_step_write: no data (NULL) for %%%d", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    const mpmd_node *n = mpmd_node_of(st->plan->g, v);
    if (!n || !mpmd_node_is_storage(n)) {
        snprintf(st->err, sizeof st->err, "%d is not a parameter or variable", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    size_t want = whole_bytes(st->plan->g, v.id);
    if (bytes != want) {
        snprintf(st->err, sizeof st->err, "\"%s\" has %zu bytes, given %zu", n->name, want, bytes);
        return MPMD_ERR_SHAPE;
    }
    /* every copy this process holds: each rank holding it, each replica */
    for (int r = 0; r < st->plan->num_ranks; r++) {
        if (!mpmd_runs_on(st->plan, v.id, r)) continue;
        for (int d = 0; d < st->plan->replicas; d++)
            if (mpmd_runtime_holds(st, r, d, v.id)) {
                mpmd_status rc = mpmd_runtime_write(st, r, d, v.id, src, bytes);
                if (rc) return rc;
            }
    }
    return MPMD_OK;
}

mpmd_status mpmd_step_write(mpmd_step *st, mpmd_value v, const void *src, size_t bytes) {
    if (!st) return MPMD_ERR_INVALID;
    if (rt_step_enter(st, "mpmd_step_write")) return MPMD_ERR_INVALID;
    mpmd_status rc = step_write(st, v, src, bytes);
    rt_step_leave(st);
    return rc;
}

static mpmd_status step_read(mpmd_step *st, mpmd_value v, void *dst, size_t bytes) {
    if (!st) return MPMD_ERR_INVALID;
    if (!dst) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: nowhere to copy %%%d (NULL)", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    v = mpmd_read_target(st->plan->g, v);
    const mpmd_node *n = mpmd_node_of(st->plan->g, v);
    if (!n) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %d is not a value of the graph", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    if (!rt_whole(st) && mpmd_sharded(&st->plan->mesh, v.id)) {
        snprintf(
            st->err, sizeof st->err,
            "mpmd_step_read: %%%d is sharded over the replicas (fsdp) and this process holds one shard; use "
            "mpmd_step_gather",
            (int)v.id);
        return MPMD_ERR_INVALID;
    }
    if (n->op == &mpmd_op_input && !st->input_set[v.id]) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: input \"%s\" was never set (mpmd_step_set_input)",
                 n->name);
        return MPMD_ERR_INVALID;
    }
    int storage = mpmd_node_is_storage(n);
    if (!storage && !(n->flags & MPMD_NODE_KEEP)) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d (%s) is not kept; call mpmd_keep on it",
                 (int)v.id, n->op->name);
        return MPMD_ERR_INVALID;
    }
    if (!storage && !st->ran) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d has no value before the first run",
                 (int)v.id);
        return MPMD_ERR_INVALID;
    }
    if (bytes != whole_bytes(st->plan->g, v.id)) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d has %zu bytes, asked for %zu", (int)v.id,
                 whole_bytes(st->plan->g, v.id), bytes);
        return MPMD_ERR_SHAPE;
    }
    int ranks[64];
    int nr = mpmd_step_where(st, v, ranks, 64);
    for (int k = 0; k < nr && k < 64; k++) {
        int replica = rt_whole(st) ? 0 : rt_here(st).replica;
        mpmd_status rc = mpmd_runtime_read(st, ranks[k], replica, v.id, dst, bytes);
        if (rc != MPMD_ERR_INVALID) return rc;
    }
    if (!rt_whole(st) && nr > 0)
        snprintf(
            st->err, sizeof st->err,
            "mpmd_step_read: %%%d is held by rank %d, not by this process (rank %d); use mpmd_step_gather",
            (int)v.id, ranks[0], rt_here(st).rank);
    else
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d is held by no rank", (int)v.id);
    return MPMD_ERR_INVALID;
}

mpmd_status mpmd_step_read(mpmd_step *st, mpmd_value v, void *dst, size_t bytes) {
    if (!st) return MPMD_ERR_INVALID;
    if (rt_step_enter(st, "mpmd_step_read")) return MPMD_ERR_INVALID;
    mpmd_status rc = step_read(st, v, dst, bytes);
    rt_step_leave(st);
    return rc;
}

/* A value of (rank, replica) into dst on this process, by the launcher: a
 * local copy, or under MPI a broadcast from the process that runs that rank
 * and replica (every process must make the same calls in the same order). */
static mpmd_status fetch(mpmd_step *st, int rank, int replica, int node, void *dst, size_t bytes) {
    return st->la->fetch(st, rank, replica, node, dst, bytes);
}

void mpmd_step_replica_params_sha256(mpmd_step *st, int replica, char hex[65]) {
    if (!hex) return;
    if (!st) { /* no step: no hash, an empty string */
        hex[0] = '\0';
        return;
    }
    int np;
    const mpmd_node **ps = mpmd_params_by_name(st->plan->g, &np);
    size_t maxb = 1;
    for (int i = 0; ps && i < np; i++)
        if (whole_bytes(st->plan->g, ps[i]->id) > maxb) maxb = whole_bytes(st->plan->g, ps[i]->id);
    void *buf = malloc(maxb);
    mpmd_sha256_ctx c;
    mpmd_sha256_init(&c);
    for (int i = 0; ps && buf && i < np; i++) {
        int r;
        if (mpmd_step_where(st, (mpmd_value){ps[i]->id}, &r, 1) < 1) continue;
        size_t b = whole_bytes(st->plan->g, ps[i]->id);
        if (fetch(st, r, replica, ps[i]->id, buf, b) == MPMD_OK) mpmd_sha256_update(&c, buf, b);
    }
    free(buf);
    free(ps);
    mpmd_sha256_final_hex(&c, hex);
}

void mpmd_step_params_sha256(mpmd_step *st, char hex[65]) { mpmd_step_replica_params_sha256(st, 0, hex); }

static mpmd_status step_gather(mpmd_step *st, mpmd_value v, void *dst, size_t bytes) {
    if (rt_whole(st)) return step_read(st, v, dst, bytes);
    if (!dst) {
        snprintf(st->err, sizeof st->err, "mpmd_step_gather: nowhere to copy %%%d (NULL)", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    v = mpmd_read_target(st->plan->g, v);
    const mpmd_node *n = mpmd_node_of(st->plan->g, v);
    int r;
    if (!n || (!mpmd_node_is_storage(n) && !(n->flags & MPMD_NODE_KEEP)) ||
        mpmd_step_where(st, v, &r, 1) < 1) {
        snprintf(st->err, sizeof st->err, "mpmd_step_gather: %%%d is not a kept value, parameter or variable",
                 (int)v.id);
        return MPMD_ERR_INVALID;
    }
    if (bytes != whole_bytes(st->plan->g, v.id)) {
        snprintf(st->err, sizeof st->err, "mpmd_step_gather: %%%d has %zu bytes, asked for %zu", (int)v.id,
                 whole_bytes(st->plan->g, v.id), bytes);
        return MPMD_ERR_SHAPE;
    }
    return fetch(st, r, 0, v.id, dst, bytes);
}

mpmd_status mpmd_step_gather(mpmd_step *st, mpmd_value v, void *dst, size_t bytes) {
    if (!st) return MPMD_ERR_INVALID;
    if (rt_step_enter(st, "mpmd_step_gather")) return MPMD_ERR_INVALID;
    mpmd_status rc = step_gather(st, v, dst, bytes);
    rt_step_leave(st);
    return rc;
}

/* ---- printing ------------------------------------------------------------- */

void mpmd_step_print_tasks(const mpmd_step *st, FILE *f) {
    if (!st || !f) return;
    if (st->plan->sched)
        mpmd_schedule_write_text(st->plan->sched, f);
    else
        fprintf(f, "loop: one rank runs the whole body for microbatch 0 .. %d in order\n",
                st->plan->num_micro - 1);
}

void mpmd_step_print(const mpmd_step *st, FILE *f) {
    if (st && f) mpmd_plan_print(st->plan, f);
}
