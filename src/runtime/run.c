/* The interpreter: runs the programs of this process's rank states (tasks,
 * before- and after-loop ops, sends, receives, collectives, frees). Their
 * set-up is setup.c; the values they hold are read and written from
 * outside a run by rank_values.c.
 *
 * Which ranks run in this process and how a run of them starts and ends is
 * the step's launcher's, st->la (launcher.h): threads of this process
 * (launcher.c) or one MPI process each (launch_mpi.c). What crosses ranks
 * (sends, receives, the collectives over a mesh axis) goes over its wire,
 * st->wire (wire.h): mailboxes (wire_local.c) or MPI (wire_mpi.c). This
 * file calls them only through those tables; the wires use the services
 * below (runtime.h).
 *
 * Buffers, kernels and copies come from the step's backend, one instance
 * per rank. Every buffer a rank's program writes is at a fixed offset of
 * the rank's one arena, as the plan's memory plan says (compiler/memory.c);
 * parameters, variables, constants, inputs and the kernels' workspace have
 * buffers of their own. Nothing is allocated while a step runs: no buffer,
 * and no host memory either (the wires plan theirs at set-up, a launch
 * wider than the stack's operand lists uses the rank's `room`); recording
 * and profiling grow their event lists.
 *
 * A rank that fails records its message and wakes every rank (through the
 * wire); the others stop at their next instruction or wait, and the
 * step returns the first failure's message.
 */
#include "runtime/launcher.h"
#include "util/exact.h"
#include "util/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double rt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t rt_bytes(const mpmd_graph *g, int node) { return mpmd_type_bytes(&g->nodes[node].type); }

const char *rt_value_str(const struct mpmd_step *st, int node, char *buf, size_t len) {
    char ob[256];
    const mpmd_graph *g = st->plan->g;
    const mpmd_node *n = &g->nodes[node];
    if (n->op == &mpmd_op_stage_marker) /* what crosses a stage boundary: say which and what made it */
        snprintf(buf, len, "%s (stage %d's output, from %s)", mpmd_operand_str(g, node, ob, sizeof ob),
                 g->nodes[n->in[0]].stage, g->nodes[n->in[0]].op->name);
    else
        snprintf(buf, len, "%s (%s)", mpmd_operand_str(g, node, ob, sizeof ob), n->op->name);
    return buf;
}

const char *rt_instr_str(const struct mpmd_step *st, int rank, int x, char *buf, size_t len) {
    static const char *pre[] = {"fwd", "bwd", "bwdA", "bwdW"};
    const mpmd_program *p = &st->plan->prog[rank];
    if (x < 0 || x >= p->n) {
        snprintf(buf, len, "the end of its step (its device's queue)");
        return buf;
    }
    const mpmd_instr *in = &p->ins[x];
    char vb[300];
    if (in->op == MPMD_I_TASK && st->plan->sched)
        snprintf(buf, len, "task %s_%d__%d", pre[in->kind], in->stage, in->mb);
    else if (in->op == MPMD_I_TASK)
        snprintf(buf, len, "microbatch %d of the loop", in->mb);
    else if (in->op == MPMD_I_RUN_PRE || in->op == MPMD_I_RUN_POST ||
             ((in->op == MPMD_I_SEND || in->op == MPMD_I_RECV) && in->mb < 0))
        snprintf(buf, len, "%s", rt_value_str(st, in->node, vb, sizeof vb));
    else if (in->op == MPMD_I_SEND || in->op == MPMD_I_RECV)
        snprintf(buf, len, "%s of microbatch %d", rt_value_str(st, in->node, vb, sizeof vb), in->mb);
    else
        snprintf(buf, len, "instruction %d of its program", x);
    return buf;
}

/* ---- the watchdog -------------------------------------------------------- */

void rt_time_after(double seconds, struct timespec *t) {
    clock_gettime(CLOCK_REALTIME, t);
    if (!(seconds <= MPMD_WAIT_MAX)) seconds = MPMD_WAIT_MAX; /* time_t holds it */
    double whole = floor(seconds);
    t->tv_sec += (time_t)whole;
    t->tv_nsec += (long)((seconds - whole) * 1e9);
    if (t->tv_nsec >= 1000000000L) t->tv_sec++, t->tv_nsec -= 1000000000L;
}

int rt_deadline(const struct mpmd_step *st, struct timespec *until) {
    if (st->wait_limit <= 0) return 0;
    rt_time_after(st->wait_limit, until);
    return 1;
}

/* ---- aborting ---------------------------------------------------------- */

int rt_aborted(struct mpmd_step *st) { return __atomic_load_n(&st->abort_flag, __ATOMIC_ACQUIRE); }

void rt_fail(mpmd_rank_state *rs, mpmd_status code, const char *fmt, ...) {
    struct mpmd_step *st = rs->st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rs->err, sizeof rs->err, fmt, ap);
    va_end(ap);
    rs->status = code;
    pthread_mutex_lock(&st->abort_mu);
    if (!st->abort_flag) {
        if (st->plan->model > 1)
            snprintf(st->err, sizeof st->err, "rank %d (replica %d, model rank %d): %.900s", rs->rank,
                     rs->replica, rs->model, rs->err);
        else if (st->plan->replicas > 1)
            snprintf(st->err, sizeof st->err, "rank %d (replica %d): %.900s", rs->rank, rs->replica, rs->err);
        else
            snprintf(st->err, sizeof st->err, "rank %d: %.900s", rs->rank, rs->err);
        st->abort_time = rt_now();
        __atomic_store_n(&st->abort_flag, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&st->abort_mu);
    if (st->wire->wake) st->wire->wake(st);
}

/* ---- values ------------------------------------------------------------- */

void *rt_value_ptr(mpmd_rank_state *rs, int v, int mb) {
    struct mpmd_step *st = rs->st;
    const mpmd_node *n = &st->plan->g->nodes[v];
    if (n->region != MPMD_REGION_BODY || n->op == &mpmd_op_constant)
        return mb >= 0 && rs->full && rs->full[v] ? rs->full[v] : rs->glob[v]; /* FSDP: gathered */
    if (n->op == &mpmd_op_microbatch)
        return (char *)rt_value_ptr(rs, n->in[0], mb) + (size_t)mb * rt_bytes(st->plan->g, v);
    int s = rs->mem->slot[v];
    return s >= 0 && mb >= 0 ? rs->val[(size_t)s * st->plan->num_micro + mb] : NULL;
}

int rt_tag(const struct mpmd_step *st, int node, int mb) {
    return node * (st->plan->num_micro + 1) + (mb + 1);
}

void *rt_buffer(mpmd_rank_state *rs, const mpmd_instr *in) {
    return in->mb >= 0 ? rt_value_ptr(rs, in->node, in->mb) : rs->glob[in->node];
}

typedef struct {
    mpmd_rank_state *rs;
    int mb;
} at_mb;

static void *ptr_at(void *ctx, int v) {
    at_mb *a = ctx;
    return rt_value_ptr(a->rs, v, a->mb);
}

/* ---- profiles ------------------------------------------------------------- */

struct rt_mark {
    int node;
    void *from, *to;
};

/* Keep op i's pair of marks for reading when the run has finished. */
static int keep_marks(mpmd_rank_state *rs, int i, void *from, void *to) {
    if (rs->nmarks == rs->capmarks) {
        int cap = rs->capmarks ? 2 * rs->capmarks : 1024;
        struct rt_mark *nm = realloc(rs->marks, (size_t)cap * sizeof *nm);
        if (!nm) return 1;
        rs->marks = nm, rs->capmarks = cap;
    }
    rs->marks[rs->nmarks++] = (struct rt_mark){i, from, to};
    return 0;
}

/* The run has finished (synced): add each op's device time to the profile
 * (when `read`) and let the marks go. */
static void read_marks(mpmd_rank_state *rs, int read) {
    const mpmd_backend *be = rs->st->plan->be;
    for (int k = 0; k < rs->nmarks; k++) {
        struct rt_mark *m = &rs->marks[k];
        double s = read && m->from && m->to ? be->queue.mark_seconds(rs->dev, m->from, m->to) : -1;
        if (s > 0 && rs->prof) rs->prof[m->node] += s;
        be->queue.mark_free(rs->dev, m->from);
        be->queue.mark_free(rs->dev, m->to);
    }
    rs->nmarks = 0;
}

static int run_kernel(mpmd_rank_state *rs, int i, int mb, void *out, const char *where) {
    struct mpmd_step *st = rs->st;
    const mpmd_backend *be = st->plan->be;
    char kerr[512];
    at_mb ctx = {rs, mb};
    /* a profile times each op: between two marks in an asynchronous
     * backend's queue (read after the run), else on the host clock */
    const int marked = rs->prof && be->queue.mark;
    void *m0 = marked ? be->queue.mark(rs->dev) : NULL;
    double t0 = rs->prof ? rt_now() : 0;
    /* FSDP: an op after the loop on sharded values (an update, a sum of
     * gradients) runs on this replica's part of them */
    int sharded = -1;
    if (mb < 0 && st->plan->mesh.shard) {
        const mpmd_node *nd = &st->plan->g->nodes[i];
        for (int j = 0; j < nd->n_in && sharded < 0; j++)
            if (st->plan->mesh.shard[nd->in[j]]) sharded = nd->in[j];
    }
    int rc;
    if (sharded >= 0) {
        int64_t lo, cnt;
        mpmd_shard_part(&st->plan->mesh, sharded, rs->replica, &lo, &cnt);
        rc = mpmd_backend_run_part(be, rs->dev, st->plan->g, i, st->plan->kern[i], out, ptr_at, &ctx,
                                   rs->nthreads, rs->scratch, mb, st->plan->mesh.shard, cnt, &rs->room, kerr,
                                   sizeof kerr);
    } else {
        rc = mpmd_backend_run_part(be, rs->dev, st->plan->g, i, st->plan->kern[i], out, ptr_at, &ctx,
                                   rs->nthreads, rs->scratch, mb, NULL, 0, &rs->room, kerr, sizeof kerr);
    }
    if (marked) {
        void *m1 = be->queue.mark(rs->dev);
        if (keep_marks(rs, i, m0, m1)) {
            be->queue.mark_free(rs->dev, m0), be->queue.mark_free(rs->dev, m1);
            if (!rc) snprintf(kerr, sizeof kerr, "out of memory for the profile"), rc = 1;
        }
    } else if (!rc && rs->prof) { /* each op waited for */
        rc = be->queue.sync(rs->dev, kerr, sizeof kerr);
        rs->prof[i] += rt_now() - t0;
    }
    if (rc) { /* name what the op is about where the graph knows: "d1/kernel" */
        const char *subj = mpmd_node_subject(st->plan->g, i);
        rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = %s%s%s%s%s: %s", i, st->plan->g->nodes[i].op->name,
                subj ? " of \"" : "", subj ? subj : "", subj ? "\"" : "", where, kerr);
    }
    return rc;
}

/* Global norm `node` (ops/clip.c) into out: this rank state's exact sum of
 * the squares of the elements it counts (each element of each input once
 * over the mesh: the lowest pipeline rank holding an input counts it, its
 * replicas and model ranks each their part, mesh/mesh.h), summed over
 * every point of the mesh by the wire, rounded once. */
static int global_norm(mpmd_rank_state *rs, int node, void *out) {
    struct mpmd_step *st = rs->st;
    const mpmd_plan *pl = st->plan;
    const mpmd_node *nd = &pl->g->nodes[node];
    uint32_t acc[MPMD_EXACT_WORDS];
    memset(acc, 0, sizeof acc);
    const void *x[16];
    int64_t cnt[16];
    int k = 0;
    char err[512] = "";
    if (!pl->be->kernels.sumsq) {
        rt_fail(rs, MPMD_ERR_INVALID, "%%%d = global_norm: the %s backend has no exact sum of squares", node,
                pl->be->name);
        return 1;
    }
    for (int j = 0; j <= nd->n_in; j++) {
        if (k == 16 || (j == nd->n_in && k)) { /* in batches of 16 */
            if (pl->be->kernels.sumsq(rs->dev, k, x, cnt, acc, err, sizeof err)) {
                rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = global_norm: %s", node, err);
                return 1;
            }
            k = 0;
        }
        if (j == nd->n_in) break;
        const int v = nd->in[j];
        int lowest = 0;
        while (lowest < pl->num_ranks && !mpmd_runs_on(pl, v, lowest))
            lowest++;
        if (lowest != rs->rank || !rs->glob[v]) continue; /* counted where it lives first */
        int64_t lo;
        mpmd_mesh_count_part(&pl->mesh, v, rs->replica, rs->model, &lo, &cnt[k]);
        x[k++] = (const char *)rs->glob[v] + (size_t)lo * sizeof(float);
    }
    if (st->wire->mesh_sum(rs, acc, MPMD_EXACT_WORDS)) return 1;
    mpmd_exact_carry(acc);
    const float norm = (float)sqrt(mpmd_exact_value(acc));
    if (pl->be->queue.upload(rs->dev, out, &norm, sizeof norm)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = global_norm: copying the norm to the %s backend failed", node,
                pl->be->name);
        return 1;
    }
    return 0;
}

/* Value i of microbatch mb has no buffer of its own: its op wrote it
 * straight into its loop sum's accumulator (acc = x_0, memory.c), so there
 * is nothing to fold and no activation to count. */
static int in_accumulator(mpmd_rank_state *rs, int i, int mb) {
    const int r = rs->st->plan->reduce_head[i];
    return mb == 0 && r >= 0 && rt_value_ptr(rs, i, 0) == rs->glob[r];
}

/* Fold body value i of microbatch mb into the loop reductions that read it
 * (acc = x_0, then acc op= x_m, in microbatch order). */
static int accumulate(mpmd_rank_state *rs, int i, int mb) {
    struct mpmd_step *st = rs->st;
    const mpmd_graph *g = st->plan->g;
    if (in_accumulator(rs, i, mb)) return 0; /* the op wrote the accumulator itself (memory.c) */
    for (int r = st->plan->reduce_head[i]; r >= 0; r = st->plan->reduce_next[r]) {
        if (st->plan->be->kernels.fold(rs->dev, g, &g->nodes[r], rs->glob[r], rt_value_ptr(rs, i, mb), mb)) {
            rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = loop_reduce, microbatch %d: the fold failed", r, mb);
            return 1;
        }
    }
    return 0;
}

static void count_live(mpmd_rank_state *rs, int64_t bytes) {
    rs->live_bytes += bytes;
    if (rs->live_bytes > rs->peak_bytes) rs->peak_bytes = rs->live_bytes;
}

static int run_task(mpmd_rank_state *rs, const mpmd_instr *in) {
    struct mpmd_step *st = rs->st;
    const mpmd_graph *g = st->plan->g;
    const int k = in->stage * MPMD_TASK_KINDS + in->kind, mb = in->mb;
    const int32_t *nodes = st->plan->cl.nodes[k];
    char where[64] = "";
    static const char *pre[] = {"fwd", "bwd", "bwdA", "bwdW"};
    if (st->plan->sched)
        snprintf(where, sizeof where, " in %s_%d__%d", pre[in->kind], in->stage, mb);
    else if (st->plan->num_micro > 0)
        snprintf(where, sizeof where, ", microbatch %d", mb);
    for (int c = 0; c < st->plan->cl.count[k]; c++) {
        if (rt_aborted(st)) return 1;
        int i = nodes[c];
        const mpmd_node *nd = &g->nodes[i];
        const int64_t made = in_accumulator(rs, i, mb) ? 0 : (int64_t)rt_bytes(g, i);
        if (nd->op->flags & MPMD_OPF_COLLECTIVE) { /* the model axis: the wire's, or this rank's own */
            count_live(rs, made);
            double t0 = rs->prof ? rt_now() : 0;
            if (mpmd_collective_exchanges(nd->op)) {
                if (st->wire->model_collective(rs, i, rt_value_ptr(rs, nd->in[0], mb),
                                               rt_value_ptr(rs, i, mb), where))
                    return 1;
            } else {
                void *ops[2] = {rt_value_ptr(rs, nd->in[0], mb),
                                nd->n_in > 1 ? rt_value_ptr(rs, nd->in[1], mb) : NULL};
                char kerr[256];
                if (st->plan->be->kernels.model_local(rs->dev, g, i, rs->model, ops, rt_value_ptr(rs, i, mb),
                                                      kerr, sizeof kerr)) {
                    rt_fail(rs, MPMD_ERR_RUNTIME, "%%%d = %s%s: %s", i, nd->op->name, where, kerr);
                    return 1;
                }
            }
            if (rs->prof) {
                char e[256];
                st->plan->be->queue.sync(rs->dev, e, sizeof e);
                rs->prof[i] += rt_now() - t0;
            }
        } else if (!(nd->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL))) {
            void *out = nd->type.dtype != MPMD_TOKEN ? rt_value_ptr(rs, i, mb) : NULL;
            count_live(rs, made);
            if (run_kernel(rs, i, mb, out, where)) return 1;
        }
        if (st->plan->reduce_head[i] >= 0 && accumulate(rs, i, mb)) return 1;
        /* values used only inside this task die at their last use here */
        for (int f = st->plan->free_head[k][c]; f >= 0; f = st->plan->free_next[f])
            if (!in_accumulator(rs, f, mb)) rs->live_bytes -= (int64_t)rt_bytes(g, f);
    }
    return 0;
}

/* GATHER instruction y's lists: its values (returned, *n of them), this
 * replica's shard of each (rs->gather_in) and the planned buffer each is
 * gathered whole into (rs->gather_out). */
static const int32_t *gather_args(mpmd_rank_state *rs, int y, int *n) {
    const int32_t *nodes = mpmd_gather_list(rs->st->plan, &rs->st->plan->prog[rs->rank].ins[y], n);
    for (int q = 0; q < *n; q++) {
        rs->gather_in[q] = rs->glob[nodes[q]];
        rs->gather_out[q] = rs->arena + rs->mem->buf[rs->mem->gath_buf[y] + q].off;
    }
    return nodes;
}

/* Before instruction x: every receive and gather whose buffers the plan
 * holds from x on (its `post`) is posted to the wire, in program order,
 * once a run (rs->posted); a wire that posts neither ahead takes them at
 * the instruction itself. */
static void post_ahead(mpmd_rank_state *rs, const mpmd_program *p, int x) {
    struct mpmd_step *st = rs->st;
    const mpmd_wire *wire = st->wire;
    if (!wire->post_recv && !wire->post_gather) return;
    for (; rs->posted < p->n; rs->posted++) {
        const mpmd_instr *in = &p->ins[rs->posted];
        if (!(in->op == MPMD_I_RECV && wire->post_recv) && !(in->op == MPMD_I_GATHER && wire->post_gather))
            continue;
        if (in->post > x) break;
        if (in->op == MPMD_I_RECV) {
            wire->post_recv(rs, rs->posted, rt_buffer(rs, in), mpmd_held_bytes(&st->plan->mesh, in->node),
                            in->peer, rt_tag(st, in->node, in->mb));
        } else {
            int n;
            const int32_t *nodes = gather_args(rs, rs->posted, &n);
            wire->post_gather(rs, rs->posted, n, nodes, (const void *const *)rs->gather_in, rs->gather_out);
        }
    }
}

/* Instruction x of the rank's program: the wire's look-ahead, the
 * instruction, then the sends whose buffers it lets go. */
static void exec_instr(mpmd_rank_state *rs, const mpmd_program *p, int x) {
    struct mpmd_step *st = rs->st;
    const mpmd_graph *g = st->plan->g;
    const mpmd_wire *wire = st->wire;
    const mpmd_instr *in = &p->ins[x];
    post_ahead(rs, p, x); /* MPI: post the receives the next tasks need */
    switch (in->op) {
    case MPMD_I_RUN_PRE:
    case MPMD_I_RUN_POST:
        if (g->nodes[in->node].op->flags & MPMD_OPF_MESH)
            global_norm(rs, in->node, rs->glob[in->node]);
        else
            run_kernel(rs, in->node, -1,
                       g->nodes[in->node].type.dtype != MPMD_TOKEN ? rs->glob[in->node] : NULL, "");
        break;
    case MPMD_I_TASK: run_task(rs, in); break;
    case MPMD_I_SEND:
        if (!wire->send(rs, x, rt_buffer(rs, in), mpmd_held_bytes(&st->plan->mesh, in->node), in->peer,
                        rt_tag(st, in->node, in->mb)) &&
            in->moved)
            rs->live_bytes -= (int64_t)rt_bytes(g, in->node);
        break;
    case MPMD_I_RECV:
        if (!wire->recv(rs, x, rt_buffer(rs, in), mpmd_held_bytes(&st->plan->mesh, in->node), in->peer,
                        rt_tag(st, in->node, in->mb)) &&
            in->mb >= 0)
            count_live(rs, (int64_t)rt_bytes(g, in->node));
        break;
    case MPMD_I_ALLREDUCE:
    case MPMD_I_REDUCE_SCATTER: {
        /* the sum (FSDP: this replica's shard of it) lands in the combined
         * result's buffer, read from then on */
        void *out = rs->arena + rs->mem->buf[rs->mem->comb_buf[in->node]].off;
        if (!(in->op == MPMD_I_ALLREDUCE ? wire->allreduce : wire->reduce_scatter)(rs, in->node,
                                                                                   rs->glob[in->node], out))
            rs->glob[in->node] = out;
        break;
    }
    case MPMD_I_GATHER: { /* FSDP: the values the next task (or the step) reads, whole, in their
                           * planned buffers */
        int n;
        const int32_t *nodes = gather_args(rs, x, &n);
        for (int q = 0; q < n; q++)
            rs->full[nodes[q]] = rs->gather_out[q];
        wire->allgather(rs, x, n, nodes, (const void *const *)rs->gather_in, rs->gather_out);
        break;
    }
    case MPMD_I_FREE:
        if (!in_accumulator(rs, in->node, in->mb)) rs->live_bytes -= (int64_t)rt_bytes(g, in->node);
        break;
    }
    /* sends whose buffers the program overwrites from here on */
    if (wire->send_done)
        for (int sx = rs->mem->reuse_head[x]; sx >= 0; sx = rs->mem->reuse_next[sx])
            wire->send_done(rs, sx);
}

/* ---- recorded segments ----------------------------------------------------
 * On a backend that can record its queue (CUDA graphs), each run of
 * instructions that stays on the rank (ops before and after the loop,
 * tasks, frees: no send, receive or replica sum between) is recorded the
 * first time it runs and replayed from then on: one launch instead of one
 * per kernel, and none of the interpreter's work per op. The buffers and
 * arguments are the same every run (the memory plan fixes every address;
 * the step counter and learning rate live on the device), so the replay
 * does what the interpreter would. The wire's host-side work for
 * these instructions (posting receives ahead, finishing sends whose
 * buffers they overwrite) is done before the replay is queued: earlier
 * than the interpreter would, never later. */

static int stays_on_rank(const mpmd_plan *pl, const mpmd_instr *in) {
    if (in->op == MPMD_I_RUN_PRE || in->op == MPMD_I_RUN_POST) /* a global norm meets the mesh */
        return !(pl->g->nodes[in->node].op->flags & MPMD_OPF_MESH);
    if (in->op == MPMD_I_TASK) /* a task with collectives of the model axis meets its model ranks */
        return !pl->task_meets[in->stage * MPMD_TASK_KINDS + in->kind];
    return in->op == MPMD_I_FREE;
}

static void rt_free_graphs(mpmd_rank_state *rs, int n) {
    const mpmd_backend *be = rs->st->plan->be;
    for (int x = 0; rs->graph && x < n; x++)
        if (rs->graph[x]) be->queue.graph_free(rs->dev, rs->graph[x]);
    free(rs->graph), free(rs->seg_end), free(rs->seg_delta), free(rs->seg_peak);
    rs->graph = NULL, rs->seg_end = NULL, rs->seg_delta = rs->seg_peak = NULL;
}

/* Run the segment that starts at instruction x from its recording (making
 * it first when there is none). Returns the instruction after the segment,
 * or x when the segment is to be interpreted instead (the backend declined
 * to record, or could not: from then on this rank interprets). */
static int run_segment(mpmd_rank_state *rs, const mpmd_program *p, int x) {
    struct mpmd_step *st = rs->st;
    const mpmd_backend *be = st->plan->be;
    const mpmd_wire *wire = st->wire;
    char err[512];
    if (!rs->graph) {
        rs->graph = calloc((size_t)p->n + 1, sizeof *rs->graph);
        rs->seg_end = calloc((size_t)p->n + 1, sizeof *rs->seg_end);
        rs->seg_delta = calloc((size_t)p->n + 1, sizeof *rs->seg_delta);
        rs->seg_peak = calloc((size_t)p->n + 1, sizeof *rs->seg_peak);
        if (!rs->graph || !rs->seg_end || !rs->seg_delta || !rs->seg_peak) {
            rt_free_graphs(rs, 0);
            rs->no_graphs = 1;
            return x;
        }
    }
    if (!rs->graph[x]) { /* record it: the interpreter queues its work into the recording */
        int e = x;
        while (e < p->n && stays_on_rank(st->plan, &p->ins[e]))
            e++;
        const int64_t live0 = rs->live_bytes, peak0 = rs->peak_bytes;
        int c = be->queue.capture_begin(rs->dev, err, sizeof err);
        if (c) { /* declined (< 0), or failed: interpret */
            rs->no_graphs = 1;
            return x;
        }
        rs->peak_bytes = live0; /* the segment's own peak */
        for (int y = x; y < e && !rt_aborted(st); y++)
            exec_instr(rs, p, y);
        void *gr = be->queue.capture_end(rs->dev, err, sizeof err);
        const int64_t delta = rs->live_bytes - live0, peak = rs->peak_bytes - live0;
        rs->live_bytes = live0, rs->peak_bytes = peak0;
        if (rt_aborted(st)) { /* a failure while recording: its message stands, and later steps
                               * interpret (so a failure of the recording itself does not repeat) */
            if (gr) be->queue.graph_free(rs->dev, gr);
            if (rs->status != MPMD_OK) rs->no_graphs = 1;
            return p->n;
        }
        if (!gr) { /* nothing was run: interpret from here (the wire's look-ahead and waits,
                    * done while recording, run again: both may be repeated) */
            rs->no_graphs = 1;
            return x;
        }
        rs->graph[x] = gr, rs->seg_end[x] = e, rs->seg_delta[x] = delta, rs->seg_peak[x] = peak;
    } else {
        for (int y = x; y < rs->seg_end[x]; y++) {
            post_ahead(rs, p, y);
            if (wire->send_done)
                for (int sx = rs->mem->reuse_head[y]; sx >= 0; sx = rs->mem->reuse_next[sx])
                    wire->send_done(rs, sx);
        }
    }
    if (be->queue.replay(rs->dev, rs->graph[x], err, sizeof err)) {
        rt_fail(rs, MPMD_ERR_RUNTIME, "replaying instructions %d to %d: %s", x, rs->seg_end[x] - 1, err);
        return p->n;
    }
    count_live(rs, rs->seg_peak[x]);
    rs->live_bytes += rs->seg_delta[x] - rs->seg_peak[x];
    return rs->seg_end[x];
}

static void *rank_main(void *arg) {
    mpmd_rank_state *rs = arg;
    struct mpmd_step *st = rs->st;
    const mpmd_graph *g = st->plan->g;
    const mpmd_program *p = &st->plan->prog[rs->rank];
    const mpmd_backend *be = st->plan->be;
    rs->nev = 0;
    rs->wait = rs->late = 0;
    __atomic_store_n(&rs->progress_us, (int64_t)(1e6 * rt_now()), __ATOMIC_RELAXED);
    rs->live_bytes = rs->peak_bytes = 0;
    rs->coll_bytes = rs->gath_bytes = 0;
    rs->posted = 0; /* receives posted to the wire so far (post_ahead) */
    be->device.enter(rs->dev);
    /* a loop result combined last run is accumulated afresh in its own buffer */
    for (int i = 0; i < g->n_nodes; i++)
        if (rs->mem->comb_buf[i] >= 0) rs->glob[i] = rs->arena + rs->mem->buf[rs->mem->val_buf[i]].off;
    /* timing an asynchronous device needs each instruction finished */
    const int timed_sync = st->record && !be->host_memory;
    /* recordings replace the interpreter unless each op or instruction is timed */
    const int replayed = be->queue.capture_begin && !st->record && !rs->prof && !rs->no_graphs;
    char serr[512];
    for (int x = 0; x < p->n && !rt_aborted(st);) {
        __atomic_store_n(&rs->at, x, __ATOMIC_RELAXED); /* for the watchdog of a lone rank */
        __atomic_store_n(&rs->progress_us, (int64_t)(1e6 * rt_now()), __ATOMIC_RELAXED);
        if (replayed && !rs->no_graphs && stays_on_rank(st->plan, &p->ins[x])) {
            int next = run_segment(rs, p, x);
            if (next != x) {
                x = next;
                continue;
            }
        }
        double t0 = st->record ? rt_now() : 0;
        exec_instr(rs, p, x);
        if (timed_sync && be->queue.sync(rs->dev, serr, sizeof serr)) {
            rt_fail(rs, MPMD_ERR_RUNTIME, "%s", serr);
            break;
        }
        if (st->record) {
            double t1 = rt_now();
            if (rs->nev == rs->capev) {
                int cap = rs->capev ? 2 * rs->capev : 1024;
                mpmd_event *ne = realloc(rs->ev, (size_t)cap * sizeof *ne);
                if (!ne) {
                    rt_fail(rs, MPMD_ERR_NOMEM, "out of memory recording the timeline");
                    break;
                }
                rs->ev = ne, rs->capev = cap;
            }
            rs->ev[rs->nev++] = (mpmd_event){x, t0 - st->t_start, t1 - st->t_start, rs->wait, rs->late};
            rs->wait = rs->late = 0;
        }
        x++;
    }
    /* the step ends when the queued work has finished; a kernel that failed
     * on the device is reported here, naming the rank */
    __atomic_store_n(&rs->at, p->n, __ATOMIC_RELAXED);
    __atomic_store_n(&rs->progress_us, (int64_t)(1e6 * rt_now()), __ATOMIC_RELAXED);
    int bad = be->queue.sync(rs->dev, serr, sizeof serr);
    if (bad) rt_fail(rs, MPMD_ERR_RUNTIME, "%s", serr);
    if (rs->nmarks) read_marks(rs, !bad && !rt_aborted(st));
    return NULL;
}

/* ---- a step ---------------------------------------------------------------- */

/* What a run the watchdog cut short left: 1 once the launcher's ranks have
 * stopped (waiting up to `wait` seconds) and the wire's messages settled. */
static int settle(struct mpmd_step *st, double wait) {
    const double t0 = rt_now();
    if (st->la->settle && !st->la->settle(st, wait)) return 0;
    const double left = wait - (rt_now() - t0);
    return st->wire->settle(st, left > 0 ? left : 0);
}

mpmd_status mpmd_runtime_run(struct mpmd_step *st) {
    const int L = st->num_local;
    if (st->broken) st->broken = !settle(st, 0);
    if (st->broken) {
        snprintf(
            st->err, sizeof st->err,
            "an earlier run of this step timed out and left work unfinished that has not ended since (a "
            "rank stuck in a kernel, or a message a peer never took): the step cannot run until it does");
        return MPMD_ERR_RUNTIME;
    }
    /* the watchdog: as asked, or the longer of 300 s and 20 slowest steps;
     * none for a negative time, an infinite one, or one past what a clock
     * can be set to (over 10^9 s: 31 years) */
    st->wait_limit = st->timeout_opt > 0   ? st->timeout_opt
                     : st->timeout_opt < 0 ? 0
                                           : (20 * st->slowest_step > 300 ? 20 * st->slowest_step : 300);
    if (!(st->wait_limit <= MPMD_WAIT_MAX)) st->wait_limit = 0;
    st->abort_flag = 0;
    st->err[0] = '\0';
    st->t_start = rt_now();
    /* every rank state of this process runs its program (the wire
     * starts them), then what is left in flight is settled */
    if (st->wire->start) st->wire->start(st);
    mpmd_status rc = st->la->launch(st, rank_main);
    if (rc) return rc;
    for (int r = 0; r < L; r++)
        st->wire->end_step(&st->rs[r]);
    st->t_end = rt_now();
    for (int r = 0; r < L; r++) {
        if (st->rs[r].status != MPMD_OK && rc == MPMD_OK) rc = st->rs[r].status;
    }
    if (rc == MPMD_OK && st->abort_flag) rc = MPMD_ERR_RUNTIME;
    if (rc == MPMD_OK && st->profiling) st->prof_runs++;
    if (rc == MPMD_OK && st->t_end - st->t_start > st->slowest_step)
        st->slowest_step = st->t_end - st->t_start;
    return rc;
}

void mpmd_runtime_free(struct mpmd_step *st) {
    if (!st->rs) return;
    /* what the watchdog left: wait for it (the longer of 30 s and the
     * watchdog's time), or leave everything it may still use */
    if (st->broken) st->broken = !settle(st, st->wait_limit > 30 ? st->wait_limit : 30);
    if (st->broken) return; /* a rank thread or a message may still use all of it: leave it be */
    const mpmd_graph *g = st->plan->g;
    if (st->la && st->la->teardown) st->la->teardown(st);
    if (st->wire) st->wire->teardown(st);
    const mpmd_backend *be = st->plan->be;
    for (int r = 0; r < st->num_local; r++) {
        mpmd_rank_state *rs = &st->rs[r];
        if (rs->dev) {
            char e[256];
            be->device.enter(rs->dev);
            be->queue.sync(rs->dev, e, sizeof e); /* nothing queued may still use a buffer */
            for (int i = 0; rs->glob && i < g->n_nodes; i++) {
                const mpmd_node *nd = &g->nodes[i];
                int own_input = nd->op == &mpmd_op_input && !be->host_memory;
                if ((mpmd_node_is_storage(nd) || nd->op == &mpmd_op_constant || own_input) && rs->glob[i] &&
                    mpmd_runs_on(st->plan, i, rs->rank))
                    be->queue.free(rs->dev, rs->glob[i]);
            }
            rt_free_graphs(rs, st->plan->prog[rs->rank].n);
            read_marks(rs, 0);
            if (rs->arena) be->queue.free(rs->dev, rs->arena);
            if (rs->scratch) be->queue.free(rs->dev, rs->scratch);
            free(rs->room.in), free((void *)rs->room.ty), free(rs->room.flat);
            be->device.close(rs->dev);
            rs->dev = NULL;
        }
        free(rs->val), free(rs->glob), free(rs->full), free(rs->gather_in), free(rs->gather_out),
            free(rs->ev), free(rs->prof), free(rs->marks);
    }
    free(st->rs);
    st->rs = NULL;
}
