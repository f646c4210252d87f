/* layers.h - what the attention layers (src/layers/layers.c) share with
 * their decoding form (src/layers/decode.c, mpmd_set_decode).
 */
#ifndef MPMD_LAYERS_H
#define MPMD_LAYERS_H

#include "../graph/graph.h"

/* 1 while the graph decodes (mpmd_set_decode with positions). */
static inline int mpmd_decoding(const mpmd_graph *g) { return g->decode_len > 0; }

/* The decode positions of a layer whose input is [b, t, C]: the rows of
 * the graph's positions this layer's microbatch reads (i32 [b, t]), or
 * MPMD_NONE after an error naming fn and the layer "name". */
mpmd_value mpmd_decode_positions(mpmd_graph *g, const char *fn, const char *name, int64_t b, int64_t t);

/* Causal attention of t new positions against the layer's key/value cache
 * (mpmd_set_decode): q [b, t, H, Dh] and k, v [b, t, KV, Dh] (KV dividing
 * H; rotated already where the layer rotates), pos the layer's positions
 * (mpmd_decode_positions). Makes the cache variables "<scope>/cache/k" and
 * "<scope>/cache/v", writes k and v into them at pos (assigned after the
 * loop, or at once without one), and returns the attention's output
 * [b, t, H Dh]. */
mpmd_value mpmd_decode_attention(mpmd_graph *g, const char *fn, mpmd_value q, mpmd_value k, mpmd_value v,
                                 mpmd_value pos);

#endif
