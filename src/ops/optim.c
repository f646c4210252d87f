/* Optimizers as graph ops: SGD and Adam/AdamW with optax's semantics.
 *
 * An optimizer is built after the microbatch loop from the parameters and
 * their loop-reduced gradients. Each parameter gets one fused update op that
 * rewrites the parameter (and its moments) in place, so a training step is
 * one static, replayable program (as ggml-opt does it). The optimizer state
 * lives in named variables, readable and checkpointable by name:
 *
 *   "optim/step"          i32 scalar, the number of Adam steps taken
 *   "optim/mu/<param>"    first moment of parameter <param>
 *   "optim/nu/<param>"    second moment of parameter <param>
 *
 * The step counter is incremented once per step by its own op, created
 * before the updates; every update takes that op's token as an input, so
 * "updates read the incremented step" is a data dependency, not only an
 * ordering of node creation.
 *
 * None of these ops is differentiable (they have no VJP rule).
 */
#include "optim.h"

#include <stdlib.h>
#include <string.h>

static void attrs_adamw(const mpmd_graph *g, const mpmd_node *n, char *buf, size_t len) {
    (void)g;
    snprintf(buf, len, " b1=%g b2=%g eps=%g weight_decay=%g", n->fa[MPMD_ADAM_B1], n->fa[MPMD_ADAM_B2],
             n->fa[MPMD_ADAM_EPS], n->fa[MPMD_ADAM_WD]);
}

const mpmd_op_desc mpmd_op_optim_step = {"optim_step", 1, -1, MPMD_OPF_SIDE_EFFECT, NULL, NULL};
const mpmd_op_desc mpmd_op_sgd = {"sgd", 3, -1, MPMD_OPF_SIDE_EFFECT, NULL, NULL};
const mpmd_op_desc mpmd_op_adamw = {"adamw", 7, -1, MPMD_OPF_SIDE_EFFECT, attrs_adamw, NULL};

static mpmd_type token_type(void) {
    mpmd_type t;
    memset(&t, 0, sizeof t);
    t.dtype = MPMD_TOKEN;
    return t;
}

/* Checks shared by every optimizer: the lists, the learning rate, and that
 * each params[i] is a distinct parameter with an f32 gradient of its type.
 * Returns 1 when all is well, else records the error and returns 0. */
static int check_update(mpmd_graph *g, const char *fn, int n, const mpmd_value *params,
                        const mpmd_value *grads, mpmd_value lr) {
    if (!g || g->status != MPMD_OK) return 0;
    if (n < 1 || !params || !grads) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: no parameters to update (n is %d%s)", fn, n,
                  (!params || !grads) && n >= 1 ? ", and a list is NULL" : "");
        return 0;
    }
    if (g->region == MPMD_REGION_BODY) {
        mpmd_fail(
            g, MPMD_ERR_INVALID,
            "%s: built inside the loop body; build the optimizer after mpmd_loop_end, from the loop-reduced "
            "gradients",
            fn);
        return 0;
    }
    if (!mpmd_check_operands(g, fn, 1, &lr)) return 0;
    const mpmd_type *lt = mpmd_type_of(g, lr);
    if (lt->dtype != MPMD_F32 || lt->ndim != 0) {
        mpmd_fail(g, MPMD_ERR_SHAPE, "%s: the learning rate is %s; an f32 scalar (f32[]) is expected", fn,
                  mpmd_tstr(g, lr));
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (!mpmd_check_operands(g, fn, 1, &params[i]) || !mpmd_check_operands(g, fn, 1, &grads[i])) return 0;
        const mpmd_node *pn = mpmd_node_of(g, params[i]);
        if (pn->op != &mpmd_op_param || !(pn->flags & MPMD_NODE_TRAINABLE)) {
            mpmd_fail(g, MPMD_ERR_INVALID, "%s: params[%d] (%%%d, %s) is not a parameter made by mpmd_param",
                      fn, i, (int)params[i].id, mpmd_tstr(g, params[i]));
            return 0;
        }
        if (!mpmd_type_equal(&pn->type, mpmd_type_of(g, grads[i]))) {
            mpmd_fail(g, MPMD_ERR_SHAPE, "%s: parameter \"%s\" is %s but its gradient grads[%d] is %s", fn,
                      pn->name, mpmd_tstr(g, params[i]), i, mpmd_tstr(g, grads[i]));
            return 0;
        }
        if (mpmd_node_of(g, grads[i])->region == MPMD_REGION_BODY) {
            mpmd_fail(g, MPMD_ERR_INVALID,
                      "%s: the gradient of \"%s\" (%%%d) is a loop-body value; pass its mpmd_loop_reduce", fn,
                      pn->name, (int)grads[i].id);
            return 0;
        }
        for (int j = 0; j < i; j++) {
            if (params[j].id == params[i].id) {
                mpmd_fail(g, MPMD_ERR_INVALID,
                          "%s: parameter \"%s\" is listed twice (params[%d] and params[%d])", fn, pn->name, j,
                          i);
                return 0;
            }
        }
    }
    return 1;
}

/* SGD (optax.sgd without momentum): p = p - lr g, one op per parameter. */
mpmd_status mpmd_sgd(mpmd_graph *g, int n, const mpmd_value *params, const mpmd_value *grads, mpmd_value lr) {
    if (!g) return MPMD_ERR_INVALID;
    if (!check_update(g, "mpmd_sgd", n, params, grads, lr)) return g->status;
    for (int i = 0; i < n; i++) {
        mpmd_value in[3] = {params[i], grads[i], lr};
        mpmd_emit(g, &mpmd_op_sgd, 3, in, token_type());
    }
    return g->status;
}

/* Adam/AdamW (optax.adamw with eps_root = 0 and no mask), per element:
 *   t  = t + 1                                  (optim_step, once per step)
 *   mu = (1 - b1) g + b1 mu
 *   nu = (1 - b2) g^2 + b2 nu
 *   u  = (mu / (1 - b1^t)) / (sqrt(nu / (1 - b2^t)) + eps) + wd p
 *   p  = p - lr u
 * with wd 0 for a parameter opts.decay leaves out (optax's mask). With
 * weight_decay 0 this is optax.adam. */
mpmd_status mpmd_adamw(mpmd_graph *g, int n, const mpmd_value *params, const mpmd_value *grads, mpmd_value lr,
                       mpmd_adam_opts opts) {
    const char *fn = "mpmd_adamw";
    if (!g) return MPMD_ERR_INVALID;
    if (!check_update(g, fn, n, params, grads, lr)) return g->status;
    if (!(opts.b1 >= 0.0f && opts.b1 < 1.0f) || !(opts.b2 >= 0.0f && opts.b2 < 1.0f)) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: b1 = %g and b2 = %g must lie in [0, 1)", fn, opts.b1, opts.b2);
        return g->status;
    }
    if (!(opts.eps >= 0.0f) || !(opts.weight_decay >= 0.0f) || opts.eps > 1e30f ||
        opts.weight_decay > 1e30f) {
        mpmd_fail(g, MPMD_ERR_INVALID, "%s: eps = %g and weight_decay = %g must be finite and >= 0", fn,
                  opts.eps, opts.weight_decay);
        return g->status;
    }
    if (mpmd_is_value(mpmd_lookup(g, "optim/step"))) {
        mpmd_fail(
            g, MPMD_ERR_INVALID,
            "%s: the graph already has an optimizer step counter \"optim/step\"; pass every parameter to "
            "one mpmd_adamw call",
            fn);
        return g->status;
    }

    /* The state, named after the parameters. */
    mpmd_value step = mpmd_variable(g, "optim/step", MPMD_I32, 0, NULL, MPMD_ZEROS);
    mpmd_value *mu = malloc((size_t)n * 2 * sizeof *mu);
    if (!mu) {
        mpmd_fail(g, MPMD_ERR_NOMEM, "%s: out of memory", fn);
        return g->status;
    }
    mpmd_value *nu = mu + n;
    for (int i = 0; i < n && g->status == MPMD_OK; i++) {
        const mpmd_node *pn = mpmd_node_of(g, params[i]);
        mpmd_type t = pn->type; /* copied: the node moves when the graph grows */
        size_t len = strlen(pn->name) + 16;
        char *name = malloc(len);
        if (!name) {
            mpmd_fail(g, MPMD_ERR_NOMEM, "%s: out of memory", fn);
            break;
        }
        snprintf(name, len, "optim/mu/%s", mpmd_node_of(g, params[i])->name);
        mu[i] = mpmd_variable(g, name, MPMD_F32, t.ndim, t.dim, MPMD_ZEROS);
        snprintf(name, len, "optim/nu/%s", mpmd_node_of(g, params[i])->name);
        nu[i] = mpmd_variable(g, name, MPMD_F32, t.ndim, t.dim, MPMD_ZEROS);
        free(name);
        /* the state of a parameter split over the model axis is split as it is */
        const mpmd_node *pn2 = mpmd_node_of(g, params[i]);
        int64_t ax = pn2 ? pn2->ia[MPMD_SPLIT_AXIS] : 0, gr = pn2 ? pn2->ia[MPMD_SPLIT_GROUPS] : 0;
        mpmd_node *mn = mpmd_node_of(g, mu[i]), *nn = mpmd_node_of(g, nu[i]);
        if (mn) mn->ia[MPMD_SPLIT_AXIS] = ax, mn->ia[MPMD_SPLIT_GROUPS] = gr;
        if (nn) nn->ia[MPMD_SPLIT_AXIS] = ax, nn->ia[MPMD_SPLIT_GROUPS] = gr;
    }

    /* t = t + 1 before any update reads it. */
    mpmd_value tick = mpmd_emit(g, &mpmd_op_optim_step, 1, &step, token_type());
    for (int i = 0; i < n && g->status == MPMD_OK; i++) {
        mpmd_value in[7] = {params[i], grads[i], mu[i], nu[i], step, lr, tick};
        mpmd_value u = mpmd_emit(g, &mpmd_op_adamw, 7, in, token_type());
        mpmd_node *un = mpmd_node_of(g, u);
        if (!un) break;
        un->fa[MPMD_ADAM_B1] = opts.b1;
        un->fa[MPMD_ADAM_B2] = opts.b2;
        un->fa[MPMD_ADAM_EPS] = opts.eps;
        un->fa[MPMD_ADAM_WD] = !opts.decay || opts.decay[i] ? opts.weight_decay : 0.0f;
    }
    free(mu);
    return g->status;
}
