/* Lowering: one linear program per rank, its check by simulation, and the
 * lists the interpreter follows inside a task (loop reductions, frees).
 *
 * A rank's program is: its before-loop ops; then, entry by entry of its
 * schedule list, for each task: receive the body values it reads from
 * other ranks, run the task (its cluster's ops for one microbatch, folding
 * results into the loop reductions as they appear), send what other ranks
 * read, and free what is dead; then the loop reductions' results go to the
 * ranks that need them, and the after-loop ops run. With FSDP a task that
 * reads sharded parameters is preceded by their gather (or, gathered per
 * step, the rank's first task by the gather of everything its tasks read),
 * and a sharded loop result is reduce-scattered instead of all-reduced.
 *
 * A value produced and used inside one task is freed by the runtime right
 * after its last use in the task (the plan's free lists, made here at the
 * end); every other body value has an explicit FREE after its last use on
 * the rank, or dies with the send that is its last use here (`moved`).
 * Where each value's bytes are, and for how long, is the memory plan's
 * (memory.c).
 */
#include "compiler/compiler.h"

#include <stdlib.h>
#include <string.h>

void mpmd_program_push(mpmd_program *p, mpmd_instr in, int *oom) {
    if (*oom) return;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        mpmd_instr *ni = realloc(p->ins, (size_t)cap * sizeof *ni);
        if (!ni) {
            *oom = 1;
            return;
        }
        p->ins = ni, p->cap = cap;
    }
    p->ins[p->n++] = in;
}

static mpmd_instr mk(int op, int node, int mb, int peer) {
    mpmd_instr in;
    memset(&in, 0, sizeof in);
    in.op = (int8_t)op;
    in.node = node;
    in.mb = mb;
    in.peer = peer;
    return in;
}

/* Distinct values of other tasks (not replicated) that cluster k reads. */
typedef struct {
    int32_t *ext_in;
    int n_ext_in;
} cluster_io;

/* What lowering every rank shares. */
typedef struct {
    mpmd_plan *pl;
    int nn, n, W;
    uint64_t *sendto; /* [nn][W] the ranks that read each body value */
    int32_t *k_of;    /* [nn] the cluster (stage x kind) of a body value, -1 */
    cluster_io *io;   /* [S x kinds] */
    int32_t *mark;    /* [nn] scratch */
    int32_t *last;    /* [nn x n] the last instruction touching (value, microbatch), -1 */
    int32_t *touched; /* the keys of last[] set for this rank */
    size_t touched_cap, n_touched;
} lowering;

/* Who reads each body value on another rank; each cluster's inputs from
 * other tasks; which values other tasks read (pl->cross). -1: out of memory. */
static int find_readers(lowering *lw) {
    mpmd_plan *pl = lw->pl;
    const mpmd_graph *g = pl->g;
    const int nn = lw->nn, W = lw->W;
    for (int i = 0; i < nn; i++)
        lw->k_of[i] = -1, lw->mark[i] = -1;
    for (int k = 0; k < pl->num_stages * MPMD_TASK_KINDS; k++)
        for (int c = 0; c < pl->cl.count[k]; c++)
            lw->k_of[pl->cl.nodes[k][c]] = k;
    for (int i = 0; i < nn; i++) {
        if (lw->k_of[i] < 0) continue;
        const mpmd_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            int u = nd->in[j];
            if (lw->k_of[u] < 0 || mpmd_replicated(&g->nodes[u]) || pl->home[u] == pl->home[i]) continue;
            lw->sendto[(size_t)u * W + (pl->home[i] >> 6)] |= (uint64_t)1 << (pl->home[i] & 63);
        }
    }
    for (int k = 0; k < pl->num_stages * MPMD_TASK_KINDS; k++) {
        int cnt = 0, bound = 1;
        for (int c = 0; c < pl->cl.count[k]; c++)
            bound += g->nodes[pl->cl.nodes[k][c]].n_in;
        lw->io[k].ext_in = malloc((size_t)bound * sizeof(int32_t));
        if (!lw->io[k].ext_in) return -1;
        for (int c = 0; c < pl->cl.count[k]; c++) {
            const mpmd_node *nd = &g->nodes[pl->cl.nodes[k][c]];
            for (int j = 0; j < nd->n_in; j++) {
                int u = nd->in[j];
                if (lw->k_of[u] < 0 || lw->k_of[u] == k || mpmd_replicated(&g->nodes[u])) continue;
                pl->cross[u] = 1;
                if (lw->mark[u] == k) continue;
                lw->mark[u] = k;
                lw->io[k].ext_in[cnt++] = u;
            }
        }
        lw->io[k].n_ext_in = cnt;
    }
    return 0;
}

/* One schedule entry's tasks on rank r: the receives of what each reads
 * from other ranks, its FSDP gather, the task, the sends of what other
 * ranks read. `have` marks the (value, microbatch) pairs already here. */
static mpmd_status push_tasks(const lowering *lw, int r, int e, unsigned char *have, mpmd_program *raw,
                              int *oom, mpmd_error *err) {
    const mpmd_plan *pl = lw->pl;
    const mpmd_graph *g = pl->g;
    const mpmd_schedule *s = pl->sched;
    const int n = lw->n;
    int nt = 1;
    mpmd_task one;
    memset(&one, 0, sizeof one);
    one.kind = MPMD_TASK_F;
    one.microbatch = e;
    const mpmd_task *t = s ? mpmd_schedule_entry(s, r, e, &nt) : &one;
    for (int q = 0; q < nt; q++) {
        int k = t[q].stage * MPMD_TASK_KINDS + t[q].kind, mb = t[q].microbatch;
        for (int c = 0; c < lw->io[k].n_ext_in; c++) {
            int u = lw->io[k].ext_in[c];
            if (have[(size_t)u * n + mb]) continue;
            if (pl->home[u] == r) {
                char tb[MPMD_TASK_STR_MAX];
                mpmd_task_str(&t[q], tb, sizeof tb);
                return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                                      "%s: rank %d runs %s before the task that computes "
                                      "its input %%%d (%s of stage %d, microbatch %d)",
                                      s ? s->name : "the loop", r, tb, u, g->nodes[u].op->name,
                                      pl->cl.stage[u], mb);
            }
            mpmd_program_push(raw, mk(MPMD_I_RECV, u, mb, pl->home[u]), oom);
            have[(size_t)u * n + mb] = 1;
        }
        mpmd_instr ti = mk(MPMD_I_TASK, -1, mb, -1);
        ti.kind = (int8_t)t[q].kind;
        ti.stage = t[q].stage;
        ti.entry = e;
        if (pl->fsdp == MPMD_FSDP_PER_TASK && pl->gather && pl->gather_n[k]) {
            mpmd_instr gi = ti; /* FSDP: its sharded values, whole, just before it */
            gi.op = MPMD_I_GATHER;
            gi.list = k;
            mpmd_program_push(raw, gi, oom);
        }
        mpmd_program_push(raw, ti, oom);
        for (int c = 0; c < pl->cl.count[k]; c++) {
            int i = pl->cl.nodes[k][c];
            have[(size_t)i * n + mb] = 1;
            for (int dst = 0; dst < pl->num_ranks; dst++)
                if ((lw->sendto[(size_t)i * lw->W + (dst >> 6)] >> (dst & 63)) & 1u)
                    mpmd_program_push(raw, mk(MPMD_I_SEND, i, mb, dst), oom);
        }
    }
    return MPMD_OK;
}

/* Rank r's program without its frees: before-loop ops, the tasks of its
 * schedule list, the loop results combined and moved, after-loop ops. */
static mpmd_status raw_program(const lowering *lw, int r, mpmd_program *raw, int *oom, mpmd_error *err) {
    const mpmd_plan *pl = lw->pl;
    const mpmd_graph *g = pl->g;
    const int nn = lw->nn, D = pl->num_ranks;
    for (int i = 0; i < nn; i++)
        if (g->nodes[i].region == MPMD_REGION_PRE && pl->live[i] && mpmd_runs_on(pl, i, r) &&
            !(g->nodes[i].op->flags & MPMD_OPF_LEAF))
            mpmd_program_push(raw, mk(MPMD_I_RUN_PRE, i, -1, -1), oom);
    /* FSDP gathered per step: every value the rank's tasks read, once, before the first */
    const int step_list = pl->num_stages * MPMD_TASK_KINDS + r;
    if (pl->fsdp == MPMD_FSDP_PER_STEP && pl->gather && pl->gather_n[step_list]) {
        mpmd_instr gi = mk(MPMD_I_GATHER, -1, -1, -1);
        gi.stage = -1, gi.list = step_list;
        mpmd_program_push(raw, gi, oom);
    }
    /* the schedule's list; without one (the unpipelined loop), the one
     * task of stage 0 for each microbatch in order */
    unsigned char *have = calloc((size_t)nn * lw->n + 1, 1);
    if (!have) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory lowering the per-rank programs");
    const int entries = pl->sched ? pl->sched->ranks[r].num_entries : lw->n;
    mpmd_status rc = MPMD_OK;
    for (int e = 0; e < entries && rc == MPMD_OK; e++)
        rc = push_tasks(lw, r, e, have, raw, oom, err);
    free(have);
    if (rc) return rc;
    /* loop results: combined across the data-parallel replicas, then
     * sent where needed; receive what this rank needs */
    for (int i = 0; i < nn && pl->replicas > 1; i++)
        if (g->nodes[i].op == &mpmd_op_loop_reduce && pl->live[i] && pl->home[i] == r &&
            g->nodes[i].ia[0] != MPMD_REDUCE_CONCAT)
            mpmd_program_push(
                raw, mk(mpmd_sharded(&pl->mesh, i) ? MPMD_I_REDUCE_SCATTER : MPMD_I_ALLREDUCE, i, -1, -1),
                oom);
    for (int i = 0; i < nn; i++) {
        if (g->nodes[i].op != &mpmd_op_loop_reduce || !pl->live[i] || pl->home[i] != r) continue;
        for (int dst = 0; dst < D; dst++)
            if (dst != r && mpmd_runs_on(pl, i, dst))
                mpmd_program_push(raw, mk(MPMD_I_SEND, i, -1, dst), oom);
    }
    for (int i = 0; i < nn; i++) {
        if (g->nodes[i].op != &mpmd_op_loop_reduce || !pl->live[i] || pl->home[i] == r ||
            !mpmd_runs_on(pl, i, r))
            continue;
        mpmd_program_push(raw, mk(MPMD_I_RECV, i, -1, pl->home[i]), oom);
    }
    for (int i = 0; i < nn; i++)
        if (g->nodes[i].region == MPMD_REGION_POST && pl->live[i] && mpmd_runs_on(pl, i, r) &&
            g->nodes[i].op != &mpmd_op_loop_reduce && !(g->nodes[i].op->flags & MPMD_OPF_LEAF))
            mpmd_program_push(raw, mk(MPMD_I_RUN_POST, i, -1, -1), oom);
    return MPMD_OK;
}

/* Note that instruction x touches (v, m). -1: out of memory. */
static int touch(lowering *lw, int v, int m, int x) {
    size_t key = (size_t)v * lw->n + (size_t)m;
    if (lw->last[key] < 0) {
        if (lw->n_touched == lw->touched_cap) {
            int32_t *nt = realloc(lw->touched, 2 * lw->touched_cap * sizeof *nt);
            if (!nt) return -1;
            lw->touched = nt, lw->touched_cap *= 2;
        }
        lw->touched[lw->n_touched++] = (int32_t)key;
    }
    lw->last[key] = x;
    return 0;
}

/* Rank r's program p: the raw one with a FREE after each body value's last
 * use on the rank (values used only inside their task are the runtime's
 * business), or the value dies with the send that is its last use here.
 * -1: out of memory. */
static int add_frees(lowering *lw, const mpmd_program *raw, mpmd_program *p) {
    const mpmd_plan *pl = lw->pl;
    const int n = lw->n;
    lw->n_touched = 0;
    for (size_t kk = 0; kk < (size_t)lw->nn * n; kk++)
        lw->last[kk] = -1;
    int bad = 0;
    for (int x = 0; x < raw->n && !bad; x++) {
        const mpmd_instr *in = &raw->ins[x];
        if ((in->op == MPMD_I_RECV || in->op == MPMD_I_SEND) && in->mb >= 0)
            bad |= touch(lw, in->node, in->mb, x);
        if (in->op != MPMD_I_TASK) continue;
        int k = in->stage * MPMD_TASK_KINDS + in->kind;
        for (int c = 0; c < lw->io[k].n_ext_in; c++)
            bad |= touch(lw, lw->io[k].ext_in[c], in->mb, x);
        for (int c = 0; c < pl->cl.count[k]; c++) {
            int i = pl->cl.nodes[k][c];
            if (pl->cross[i])
                bad |= touch(lw, i, in->mb, x); /* read by other tasks, on this rank or another */
        }
    }
    /* bucket the frees by instruction */
    int32_t *head = malloc((size_t)(raw->n + 1) * sizeof *head),
            *nxt = malloc((lw->n_touched + 1) * sizeof *nxt);
    if (bad || !head || !nxt) {
        free(head), free(nxt);
        return -1;
    }
    for (int x = 0; x < raw->n; x++)
        head[x] = -1;
    for (size_t t = 0; t < lw->n_touched; t++) {
        int x = lw->last[lw->touched[t]];
        nxt[t] = head[x], head[x] = (int32_t)t;
    }
    int oom = 0;
    for (int x = 0; x < raw->n; x++) {
        mpmd_instr in = raw->ins[x];
        int moved = 0;
        if (in.op == MPMD_I_SEND && in.mb >= 0 && lw->last[(size_t)in.node * n + in.mb] == x) {
            in.moved = 1; /* its last use here */
            moved = 1;
        }
        mpmd_program_push(p, in, &oom);
        for (int t = head[x]; t >= 0; t = nxt[t]) {
            int v = lw->touched[t] / n, m = lw->touched[t] % n;
            if (moved && v == in.node && m == in.mb) continue;
            if (mpmd_replicated(&pl->g->nodes[v])) continue;
            mpmd_program_push(p, mk(MPMD_I_FREE, v, m, -1), &oom);
        }
    }
    free(head), free(nxt);
    return oom ? -1 : 0;
}

mpmd_status mpmd_lower(mpmd_plan *pl, mpmd_error *err) {
    const int nn = pl->g->n_nodes, D = pl->num_ranks, S = pl->num_stages, n = pl->num_micro;
    lowering lw = {pl, nn, n, pl->words, NULL, NULL, NULL, NULL, NULL, NULL, 1024, 0};
    mpmd_status rc = MPMD_OK;
    lw.sendto = calloc((size_t)nn * lw.W + 1, sizeof *lw.sendto);
    lw.k_of = malloc((size_t)(nn + 1) * sizeof *lw.k_of);
    lw.io = calloc((size_t)S * MPMD_TASK_KINDS, sizeof *lw.io);
    lw.mark = malloc((size_t)(nn + 1) * sizeof *lw.mark);
    lw.last = malloc(((size_t)nn * n + 1) * sizeof *lw.last);
    lw.touched = malloc(lw.touched_cap * sizeof *lw.touched);
    pl->cross = calloc((size_t)nn + 1, 1); /* read by another task */
    pl->prog = calloc((size_t)D, sizeof *pl->prog);
    int oom = !lw.sendto || !lw.k_of || !lw.io || !lw.mark || !lw.last || !lw.touched || !pl->cross ||
              !pl->prog || find_readers(&lw);
    for (int r = 0; r < D && !oom && rc == MPMD_OK; r++) {
        mpmd_program raw = {r, 0, 0, NULL, 0, 0};
        pl->prog[r].rank = r;
        rc = raw_program(&lw, r, &raw, &oom, err);
        if (rc == MPMD_OK && !oom) oom = add_frees(&lw, &raw, &pl->prog[r]);
        free(raw.ins);
    }
    if (oom && rc == MPMD_OK)
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory lowering the per-rank programs");
    if (lw.io)
        for (int k = 0; k < S * MPMD_TASK_KINDS; k++)
            free(lw.io[k].ext_in);
    free(lw.io), free(lw.sendto), free(lw.k_of), free(lw.mark), free(lw.last), free(lw.touched);
    return rc;
}

/* ---- the check: run the programs' communication on paper ---------------- */

/* In-flight messages keyed by (value, microbatch, destination), in an
 * open-addressing table sized for every send of the programs; each carries
 * its send's instruction and the sender's vector clock at the send. */
typedef struct {
    int32_t node, mb, dst, src, count; /* count 0 and node -1: empty slot */
    int32_t sx;                        /* the send's instruction on src */
    int32_t vc;                        /* offset of its vector clock in the clock pool */
} msg_slot;

static msg_slot *msg_find(msg_slot *t, size_t cap, int node, int mb, int dst) {
    uint64_t h = ((uint64_t)(uint32_t)node * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uint32_t)(mb + 1) << 20) ^
                 ((uint64_t)(uint32_t)dst * 0xc2b2ae3d27d4eb4full);
    size_t i = (size_t)(h ^ (h >> 29)) & (cap - 1);
    while (t[i].node != -1 && !(t[i].node == node && t[i].mb == mb && t[i].dst == dst))
        i = (i + 1) & (cap - 1);
    return &t[i];
}

/* A send of rank r whose receiver has not yet been seen to have it. */
typedef struct {
    int32_t x;    /* the send's instruction */
    int32_t peer; /* its receiver */
} unacked;

/* The ranks stopped at their program counters pc, each at a receive. */
static mpmd_status deadlock_error(const mpmd_plan *pl, const int32_t *pc, mpmd_error *err) {
    char msg[MPMD_ERROR_MSG_MAX];
    size_t k = (size_t)snprintf(msg, sizeof msg, "the per-rank programs deadlock:");
    for (int r = 0; r < pl->num_ranks && k < sizeof msg; r++) {
        const mpmd_program *p = &pl->prog[r];
        if (pc[r] >= p->n) continue;
        const mpmd_instr *in = &p->ins[pc[r]];
        k +=
            (size_t)snprintf(msg + k, sizeof msg - k, " rank %d waits for %%%d (microbatch %d) from rank %d;",
                             r, in->node, in->mb, in->peer);
    }
    return mpmd_error_set(err, MPMD_ERR_SCHEDULE, "%s", msg);
}

/* Vector clocks: vc[r * D + q] is how many instructions of rank q rank r
 * knows to have finished. A receive learns what its sender knew at the
 * send. After each receive, the sends of the rank whose receivers it now
 * knows to have finished their receive may have their buffers reused. */
mpmd_status mpmd_program_check(mpmd_plan *pl, mpmd_error *err) {
    const int D = pl->num_ranks;
    size_t sends = 0, cap = 64;
    for (int r = 0; r < D; r++)
        for (int x = 0; x < pl->prog[r].n; x++) {
            mpmd_instr *in = &pl->prog[r].ins[x];
            sends += in->op == MPMD_I_SEND;
            if (in->op == MPMD_I_SEND) in->reuse = pl->prog[r].n; /* the end, unless learnt sooner */
        }
    while (cap < 2 * sends + 2)
        cap *= 2;
    int32_t *pc = calloc((size_t)D + 1, sizeof *pc);
    msg_slot *t = malloc(cap * sizeof *t);
    int32_t *vc = calloc((size_t)D * D + 1, sizeof *vc);
    int32_t *pool = malloc(((size_t)sends * D + 1) * sizeof *pool);
    unacked **ua = calloc((size_t)D + 1, sizeof *ua);
    int *nua = calloc((size_t)D + 1, sizeof *nua);
    int32_t **yrecv = calloc((size_t)D + 1, sizeof *yrecv); /* [r][x]: a send's receive there, -1 */
    mpmd_status rc = MPMD_OK;
    if (!pc || !t || !vc || !pool || !ua || !nua || !yrecv) goto nomem;
    for (int r = 0; r < D; r++) {
        int ns = 0;
        for (int x = 0; x < pl->prog[r].n; x++)
            ns += pl->prog[r].ins[x].op == MPMD_I_SEND;
        if (!(ua[r] = malloc((size_t)(ns + 1) * sizeof **ua))) goto nomem;
        if (!(yrecv[r] = malloc((size_t)(pl->prog[r].n + 1) * sizeof **yrecv))) goto nomem;
        for (int x = 0; x < pl->prog[r].n; x++)
            yrecv[r][x] = -1;
    }
    for (size_t i = 0; i < cap; i++)
        t[i].node = -1, t[i].count = 0;
    size_t outstanding = 0, used = 0;
    for (;;) {
        int progressed = 0, done = 1;
        for (int r = 0; r < D; r++) {
            mpmd_program *p = &pl->prog[r];
            int32_t *my = vc + (size_t)r * D;
            while (pc[r] < p->n) {
                const int x = pc[r];
                mpmd_instr *in = &p->ins[x];
                if (in->op == MPMD_I_SEND) {
                    msg_slot *m = msg_find(t, cap, in->node, in->mb, in->peer);
                    if (m->node == -1) m->node = in->node, m->mb = in->mb, m->dst = in->peer;
                    m->src = r;
                    m->count++;
                    m->sx = x;
                    m->vc = (int32_t)used;
                    memcpy(pool + used, my, (size_t)D * sizeof *pool);
                    pool[used + (size_t)r] = x + 1;
                    used += (size_t)D;
                    outstanding++;
                    ua[r][nua[r]++] = (unacked){x, in->peer};
                } else if (in->op == MPMD_I_RECV) {
                    msg_slot *m = msg_find(t, cap, in->node, in->mb, r);
                    if (m->node == -1 || m->count == 0) break; /* blocked */
                    if (m->src != in->peer) {
                        rc = mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                                            "rank %d expects %%%d (microbatch %d) from rank %d, "
                                            "but rank %d sent it",
                                            r, in->node, in->mb, in->peer, m->src);
                        goto out;
                    }
                    m->count--;
                    outstanding--;
                    int learnt = 0;
                    for (int q = 0; q < D; q++)
                        if (pool[m->vc + q] > my[q]) my[q] = pool[m->vc + q], learnt = 1;
                    /* the sender learns of this receive later, from what it receives */
                    yrecv[m->src][m->sx] = x;
                    int k = 0;
                    for (int j = 0; learnt && j < nua[r]; j++) {
                        unacked a = ua[r][j];
                        int y = yrecv[r][a.x];
                        if (y >= 0 && my[a.peer] > y)
                            p->ins[a.x].reuse = x;
                        else
                            ua[r][k++] = a;
                    }
                    if (learnt) nua[r] = k;
                }
                my[r] = x + 1;
                pc[r]++;
                progressed = 1;
            }
            if (pc[r] < p->n) done = 0;
        }
        if (done) break;
        if (!progressed) {
            rc = deadlock_error(pl, pc, err);
            goto out;
        }
    }
    if (outstanding) {
        for (size_t i = 0; i < cap; i++)
            if (t[i].node != -1 && t[i].count > 0) {
                rc = mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                                    "rank %d sends %%%d (microbatch %d) to rank %d, which never "
                                    "receives it",
                                    t[i].src, t[i].node, t[i].mb, t[i].dst);
                break;
            }
    }
    goto out;
nomem:
    rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory checking the programs");
out:
    for (int r = 0; r < D; r++) {
        if (ua) free(ua[r]);
        if (yrecv) free(yrecv[r]);
    }
    free(pc), free(t), free(vc), free(pool), free(ua), free(nua), free(yrecv);
    return rc;
}

/* The loop reductions reading each body value, as lists (reduce_head[x] ->
 * reduce_next[...]), in creation order; and inside each task, a value no
 * other task reads dies after its last reader in the task (or right away
 * when nothing reads it): free_head[k][c] lists the values of task k that
 * die after its op at position c. */
mpmd_status mpmd_lower_task_lists(mpmd_plan *pl, mpmd_error *err) {
    const mpmd_graph *g = pl->g;
    const int nn = g->n_nodes;
    pl->reduce_head = malloc((size_t)(nn + 1) * sizeof *pl->reduce_head);
    pl->reduce_next = malloc((size_t)(nn + 1) * sizeof *pl->reduce_next);
    pl->free_next = malloc((size_t)(nn + 1) * sizeof *pl->free_next);
    pl->free_head = calloc((size_t)pl->num_stages * MPMD_TASK_KINDS, sizeof *pl->free_head);
    if (!pl->reduce_head || !pl->reduce_next || !pl->free_next || !pl->free_head) goto nomem;
    for (int i = 0; i < nn; i++)
        pl->reduce_head[i] = -1, pl->reduce_next[i] = -1, pl->free_next[i] = -1;
    for (int i = nn - 1; i >= 0; i--)
        if (g->nodes[i].op == &mpmd_op_loop_reduce && pl->live[i]) {
            int x = g->nodes[i].in[0];
            pl->reduce_next[i] = pl->reduce_head[x];
            pl->reduce_head[x] = i;
        }
    for (int k = 0; k < pl->num_stages * MPMD_TASK_KINDS; k++) {
        int cnt = pl->cl.count[k];
        pl->free_head[k] = malloc((size_t)(cnt + 1) * sizeof(int32_t));
        int32_t *lastpos = malloc((size_t)(cnt + 1) * sizeof(int32_t));
        if (!pl->free_head[k] || !lastpos) {
            free(lastpos);
            goto nomem;
        }
        for (int c = 0; c < cnt; c++)
            pl->free_head[k][c] = -1, lastpos[c] = c;
        /* position of each node inside the cluster: the nodes are sorted */
        for (int c = 0; c < cnt; c++) {
            const mpmd_node *nd = &g->nodes[pl->cl.nodes[k][c]];
            for (int j = 0; j < nd->n_in; j++) {
                int u = nd->in[j];
                /* binary search u in the cluster's sorted node list */
                int lo = 0, hi = c - 1;
                while (lo <= hi) {
                    int mid = (lo + hi) / 2;
                    if (pl->cl.nodes[k][mid] < u)
                        lo = mid + 1;
                    else if (pl->cl.nodes[k][mid] > u)
                        hi = mid - 1;
                    else {
                        lastpos[mid] = c;
                        break;
                    }
                }
            }
        }
        for (int c = 0; c < cnt; c++) {
            int i = pl->cl.nodes[k][c];
            const mpmd_node *nd = &g->nodes[i];
            if (pl->cross[i] || mpmd_replicated(nd) ||
                (nd->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) || nd->type.dtype == MPMD_TOKEN)
                continue;
            pl->free_next[i] = pl->free_head[k][lastpos[c]];
            pl->free_head[k][lastpos[c]] = i;
        }
        free(lastpos);
    }
    return MPMD_OK;
nomem:
    return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
}
