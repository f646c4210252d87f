/* mlp_model.h - the small MLP the pipeline tests and benchmarks share: one
 * pipeline stage per layer, cheap enough to compile plans of hundreds of
 * stages. Shared by the tests (tu_build_mlp) and bench/bench_pipeline.
 *
 * The step graph (mlp_build):
 *
 *   inputs  "x", "y"   f32 [micro * rows_per_mb, width]
 *   loop over `micro` microbatches (mpmd_loop_begin):
 *     h = x
 *     h = dense_l(h), l = 0 .. layers-1           width -> width, with bias;
 *                                                 tanh and a stage marker
 *                                                 after every layer but the
 *                                                 last
 *     loss = mean((h - y)^2) / micro              a final marker closes the
 *                                                 last stage
 *     grads = d loss / d params                   mpmd_grad, all parameters
 *     loss and every gradient loop-reduced with ADD
 *   after the loop: SGD (lr 0.05) on every parameter; the summed loss is
 *   kept.
 *
 * Parameter names: dense_<l>/kernel, dense_<l>/bias. The nodes are made in
 * this order on every call, so two graphs built with the same arguments are
 * identical (the tests compare hashes across runs).
 */
#ifndef MLP_MODEL_H
#define MLP_MODEL_H

#include "mpmd.h"

typedef struct mlp_model {
    mpmd_graph *g; /* owned by the caller: mpmd_graph_free */
    mpmd_value x, y, loss;
} mlp_model;

/* Build the step described above. Returns MPMD_OK, the graph's first error
 * (its message is mpmd_graph_error(m->g)) or MPMD_ERR_NOMEM. m->g is set
 * in every case, NULL only if no graph could be made; the caller frees it
 * with mpmd_graph_free whether or not building succeeded. */
mpmd_status mlp_build(int layers, int micro, int rows_per_mb, int width, mlp_model *m);

#endif
