/* Rematerialisation (mpmd_remat_begin/end):
 *
 * - a GPT whose blocks are remat regions (policies SAVE_NOTHING, SAVE_DOTS,
 *   and SAVE_NAMED keeping the attention's output) trains to the same bits
 *   as without remat, on the one-rank loop and on every schedule of the
 *   equivalence list, f32 and bf16;
 * - the backward really recomputes: the graph gains copies of the blocks'
 *   forward ops (matrix products and fused attention too under
 *   SAVE_NOTHING, none of them under SAVE_DOTS), made in the backward;
 * - the activation bytes fall: planned and measured peaks of body values
 *   (the one rank's, and summed over a pipeline's ranks), and the arena;
 * - misuse is an error with a message: outside the body, nested, unclosed
 *   at mpmd_loop_end, closed without opening, an unknown policy. */
#include "gpt_model.h"
#include "graph/graph.h"
#include "ops/nn.h"
#include "testutil.h"

#include <string.h>

static gpt_config config(int remat, mpmd_dtype compute) {
    gpt_config c = gpt_config_default();
    c.vocab = 32, c.seq = 8, c.width = 16, c.heads = 2, c.layers = 4, c.stages = 4;
    c.microbatches = 4, c.batch = 8, c.tie_embeddings = 1;
    c.compute = compute;
    c.remat = remat;
    return c;
}

typedef struct {
    char hash[65];
    float loss;
    int64_t planned[8], measured[8];
    size_t arena[8];
    int ranks;
} outcome;

/* Two steps on fixed tokens; the schedule NULL: the loop. */
static int train(const gpt_model *m, const mpmd_schedule *s, outcome *out, const char *label) {
    mpmd_error err;
    mpmd_step *st = tu_step(m->g, s, 0, label);
    if (!st) return 0;
    mpmd_step_set_recording(st, 1);
    size_t n = (size_t)(m->cfg.batch * m->cfg.seq);
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    for (size_t i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 7 + 3) % 32), tgt[i] = (int32_t)((i * 5 + 1) % 32);
    int ok = 1;
    for (int step = 0; step < 2 && ok; step++)
        ok = mpmd_step_set_input(st, m->tokens, tok, n * sizeof *tok) == MPMD_OK &&
             mpmd_step_set_input(st, m->targets, tgt, n * sizeof *tgt) == MPMD_OK &&
             mpmd_step_run(st) == MPMD_OK;
    CHECK(ok, "%s: %s", label, mpmd_step_error(st));
    ok = ok && mpmd_step_read(st, m->loss, &out->loss, sizeof out->loss) == MPMD_OK;
    mpmd_step_params_sha256(st, out->hash);
    mpmd_step_stats stats;
    out->ranks = mpmd_step_num_ranks(st);
    if (ok && mpmd_step_summary(st, &stats, &err) == MPMD_OK) {
        for (int r = 0; r < out->ranks && r < 8; r++) {
            out->planned[r] = stats.ranks[r].planned_peak_bytes;
            out->measured[r] = stats.ranks[r].peak_bytes;
            out->arena[r] = mpmd_step_arena_bytes(st, r);
            /* the plan counts activations as the runtime does: the same bytes */
            CHECK(out->planned[r] == out->measured[r], "%s rank %d: activations planned %lld, measured %lld",
                  label, r, (long long)out->planned[r], (long long)out->measured[r]);
        }
        mpmd_step_stats_free(&stats);
    }
    free(tok), free(tgt);
    mpmd_step_free(st);
    return ok;
}

/* The live copies of forward ops that mpmd_grad made: products and others. */
/* Recomputed copies: products (matmul, attention) and the other ops; of
 * the products, *attention (when not NULL) the attention ops. */
static void count_copies3(const mpmd_graph *g, int *matmuls, int *others, int *attention) {
    int att = 0;
    *matmuls = *others = 0;
    unsigned char *live = mpmd_live_nodes(g);
    for (int i = 0; i < g->n_nodes; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!live[i] || !(n->flags & MPMD_NODE_RECOMPUTED)) continue;
        CHECK(n->is_bwd && n->region == MPMD_REGION_BODY, "copy %%%d is not a backward body op", i);
        att += n->op == &mpmd_op_attention;
        ++*(n->op == &mpmd_op_matmul || n->op == &mpmd_op_attention ? matmuls : others);
    }
    free(live);
    if (attention) *attention = att;
}
static void count_copies(const mpmd_graph *g, int *matmuls, int *others) {
    count_copies3(g, matmuls, others, NULL);
}

/* Two tanh(x w) layers in a SAVE_NAMED region that keeps the first; the
 * summed gradient of w into out. */
static void named(int remat, float out[64]) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 8));
    mpmd_value w = mpmd_param(g, "w", MPMD_SHAPE(8, 8), MPMD_NORMAL(0.5f));
    mpmd_loop_begin(g, 2);
    mpmd_value h = mpmd_microbatch(g, x);
    if (remat) mpmd_remat_begin(g, MPMD_REMAT_SAVE_NAMED);
    mpmd_value a = mpmd_remat_save(g, mpmd_tanh(g, mpmd_matmul(g, h, w, 0)));
    mpmd_value b = mpmd_tanh(g, mpmd_matmul(g, a, w, 0));
    if (remat) mpmd_remat_end(g);
    mpmd_value l = mpmd_sum(g, mpmd_mul(g, b, b), MPMD_AXES(0, 1), 0);
    mpmd_value gw;
    mpmd_grad(g, l, 1, &w, &gw);
    mpmd_value rg = mpmd_loop_reduce(g, gw, MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_keep(g, rg);
    CHECK(mpmd_graph_status(g) == MPMD_OK, "named: %s", mpmd_graph_error(g));
    int mm, other;
    count_copies(g, &mm, &other);
    /* b's product and tanh are made again (tanh's rule reads its output); a is kept */
    if (remat)
        CHECK(mm == 1 && other == 1, "named: %d products and %d other ops recomputed, want 1 and 1", mm,
              other);
    else
        CHECK(mm == 0 && other == 0, "no remat: %d and %d ops recomputed", mm, other);
    mpmd_exec *ex = tu_exec(g, 1);
    float xs[32];
    tu_fill(xs, 32, 5);
    CHECK(mpmd_exec_set_input(ex, x, xs, sizeof xs) == MPMD_OK && mpmd_exec_run(ex) == MPMD_OK &&
              mpmd_exec_read(ex, rg, out, 64 * sizeof *out) == MPMD_OK,
          "named: %s", mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

static void misuse(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_remat_begin(g, MPMD_REMAT_SAVE_NOTHING);
    CHECK(mpmd_graph_status(g) == MPMD_ERR_INVALID &&
              strstr(mpmd_graph_error(g), "inside the microbatch loop"),
          "outside the body: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_loop_begin(g, 2);
    mpmd_remat_begin(g, MPMD_REMAT_SAVE_DOTS);
    mpmd_remat_begin(g, MPMD_REMAT_SAVE_DOTS);
    CHECK(strstr(mpmd_graph_error(g), "do not nest"), "nested: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_loop_begin(g, 2);
    mpmd_remat_begin(g, MPMD_REMAT_SAVE_NOTHING);
    mpmd_loop_end(g);
    CHECK(strstr(mpmd_graph_error(g), "still open (call mpmd_remat_end)"), "unclosed: %s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_loop_begin(g, 2);
    mpmd_remat_end(g);
    CHECK(strstr(mpmd_graph_error(g), "no region is open"), "end without begin: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    mpmd_loop_begin(g, 2);
    mpmd_remat_begin(g, (mpmd_remat_policy)9);
    CHECK(strstr(mpmd_graph_error(g), "policy 9"), "bad policy: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

int main(void) {
    const tu_named_schedule *list = tu_every_schedule;
    const int policies[] = {MPMD_REMAT_SAVE_NOTHING, MPMD_REMAT_SAVE_DOTS};
    for (int prec = 0; prec < 2; prec++) {
        mpmd_dtype dt = prec ? MPMD_BF16 : MPMD_F32;
        mpmd_error err;
        gpt_model base;
        gpt_config c0 = config(0, dt);
        if (gpt_build(&c0, 1, &base, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        outcome ref;
        train(&base, NULL, &ref, "no remat, loop");
        for (int p = 0; p < 2; p++) {
            gpt_config c = config(policies[p], dt);
            gpt_model m;
            if (gpt_build(&c, 1, &m, &err)) {
                CHECK(0, "%s", err.msg);
                continue;
            }
            const char *pname = p ? "dots" : "block";
            int mm, other, mm0, other0, att;
            count_copies3(m.g, &mm, &other, &att);
            count_copies(base.g, &mm0, &other0);
            CHECK(other > 0 && mm0 == 0 && other0 == 0, "%s %s: %d copies (none without remat: %d)", pname,
                  prec ? "bf16" : "f32", other, other0);
            if (p == 0) {
                CHECK(mm >= 4 * c.layers, "block: the backward recomputes %d matrix products, want >= %d", mm,
                      4 * c.layers);
                CHECK(att == c.layers, "block: the backward recomputes %d attention ops, want %d", att,
                      c.layers);
            } else {
                CHECK(mm == 0, "dots: the backward recomputes %d matrix products (%d attention), want 0", mm,
                      att);
            }
            outcome loop;
            char label[160];
            snprintf(label, sizeof label, "remat %s %s, loop", pname, prec ? "bf16" : "f32");
            train(&m, NULL, &loop, label);
            CHECK(!strcmp(loop.hash, ref.hash) && loop.loss == ref.loss, "%s: %s vs %s", label, loop.hash,
                  ref.hash);
            CHECK(loop.planned[0] < ref.planned[0] && loop.measured[0] < ref.measured[0] &&
                      loop.arena[0] < ref.arena[0],
                  "%s: planned %lld (without %lld), measured %lld (%lld), arena %zu (%zu) bytes", label,
                  (long long)loop.planned[0], (long long)ref.planned[0], (long long)loop.measured[0],
                  (long long)ref.measured[0], loop.arena[0], ref.arena[0]);
            for (size_t k = 0; k < (size_t)tu_num_every_schedule; k++) {
                mpmd_schedule *s;
                if (mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(list[k].name),
                                      list[k].stages, list[k].ranks, c.microbatches, list[k].fuse, &s,
                                      &err)) {
                    CHECK(0, "%s", err.msg);
                    continue;
                }
                outcome with, without;
                snprintf(label, sizeof label, "remat %s %s, %s", pname, prec ? "bf16" : "f32", list[k].name);
                train(&m, s, &with, label);
                train(&base, s, &without, label);
                CHECK(!strcmp(with.hash, ref.hash) && with.loss == ref.loss, "%s: %s vs the loop's %s", label,
                      with.hash, ref.hash);
                /* over the ranks (the last one's peak is the LM head's, outside the regions) */
                int64_t pw = 0, pwo = 0, mw = 0, mwo = 0;
                for (int r = 0; r < with.ranks; r++) {
                    pw += with.planned[r], pwo += without.planned[r];
                    mw += with.measured[r], mwo += without.measured[r];
                }
                CHECK(pw < pwo && mw < mwo && with.planned[0] < without.planned[0],
                      "%s: peak activation bytes over the ranks planned %lld (without %lld), measured %lld "
                      "(%lld)",
                      label, (long long)pw, (long long)pwo, (long long)mw, (long long)mwo);
                mpmd_schedule_free(s);
            }
            gpt_model_free(&m);
        }
        gpt_model_free(&base);
    }

    /* SAVE_NAMED keeping one value: fewer copies than SAVE_NOTHING, the same bits as no remat */
    float with[64], without[64];
    named(1, with);
    named(0, without);
    CHECK(!memcmp(with, without, sizeof with), "named: the gradient differs from the one without remat");
    misuse();
    return tu_report("test_remat");
}
