/* The memory plan: one arena per rank, every buffer in it fixed before
 * anything runs.
 *
 * A rank's program is numbered at op granularity (positions): one per
 * instruction, one per op of a task. Walking the program once gives every
 * buffer the program writes (an op's result for one microbatch, a
 * before- or after-loop result, a loop result's accumulator, a received
 * value, a combined loop result) the position where it is first written and
 * the last position that needs it:
 *
 * - an op reads its operands at its position; a microbatch slice reads the
 *   batch it looks into;
 * - a loop reduction folds each microbatch's value in at that value's
 *   position;
 * - a send needs its buffer until the instruction after which the sender
 *   knows the receiver has it (the SEND's `reuse`, from the programs'
 *   vector clocks, lower.c): the receiver copies from it, or MPI sends from
 *   it, with no buffer of the wire's in between;
 * - a receive is written from the instruction where the wire may post
 *   it (the RECV's `post`: MPI posts receives ahead, the in-process
 *   transport copies at the receive itself);
 * - a kept value lives to the end of the step, and is readable until the
 *   next run;
 * - FSDP: a parameter gathered for a task lives from the GATHER's `post`
 *   (the task before it when the wire posts ahead: MPI) to the
 *   task's last op that reads it; a sharded value outside the body (its
 *   storage, a reduce-scattered or received loop result) has one shard's
 *   bytes.
 *
 * An op that may run in place (its descriptor's `inplace` operand) takes
 * over its operand's block when the operand dies there. A value whose one
 * reader is an ADD or MAX loop reduction is written, for microbatch 0,
 * straight into the reduction's accumulator (acc = x_0 costs no copy). arena.c places the
 * buffers; the arena's size is the rank's peak. */
#include "compiler/arena.h"
#include "compiler/compiler.h"

#include <stdlib.h>
#include <string.h>

static int needs_buffer(const mpmd_node *n) {
    return !(n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) && n->type.dtype != MPMD_TOKEN;
}

typedef struct {
    const mpmd_plan *pl;
    const unsigned char *folds; /* [nn] 1: the value's one reader is an ADD or MAX loop reduction */
    mpmd_rank_memory *m;
    int n;         /* microbatches (at least 1 for the tables) */
    int32_t *cur;  /* [nn] the buffer a value outside the body is read from now */
    int32_t *cand; /* [nbuf] the operand buffer an in-place op may take over, -1 */
    /* [nbuf] a body value's span as the runtime counts its activations:
     * from its op or its RECV instruction (not the receive's posting) to
     * its last reader inside its task, or, for a value other tasks read, to
     * its FREE or the SEND it dies with (-1: its buffer's last) */
    int32_t *act_from, *act_to;
    int cap;
} builder;

static int new_buf(builder *b, int node, int mb, int what, int def, int cand) {
    mpmd_rank_memory *m = b->m;
    if (m->nbuf == b->cap) {
        int cap = b->cap ? 2 * b->cap : 1024;
        mpmd_buffer *nb = realloc(m->buf, (size_t)cap * sizeof *nb);
        int32_t *nc = realloc(b->cand, (size_t)cap * sizeof *nc);
        if (nb) m->buf = nb;
        if (nc) b->cand = nc;
        int32_t *af = nb && nc ? realloc(b->act_from, (size_t)cap * sizeof *af) : NULL;
        if (af) b->act_from = af;
        int32_t *at = af ? realloc(b->act_to, (size_t)cap * sizeof *at) : NULL;
        if (at) b->act_to = at;
        if (!at) return -1;
        b->cap = cap;
    }
    mpmd_buffer *x = &m->buf[m->nbuf];
    memset(x, 0, sizeof *x);
    x->node = node, x->mb = mb, x->what = (int8_t)what;
    x->def = x->last = def;
    x->bytes = mpmd_type_bytes(&b->pl->g->nodes[node].type);
    b->cand[m->nbuf] = cand;
    b->act_from[m->nbuf] = def, b->act_to[m->nbuf] = -1;
    return m->nbuf++;
}

/* The buffer value u is read from on this rank while microbatch mb runs (a
 * microbatch slice: the batch it looks into); -1 when it has none in the
 * arena (storage, an input, no data). */
static int buffer_of(const builder *b, int u, int mb) {
    const mpmd_graph *g = b->pl->g;
    const mpmd_node *un = &g->nodes[u];
    if (un->op == &mpmd_op_microbatch) return buffer_of(b, un->in[0], -1);
    if (un->region == MPMD_REGION_BODY && un->op != &mpmd_op_constant) {
        int s = b->m->slot[u];
        return s >= 0 && mb >= 0 ? b->m->body_buf[(size_t)s * b->n + mb] : -1;
    }
    return b->cur[u];
}

static void use(builder *b, int bi, int p) {
    if (bi >= 0 && b->m->buf[bi].last < p) b->m->buf[bi].last = p;
}

/* The position before which each receive may be posted: `ahead` tasks
 * ahead, as the wire posts them (0: at the receive itself). A gather
 * (FSDP) may be posted one task ahead (at the task before it) when
 * receives are posted ahead at all: it overlaps that task. */
static void set_posts(mpmd_program *p, int ahead) {
    int x = 0, limit = 0; /* limit: everything before it is posted before instruction x runs */
    int last_task = -1;
    for (int y = 0; y < p->n; y++) {
        if (p->ins[y].op == MPMD_I_GATHER) p->ins[y].post = ahead > 0 && last_task >= 0 ? last_task : y;
        if (p->ins[y].op == MPMD_I_TASK) last_task = y;
        if (p->ins[y].op != MPMD_I_RECV) continue;
        if (ahead <= 0) {
            p->ins[y].post = y;
            continue;
        }
        for (;; x++) {
            int tasks = 0;
            limit = x;
            while (limit < p->n && tasks < ahead)
                tasks += p->ins[limit++].op == MPMD_I_TASK;
            if (limit > y) break;
        }
        p->ins[y].post = x;
    }
}

/* Phase 1: number the program at op granularity (m->pos), give every body
 * value this rank computes or receives a slot, and chain the sends by the
 * instruction at which their buffers may be reused. -1: out of memory. */
static int number_positions(builder *b, const mpmd_program *p) {
    const mpmd_plan *pl = b->pl;
    const int nn = pl->g->n_nodes;
    mpmd_rank_memory *m = b->m;
    m->slot = malloc((size_t)(nn + 1) * sizeof *m->slot);
    m->slot_node = malloc((size_t)(nn + 1) * sizeof *m->slot_node);
    m->val_buf = malloc((size_t)(nn + 1) * sizeof *m->val_buf);
    m->comb_buf = malloc((size_t)(nn + 1) * sizeof *m->comb_buf);
    m->gath_buf = malloc((size_t)(p->n + 1) * sizeof *m->gath_buf);
    m->pos = malloc((size_t)(p->n + 1) * sizeof *m->pos);
    b->cur = malloc((size_t)(nn + 1) * sizeof *b->cur);
    if (!m->slot || !m->slot_node || !m->val_buf || !m->comb_buf || !m->gath_buf || !m->pos || !b->cur)
        return -1;
    for (int i = 0; i < nn; i++)
        m->slot[i] = m->val_buf[i] = m->comb_buf[i] = b->cur[i] = -1;
    for (int x = 0; x <= p->n; x++)
        m->gath_buf[x] = -1;
    int P = 0;
    for (int x = 0; x < p->n; x++) {
        const mpmd_instr *in = &p->ins[x];
        m->pos[x] = P;
        if (in->op == MPMD_I_TASK) {
            int k = in->stage * MPMD_TASK_KINDS + in->kind;
            for (int c = 0; c < pl->cl.count[k]; c++) {
                int v = pl->cl.nodes[k][c];
                if (m->slot[v] < 0) m->slot_node[m->nslots] = v, m->slot[v] = m->nslots++;
            }
            P += pl->cl.count[k] > 0 ? pl->cl.count[k] : 1;
        } else {
            if (in->op == MPMD_I_RECV && in->mb >= 0 && m->slot[in->node] < 0)
                m->slot_node[m->nslots] = in->node, m->slot[in->node] = m->nslots++;
            P++;
        }
    }
    m->pos[p->n] = P;
    m->reuse_head = malloc((size_t)(p->n + 1) * sizeof *m->reuse_head);
    m->reuse_next = malloc((size_t)(p->n + 1) * sizeof *m->reuse_next);
    if (!m->reuse_head || !m->reuse_next) return -1;
    for (int x = 0; x <= p->n; x++)
        m->reuse_head[x] = m->reuse_next[x] = -1;
    for (int x = p->n - 1; x >= 0; x--)
        if (p->ins[x].op == MPMD_I_SEND && p->ins[x].reuse < p->n) {
            m->reuse_next[x] = m->reuse_head[p->ins[x].reuse];
            m->reuse_head[p->ins[x].reuse] = x;
        }
    m->npos = P + 1;
    if (!(m->body_buf = malloc(((size_t)m->nslots * b->n + 1) * sizeof *m->body_buf))) return -1;
    for (size_t k = 0; k < (size_t)m->nslots * b->n; k++)
        m->body_buf[k] = -1;
    return 0;
}

/* A task's ops at positions at, at + 1, ...: each reads its operands there
 * and makes its buffer, and the loop reductions fold its value in right
 * after. -1: out of memory. */
static int walk_task(builder *b, const mpmd_instr *in, int at) {
    const mpmd_plan *pl = b->pl;
    const mpmd_graph *g = pl->g;
    mpmd_rank_memory *m = b->m;
    const int k = in->stage * MPMD_TASK_KINDS + in->kind, mb = in->mb;
    for (int c = 0; c < pl->cl.count[k]; c++) {
        const int i = pl->cl.nodes[k][c], pc = at + c;
        const mpmd_node *nd = &g->nodes[i];
        if (!(nd->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)))
            for (int j = 0; j < nd->n_in; j++)
                use(b, buffer_of(b, nd->in[j], mb), pc);
        if (needs_buffer(nd)) {
            const int red = pl->reduce_head[i];
            int bi;
            if (mb == 0 && b->folds[i] && b->cur[red] < 0) {
                /* the first microbatch's value is the loop result's start (acc = x_0): the op
                 * writes it into the accumulator, and the fold has nothing to copy */
                bi = new_buf(b, red, -1, MPMD_BUF_VALUE, pc, -1);
                if (bi < 0) return -1;
                b->cur[red] = m->val_buf[red] = bi;
            } else {
                int q = nd->op->inplace;
                int cand = q >= 0 && q < nd->n_in ? buffer_of(b, nd->in[q], mb) : -1;
                bi = new_buf(b, i, mb, MPMD_BUF_BODY, pc, cand);
                if (bi < 0) return -1;
            }
            m->body_buf[(size_t)m->slot[i] * b->n + mb] = bi;
        }
        for (int red = pl->reduce_head[i]; red >= 0; red = pl->reduce_next[red]) {
            if (b->cur[red] < 0) {
                int bi = new_buf(b, red, -1, MPMD_BUF_VALUE, pc, -1);
                if (bi < 0) return -1;
                b->cur[red] = m->val_buf[red] = bi;
            }
            use(b, b->cur[red], pc);
            use(b, buffer_of(b, i, mb), pc);
        }
    }
    for (int q = 0; pl->fsdp == MPMD_FSDP_PER_TASK && pl->gather && q < pl->gather_n[k]; q++)
        b->cur[pl->gather[k][q]] = -1; /* gathered for this task only */
    return 0;
}

/* A body value other tasks read stops counting as activations at the
 * instruction after which the rank drops it (its FREE, or the SEND that is
 * its last use here), as the runtime counts it; its buffer may be reused
 * sooner, at its last reader's op. */
static void activations_end(builder *b, const mpmd_instr *in, int at) {
    int bi = in->mb >= 0 ? buffer_of(b, in->node, in->mb) : -1;
    if (bi >= 0 && b->m->buf[bi].what == MPMD_BUF_BODY) b->act_to[bi] = at;
}

/* Phase 2, the walk: every buffer with its first write and last read.
 * -1: out of memory. */
static int walk(builder *b, const mpmd_program *p) {
    const mpmd_plan *pl = b->pl;
    const mpmd_graph *g = pl->g;
    mpmd_rank_memory *m = b->m;
    for (int x = 0; x < p->n; x++) {
        const mpmd_instr *in = &p->ins[x];
        const int at = m->pos[x];
        switch (in->op) {
        case MPMD_I_RUN_PRE:
        case MPMD_I_RUN_POST: {
            const mpmd_node *nd = &g->nodes[in->node];
            for (int j = 0; j < nd->n_in; j++)
                use(b, buffer_of(b, nd->in[j], -1), at);
            if (needs_buffer(nd)) {
                int k = nd->op->inplace;
                int cand = k >= 0 && k < nd->n_in ? buffer_of(b, nd->in[k], -1) : -1;
                int bi = new_buf(b, in->node, -1, MPMD_BUF_VALUE, at, cand);
                if (bi < 0) return -1;
                m->buf[bi].bytes = mpmd_held_bytes(&pl->mesh, in->node); /* FSDP: a sum of gradient shards */
                b->cur[in->node] = m->val_buf[in->node] = bi;
            }
            break;
        }
        case MPMD_I_TASK:
            if (walk_task(b, in, at)) return -1;
            break;
        case MPMD_I_SEND:
            use(b, in->mb >= 0 ? buffer_of(b, in->node, in->mb) : b->cur[in->node], m->pos[in->reuse]);
            if (in->moved) activations_end(b, in, at);
            break;
        case MPMD_I_FREE: activations_end(b, in, at); break;
        case MPMD_I_RECV: {
            const int from = m->pos[in->post];
            int bi = new_buf(b, in->node, in->mb, in->mb >= 0 ? MPMD_BUF_BODY : MPMD_BUF_VALUE, from, -1);
            if (bi < 0) return -1;
            m->buf[bi].received = 1;
            b->act_from[bi] = at;
            if (in->mb < 0) m->buf[bi].bytes = mpmd_held_bytes(&pl->mesh, in->node); /* a shard, with FSDP */
            use(b, bi, at);
            if (in->mb >= 0)
                m->body_buf[(size_t)m->slot[in->node] * b->n + in->mb] = bi;
            else
                b->cur[in->node] = m->val_buf[in->node] = bi;
            break;
        }
        case MPMD_I_ALLREDUCE:
        case MPMD_I_REDUCE_SCATTER: {
            use(b, b->cur[in->node], at);
            int bi = new_buf(b, in->node, -1, MPMD_BUF_COMBINED, at, -1);
            if (bi < 0) return -1;
            m->buf[bi].bytes = mpmd_held_bytes(&pl->mesh, in->node);
            b->cur[in->node] = m->comb_buf[in->node] = bi;
            break;
        }
        case MPMD_I_GATHER: { /* sharded values, whole, read by the tasks' ops (above) */
            int ng;
            const int32_t *list = mpmd_gather_list(pl, in, &ng);
            for (int q = 0; q < ng; q++) {
                int v = list[q];
                int bi = new_buf(b, v, -1, MPMD_BUF_GATHERED, m->pos[in->post], -1); /* from its posting */
                if (bi < 0) return -1;
                m->buf[bi].bytes = mpmd_gathered_bytes(&pl->mesh, v);
                if (q == 0) m->gath_buf[x] = bi;
                b->cur[v] = bi;
            }
            break;
        }
        default: break;
        }
    }
    /* kept values stay readable after the run (a body value: its last
     * microbatch's); a shard made before the loop (FSDP: a parameter's
     * cast) lives through the step, since the other replicas may still be
     * copying it after this rank's last gather of it */
    const int end = m->npos - 1;
    for (int bi = 0; bi < m->nbuf; bi++) {
        mpmd_buffer *x = &m->buf[bi];
        if (x->what == MPMD_BUF_VALUE && g->nodes[x->node].region == MPMD_REGION_PRE &&
            mpmd_sharded(&pl->mesh, x->node))
            x->last = end;
        if (!(g->nodes[x->node].flags & MPMD_NODE_KEEP)) continue;
        if (x->what == MPMD_BUF_BODY ? x->mb == pl->num_micro - 1 : b->cur[x->node] == bi) x->last = end;
    }
    return 0;
}

/* Phase 3: live bytes position by position, by kind: [0] body values made
 * here, [1] received, [2] loop results, [3] other values, [4] gathered.
 * The arena at its fullest with what fills it; the most bytes of body
 * values alive at once (the program's peak of activations, the values'
 * own bytes, unrounded), and of those kept past their task. -1: out of
 * memory. */
static int live_peaks(builder *b, mpmd_program *p) {
    const mpmd_plan *pl = b->pl;
    const mpmd_graph *g = pl->g;
    mpmd_rank_memory *m = b->m;
    enum { KINDS = 5 };
    int64_t *delta = calloc(((size_t)m->npos + 1) * KINDS, sizeof *delta);
    if (!delta) return -1;
    for (int bi = 0; bi < m->nbuf; bi++) {
        const mpmd_buffer *x = &m->buf[bi];
        int kind = x->received                                                                      ? 1
                   : x->what == MPMD_BUF_BODY                                                       ? 0
                   : x->what == MPMD_BUF_GATHERED                                                   ? 4
                   : (x->what == MPMD_BUF_COMBINED || g->nodes[x->node].op == &mpmd_op_loop_reduce) ? 2
                                                                                                    : 3;
        size_t rb = (x->bytes + MPMD_ARENA_ALIGN - 1) / MPMD_ARENA_ALIGN * MPMD_ARENA_ALIGN;
        delta[(size_t)x->def * KINDS + kind] += (int64_t)rb;
        delta[((size_t)x->last + 1) * KINDS + kind] -= (int64_t)rb;
    }
    int64_t live[KINDS] = {0, 0, 0, 0, 0};
    p->peak_bytes = 0;
    for (int q = 0; q < m->npos; q++) {
        int64_t all = 0;
        for (int k = 0; k < KINDS; k++)
            all += live[k] += delta[(size_t)q * KINDS + k];
        if ((size_t)all > m->live_peak) {
            m->live_peak = (size_t)all;
            m->live_activations = (size_t)live[0], m->live_received = (size_t)live[1];
            m->live_loop_results = (size_t)live[2], m->live_other = (size_t)live[3];
            m->live_gathered = (size_t)live[4];
        }
    }
    free(delta);
    delta = calloc(((size_t)m->npos + 1) * 2, sizeof *delta);
    if (!delta) return -1;
    for (int bi = 0; bi < m->nbuf; bi++) {
        const mpmd_buffer *x = &m->buf[bi];
        if (x->what != MPMD_BUF_BODY) continue;
        int kept = x->received || pl->cross[x->node];
        const int from = b->act_from[bi], to = b->act_to[bi] >= 0 ? b->act_to[bi] : x->last;
        delta[(size_t)from * 2] += (int64_t)x->bytes;
        delta[((size_t)to + 1) * 2] -= (int64_t)x->bytes;
        if (kept) {
            delta[(size_t)x->def * 2 + 1] += (int64_t)x->bytes;
            delta[((size_t)x->last + 1) * 2 + 1] -= (int64_t)x->bytes;
        }
    }
    int64_t blive = 0, klive = 0;
    for (int q = 0; q < m->npos; q++) {
        if ((blive += delta[(size_t)q * 2]) > p->peak_bytes) p->peak_bytes = blive;
        if ((klive += delta[(size_t)q * 2 + 1]) > (int64_t)m->kept_peak) m->kept_peak = (size_t)klive;
    }
    free(delta);
    return 0;
}

/* Phase 4: the buffers' offsets in the arena (an in-place op's result takes
 * its operand's block when the operand dies there). -1: out of memory. */
static int place(builder *b) {
    const mpmd_graph *g = b->pl->g;
    mpmd_rank_memory *m = b->m;
    mpmd_arena_item *items = malloc(((size_t)m->nbuf + 1) * sizeof *items);
    size_t *offs = malloc(((size_t)m->nbuf + 1) * sizeof *offs);
    size_t arena = (size_t)-1;
    if (items && offs) {
        for (int bi = 0; bi < m->nbuf; bi++) {
            const mpmd_buffer *x = &m->buf[bi];
            items[bi] = (mpmd_arena_item){x->bytes, x->def, x->last, -1};
            int c = b->cand[bi];
            if (c >= 0 && m->buf[c].last == x->def && m->buf[c].bytes == x->bytes &&
                !(g->nodes[m->buf[c].node].flags & MPMD_NODE_KEEP))
                items[bi].alias = c;
        }
        arena = mpmd_arena_plan(m->nbuf, items, m->npos, offs);
    }
    if (arena != (size_t)-1) {
        m->arena_bytes = arena;
        for (int bi = 0; bi < m->nbuf; bi++)
            m->buf[bi].off = offs[bi];
    }
    free(items), free(offs);
    return arena == (size_t)-1 ? -1 : 0;
}

/* Phase 5: the kernels' workspace, and everything the rank allocates
 * besides the arena, as the runtime allocates it (run.c) and the backend
 * rounds it. */
static void count_allocations(const mpmd_plan *pl, int r, mpmd_rank_memory *m) {
    const mpmd_graph *g = pl->g;
    const mpmd_backend *be = pl->be;
    for (int i = 0; i < g->n_nodes; i++) {
        const mpmd_node *nd = &g->nodes[i];
        if (!pl->live[i] || !mpmd_runs_on(pl, i, r)) continue;
        if (pl->kern[i]) {
            size_t sb = mpmd_kernel_workspace(pl->kern[i], g, nd);
            if (sb > m->scratch_bytes) m->scratch_bytes = sb;
        }
        size_t a = mpmd_backend_alloc_bytes(be, mpmd_held_bytes(&pl->mesh, i) + MPMD_STORAGE_PAD);
        if (nd->flags & MPMD_NODE_TRAINABLE)
            m->params_bytes += a;
        else if (mpmd_node_is_storage(nd) || nd->op == &mpmd_op_constant)
            m->state_bytes += a;
        else if (nd->op == &mpmd_op_input && !be->host_memory)
            m->input_bytes += a;
    }
    m->total_bytes = m->params_bytes + m->state_bytes + m->input_bytes +
                     mpmd_backend_alloc_bytes(be, m->arena_bytes ? m->arena_bytes : 64) +
                     (m->scratch_bytes ? mpmd_backend_alloc_bytes(be, m->scratch_bytes) : 0);
}

static mpmd_status plan_rank(mpmd_plan *pl, int r, const unsigned char *folds, mpmd_error *err) {
    const int n = pl->num_micro > 0 ? pl->num_micro : 1;
    mpmd_program *p = &pl->prog[r];
    builder b = {pl, folds, &pl->mem[r], n, NULL, NULL, NULL, NULL, 0};
    set_posts(p, pl->recv_ahead);
    int bad = number_positions(&b, p) || walk(&b, p) || live_peaks(&b, p) || place(&b);
    if (!bad) count_allocations(pl, r, b.m);
    free(b.cur), free(b.cand), free(b.act_from), free(b.act_to);
    if (bad) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory planning rank %d's buffers", r);
    return MPMD_OK;
}

/* The body values whose one live reader is a single ADD or MAX loop
 * reduction (a microbatch's gradient, its loss) and that are not kept:
 * microbatch 0's can be written straight into the accumulator. */
static unsigned char *fold_targets(const mpmd_plan *pl) {
    const mpmd_graph *g = pl->g;
    const int nn = g->n_nodes;
    int32_t *uses = calloc((size_t)nn + 1, sizeof *uses);
    unsigned char *f = calloc((size_t)nn + 1, 1);
    if (!uses || !f) {
        free(uses), free(f);
        return NULL;
    }
    for (int j = 0; j < nn; j++)
        if (pl->live[j])
            for (int k = 0; k < g->nodes[j].n_in; k++)
                uses[g->nodes[j].in[k]]++;
    for (int i = 0; i < nn; i++) {
        const mpmd_node *nd = &g->nodes[i];
        const int red = pl->reduce_head[i];
        f[i] = nd->region == MPMD_REGION_BODY && red >= 0 && pl->reduce_next[red] < 0 && uses[i] == 1 &&
               g->nodes[red].ia[0] != MPMD_REDUCE_CONCAT && !(nd->flags & MPMD_NODE_KEEP) &&
               mpmd_type_bytes(&nd->type) == mpmd_type_bytes(&g->nodes[red].type);
    }
    free(uses);
    return f;
}

mpmd_status mpmd_plan_memory(mpmd_plan *pl, mpmd_error *err) {
    unsigned char *folds = fold_targets(pl);
    if (!folds || !(pl->mem = calloc((size_t)pl->num_ranks, sizeof *pl->mem))) {
        free(folds);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < pl->num_ranks; r++)
        if (plan_rank(pl, r, folds, err)) {
            free(folds);
            return err ? err->code : MPMD_ERR_NOMEM;
        }
    free(folds);
    return MPMD_OK;
}

void mpmd_plan_print_memory(const mpmd_plan *pl, int r, FILE *f) {
    const mpmd_graph *g = pl->g;
    const mpmd_rank_memory *m = &pl->mem[r];
    static const char *what[] = {"body", "value", "combined", "gathered"};
    char tb[160];
    fprintf(f,
            "rank %d memory plan: %zu bytes on the %s backend: parameters %zu, optimizer state and constants "
            "%zu, "
            "inputs %zu, arena %zu (%d buffers over %d positions; at its fullest %zu live: activations %zu, "
            "received %zu, loop results %zu, gathered parameters %zu, other %zu), workspace %zu\n",
            r, m->total_bytes, pl->be->name, m->params_bytes, m->state_bytes, m->input_bytes, m->arena_bytes,
            m->nbuf, m->npos, m->live_peak, m->live_activations, m->live_received, m->live_loop_results,
            m->live_gathered, m->live_other, m->scratch_bytes);
    for (int bi = 0; bi < m->nbuf; bi++) {
        const mpmd_buffer *x = &m->buf[bi];
        const mpmd_node *n = &g->nodes[x->node];
        char mb[24] = "";
        if (x->mb >= 0) snprintf(mb, sizeof mb, " mb %d", x->mb);
        fprintf(f, "  %%%-5d %-14s %-22s %-8s offset %10zu  %10zu bytes  live [%d, %d]%s\n", x->node,
                n->op->name, mpmd_type_str(&n->type, tb, sizeof tb), what[x->what], x->off, x->bytes, x->def,
                x->last, mb);
    }
}
