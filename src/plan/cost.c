/* What links, collectives and stages cost, and one layout's prediction
 * (mpmd_planner_predict). The model is stated in include/mpmd_plan.h and,
 * with its numbers, in docs/planner.md. */
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- links and collectives ---- */

int plan_same_node(const mpmd_cluster *c, int64_t a, int64_t b) {
    return a / c->gpus_per_node == b / c->gpus_per_node;
}

int plan_group_per_node(const mpmd_cluster *c, int n, int stride) {
    if (n <= 1 || stride >= c->gpus_per_node) return 1;
    int k = c->gpus_per_node / (stride > 0 ? stride : 1);
    return k < n ? k : n;
}

double plan_p2p_time(const mpmd_cluster *c, int same_node, double bytes) {
    if (bytes <= 0) return 0;
    double bw = same_node ? c->node_bandwidth : c->net_bandwidth;
    return bytes / (bw * MPMD_PLAN_LINK_EFFICIENCY) + (same_node ? c->node_latency : c->net_latency);
}

/* A ring's time: `share` of the bytes crosses each link (2(n-1)/n for an
 * all-reduce, (n-1)/n for a gather), `steps` latencies per ring. */
static double ring(const mpmd_cluster *c, int n, int per_node, double bytes, double factor) {
    if (n <= 1 || bytes <= 0) return 0;
    int k = per_node < 1 ? 1 : per_node > n ? n : per_node;
    int nodes = (n + k - 1) / k;
    double t = 0;
    if (k > 1)
        t += factor * (k - 1) / k * bytes / (c->node_bandwidth * MPMD_PLAN_LINK_EFFICIENCY) +
             factor * (k - 1) * c->node_latency;
    if (nodes > 1) /* across nodes each member carries its 1/k of the bytes on its own share of the network */
        t += factor * (nodes - 1) / nodes * (bytes / k) / (c->net_bandwidth * MPMD_PLAN_LINK_EFFICIENCY) +
             factor * (nodes - 1) * c->net_latency;
    return t;
}

double plan_allreduce_time(const mpmd_cluster *c, int n, int per_node, double bytes) {
    return ring(c, n, per_node, bytes, 2.0);
}

double plan_allgather_time(const mpmd_cluster *c, int n, int per_node, double bytes) {
    return ring(c, n, per_node, bytes, 1.0);
}

/* ---- a block, an embedding, a head ---- */

/* One transformer block on one GPU of a tp group, for one microbatch of T
 * tokens. FLOPs of the matrix products per task kind, the bytes the
 * memory-bound kernels move, parameters, and the bytes kept for the
 * backward per policy. The memory-bound kernels of a forward are the op
 * list of a GPT-2 block with dropout as Megatron-LM trains it: layer norm
 * twice (read and write the width), bias + dropout + residual twice (read
 * two, write one, a mask byte), bias + GELU on the MLP width (split over
 * tp), scale + mask + softmax and dropout on the attention probabilities
 * (split over tp); the backward moves twice a forward's bytes. The kept
 * bytes are Korthikanti et al. 2022's count (sbh(10 + 24/t) + 5as^2b/t at
 * 2-byte activations), in the compute dtype's bytes. */
typedef struct block_cost {
    double flops[4];  /* F, B, A, W */
    double bytes_f;   /* memory-bound bytes of a forward */
    double tp_bytes;  /* one tensor-parallel all-reduce (2 in F, 2 in A) */
    double params;    /* this GPU's */
    double keep[3];   /* per MPMD_PLAN_REMAT_*: kept from F for the backward */
    double keep_w;    /* split backward: kept from A until W */
    double keep_none; /* everything a forward makes (a task's working set) */
} block_cost;

static block_cost block_of(const mpmd_transformer *m, int tp, double T) {
    const double h = m->hidden, f = m->ffn ? m->ffn : 4.0 * h, s = m->seq, a = m->heads, t = tp;
    const double eb = plan_dtype_bytes(m->dtype);
    block_cost b;
    double dense = (8 * T * h * h + 4 * T * h * f) / t, attn = 4 * T * s * h / t;
    b.flops[MPMD_TASK_F] = dense + attn;
    b.flops[MPMD_TASK_A] = dense + 2 * attn; /* the scores' and the context's gradients: 4 products */
    b.flops[MPMD_TASK_W] = dense;
    b.flops[MPMD_TASK_B] = b.flops[MPMD_TASK_A] + b.flops[MPMD_TASK_W];
    b.bytes_f = (10 * eb + 2) * T * h + (2 * eb * T * f + (4 * eb + 1) * T * a * s) / t;
    b.tp_bytes = tp > 1 ? eb * T * h : 0;
    b.params =
        (4 * h * h + 2 * h * f + 3 * h + f) / t + 6 * h; /* split matrices; whole norms, out and fc2 biases */
    b.keep_none = (4 * eb + 2) * T * h + (4 * eb * T * h + 2 * eb * T * f + (2 * eb + 1) * T * a * s) / t;
    b.keep[MPMD_PLAN_REMAT_NONE] = b.keep_none;
    /* dots: the block's input, its products (qkv, scores, context, out, fc1, fc2) */
    b.keep[MPMD_PLAN_REMAT_DOTS] = 3 * eb * T * h + (4 * eb * T * h + eb * T * f + eb * T * a * s) / t;
    b.keep[MPMD_PLAN_REMAT_BLOCK] = eb * T * h;
    /* the products' inputs and their output gradients, which W reads */
    b.keep_w = 4 * eb * T * h + (4 * eb * T * h + 2 * eb * T * f) / t;
    return b;
}

/* Whether the vocabulary splits over tp (mpmd splits the embedding and the
 * head by vocabulary rows when tp divides it, else keeps them whole). */
static int vocab_split(const mpmd_transformer *m, int tp) { return tp > 1 && m->vocab % tp == 0; }

typedef struct stage_ctx {
    const mpmd_cluster *c;
    const mpmd_transformer *m;
    const mpmd_run_layout *l;
    double T;          /* tokens per microbatch */
    double flops_rate; /* FLOP/s of the products */
    double bytes_rate; /* bytes/s of the memory-bound kernels */
} stage_ctx;

static double tp_allreduce(const stage_ctx *x, double bytes) {
    int tp = x->l->tp;
    return plan_allreduce_time(x->c, tp, plan_group_per_node(x->c, tp, 1), bytes);
}

/* Stage s's costs: its blocks, and the embedding or the head it holds. */
static void stage_cost(const stage_ctx *x, int first, int layers, int embedding, int head,
                       mpmd_stage_cost *o) {
    const mpmd_transformer *m = x->m;
    const mpmd_run_layout *l = x->l;
    const double T = x->T, h = m->hidden, V = m->vocab, eb = plan_dtype_bytes(m->dtype);
    const block_cost b = block_of(m, l->tp, T);
    memset(o, 0, sizeof *o);
    o->first_layer = first, o->layers = layers, o->embedding = embedding, o->head = head;
    double ar = tp_allreduce(x, b.tp_bytes);
    double flops[4], bytes[4], tpt[4];
    for (int k = 0; k < 4; k++)
        flops[k] = layers * b.flops[k], bytes[k] = 0, tpt[k] = 0;
    bytes[MPMD_TASK_F] = layers * b.bytes_f;
    bytes[MPMD_TASK_A] = layers * 2 * b.bytes_f;
    tpt[MPMD_TASK_F] = tpt[MPMD_TASK_A] = layers * 2 * ar;
    if (l->remat == MPMD_PLAN_REMAT_BLOCK) { /* the whole forward again, in the backward */
        flops[MPMD_TASK_A] += layers * b.flops[MPMD_TASK_F];
        bytes[MPMD_TASK_A] += layers * b.bytes_f;
        tpt[MPMD_TASK_A] += layers * 2 * ar;
    } else if (l->remat == MPMD_PLAN_REMAT_DOTS) { /* the memory-bound kernels again */
        bytes[MPMD_TASK_A] += layers * b.bytes_f;
    }
    double params = layers * b.params, keep_f = layers * b.keep[l->remat], keep_w = layers * b.keep_w;
    double work = layers ? (l->remat == MPMD_PLAN_REMAT_BLOCK ? 2 : 1) * b.keep_none + 4 * b.params : 0;
    const int vs = vocab_split(m, l->tp);
    const double Vt = vs ? V / l->tp : V;
    if (embedding) { /* look up, add positions; the gradient scattered into the table */
        params += Vt * h + (double)m->seq * h;
        bytes[MPMD_TASK_F] += 3 * eb * T * h;
        bytes[MPMD_TASK_W] += 3 * 4 * T * h;
        if (vs) tpt[MPMD_TASK_F] += tp_allreduce(x, eb * T * h);
    }
    if (head) { /* final norm, logits, cross-entropy over the (split) vocabulary */
        params += 2 * h + (m->untied || !embedding ? Vt * h : 0); /* a tied head: the embedding's copy */
        flops[MPMD_TASK_F] += 2 * T * h * Vt;
        flops[MPMD_TASK_A] += 2 * T * h * Vt;
        flops[MPMD_TASK_W] += 2 * T * h * Vt;
        bytes[MPMD_TASK_F] += 2 * eb * T * h + 10 * T * Vt;
        bytes[MPMD_TASK_A] += 4 * eb * T * h + 6 * T * Vt;
        if (vs) {
            tpt[MPMD_TASK_F] += 2 * tp_allreduce(x, 4 * T); /* the softmax's max and sum over the split */
            tpt[MPMD_TASK_A] += tp_allreduce(x, eb * T * h);
        }
        keep_f += (eb + 4) * T * Vt; /* logits and f32 probabilities, outside any remat region */
        keep_w += eb * T * h + eb * T * Vt;
        double hw = (eb + 8) * T * Vt;
        if (hw > work) work = hw;
    }
    bytes[MPMD_TASK_W] += 12 * params; /* each microbatch's f32 gradients added into their sums */
    flops[MPMD_TASK_B] = flops[MPMD_TASK_A] + flops[MPMD_TASK_W];
    bytes[MPMD_TASK_B] = bytes[MPMD_TASK_A] + bytes[MPMD_TASK_W];
    tpt[MPMD_TASK_B] = tpt[MPMD_TASK_A];
    for (int k = 0; k < 4; k++) {
        o->time[k] = flops[k] / x->flops_rate + bytes[k] / x->bytes_rate + tpt[k];
        o->tp_time[k] = tpt[k];
    }
    o->params = params;
    o->keep_f = keep_f;
    o->keep_w = keep_w;
    o->work = work;
}

/* ---- one layout ---- */

/* Bytes a GPU holds all step per parameter it owns: the f32 parameter, its
 * f32 gradient sum, AdamW's two f32 moments, and the compute dtype's copy
 * the layers read (mpmd casts once a step); FSDP shards all of it over the
 * replicas, and per step holds the gathered copy whole too. */
static double static_per_param(const mpmd_transformer *m, const mpmd_run_layout *l) {
    double cast = m->dtype == MPMD_PLAN_F32 ? 0 : plan_dtype_bytes(m->dtype);
    if (l->fsdp == MPMD_PLAN_FSDP_OFF || l->dp < 2) return 16 + cast;
    double own = (16 + cast) / l->dp;
    return l->fsdp == MPMD_PLAN_FSDP_STEP ? own + (cast ? cast : 4) : own;
}

/* The layout's counts against the model and the GPUs; 1 (and out->why) when it cannot run. */
static int check_layout(const mpmd_transformer *m, const mpmd_run_layout *l, mpmd_run_prediction *out) {
    char *why = out->why;
    const size_t len = sizeof out->why;
    const int ffn = m->ffn ? m->ffn : 4 * m->hidden;
    const int64_t group = (int64_t)l->dp * (l->microbatch > 0 ? l->microbatch : 1);
    out->valid = 0;
    if (l->tp < 1 || l->pp < 1 || l->dp < 1 || l->stages < 1 || l->microbatch < 1)
        snprintf(why, len, "tp %d, pp %d, dp %d, %d stages, microbatch %d: every count must be at least 1",
                 l->tp, l->pp, l->dp, l->stages, l->microbatch);
    else if (m->heads % l->tp || ffn % l->tp)
        snprintf(why, len, "tp %d does not divide the %d heads or the MLP width %d", l->tp, m->heads, ffn);
    else if (l->stages % l->pp || l->stages > m->layers)
        snprintf(
            why, len,
            "%d stages on %d pipeline ranks for %d layers: the stages must be a multiple of the ranks and at "
            "most the layers",
            l->stages, l->pp, m->layers);
    else if (m->batch % group)
        snprintf(why, len, "dp %d x microbatch %d does not divide the batch (%lld)", l->dp, l->microbatch,
                 (long long)m->batch);
    else if ((l->pp == 1) != (l->schedule == MPMD_PLAN_LOOP))
        snprintf(why, len,
                 "pp %d with schedule %d: one pipeline rank runs the loop (-1), more run a schedule", l->pp,
                 l->schedule);
    else if (l->fsdp != MPMD_PLAN_FSDP_OFF && l->dp < 2)
        snprintf(why, len, "FSDP needs replicas to shard over (dp %d)", l->dp);
    else if (l->remat < MPMD_PLAN_REMAT_NONE || l->remat > MPMD_PLAN_REMAT_BLOCK || l->fsdp < 0 ||
             l->fsdp > 2)
        snprintf(why, len, "remat %d or fsdp %d is not one of the planner's", l->remat, l->fsdp);
    else if (m->batch / group > (1 << 24))
        snprintf(why, len, "%lld microbatches are more than a schedule takes", (long long)(m->batch / group));
    else {
        out->microbatches = (int)(m->batch / group);
        return 0;
    }
    return 1;
}

/* The rank of stage i (docs/schedules.md: DualPipeV's V, else i mod pp). */
static int stage_rank_of(const mpmd_run_layout *l, int i) {
    if (l->schedule == MPMD_SCHED_DUALPIPEV) return i < l->pp ? i : 2 * l->pp - 1 - i;
    return i % l->pp;
}

/* Every stage's costs and the link to the next; FSDP's per-task gathers
 * overlap the task before, so a task takes at least its gather. */
static void stages_of(const stage_ctx *x, int split, mpmd_stage_cost *st) {
    const mpmd_run_layout *l = x->l;
    const int S = l->stages, L = x->m->layers;
    const double per_param = static_per_param(x->m, l), eb = plan_dtype_bytes(x->m->dtype);
    for (int i = 0, first = 0; i < S; i++) {
        int layers = L / S + (i < L % S);
        stage_cost(x, first, layers, i == 0, i == S - 1, &st[i]);
        first += layers;
        st[i].rank = stage_rank_of(l, i);
        st[i].static_bytes = st[i].params * per_param;
        if (l->fsdp == MPMD_PLAN_FSDP_TASK) {
            double g = plan_allgather_time(x->c, l->dp, plan_group_per_node(x->c, l->dp, l->tp * l->pp),
                                           eb * st[i].params);
            for (int k = 0; k < 4; k++)
                if (k != MPMD_TASK_W && st[i].time[k] < g) st[i].time[k] = g;
            st[i].work += eb * st[i].params; /* the gathered copy, while a task runs */
        }
        if (split && st[i].keep_w > st[i].keep_f) st[i].keep_f = st[i].keep_w;
        if (!split) st[i].keep_w = 0;
    }
    for (int i = 0; i + 1 < S;
         i++) { /* GPU numbers: model rank innermost, then pipeline rank, then replica */
        int64_t a = (int64_t)st[i].rank * l->tp, b = (int64_t)st[i + 1].rank * l->tp;
        st[i].link = plan_p2p_time(x->c, plan_same_node(x->c, a, b), eb * x->T * x->m->hidden);
    }
}

/* After the loop, rank r: the data-parallel combine of its f32 gradients
 * (all-reduce, or FSDP's reduce-scatter), the tied embedding's gradient
 * summed between the first and the last stage's ranks, the optimizer. */
static void after_loop(const stage_ctx *x, const mpmd_stage_cost *st, int r, double *dp_comm, double *opt) {
    const mpmd_run_layout *l = x->l;
    double params = 0;
    for (int i = 0; i < l->stages; i++)
        if (st[i].rank == r) params += st[i].params;
    int per_node = plan_group_per_node(x->c, l->dp, l->tp * l->pp);
    double grads = 4 * params, t = 0;
    if (l->dp > 1)
        t = l->fsdp ? plan_allgather_time(x->c, l->dp, per_node, grads)
                    : plan_allreduce_time(x->c, l->dp, per_node, grads);
    const mpmd_stage_cost *e = &st[0], *h = &st[l->stages - 1];
    if (!x->m->untied && e->rank != h->rank && (r == e->rank || r == h->rank)) {
        double table = 4.0 * (vocab_split(x->m, l->tp) ? x->m->vocab / l->tp : x->m->vocab) * x->m->hidden;
        int same = plan_same_node(x->c, (int64_t)e->rank * l->tp, (int64_t)h->rank * l->tp);
        t += plan_allreduce_time(x->c, 2, same ? 2 : 1, l->fsdp && l->dp > 1 ? table / l->dp : table);
    }
    *dp_comm = t;
    /* AdamW reads the parameter, gradient and moments and writes three of them and the cast copy */
    *opt = 30 * params / (l->fsdp && l->dp > 1 ? l->dp : 1) / x->bytes_rate;
}

/* Before the loop: FSDP's per-step gather of the compute-dtype copies (the
 * slowest rank's). */
static double before_loop(const stage_ctx *x, const mpmd_stage_cost *st) {
    const mpmd_run_layout *l = x->l;
    double before = 0;
    if (l->fsdp == MPMD_PLAN_FSDP_STEP)
        for (int r = 0; r < l->pp; r++) {
            double params = 0;
            for (int i = 0; i < l->stages; i++)
                if (st[i].rank == r) params += st[i].params;
            double g = plan_allgather_time(x->c, l->dp, plan_group_per_node(x->c, l->dp, l->tp * l->pp),
                                           plan_dtype_bytes(x->m->dtype) * params);
            if (g > before) before = g;
        }
    return before;
}

/* A step no schedule beats: before the loop, then the busiest rank's own
 * tasks back to back, then its work after the loop. */
static double lower_bound(const stage_ctx *x, const mpmd_stage_cost *st, int split, int n) {
    const mpmd_run_layout *l = x->l;
    double worst = 0;
    for (int r = 0; r < l->pp; r++) {
        double busy = 0, dp_comm, opt;
        for (int i = 0; i < l->stages; i++)
            if (st[i].rank == r)
                busy +=
                    n * (st[i].time[MPMD_TASK_F] + (split ? st[i].time[MPMD_TASK_A] + st[i].time[MPMD_TASK_W]
                                                          : st[i].time[MPMD_TASK_B]));
        after_loop(x, st, r, &dp_comm, &opt);
        if (busy + dp_comm + opt > worst) worst = busy + dp_comm + opt;
    }
    return before_loop(x, st) + worst;
}

/* Bytes rank 0 needs at least: its stages' own bytes, its largest task's
 * working set, and min(pp, n) forwards kept: every built-in schedule runs
 * that many forwards on rank 0 before its first backward can start (the
 * loop, one). */
static double memory_bound(const mpmd_run_layout *l, const mpmd_stage_cost *st, int n) {
    double held = 0, work = 0, keep = INFINITY;
    for (int i = 0; i < l->stages; i++) {
        if (st[i].rank != 0) continue;
        held += st[i].static_bytes;
        if (st[i].work > work) work = st[i].work;
        if (st[i].keep_f < keep) keep = st[i].keep_f;
    }
    return held + work + (l->pp < n ? l->pp : n) * (isfinite(keep) ? keep : 0);
}

/* Simulate the schedule with the stages' own times, links and bytes; fill
 * the prediction's time and memory. */
static mpmd_status simulate(const stage_ctx *x, const mpmd_schedule *s, const mpmd_stage_cost *st,
                            double limit, mpmd_run_prediction *out, double *rank_peak, mpmd_error *err) {
    const mpmd_run_layout *l = x->l;
    const int S = l->stages, D = l->pp;
    double *lat = malloc((size_t)S * 4 * sizeof *lat), *link = malloc((size_t)S * sizeof *link),
           *mem = malloc((size_t)S * 3 * sizeof *mem), *end = calloc((size_t)D, sizeof *end),
           *work = calloc((size_t)D, sizeof *work), *tp = calloc((size_t)D, sizeof *tp);
    mpmd_status rc = MPMD_OK;
    mpmd_sim *sim = NULL;
    if (!lat || !link || !mem || !end || !work || !tp) {
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory for the planner's simulation");
        goto done;
    }
    for (int i = 0; i < S; i++) {
        const int split = s->split_backward;
        for (int k = 0; k < 4; k++)
            lat[i * 4 + k] = st[i].time[k];
        link[i] = st[i].link;
        mem[i * 3] = st[i].keep_f, mem[i * 3 + 1] = st[i].keep_w, mem[i * 3 + 2] = st[i].static_bytes;
        if (st[i].work > work[st[i].rank]) work[st[i].rank] = st[i].work;
        tp[st[i].rank] += out->microbatches *
                          (st[i].tp_time[MPMD_TASK_F] + st[i].tp_time[split ? MPMD_TASK_A : MPMD_TASK_B]);
    }
    mpmd_cost_model cost = MPMD_COST_DEFAULTS;
    cost.stage_latency = lat, cost.link_time = link, cost.stage_memory = mem;
    if ((rc = mpmd_schedule_simulate(s, &cost, &sim, err, NULL))) goto done;
    for (int64_t i = 0; i < sim->num_ops; i++)
        if (sim->ops[i].end > end[sim->ops[i].rank]) end[sim->ops[i].rank] = sim->ops[i].end;
    const double before = before_loop(x, st);
    out->step = -1;
    out->peak = -1;
    for (int r = 0; r < D; r++) {
        double dp_comm, opt;
        after_loop(x, st, r, &dp_comm, &opt);
        double t = before + end[r] + dp_comm + opt;
        if (t > out->step) {
            out->step = t;
            out->before = before, out->dp_comm = dp_comm, out->optimizer = opt;
            out->tp_comm = tp[r];
            out->compute = sim->busy[r] - tp[r];
            out->idle = end[r] - sim->busy[r];
            out->step_rank = r;
        }
        double peak = sim->peak_bytes[r] + work[r];
        if (rank_peak) rank_peak[r] = peak;
        if (peak > out->peak) out->peak = peak, out->peak_rank = r;
    }
    out->fits = out->peak <= limit;
done:
    mpmd_sim_free(sim);
    free(lat), free(link), free(mem), free(end), free(work), free(tp);
    return rc;
}

static mpmd_status check_cluster(const mpmd_cluster *c, mpmd_error *err) {
    if (!c) return mpmd_error_set(err, MPMD_ERR_INVALID, "no cluster (NULL)");
    const double v[] = {c->memory, c->memory_bandwidth, c->node_bandwidth, c->net_bandwidth};
    const char *const names[] = {"memory", "memory_bandwidth", "node_bandwidth", "net_bandwidth"};
    if (c->gpus_per_node < 1)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "cluster %s: gpus_per_node must be at least 1, got %d",
                              c->name, c->gpus_per_node);
    for (int i = 0; i < 4; i++)
        if (!(v[i] > 0) || !isfinite(v[i]))
            return mpmd_error_set(err, MPMD_ERR_INVALID, "cluster %s: %s must be positive and finite, got %g",
                                  c->name, names[i], v[i]);
    if (!(c->node_latency >= 0) || !(c->net_latency >= 0) || !isfinite(c->node_latency + c->net_latency))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "cluster %s: the latencies must be finite and >= 0",
                              c->name);
    return MPMD_OK;
}

/* The schedule of a valid layout (the loop: Std1F1B on one stage, F B F B ...). */
static mpmd_status schedule_of(const mpmd_run_layout *l, int n, mpmd_schedule **s, mpmd_error *err) {
    if (l->schedule == MPMD_PLAN_LOOP) return mpmd_schedule_std1f1b(1, n, s, err);
    if (l->schedule < 0 || l->schedule >= MPMD_SCHED_USER)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "schedule %d is not a built-in kind", l->schedule);
    return mpmd_schedule_new((mpmd_schedule_kind)l->schedule, l->stages, l->pp, n, 0, s, err);
}

/* The schedule of layout l from the cache, built there when it holds
 * another (kind, stages, ranks, microbatches); NULL and out->why when this
 * kind cannot take these counts. */
static const mpmd_schedule *cached_schedule(plan_schedule_cache *cache, const mpmd_run_layout *l, int n,
                                            mpmd_run_prediction *out, mpmd_status *rc, mpmd_error *err) {
    const int key[4] = {l->schedule, l->stages, l->pp, n};
    if (!cache->valid || memcmp(key, cache->key, sizeof key)) {
        mpmd_schedule_free(cache->s);
        cache->s = NULL;
        mpmd_error serr;
        if (schedule_of(l, n, &cache->s, &serr)) {
            cache->s = NULL;
            if (serr.code == MPMD_ERR_NOMEM) *rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s", serr.msg);
            snprintf(cache->why, sizeof cache->why, "%.*s", (int)sizeof cache->why - 1, serr.msg);
        }
        memcpy(cache->key, key, sizeof key);
        cache->valid = 1;
    }
    if (!cache->s) snprintf(out->why, sizeof out->why, "%s", cache->why);
    return cache->s;
}

void plan_schedule_cache_free(plan_schedule_cache *cache) {
    mpmd_schedule_free(cache->s);
    memset(cache, 0, sizeof *cache);
}

mpmd_status mpmd_planner_predict(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_run_layout *l,
                                 double memory_limit, mpmd_run_prediction *out, double *rank_peak,
                                 mpmd_stage_cost *stages, mpmd_error *err) {
    plan_schedule_cache cache = {0};
    mpmd_status rc = plan_predict(c, m, l, memory_limit, out, rank_peak, stages, &cache, 0, err);
    plan_schedule_cache_free(&cache);
    return rc;
}

mpmd_status plan_predict(const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_run_layout *l,
                         double memory_limit, mpmd_run_prediction *out, double *rank_peak,
                         mpmd_stage_cost *stages, plan_schedule_cache *cache, int bound_only,
                         mpmd_error *err) {
    mpmd_status rc = MPMD_OK;
    if (!out || !l)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_planner_predict: no layout or no place for the prediction");
    if ((rc = check_cluster(c, err)) || (rc = mpmd_transformer_check(m, err))) return rc;
    memset(out, 0, sizeof *out);
    out->layout = *l;
    out->step = NAN;
    out->peak_rank = -1;
    if (check_layout(m, l, out)) return MPMD_OK;
    const double peak_flops = c->peak_flops[m->dtype];
    if (!(peak_flops > 0))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "cluster %s has no peak FLOP/s for the model's dtype",
                              c->name);
    const mpmd_schedule *s = NULL;
    if (!bound_only && !(s = cached_schedule(cache, l, out->microbatches, out, &rc, err))) return rc;
    const int split = l->schedule == MPMD_SCHED_ZEROBUBBLE || l->schedule == MPMD_SCHED_DUALPIPEV;
    mpmd_stage_cost *st = stages ? stages : malloc((size_t)l->stages * sizeof *st);
    if (!st) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory for the planner's stages");
    const double limit = memory_limit > 0 ? memory_limit : c->memory;
    stage_ctx x = {c,
                   m,
                   l,
                   (double)l->microbatch * m->seq,
                   peak_flops * MPMD_PLAN_GEMM_EFFICIENCY,
                   c->memory_bandwidth * MPMD_PLAN_MEMORY_EFFICIENCY};
    stages_of(&x, split, st);
    out->valid = 1;
    /* what no schedule changes: a rank's stages' own bytes; past the limit, not simulated */
    double floor_peak = 0;
    for (int r = 0; r < l->pp; r++) {
        double b = 0;
        for (int i = 0; i < l->stages; i++)
            if (st[i].rank == r) b += st[i].static_bytes;
        if (rank_peak) rank_peak[r] = b;
        if (b > floor_peak) floor_peak = b, out->peak_rank = r;
    }
    if (floor_peak > limit) {
        out->peak = floor_peak;
    } else if (bound_only) {
        out->peak = memory_bound(l, st, out->microbatches);
        out->step = lower_bound(&x, st, split, out->microbatches);
        out->bound = out->peak <= limit;
    } else {
        rc = simulate(&x, s, st, limit, out, rank_peak, err);
        out->simulated = !rc;
    }
    if (!rc && out->simulated) {
        const double flops = mpmd_transformer_step_flops(m), gpus = (double)l->tp * l->pp * l->dp;
        double recompute = 0;
        if (l->remat == MPMD_PLAN_REMAT_BLOCK) { /* every block's forward products once more */
            block_cost b = block_of(m, 1, (double)m->seq);
            recompute = (double)m->layers * b.flops[MPMD_TASK_F] * (double)m->batch;
        }
        out->tokens_per_s = (double)m->batch * m->seq / out->step;
        out->mfu = flops / (out->step * gpus * peak_flops);
        out->hw_flops_per_gpu = (flops + recompute) / (out->step * gpus);
    }
    if (!stages) free(st);
    return rc;
}
