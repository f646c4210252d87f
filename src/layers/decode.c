/* Decoding with a key/value cache (mpmd_set_decode): the form the causal
 * attention layers take when a graph generates, one position (or a few)
 * of each sequence per run.
 *
 * A layer keeps the keys and values of the positions seen so far in two
 * variables named after it, "<layer>/cache/k" and "<layer>/cache/v",
 * [B, L, KV, Dh] for the B sequences of the step, L positions, KV
 * key/value heads (this model rank's) of size Dh, in the compute dtype. A
 * run at positions pos [b, t] (the microbatch's rows) with new q [b, t, H,
 * Dh] and k, v [b, t, KV, Dh]:
 *
 *   one-hot  at[b, i, j]    = (j == pos[b, i])          [b, t, L]
 *   causal   valid[b, i, j] = (j <= pos[b, i])
 *   write    K[b, j] = k[b, i] where at[b, i, j], else the cache's K[b, j]
 *            (one product at^T k per sequence: each written row sums one
 *            1 * k and zeros, so it is k exactly, in any float dtype)
 *   attend   head h (key/value head h / (H / KV), as repeat_kv shares them)
 *            o[b, i, h] = softmax_j(q[b, i, h] . K[b, j, h / rep] / sqrt(Dh),
 *            j with valid[b, i, j]) V[b, j, h / rep]
 *
 * The one-hot and causal masks come from the positions as floats: an f32
 * table [L, 1] holding 0 .. L-1 looked up by the positions (mpmd_embedding,
 * so a position outside [0, L) is the lookup's run-time error naming it),
 * compared with the same numbers laid out as a row. Positions below 2^24
 * are exact in f32, and L is bounded to that. The query heads sharing a
 * key/value head are laid out as rows of one product per key/value head,
 * so the cache is never repeated per query head.
 *
 * Inside the loop the layer reads its microbatch's rows of the cache
 * (mpmd_microbatch), and the written rows, stacked over the microbatches
 * (MPMD_REDUCE_CONCAT), are assigned after the loop on the ranks of the
 * layer's stage; in a graph without a loop the assignment follows at once.
 */
#include "layers.h"

#include "../ops/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Positions must be exact in f32 (the masks compare them as floats). */
#define DECODE_MAX_LEN ((int64_t)1 << 24)

mpmd_status mpmd_set_decode(mpmd_graph *g, mpmd_value positions, int64_t length) {
    const char *fn = "mpmd_set_decode";
    if (!g) return MPMD_ERR_INVALID;
    if (g->status != MPMD_OK) return g->status;
    if (!mpmd_is_value(positions)) { /* off for the layers made after */
        g->decode_len = 0;
        g->decode_positions = MPMD_NONE;
        return MPMD_OK;
    }
    if (!mpmd_check_operands(g, fn, 1, &positions)) return g->status;
    const mpmd_node *pn = mpmd_node_of(g, positions);
    if (pn->type.dtype != MPMD_I32 || pn->type.ndim != 2) {
        mpmd_fail(g, MPMD_ERR_SHAPE, "%s: positions are %s; i32 [sequences, new positions] is expected", fn,
                  mpmd_tstr(g, positions));
        return g->status;
    }
    if (pn->region != MPMD_REGION_PRE) {
        mpmd_fail(
            g, MPMD_ERR_INVALID,
            "%s: positions %%%d is not a before-loop value (an input: the layers in the loop read their "
            "microbatch's rows of it)",
            fn, (int)positions.id);
        return g->status;
    }
    if (length < 1 || length > DECODE_MAX_LEN) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: a cache of %lld positions; between 1 and %lld are expected", fn,
                  (long long)length, (long long)DECODE_MAX_LEN);
        return g->status;
    }
    /* the masks' constants, made once, before the loop */
    float *iota = malloc((size_t)length * sizeof *iota);
    if (!iota) {
        mpmd_fail(g, MPMD_ERR_NOMEM, "%s: out of memory for %lld positions", fn, (long long)length);
        return g->status;
    }
    for (int64_t j = 0; j < length; j++)
        iota[j] = (float)j;
    int saved = g->region;
    g->region = MPMD_REGION_PRE;
    mpmd_value table = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(length, 1), iota);
    mpmd_value row = mpmd_reshape(g, table, MPMD_SHAPE(length));
    mpmd_value neg = mpmd_full(g, -INFINITY, MPMD_SCALAR_SHAPE);
    g->region = saved;
    free(iota);
    if (g->status != MPMD_OK) return g->status;
    g->decode_positions = positions;
    g->decode_len = length;
    g->decode_table = table, g->decode_row = row, g->decode_neg = neg;
    return MPMD_OK;
}

mpmd_value mpmd_decode_positions(mpmd_graph *g, const char *fn, const char *name, int64_t b, int64_t t) {
    mpmd_value pos = g->decode_positions;
    if (g->region == MPMD_REGION_BODY) {
        if (g->n_micro < 1 || mpmd_type_of(g, pos)->dim[0] % g->n_micro)
            return mpmd_fail(g, MPMD_ERR_SHAPE,
                             "%s \"%s\": decode positions %s do not split into %d microbatches of sequences",
                             fn, name, mpmd_tstr(g, pos), g->n_micro);
        pos = mpmd_microbatch(g, pos);
    } else if (g->region != MPMD_REGION_PRE) {
        return mpmd_fail(g, MPMD_ERR_INVALID,
                         "%s \"%s\": a layer that decodes belongs before or in the loop, "
                         "not after it",
                         fn, name);
    }
    const mpmd_type *tp = mpmd_type_of(g, pos);
    if (!tp) return MPMD_NONE;
    if (tp->dim[0] != b || tp->dim[1] != t) {
        char per[200] = "";
        if (g->region == MPMD_REGION_BODY)
            snprintf(per, sizeof per, " (%s per microbatch)", mpmd_tstr(g, pos));
        return mpmd_fail(g, MPMD_ERR_SHAPE,
                         "%s \"%s\": decode positions are %s%s for an input of %lld sequences of %lld new "
                         "positions; [%lld, %lld] is expected",
                         fn, name, mpmd_tstr(g, g->decode_positions), per, (long long)b, (long long)t,
                         (long long)b, (long long)t);
    }
    return pos;
}

/* The cache variable "<scope>/cache/<which>" [B, L, KV, Dh] in dtype dt. */
static mpmd_value cache_var(mpmd_graph *g, const char *fn, const char *which, int64_t b, int64_t kv,
                            int64_t dh, mpmd_dtype dt) {
    char name[600];
    int n = snprintf(name, sizeof name, "%s%scache/%s", g->scope, g->scope[0] ? "/" : "", which);
    if (n < 0 || (size_t)n >= sizeof name)
        return mpmd_fail(g, MPMD_ERR_INVALID, "%s: the layer's scope \"%s\" is too long for its cache's name",
                         fn, g->scope);
    const int64_t B = g->region == MPMD_REGION_BODY ? b * g->n_micro : b;
    return mpmd_variable(g, name, dt, MPMD_SHAPE(B, g->decode_len, kv, dh), MPMD_ZEROS);
}

/* The cache's rows of this microbatch with the t new rows x [b, t, KV, Dh]
 * written at the one-hot positions at [b, t, L] (in x's dtype), stored back
 * after the loop (or at once). */
static mpmd_value cache_write(mpmd_graph *g, const char *fn, const char *which, mpmd_value x, mpmd_value at,
                              mpmd_value written) {
    const mpmd_type tx = *mpmd_type_of(g, x);
    const int64_t b = tx.dim[0], t = tx.dim[1], kv = tx.dim[2], dh = tx.dim[3], L = g->decode_len;
    mpmd_value var = cache_var(g, fn, which, b, kv, dh, tx.dtype);
    const int body = g->region == MPMD_REGION_BODY;
    mpmd_value old = body ? mpmd_microbatch(g, var) : var;
    /* [b, L, t] @ [b, t, KV Dh]: row j is k[i] where pos[i] == j, zeros elsewhere */
    static const int swap_last[3] = {0, 2, 1};
    mpmd_value rows =
        mpmd_matmul(g, mpmd_permute(g, at, swap_last), mpmd_reshape(g, x, MPMD_SHAPE(b, t, kv * dh)), 0);
    mpmd_value cache = mpmd_where(g, written, mpmd_reshape(g, rows, MPMD_SHAPE(b, L, kv, dh)), old);
    if (body) {
        mpmd_value all = mpmd_loop_reduce(g, cache, MPMD_REDUCE_CONCAT);
        int saved = g->region;
        g->region = MPMD_REGION_POST;
        (void)mpmd_assign(g, var, all);
        g->region = saved;
    } else {
        (void)mpmd_assign(g, var, cache);
    }
    return cache;
}

mpmd_value mpmd_decode_attention(mpmd_graph *g, const char *fn, mpmd_value q, mpmd_value k, mpmd_value v,
                                 mpmd_value pos) {
    mpmd_value in[4] = {q, k, v, pos};
    if (!mpmd_check_operands(g, fn, 4, in)) return MPMD_NONE;
    const mpmd_type tq = *mpmd_type_of(g, q), tk = *mpmd_type_of(g, k);
    const int64_t b = tq.dim[0], t = tq.dim[1], H = tq.dim[2], dh = tq.dim[3], kv = tk.dim[2], rep = H / kv;
    const int64_t L = g->decode_len;
    const mpmd_dtype dt = tq.dtype;
    /* the positions as floats [b, t, 1], and the masks [b, t, L] */
    mpmd_value p = mpmd_embedding(g, g->decode_table, pos);
    mpmd_value at = mpmd_compare(g, g->decode_row, p, MPMD_CMP_EQ);
    mpmd_value valid = mpmd_compare(g, g->decode_row, p, MPMD_CMP_LE);
    /* rows of the cache written by this run: [b, L, 1, 1] */
    mpmd_value written =
        mpmd_reshape(g, mpmd_sum(g, at, MPMD_AXES(1), MPMD_DROP_DIMS), MPMD_SHAPE(b, L, 1, 1));
    at = mpmd_cast(g, at, dt), written = mpmd_cast(g, written, dt);
    mpmd_value K = cache_write(g, fn, "k", k, at, written), V = cache_write(g, fn, "v", v, at, written);
    /* q [b, t, KV, rep, Dh] -> [b, KV, rep t, Dh]; K, V [b, L, KV, Dh] -> [b, KV, L, Dh] */
    static const int q_perm[5] = {0, 2, 3, 1, 4}, o_perm[5] = {0, 3, 1, 2, 4}, kv_perm[4] = {0, 2, 1, 3};
    mpmd_value qg =
        mpmd_reshape(g, mpmd_permute(g, mpmd_reshape(g, q, MPMD_SHAPE(b, t, kv, rep, dh)), q_perm),
                     MPMD_SHAPE(b, kv, rep * t, dh));
    mpmd_value s =
        mpmd_matmul_scaled(g, qg, mpmd_permute(g, K, kv_perm), MPMD_TRANS_B, 1.0f / sqrtf((float)dh));
    /* [b, KV, rep, t, L]: each query row masked by its own position */
    s = mpmd_where(g, mpmd_reshape(g, mpmd_cast(g, valid, dt), MPMD_SHAPE(b, 1, 1, t, L)),
                   mpmd_reshape(g, s, MPMD_SHAPE(b, kv, rep, t, L)), mpmd_cast(g, g->decode_neg, dt));
    mpmd_value pr = mpmd_reshape(g, mpmd_softmax(g, s), MPMD_SHAPE(b, kv, rep * t, L));
    mpmd_value o = mpmd_matmul(g, pr, mpmd_permute(g, V, kv_perm), 0); /* [b, KV, rep t, Dh] */
    o = mpmd_permute(g, mpmd_reshape(g, o, MPMD_SHAPE(b, kv, rep, t, dh)), o_perm);
    return mpmd_reshape(g, o, MPMD_SHAPE(b, t, H * dh));
}
