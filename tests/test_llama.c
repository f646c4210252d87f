/* The LLaMA layers (src/layers/layers.c):
 *
 * - the gradient of a LLaMA block (RMS norms, rotary grouped-query
 *   attention, SwiGLU) with respect to its input and to every parameter
 *   kind, against finite differences;
 * - grouped-query attention equals full multi-head attention whose key and
 *   value heads are copies (kv_heads 1 vs 2 with tiled kernels);
 * - mpmd_set_layer_dropout puts one dropout on each residual branch of the
 *   blocks built after it, and none before;
 * - bad arguments are errors that name the layer and the numbers. */
#include "graph/graph.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

enum { B = 2, T = 5, C = 8, HEADS = 2 };

static mpmd_value g_block(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    int kv = *(const int *)ctx;
    return mpmd_llama_block(g, "blk", p[0], HEADS, kv, 12, 10000.0f, 1e-6f);
}

/* the same block, its parameters (as inputs of the check) used in place of
 * its own: q kernel, gate kernel and the first norm's scale */
static mpmd_value g_block_params(mpmd_graph *g, const mpmd_value *p, void *ctx) {
    (void)ctx;
    mpmd_value x = mpmd_rms_norm(g, p[0], mpmd_add_scalar(g, p[1], 1.0f), 1e-6f);
    mpmd_value q = mpmd_reshape(g, mpmd_matmul(g, x, p[2], 0), MPMD_SHAPE(B, T, HEADS, C / HEADS));
    mpmd_value h = mpmd_mul(g, mpmd_silu(g, mpmd_matmul(g, x, p[3], 0)), x);
    return mpmd_add(g, mpmd_reshape(g, mpmd_attention(g, mpmd_rope(g, q, 100.0f, 0), q, q, 1), MPMD_SHAPE(B, T, C)),
                    h);
}

static void test_block_gradients(void) {
    mpmd_type tx = tu_f32(MPMD_SHAPE(B, T, C));
    for (int kv = 1; kv <= 2; kv++) {
        char label[64];
        snprintf(label, sizeof label, "llama block, %d kv heads, d/dx", kv);
        CHECK(tu_gradcheck(label, 1, &tx, g_block, &kv, 1e-2, 1e-2), "%s", label);
    }
    mpmd_type ts[4] = {tx, tu_f32(MPMD_SHAPE(C)), tu_f32(MPMD_SHAPE(C, C)), tu_f32(MPMD_SHAPE(C, C))};
    CHECK(tu_gradcheck("rms norm, rope, silu gate: the parameters", 4, ts, g_block_params, NULL, 1e-2, 1e-2),
          "parameters");
}

/* Run one rope attention with kv key/value heads on x; the k and v kernels
 * are kernel_kv [C, Dh] tiled kv times, q and o given. */
static void attention_out(int kv, const float *x, const float *wq, const float *wk, const float *wv,
                          const float *wo, float *out) {
    const int64_t dh = C / HEADS;
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xv = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    mpmd_value y = mpmd_rope_attention(g, "attn", xv, HEADS, kv, 10000.0f);
    mpmd_keep(g, y);
    CHECK(mpmd_graph_status(g) == MPMD_OK, "%s", mpmd_graph_error(g));
    mpmd_exec *ex = tu_exec(g, 1);
    float *tk = malloc((size_t)C * kv * dh * sizeof *tk), *tv = malloc((size_t)C * kv * dh * sizeof *tv);
    for (int64_t r = 0; r < C; r++)
        for (int h = 0; h < kv; h++)
            for (int64_t j = 0; j < dh; j++) {
                tk[(r * kv + h) * dh + j] = wk[r * dh + j];
                tv[(r * kv + h) * dh + j] = wv[r * dh + j];
            }
    size_t sq = (size_t)C * C * sizeof(float), skv = (size_t)C * kv * dh * sizeof(float);
    CHECK(mpmd_exec_write(ex, mpmd_lookup(g, "attn/q/kernel"), wq, sq) == MPMD_OK &&
              mpmd_exec_write(ex, mpmd_lookup(g, "attn/k/kernel"), tk, skv) == MPMD_OK &&
              mpmd_exec_write(ex, mpmd_lookup(g, "attn/v/kernel"), tv, skv) == MPMD_OK &&
              mpmd_exec_write(ex, mpmd_lookup(g, "attn/o/kernel"), wo, sq) == MPMD_OK &&
              mpmd_exec_set_input(ex, xv, x, (size_t)B * T * C * sizeof(float)) == MPMD_OK &&
              mpmd_exec_run(ex) == MPMD_OK &&
              mpmd_exec_read(ex, y, out, (size_t)B * T * C * sizeof(float)) == MPMD_OK,
          "kv %d: %s", kv, mpmd_exec_error(ex));
    free(tk), free(tv);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
}

static void test_grouped_query(void) {
    const int64_t dh = C / HEADS;
    float x[B * T * C], wq[C * C], wo[C * C], wk[C * C / HEADS], wv[C * C / HEADS], y1[B * T * C], y2[B * T * C];
    tu_fill(x, B * T * C, 1), tu_fill(wq, C * C, 2), tu_fill(wo, C * C, 3);
    tu_fill(wk, C * dh, 4), tu_fill(wv, C * dh, 5);
    attention_out(1, x, wq, wk, wv, wo, y1);
    attention_out(HEADS, x, wq, wk, wv, wo, y2);
    double worst = 0;
    for (int i = 0; i < B * T * C; i++)
        worst = fmax(worst, fabs(y1[i] - y2[i]) / fmax(1.0, fabs(y2[i])));
    CHECK(worst < 1e-6, "one shared key/value head differs from two equal ones by %.3g", worst);
}

static int count_op(const mpmd_graph *g, const char *name) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += !strcmp(g->nodes[i].op->name, name);
    return n;
}

static void test_layer_dropout(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    mpmd_value key = mpmd_input(g, "key", MPMD_I32, MPMD_SHAPE(2));
    mpmd_value h = mpmd_llama_block(g, "b0", x, HEADS, 1, 12, 10000.0f, 1e-6f);
    CHECK(count_op(g, "dropout") == 0, "dropout before mpmd_set_layer_dropout");
    CHECK(mpmd_set_layer_dropout(g, 0.1f, key) == MPMD_OK, "%s", mpmd_graph_error(g));
    h = mpmd_llama_block(g, "b1", h, HEADS, 1, 12, 10000.0f, 1e-6f);
    CHECK(count_op(g, "dropout") == 2, "llama block: %d dropouts, want 2", count_op(g, "dropout"));
    h = mpmd_gpt_block(g, "b2", h, HEADS);
    CHECK(count_op(g, "dropout") == 4, "gpt block: %d dropouts in all, want 4", count_op(g, "dropout"));
    CHECK(mpmd_set_layer_dropout(g, 0.0f, MPMD_NONE) == MPMD_OK, "%s", mpmd_graph_error(g));
    TU_DROP(mpmd_transformer_block(g, "b3", h, HEADS, 1));
    CHECK(count_op(g, "dropout") == 4, "rate 0 still drops");
    CHECK(mpmd_graph_status(g) == MPMD_OK, "%s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    key = mpmd_input(g, "key", MPMD_F32, MPMD_SHAPE(2));
    CHECK(mpmd_set_layer_dropout(g, 0.1f, key) != MPMD_OK && strstr(mpmd_graph_error(g), "i32 with 2 elements"),
          "a float key: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    key = mpmd_input(g, "key", MPMD_I32, MPMD_SHAPE(2));
    CHECK(mpmd_set_layer_dropout(g, 1.5f, key) != MPMD_OK && strstr(mpmd_graph_error(g), "rate 1.5"),
          "rate 1.5: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

static void test_errors(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    TU_DROP(mpmd_llama_block(g, "blk", x, 4, 3, 12, 10000.0f, 1e-6f));
    const char *m = mpmd_graph_error(g);
    CHECK(strstr(m, "blk") && strstr(m, "3 key/value heads") && strstr(m, "4 query heads"), "kv heads: %s", m);
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    TU_DROP(mpmd_llama_block(g, "blk", x, 3, 1, 12, 10000.0f, 1e-6f));
    m = mpmd_graph_error(g);
    CHECK(strstr(m, "3 heads do not divide the width 8"), "heads: %s", m);
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B, T, C));
    TU_DROP(mpmd_llama_block(g, "blk", x, 2, 1, 0, 10000.0f, 1e-6f));
    m = mpmd_graph_error(g);
    CHECK(strstr(m, "blk") && strstr(m, "MLP width 0"), "hidden: %s", m);
    mpmd_graph_free(g);
}

int main(void) {
    test_block_gradients();
    test_grouped_query();
    test_layer_dropout();
    test_errors();
    return tu_report("test_llama");
}
