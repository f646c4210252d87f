/* The LLaMA layers (src/layers/layers.c):
 *
 * - the gradient of a LLaMA block (RMS norms, rotary grouped-query
 *   attention, SwiGLU) with respect to its input and to every parameter
 *   kind, against finite differences;
 * - grouped-query attention equals full multi-head attention whose key and
 *   value heads are copies (kv_heads 1 vs 2 with tiled kernels);
 * - rotary grouped-query attention (4 query heads, 1, 2 and 4 key/value
 *   heads), its output and its input's gradient, against a reference in
 *   double written here from the documented math;
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
    return mpmd_add(
        g, mpmd_reshape(g, mpmd_attention(g, mpmd_rope(g, q, 100.0f, 0), q, q, 1), MPMD_SHAPE(B, T, C)), h);
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
    float x[B * T * C], wq[C * C], wo[C * C], wk[C * C / HEADS], wv[C * C / HEADS], y1[B * T * C],
        y2[B * T * C];
    tu_fill(x, B * T * C, 1), tu_fill(wq, C * C, 2), tu_fill(wo, C * C, 3);
    tu_fill(wk, C * dh, 4), tu_fill(wv, C * dh, 5);
    attention_out(1, x, wq, wk, wv, wo, y1);
    attention_out(HEADS, x, wq, wk, wv, wo, y2);
    double worst = 0;
    for (int i = 0; i < B * T * C; i++)
        worst = fmax(worst, fabs(y1[i] - y2[i]) / fmax(1.0, fabs(y2[i])));
    CHECK(worst < 1e-6, "one shared key/value head differs from two equal ones by %.3g", worst);
}

/* ---- rotary grouped-query attention against a reference ------------------
 *
 * The reference, in double, from the definitions in mpmd.h:
 *   q = x Wq [B, T, H, Dh], k = x Wk and v = x Wv [B, T, KV, Dh] (dense
 *   kernels [in, out], no bias; head h is columns h Dh .. h Dh + Dh - 1);
 *   rope on q and k: in each head, the pair (u[i], u[i + Dh/2]) at position
 *   t turned by the angle t base^(-2i/Dh):
 *     u'[i] = u[i] cos - u[i + Dh/2] sin,  u'[i + Dh/2] = u[i] sin + u[i + Dh/2] cos
 *   (Hugging Face's LLaMA: q cos + rotate_half(q) sin);
 *   query head h reads key/value head h / G, G = H / KV (repeat_kv: key/value
 *   head j serves query heads j G .. j G + G - 1);
 *   a = causal softmax(q k^T / sqrt(Dh)) v per head, y = a Wo.
 * Its input gradient (of sum(y * r)) by central differences in double. */
enum { GB = 2, GT = 6, GC = 32, GH = 4, GDH = GC / GH };
#define GBASE 100.0

typedef struct gqa_weights {
    float wq[GC * GC], wk[GC * GC], wv[GC * GC], wo[GC * GC]; /* k, v: [GC, kv GDH] used */
} gqa_weights;

static void ref_rope(double *u, int t) { /* one head's GDH values at position t */
    for (int i = 0; i < GDH / 2; i++) {
        double th = t * pow(GBASE, -2.0 * i / GDH), c = cos(th), sn = sin(th);
        double a = u[i], b = u[i + GDH / 2];
        u[i] = a * c - b * sn;
        u[i + GDH / 2] = a * sn + b * c;
    }
}

/* y [GB, GT, GC] of x; `wrong`: query head h reads key/value head h % kv */
static void ref_gqa(int kv, int wrong, const double *x, const gqa_weights *w, double *y) {
    static double q[GB][GT][GH][GDH], k[GB][GT][GH][GDH], v[GB][GT][GH][GDH], a[GB][GT][GC];
    const int G = GH / kv, kw = kv * GDH;
    for (int b = 0; b < GB; b++)
        for (int t = 0; t < GT; t++) {
            const double *xr = x + (b * GT + t) * GC;
            for (int o = 0; o < GC; o++) {
                double sq = 0, sk = 0, sv = 0;
                for (int c = 0; c < GC; c++) {
                    sq += xr[c] * w->wq[c * GC + o];
                    if (o < kw) sk += xr[c] * w->wk[c * kw + o], sv += xr[c] * w->wv[c * kw + o];
                }
                q[b][t][o / GDH][o % GDH] = sq;
                if (o < kw) k[b][t][o / GDH][o % GDH] = sk, v[b][t][o / GDH][o % GDH] = sv;
            }
            for (int h = 0; h < GH; h++)
                ref_rope(q[b][t][h], t);
            for (int m = 0; m < kv; m++)
                ref_rope(k[b][t][m], t);
        }
    for (int b = 0; b < GB; b++)
        for (int h = 0; h < GH; h++) {
            const int m = wrong ? h % kv : h / G;
            for (int t = 0; t < GT; t++) {
                double sc[GT], mx = -INFINITY, z = 0;
                for (int u = 0; u <= t; u++) {
                    sc[u] = 0;
                    for (int j = 0; j < GDH; j++)
                        sc[u] += q[b][t][h][j] * k[b][u][m][j];
                    sc[u] /= sqrt((double)GDH);
                    mx = fmax(mx, sc[u]);
                }
                for (int u = 0; u <= t; u++)
                    z += sc[u] = exp(sc[u] - mx);
                for (int j = 0; j < GDH; j++) {
                    double s = 0;
                    for (int u = 0; u <= t; u++)
                        s += sc[u] / z * v[b][u][m][j];
                    a[b][t][h * GDH + j] = s;
                }
            }
        }
    for (int b = 0; b < GB; b++)
        for (int t = 0; t < GT; t++)
            for (int o = 0; o < GC; o++) {
                double s = 0;
                for (int i = 0; i < GC; i++)
                    s += a[b][t][i] * w->wo[i * GC + o];
                y[(b * GT + t) * GC + o] = s;
            }
}

static double ref_loss(int kv, const double *x, const gqa_weights *w, const float *r) {
    double y[GB * GT * GC], l = 0;
    ref_gqa(kv, 0, x, w, y);
    for (int i = 0; i < GB * GT * GC; i++)
        l += y[i] * r[i];
    return l;
}

/* mpmd_rope_attention's output and input gradient (of sum(y * r)) */
static int lib_gqa(int kv, const float *x, const gqa_weights *w, const float *r, float *y, float *gx) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value xv = mpmd_param(g, "x", MPMD_SHAPE(GB, GT, GC), MPMD_ZEROS);
    mpmd_value yv = mpmd_rope_attention(g, "attn", xv, GH, kv, (float)GBASE);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, yv, mpmd_constant(g, MPMD_F32, MPMD_SHAPE(GB, GT, GC), r)),
                               MPMD_ALL_AXES, MPMD_DROP_DIMS);
    mpmd_value gv;
    mpmd_grad(g, loss, 1, &xv, &gv);
    mpmd_keep(g, yv), mpmd_keep(g, gv);
    if (mpmd_graph_status(g) != MPMD_OK) {
        CHECK(0, "rope attention, %d kv heads: %s", kv, mpmd_graph_error(g));
        mpmd_graph_free(g);
        return 0;
    }
    mpmd_exec *ex = tu_exec(g, 1);
    const size_t sx = sizeof(float) * GB * GT * GC, sq = sizeof(float) * GC * GC,
                 skv = sizeof(float) * GC * kv * GDH;
    int ok = mpmd_exec_write(ex, xv, x, sx) == MPMD_OK &&
             mpmd_exec_write(ex, mpmd_lookup(g, "attn/q/kernel"), w->wq, sq) == MPMD_OK &&
             mpmd_exec_write(ex, mpmd_lookup(g, "attn/k/kernel"), w->wk, skv) == MPMD_OK &&
             mpmd_exec_write(ex, mpmd_lookup(g, "attn/v/kernel"), w->wv, skv) == MPMD_OK &&
             mpmd_exec_write(ex, mpmd_lookup(g, "attn/o/kernel"), w->wo, sq) == MPMD_OK &&
             mpmd_exec_run(ex) == MPMD_OK && mpmd_exec_read(ex, yv, y, sx) == MPMD_OK &&
             mpmd_exec_read(ex, gv, gx, sx) == MPMD_OK;
    CHECK(ok, "rope attention, %d kv heads: %s", kv, mpmd_exec_error(ex));
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return ok;
}

static void test_grouped_query_reference(void) {
    static gqa_weights w;
    float x[GB * GT * GC], r[GB * GT * GC], y[GB * GT * GC], gx[GB * GT * GC];
    static double xd[GB * GT * GC], yr[GB * GT * GC], yw[GB * GT * GC], gr[GB * GT * GC];
    tu_fill(x, GB * GT * GC, 41), tu_fill(r, GB * GT * GC, 42);
    tu_fill(w.wq, GC * GC, 43), tu_fill(w.wk, GC * GC, 44), tu_fill(w.wv, GC * GC, 45),
        tu_fill(w.wo, GC * GC, 46);
    /* scores of order one: weights of scale 1 / sqrt(width) */
    for (int i = 0; i < GC * GC; i++) {
        const float s = 1.0f / sqrtf((float)GC);
        w.wq[i] *= 2 * s, w.wk[i] *= 2 * s, w.wv[i] *= s, w.wo[i] *= s;
    }
    for (int i = 0; i < GB * GT * GC; i++)
        xd[i] = x[i];
    for (int kv = 1; kv <= GH; kv *= 2) {
        if (!lib_gqa(kv, x, &w, r, y, gx)) continue;
        ref_gqa(kv, 0, xd, &w, yr);
        double worst = 0, scale = 0;
        int at = 0;
        for (int i = 0; i < GB * GT * GC; i++) {
            double e = fabs(y[i] - yr[i]) / fmax(1.0, fabs(yr[i]));
            if (e > worst) worst = e, at = i;
            scale = fmax(scale, fabs(yr[i]));
        }
        CHECK(
            worst < 1e-5 && scale > 0.1,
            "rope attention, %d of %d kv heads: output element %d (b %d, t %d, c %d) is %.7g, the reference "
            "%.7g (error %.3g of max(1, |ref|), tolerance 1e-5; largest |ref| %.3g)",
            kv, GH, at, at / (GT * GC), at / GC % GT, at % GC, y[at], yr[at], worst, scale);
        /* the input's gradient: central differences of the reference */
        double gscale = 0;
        for (int i = 0; i < GB * GT * GC; i++) {
            const double h = 1e-5, save = xd[i];
            xd[i] = save + h;
            double lp = ref_loss(kv, xd, &w, r);
            xd[i] = save - h;
            double lm = ref_loss(kv, xd, &w, r);
            xd[i] = save;
            gr[i] = (lp - lm) / (2 * h);
            gscale = fmax(gscale, fabs(gr[i]));
        }
        worst = 0, at = 0;
        for (int i = 0; i < GB * GT * GC; i++) {
            double e = fabs(gx[i] - gr[i]) / fmax(1.0, gscale);
            if (e > worst) worst = e, at = i;
        }
        CHECK(
            worst < 1e-5 && gscale > 0.1,
            "rope attention, %d of %d kv heads: d/dx element %d (b %d, t %d, c %d) is %.7g, the reference's "
            "%.7g (error %.3g of max(1, max|ref|) = %.3g, tolerance 1e-5)",
            kv, GH, at, at / (GT * GC), at / GC % GT, at % GC, gx[at], gr[at], worst, fmax(1.0, gscale));
        /* the data tell the groupings apart: with 2 key/value heads, query
         * head h reading head h % 2 (not h / 2) moves the output far past
         * the tolerance (with 1 or 4 the two are the same) */
        if (kv == 2) {
            ref_gqa(kv, 1, xd, &w, yw);
            double apart = 0;
            for (int i = 0; i < GB * GT * GC; i++)
                apart = fmax(apart, fabs(yw[i] - yr[i]) / fmax(1.0, fabs(yr[i])));
            CHECK(apart > 1e-2, "the groupings h / 2 and h %% 2 differ by only %.3g here", apart);
        }
    }
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
    CHECK(mpmd_set_layer_dropout(g, 0.1f, key) != MPMD_OK &&
              strstr(mpmd_graph_error(g), "i32 with 2 elements"),
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
    CHECK(strstr(m, "blk") && strstr(m, "3 key/value heads") && strstr(m, "4 query heads"), "kv heads: %s",
          m);
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
    test_grouped_query_reference();
    test_layer_dropout();
    test_errors();
    return tu_report("test_llama");
}
