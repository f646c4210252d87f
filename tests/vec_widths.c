/* vec_widths - one training step through the CPU kernels whose loops are
 * built for several vector widths (src/backend/cpu/cpu.h: gelu, sigmoid,
 * silu and their gradients, softmax, log-softmax, cross-entropy, fused
 * attention, layer norm, the fixed-order sums, AdamW), printed as a hash of
 * every result's bits.
 *
 * tests/vec_widths.cmake builds it twice: against the library as it is
 * (the widest clone this CPU runs: AVX-512 or AVX2), and with those kernel
 * files compiled again with MPMD_NO_VEC_CLONES (the x86-64-v2 baseline,
 * 4-wide SSE), and checks that both print the same line. Lengths are odd
 * so that every loop has a tail.
 */
#include "mpmd.h"
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* FNV-1a over bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

int main(void) {
    enum { B = 3, T = 37, H = 2, D = 16, W = H * D, V = 1001, HID = 77 };
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(B * T, W));
    mpmd_value lab = mpmd_input(g, "labels", MPMD_I32, MPMD_SHAPE(B * T));
    mpmd_value w1 = mpmd_param(g, "w1", MPMD_SHAPE(W, HID), MPMD_NORMAL(0.3f));
    mpmd_value w2 = mpmd_param(g, "w2", MPMD_SHAPE(HID, W), MPMD_NORMAL(0.3f));
    mpmd_value wq = mpmd_param(g, "wq", MPMD_SHAPE(W, 3 * W), MPMD_NORMAL(0.3f));
    mpmd_value wo = mpmd_param(g, "wo", MPMD_SHAPE(W, V), MPMD_NORMAL(0.3f));
    mpmd_value gam = mpmd_param(g, "gamma", MPMD_SHAPE(W), MPMD_ONES);
    mpmd_value bet = mpmd_param(g, "beta", MPMD_SHAPE(W), MPMD_ZEROS);
    mpmd_value params[6] = {w1, w2, wq, wo, gam, bet};

    /* a block: layer norm, attention, an MLP with gelu, sigmoid and silu */
    mpmd_value h = mpmd_layer_norm(g, x, gam, bet, 1e-5f);
    mpmd_value qkv = mpmd_reshape(g, mpmd_matmul(g, h, wq, 0), 4, (int64_t[]){B, T, 3 * H, D});
    mpmd_value q = mpmd_slice(g, qkv, 2, 0, H), k = mpmd_slice(g, qkv, 2, H, 2 * H),
               v = mpmd_slice(g, qkv, 2, 2 * H, 3 * H);
    mpmd_value a = mpmd_reshape(g, mpmd_attention(g, q, k, v, 1), 2, (int64_t[]){B * T, W});
    mpmd_value u = mpmd_matmul(g, mpmd_add(g, x, a), w1, 0);
    mpmd_value m = mpmd_add(g, mpmd_gelu(g, u), mpmd_mul(g, mpmd_sigmoid(g, u), mpmd_silu(g, u)));
    mpmd_value y = mpmd_add(g, a, mpmd_matmul(g, m, w2, 0));
    mpmd_value logits = mpmd_matmul(g, y, wo, 0);
    /* the loss: cross-entropy, plus a little of softmax and log-softmax */
    mpmd_value loss = mpmd_mean(g, mpmd_cross_entropy(g, logits, lab), 0, NULL, 0);
    mpmd_value sm = mpmd_mul(g, mpmd_softmax(g, logits), mpmd_log_softmax(g, logits));
    loss = mpmd_add(g, loss, mpmd_mul_scalar(g, mpmd_sum(g, sm, 0, NULL, 0), 1e-3f));
    mpmd_value grads[6];
    if (mpmd_grad(g, loss, 6, params, grads) ||
        mpmd_adamw(g, 6, params, grads, mpmd_scalar(g, 1e-2f),
                   (mpmd_adam_opts){0.9f, 0.999f, 1e-8f, 0.01f, NULL})) {
        fprintf(stderr, "vec_widths: %s\n", mpmd_graph_error(g));
        return 1;
    }
    mpmd_keep(g, loss);
    mpmd_keep(g, logits);
    mpmd_exec *ex = tu_exec(g, 1);
    float *xs = malloc(sizeof(float) * B * T * W);
    int32_t labels[B * T];
    tu_fill(xs, B * T * W, 3);
    for (int i = 0; i < B * T; i++)
        labels[i] = (i * 389) % V;
    mpmd_exec_set_input(ex, x, xs, sizeof(float) * B * T * W);
    mpmd_exec_set_input(ex, lab, labels, sizeof labels);
    uint64_t hash = 1469598103934665603ull;
    float l = 0;
    for (int s = 0; s < 2; s++) { /* two steps: AdamW reads its moments back */
        if (mpmd_exec_run(ex)) {
            fprintf(stderr, "vec_widths: %s\n", mpmd_exec_error(ex));
            return 1;
        }
    }
    mpmd_exec_read(ex, loss, &l, sizeof l);
    hash = fnv(hash, &l, sizeof l);
    float *buf = malloc(sizeof(float) * B * T * V);
    mpmd_exec_read(ex, logits, buf, sizeof(float) * B * T * V);
    hash = fnv(hash, buf, sizeof(float) * B * T * V);
    for (int i = 0; i < 6; i++) {
        mpmd_type t = mpmd_value_type(g, params[i]);
        size_t bytes = sizeof(float) * (size_t)mpmd_type_numel(&t);
        float *p = malloc(bytes);
        mpmd_exec_read(ex, params[i], p, bytes);
        hash = fnv(hash, p, bytes);
        free(p);
    }
    printf("loss %.9g, results' hash %016llx\n", l, (unsigned long long)hash);
    free(buf);
    free(xs);
    mpmd_exec_free(ex);
    mpmd_graph_free(g);
    return 0;
}
