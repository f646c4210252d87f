/* bench_ops - the hot kernels of a GPT-2 124M training step, one by one.
 *
 * Shapes: tokens 256 (batch 4 x seq 64), width 768, 12 heads of 64, MLP
 * 3072, vocab 50257 (LM head tied to the token embedding). Each kernel is
 * timed alone, straight through the CPU backend's kernel table on buffers of
 * random data (the graph only describes the node): the median of at least 5
 * runs after one warm-up. The backward kernels are the very nodes mpmd_grad
 * emits for the forward op.
 *
 * One JSON object per kernel on stdout, one per line:
 *   {"bench":"ops","kernel":..,"op":..,"shape":..,"threads":..,"ms":..,
 *    "gflops":..}  for products (2 M N K / time), "gbs":.. for the others
 *   (bytes of the inputs and the output / time; for the embedding gather,
 *   the rows it reads instead of the whole table).
 * The first line is the single-thread sgemm yardstick (1024^3).
 *
 * Options: --threads N (default 1), --filter S (only kernels whose name
 * contains S).
 */
#include "program.h"
#include "backend/cpu/cpu.h"
#include "bench_util.h"
#include "graph/graph.h"
#include "mpmd.h"
#include "ops/nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TOKENS = 256, WIDTH = 768, HEADS = 12, SEQ = 64, MLP = 3072, VOCAB = 50257 };

static int g_threads = 1;
static void *g_dev; /* the CPU backend's instance: its pool runs the kernels' threads */
static const char *g_filter = NULL;

static void *xmalloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) {
        fprintf(stderr, "bench_ops: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* Deterministic data: floats in [-1, 1), ints in [0, 1000) (valid ids and
 * labels for every table and vocabulary here). */
static void fill(void *buf, const mpmd_type *t, uint64_t seed) {
    int64_t n = mpmd_type_numel(t);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        if (t->dtype == MPMD_I32)
            ((int32_t *)buf)[i] = (int32_t)((s >> 20) % 1000);
        else
            ((float *)buf)[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* Time node v's kernel; prints its JSON line. flops > 0: a product. */
static void bench_node(const mpmd_graph *g, mpmd_value v, const char *label, double flops) {
    if (g_filter && !strstr(label, g_filter)) return;
    const mpmd_node *n = mpmd_node_of(g, v);
    if (!n) {
        fprintf(stderr, "bench_ops: %s: no such node\n", label);
        exit(1);
    }
    const mpmd_kernel *e = mpmd_cpu_find(n->op);
    if (!e) {
        fprintf(stderr, "bench_ops: %s: no CPU kernel for %s\n", label, n->op->name);
        exit(1);
    }
    void *in[8];
    const mpmd_type *ty[8];
    double bytes = (double)mpmd_type_bytes(&n->type);
    char shape[512];
    size_t k = 0;
    shape[0] = '\0';
    for (int i = 0; i < n->n_in && i < 8; i++) {
        ty[i] = mpmd_type_of(g, mpmd_in(n, i));
        in[i] = xmalloc(mpmd_type_bytes(ty[i]));
        fill(in[i], ty[i], (uint64_t)i + 1);
        /* a gather reads only the rows it copies, not the whole table */
        if (!(n->op == &mpmd_op_embedding && i == 0)) bytes += (double)mpmd_type_bytes(ty[i]);
        char tb[160];
        if (k < sizeof shape)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%s", i ? " " : "",
                                  mpmd_type_str(ty[i], tb, sizeof tb));
    }
    if (n->op == &mpmd_op_embedding) bytes += (double)mpmd_type_bytes(&n->type);
    void *out = xmalloc(mpmd_type_bytes(&n->type));
    size_t sb = e->scratch ? e->scratch(g, n) : 0;
    void *scratch = sb ? xmalloc(sb) : NULL;
    char err[512] = "";
    mpmd_kargs a = {g, n, out, in, ty, g_threads, scratch, 0, err, sizeof err, g_dev};
    double t[64];
    int reps = 0;
    if (e->fn(&a)) { /* warm-up; also checks the inputs */
        fprintf(stderr, "bench_ops: %s: %s\n", label, err);
        exit(1);
    }
    double start = bench_now();
    while (reps < (bench_smoke() ? 1 : 64) && (reps < 5 || bench_now() - start < 0.3)) {
        double t0 = bench_now();
        e->fn(&a);
        t[reps++] = bench_now() - t0;
    }
    double med = bench_median(t, reps);
    if (flops > 0)
        printf(
            "{\"bench\":\"ops\",\"kernel\":\"%s\",\"op\":\"%s\",\"shape\":\"%s\",\"threads\":%d,\"ms\":%.4f,"
            "\"gflops\":%.2f}\n",
            label, n->op->name, shape, g_threads, med * 1e3, flops / med / 1e9);
    else
        printf(
            "{\"bench\":\"ops\",\"kernel\":\"%s\",\"op\":\"%s\",\"shape\":\"%s\",\"threads\":%d,\"ms\":%.4f,"
            "\"gbs\":%.2f}\n",
            label, n->op->name, shape, g_threads, med * 1e3, bytes / med / 1e9);
    fflush(stdout);
    for (int i = 0; i < n->n_in && i < 8; i++)
        free(in[i]);
    free(out);
    free(scratch);
}

/* The node that mpmd_grad made with this op name for forward node fwd. */
static mpmd_value find_bwd(const mpmd_graph *g, mpmd_value fwd, const char *op) {
    for (int i = 0; i < mpmd_graph_num_values(g); i++) {
        const mpmd_node *n = mpmd_node_of(g, (mpmd_value){i});
        if (n->is_bwd && n->fwd == fwd.id && strcmp(n->op->name, op) == 0) return (mpmd_value){i};
    }
    fprintf(stderr, "bench_ops: no %s node for %%%d\n", op, (int)fwd.id);
    exit(1);
}

static void check_graph(const mpmd_graph *g) {
    if (mpmd_graph_status(g) != MPMD_OK) {
        fprintf(stderr, "bench_ops: graph error: %s\n", mpmd_graph_error(g));
        exit(1);
    }
}

/* y = op(x) and loss = sum(y * r): the graph holds the forward node and the
 * backward nodes mpmd_grad emits for it. */
static mpmd_value with_grad(mpmd_graph *g, mpmd_value y, int nw, const mpmd_value *wrt) {
    mpmd_type t = mpmd_value_type(g, y);
    mpmd_value r = mpmd_full(g, 0.5f, t.ndim, t.dim);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, y, r), 0, NULL, 0);
    mpmd_value grads[8];
    mpmd_grad(g, loss, nw, wrt, grads);
    check_graph(g);
    return y;
}

/* The dense layers: y = x W, dx = dy W^T, dW = x^T dy (all three products
 * as mpmd_grad emits them), and the tied LM head y = x E^T. */
static void bench_matmuls(void) {
    static const struct {
        const char *name;
        int64_t k, n;
    } dense[] = {{"qkv", WIDTH, 3 * WIDTH},
                 {"attn_out", WIDTH, WIDTH},
                 {"mlp_up", WIDTH, MLP},
                 {"mlp_down", MLP, WIDTH}};
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) {
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value x = mpmd_param(g, "x", MPMD_SHAPE(4, SEQ, dense[i].k), MPMD_ZEROS);
        mpmd_value w = mpmd_param(g, "w", MPMD_SHAPE(dense[i].k, dense[i].n), MPMD_ZEROS);
        mpmd_value p[2] = {x, w};
        mpmd_value y = with_grad(g, mpmd_matmul(g, x, w, 0), 2, p);
        double fl = 2.0 * TOKENS * (double)dense[i].k * (double)dense[i].n;
        char label[64];
        snprintf(label, sizeof label, "matmul_%s_fwd", dense[i].name);
        bench_node(g, y, label, fl);
        /* the first matmul of the backward is dx, the second dW (in the rule's order) */
        int seen = 0;
        for (int j = y.id + 1; j < mpmd_graph_num_values(g); j++) {
            const mpmd_node *n = mpmd_node_of(g, (mpmd_value){j});
            if (n->is_bwd && n->fwd == y.id && strcmp(n->op->name, "matmul") == 0) {
                snprintf(label, sizeof label, "matmul_%s_%s", dense[i].name, seen++ ? "dw" : "dx");
                bench_node(g, (mpmd_value){j}, label, fl);
            }
        }
        mpmd_graph_free(g);
    }
    /* LM head tied to the embedding table [V, C]: logits = x E^T */
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_param(g, "x", MPMD_SHAPE(4, SEQ, WIDTH), MPMD_ZEROS);
    mpmd_value e = mpmd_param(g, "wte", MPMD_SHAPE(VOCAB, WIDTH), MPMD_ZEROS);
    mpmd_value p[2] = {x, e};
    mpmd_value y = with_grad(g, mpmd_matmul(g, x, e, MPMD_TRANS_B), 2, p);
    double fl = 2.0 * TOKENS * (double)WIDTH * VOCAB;
    bench_node(g, y, "matmul_lm_head_fwd", fl);
    int seen = 0;
    for (int j = y.id + 1; j < mpmd_graph_num_values(g); j++) {
        const mpmd_node *n = mpmd_node_of(g, (mpmd_value){j});
        if (n->is_bwd && n->fwd == y.id && strcmp(n->op->name, "matmul") == 0)
            bench_node(g, (mpmd_value){j}, seen++ ? "matmul_lm_head_dw" : "matmul_lm_head_dx", fl);
    }
    mpmd_graph_free(g);
    /* attention scores and mixing, batched over 4 x 12 heads */
    g = mpmd_graph_new();
    mpmd_value q = mpmd_param(g, "q", MPMD_SHAPE(4, HEADS, SEQ, WIDTH / HEADS), MPMD_ZEROS);
    mpmd_value k = mpmd_param(g, "k", MPMD_SHAPE(4, HEADS, SEQ, WIDTH / HEADS), MPMD_ZEROS);
    mpmd_value s = mpmd_matmul(g, q, k, MPMD_TRANS_B);
    mpmd_value o = mpmd_matmul(g, s, k, 0);
    check_graph(g);
    fl = 2.0 * 4 * HEADS * SEQ * SEQ * (WIDTH / HEADS);
    bench_node(g, s, "matmul_attn_scores_fwd", fl);
    bench_node(g, o, "matmul_attn_mix_fwd", fl);
    mpmd_graph_free(g);
}

static void bench_layer_norm(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_param(g, "x", MPMD_SHAPE(4, SEQ, WIDTH), MPMD_ZEROS);
    mpmd_value ga = mpmd_param(g, "gamma", MPMD_SHAPE(WIDTH), MPMD_ONES);
    mpmd_value be = mpmd_param(g, "beta", MPMD_SHAPE(WIDTH), MPMD_ZEROS);
    mpmd_value p[3] = {x, ga, be};
    mpmd_value y = with_grad(g, mpmd_layer_norm(g, x, ga, be, 1e-5f), 3, p);
    bench_node(g, y, "layer_norm_fwd", 0);
    bench_node(g, find_bwd(g, y, "layer_norm_grad_x"), "layer_norm_grad_x", 0);
    bench_node(g, find_bwd(g, y, "layer_norm_grad_gamma"), "layer_norm_grad_gamma", 0);
    mpmd_graph_free(g);
}

static void bench_softmax(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value s = mpmd_param(g, "s", MPMD_SHAPE(4, HEADS, SEQ, SEQ), MPMD_ZEROS);
    mpmd_value y = with_grad(g, mpmd_softmax_causal(g, s), 1, &s);
    bench_node(g, y, "softmax_causal_fwd", 0);
    bench_node(g, find_bwd(g, y, "softmax_causal_grad"), "softmax_causal_bwd", 0);
    mpmd_graph_free(g);
}

/* Fused causal attention on q, k, v [4, T, 12, 64], at the file's 64
 * positions and at GPT-2's 1024, forward and backward. flops: the products
 * on the causal half of the scores, 2 B H T^2 D for the forward (Q K^T and
 * P V) and 5 B H T^2 D for the backward (S again, dP, dQ, dK, dV). */
static void bench_attention(void) {
    static const int64_t seqs[2] = {SEQ, 1024};
    for (int i = 0; i < 2; i++) {
        int64_t t = seqs[i], dh = WIDTH / HEADS;
        mpmd_graph *g = mpmd_graph_new();
        mpmd_value q = mpmd_param(g, "q", MPMD_SHAPE(4, t, HEADS, dh), MPMD_ZEROS);
        mpmd_value k = mpmd_param(g, "k", MPMD_SHAPE(4, t, HEADS, dh), MPMD_ZEROS);
        mpmd_value v = mpmd_param(g, "v", MPMD_SHAPE(4, t, HEADS, dh), MPMD_ZEROS);
        mpmd_value p[3] = {q, k, v};
        mpmd_value y = with_grad(g, mpmd_attention(g, q, k, v, 1), 3, p);
        double fl = 2.0 * 4 * HEADS * (double)t * (double)t * (double)dh;
        char label[64];
        snprintf(label, sizeof label, "attention_seq%lld_fwd", (long long)t);
        bench_node(g, y, label, fl);
        snprintf(label, sizeof label, "attention_seq%lld_bwd", (long long)t);
        bench_node(g, find_bwd(g, y, "attention_grad"), label, 2.5 * fl);
        mpmd_graph_free(g);
    }
}

static void bench_cross_entropy(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value logits = mpmd_param(g, "logits", MPMD_SHAPE(4, SEQ, VOCAB), MPMD_ZEROS);
    mpmd_value labels = mpmd_input(g, "labels", MPMD_I32, MPMD_SHAPE(4, SEQ));
    mpmd_value y = with_grad(g, mpmd_cross_entropy(g, logits, labels), 1, &logits);
    bench_node(g, y, "cross_entropy_fwd", 0);
    bench_node(g, find_bwd(g, y, "cross_entropy_grad"), "cross_entropy_bwd", 0);
    mpmd_graph_free(g);
}

static void bench_embedding(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value table = mpmd_param(g, "wte", MPMD_SHAPE(VOCAB, WIDTH), MPMD_ZEROS);
    mpmd_value ids = mpmd_input(g, "ids", MPMD_I32, MPMD_SHAPE(4, SEQ));
    mpmd_value y = with_grad(g, mpmd_embedding(g, table, ids), 1, &table);
    bench_node(g, y, "embedding_fwd", 0);
    bench_node(g, find_bwd(g, y, "embedding_grad"), "embedding_bwd", 0);
    mpmd_graph_free(g);
}

static void bench_gelu(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_param(g, "x", MPMD_SHAPE(4, SEQ, MLP), MPMD_ZEROS);
    mpmd_value y = with_grad(g, mpmd_gelu(g, x), 1, &x);
    bench_node(g, y, "gelu_fwd", 0);
    bench_node(g, find_bwd(g, y, "gelu_grad"), "gelu_bwd", 0);
    mpmd_graph_free(g);
}

/* The yardstick: C[1024,1024] = A B on one thread through mpmd_sgemm. */
static void bench_sgemm(void) {
    if (g_filter && !strstr("sgemm_1024", g_filter)) return;
    const int64_t n = 1024;
    mpmd_type t = {MPMD_F32, 2, {n, n}};
    float *a = xmalloc((size_t)(n * n) * 4), *b = xmalloc((size_t)(n * n) * 4),
          *c = xmalloc((size_t)(n * n) * 4);
    fill(a, &t, 1);
    fill(b, &t, 2);
    double ts[7];
    mpmd_sgemm(1, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < 7; r++) {
        double t0 = bench_now();
        mpmd_sgemm(1, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        ts[r] = bench_now() - t0;
    }
    double med = bench_median(ts, 7);
    printf("{\"bench\":\"ops\",\"kernel\":\"sgemm_1024\",\"op\":\"cblas_sgemm\",\"shape\":\"f32[1024,1024] "
           "f32[1024,1024]\",\"threads\":1,\"ms\":%.4f,\"gflops\":%.2f}\n",
           med * 1e3, 2.0 * n * n * n / med / 1e9);
    free(a), free(b), free(c);
}

int main(int argc, char **argv) {
    program_start("bench_ops", argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            g_threads = atoi(argv[++i]);
            if (g_threads < 1) {
                fprintf(stderr, "bench_ops: --threads must be >= 1\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--filter") && i + 1 < argc) {
            g_filter = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_ops [--threads N] [--filter NAME]\n");
            return 2;
        }
    }
    char why[256];
    const mpmd_backend *cpu = mpmd_backend_get("cpu");
    if (!cpu || !(g_dev = cpu->device.open(0, g_threads, why, sizeof why))) {
        fprintf(stderr, "bench_ops: opening the CPU backend: %s\n", cpu ? why : "not built");
        return 1;
    }
    bench_sgemm();
    bench_matmuls();
    bench_layer_norm();
    bench_softmax();
    bench_attention();
    bench_cross_entropy();
    bench_embedding();
    bench_gelu();
    cpu->device.close(g_dev);
    return 0;
}
