/* mesh.h - which part of each value a point of the mesh holds.
 *
 * The mesh has three axes: D pipeline ranks ("mpmd"), R data-parallel
 * replicas ("data") and M model ranks ("model"). A value outside the loop
 * body lives on the pipeline ranks that run or hold it (the plan's
 * placement); this module says which part of it each replica and model
 * rank of such a pipeline rank holds:
 *
 * - Tensor parallelism (the model axis): a parameter or variable made by
 *   mpmd_param_split is held as model rank m's part of the whole value (the
 *   split axis seen as [groups, M, n / (groups M)], rank m holds [:, m, :]);
 *   the node's type is the part's. Every other value is computed by each
 *   model rank from its own operands: it may differ between model ranks
 *   (it "varies" over the axis, as a split parameter's gradient does) or be
 *   the same on all of them (the gradient of a parameter every model rank
 *   holds whole).
 * - FSDP (the data axis): a sharded value is held as replica d's shard of
 *   it: ceil(numel / R) elements, [d L, min((d + 1) L, numel)), the last
 *   shards padded (a shard may be all padding when numel < R); the padding
 *   is never read. A replica gathers every replica's shard to use the value
 *   whole.
 *
 * The compiler decides which values are sharded (compiler/shard.c) and
 * fills it in once; the runtime, the wires and the checkpoints
 * read it and never change it. */
#ifndef MPMD_MESH_H
#define MPMD_MESH_H

#include "graph/graph.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mpmd_mesh {
    const mpmd_graph *g;
    int replicas;          /* R: data-parallel replicas of every pipeline rank */
    int model;             /* M: model ranks of every pipeline rank and replica */
    unsigned char *shard;  /* [n_nodes] 1: held as one shard per replica (FSDP); NULL: none */
    unsigned char *varies; /* [n_nodes] 1: differs between model ranks; NULL when M is 1 */
} mpmd_mesh;

/* Fill in the mesh and the model-axis variance of every value (shard
 * stays NULL until the compiler sets it). Non-zero when out of memory. */
int mpmd_mesh_init(mpmd_mesh *l, const mpmd_graph *g, int replicas, int model);
void mpmd_mesh_free(mpmd_mesh *l);

/* ---- FSDP's shards over the data axis ---- */

static inline int mpmd_sharded(const mpmd_mesh *l, int node) { return l->shard && l->shard[node]; }
/* Elements of each replica's shard of value node: ceil(numel / replicas). */
int64_t mpmd_shard_len(const mpmd_mesh *l, int node);
/* Replica d's part of the value: its first element and element count (the
 * rest of its shard is padding, never read). */
void mpmd_shard_part(const mpmd_mesh *l, int node, int replica, int64_t *lo, int64_t *count);
/* Bytes of value node a replica holds outside the body: its shard's
 * (padding included) when sharded, else the value's; and a whole gathered
 * value's (every shard, padding included). */
size_t mpmd_held_bytes(const mpmd_mesh *l, int node);
size_t mpmd_gathered_bytes(const mpmd_mesh *l, int node);

/* ---- tensor parallelism's splits over the model axis ---- */

/* Whether parameter or variable `node` is split over the model axis (a
 * graph with mpmd_set_tensor_parallel > 1), and how (mpmd_param_split). */
int mpmd_split_of(const mpmd_graph *g, int node, int *axis, int *groups);
/* Its whole type (the node's type is one model rank's part). */
mpmd_type mpmd_split_whole_type(const mpmd_graph *g, int node);
/* Model rank m's part of the whole value: copied into the whole
 * (to_whole) or out of it; a value not split is copied whole. */
void mpmd_split_copy(const mpmd_graph *g, int node, int m, void *whole, void *part, int to_whole);
/* Whether value node differs between model ranks. */
static inline int mpmd_varies(const mpmd_mesh *l, int node) { return l->varies && l->varies[node]; }

/* ---- what a mesh point holds ---- */

/* Whether a replica and model rank hold only a part of value node (an FSDP
 * shard, or a split over the model axis): no pointer to the whole value. */
int mpmd_mesh_partial(const mpmd_mesh *l, int node);
/* The elements of value node that (replica, model rank) count when every
 * element of the value is to be counted once over the replicas and model
 * ranks that hold it (a global norm): *lo and *count index the buffer the
 * point holds (its shard when sharded). A model-varying value is counted
 * on each model rank (its own part), split over the replicas; a value the
 * same on every model rank, split over replicas and model ranks. */
void mpmd_mesh_count_part(const mpmd_mesh *l, int node, int replica, int model, int64_t *lo, int64_t *count);

#ifdef __cplusplus
}
#endif

#endif
