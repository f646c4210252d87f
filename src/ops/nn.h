/* nn.h - the neural-network op family's descriptors, shared by the op
 * constructors (src/ops/nn.c) and the CPU kernels (src/backend/cpu/nn.c).
 *
 * Where each attribute is kept, op by op (read and set them through the
 * accessors at the end of this file). Public ops (constructors in mpmd.h):
 *   matmul          ia[0] = flags (MPMD_TRANS_A | MPMD_TRANS_B); ia[1] = 1: the
 *                   product is scaled by fa[0] (mpmd_matmul_scaled)
 *   softmax, log_softmax, softmax_causal   (last axis)
 *   layer_norm      inputs x, gamma, beta; fa[0] = eps
 *   rms_norm        inputs x, scale; fa[0] = eps
 *   rope            input x [..., T, H, D]; fa[0] = base, ia[0] = the first
 *                   position, ia[1] = 1: the inverse rotation (its gradient);
 *                   fa[1..3] = Llama 3.1's factor, low and high frequency
 *                   factors (factor 0: none), ia[2] = its original positions
 *   rope_at         inputs x [..., T, H, D], positions i32 [..., T] or [T];
 *                   attributes as rope's (ia[0] unused): row t of x turned
 *                   by its own position
 *   embedding       inputs table [V, C], ids i32 [...]
 *   cross_entropy   inputs logits [..., V], labels i32 [...]
 *   attention       inputs q, k, v [B, T, H, D] (one type); ia[0] = 1: causal,
 *                   fa[0] = the scale. o[b, i, h, :] = sum_j p_j v[b, j, h, :]
 *                   with p = softmax_j(scale q[b, i, h, :] . k[b, j, h, :]) over
 *                   j (j <= i when causal): scores, softmax and the weighted
 *                   sum in one op that never stores the [T, T] scores
 *
 * Internal ops, emitted only by the gradient rules:
 *   softmax_grad(y, gy), softmax_causal_grad(y, gy), log_softmax_grad(y, gy)
 *   layer_norm_grad_x(x, gamma, gy)       fa[0] = eps
 *   layer_norm_grad_gamma(x, gy)          fa[0] = eps
 *   rms_norm_grad_x(x, scale, gy)         fa[0] = eps
 *   rms_norm_grad_scale(x, gy)            fa[0] = eps
 *   embedding_grad(ids, gy)               result [V, C], ia[0] = V
 *   cross_entropy_grad(logits, labels, y, gy)  y is the forward's output
 *   attention_grad(q, k, v, o, go)        result [3, B, T, H, D]: dq, dk, dv
 *                                         stacked; ia[0], fa[0] as the
 *                                         forward's, o its output
 */
#ifndef MPMD_OPS_NN_H
#define MPMD_OPS_NN_H

#include "../graph/graph.h"

extern const mpmd_op_desc mpmd_op_matmul;
extern const mpmd_op_desc mpmd_op_softmax, mpmd_op_log_softmax, mpmd_op_softmax_causal;
extern const mpmd_op_desc mpmd_op_softmax_grad, mpmd_op_softmax_causal_grad, mpmd_op_log_softmax_grad;
extern const mpmd_op_desc mpmd_op_layer_norm, mpmd_op_layer_norm_grad_x, mpmd_op_layer_norm_grad_gamma;
extern const mpmd_op_desc mpmd_op_rms_norm, mpmd_op_rms_norm_grad_x, mpmd_op_rms_norm_grad_scale;
extern const mpmd_op_desc mpmd_op_rope, mpmd_op_rope_at;
extern const mpmd_op_desc mpmd_op_embedding, mpmd_op_embedding_grad;
extern const mpmd_op_desc mpmd_op_cross_entropy, mpmd_op_cross_entropy_grad;
extern const mpmd_op_desc mpmd_op_attention, mpmd_op_attention_grad;

/* The rope ops' constructor (mpmd_rope, mpmd_rope_at and the rotary
 * layers): positions MPMD_NONE for the offset form; scaling NULL for none;
 * fn names the public call in messages. */
mpmd_value mpmd_rope_op(mpmd_graph *g, const char *fn, mpmd_value x, mpmd_value positions, float base,
                        const mpmd_rope_scaling *scaling, int64_t offset);
/* 1 when a scaling is none (factor 0) or in range (mpmd.h's rule). */
int mpmd_rope_scaling_ok(const mpmd_rope_scaling *s);

/* The attributes above by name: the constructors and gradient rules set
 * them, the printers, rules and kernels read them. */
/* matmul: flags, and alpha in C = alpha op(A) op(B) (1 unless scaled) */
static inline int mpmd_matmul_flags(const mpmd_node *n) { return (int)n->ia[0]; }
static inline void mpmd_matmul_set_flags(mpmd_node *n, int flags) { n->ia[0] = flags; }
static inline int mpmd_matmul_has_alpha(const mpmd_node *n) { return (n->ia[1] & 1) != 0; }
static inline float mpmd_matmul_alpha(const mpmd_node *n) { return (n->ia[1] & 1) ? n->fa[0] : 1.0f; }
static inline void mpmd_matmul_set_alpha(mpmd_node *n, float alpha) {
    n->ia[1] = 1;
    n->fa[0] = alpha;
}
/* the norms and their gradients: eps */
static inline float mpmd_norm_eps(const mpmd_node *n) { return n->fa[0]; }
static inline void mpmd_norm_set_eps(mpmd_node *n, float eps) { n->fa[0] = eps; }
/* attention and attention_grad: causal, scale */
static inline int mpmd_attention_causal(const mpmd_node *n) { return n->ia[0] != 0; }
static inline float mpmd_attention_scale(const mpmd_node *n) { return n->fa[0]; }
static inline void mpmd_attention_set(mpmd_node *n, int causal, float scale) {
    n->ia[0] = causal != 0;
    n->fa[0] = scale;
}
/* embedding_grad: the table's rows V */
static inline int64_t mpmd_embedding_grad_rows(const mpmd_node *n) { return n->ia[0]; }
static inline void mpmd_embedding_grad_set_rows(mpmd_node *n, int64_t rows) { n->ia[0] = rows; }
/* rope, rope_at: base, the first position (rope), inverse, and Llama 3.1's
 * scaling (factor 0: none) */
static inline float mpmd_rope_base(const mpmd_node *n) { return n->fa[0]; }
static inline int64_t mpmd_rope_offset(const mpmd_node *n) { return n->ia[0]; }
static inline int mpmd_rope_inverse(const mpmd_node *n) { return n->ia[1] != 0; }
static inline float mpmd_rope_factor(const mpmd_node *n) { return n->fa[1]; }
static inline float mpmd_rope_low_freq_factor(const mpmd_node *n) { return n->fa[2]; }
static inline float mpmd_rope_high_freq_factor(const mpmd_node *n) { return n->fa[3]; }
static inline int64_t mpmd_rope_original_positions(const mpmd_node *n) { return n->ia[2]; }
static inline void mpmd_rope_set(mpmd_node *n, float base, int64_t offset, int inverse) {
    n->fa[0] = base;
    n->ia[0] = offset;
    n->ia[1] = inverse != 0;
}
static inline void mpmd_rope_set_scaling(mpmd_node *n, const mpmd_rope_scaling *s) {
    n->fa[1] = s->factor;
    n->fa[2] = s->low_freq_factor;
    n->fa[3] = s->high_freq_factor;
    n->ia[2] = s->original_positions;
}

#endif
