/* Bad input gets an error, never a crash:
 *
 * - a type whose element count or byte size does not fit (a 2^31 x 2^31
 *   input, then an op on it; f32[2^62 + 1, 4] summed over an axis; a
 *   broadcast to a huge shape) is refused where it is built;
 * - NULL arguments to the public functions: no graph, no dims, no wrt or
 *   grads, no data, no schedule, no step, no executor. */
#include "testutil.h"

#include <string.h>

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static void huge_shapes(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(1LL << 31, 1LL << 31));
    mpmd_value y = mpmd_mul_scalar(g, x, 2.0f);
    CHECK(!mpmd_is_value(y) && mpmd_graph_status(g) == MPMD_ERR_SHAPE && has(mpmd_graph_error(g), "more elements than fit"),
          "2^31 x 2^31: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE((1LL << 62) + 1, 4));
    y = mpmd_sum(g, x, MPMD_AXES(1), MPMD_DROP_DIMS);
    CHECK(!mpmd_is_value(y) && has(mpmd_graph_error(g), "f32[4611686018427387905,4]"), "2^62 + 1: %s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* each operand fits, their broadcast does not */
    g = mpmd_graph_new();
    mpmd_value a = mpmd_input(g, "a", MPMD_F32, MPMD_SHAPE(1LL << 40, 1));
    mpmd_value b = mpmd_input(g, "b", MPMD_F32, MPMD_SHAPE(1, 1LL << 40));
    CHECK(mpmd_graph_status(g) == MPMD_OK, "each operand fits: %s", mpmd_graph_error(g));
    y = mpmd_add(g, a, b);
    CHECK(!mpmd_is_value(y) && has(mpmd_graph_error(g), "add: the result f32[1099511627776,1099511627776]"),
          "broadcast: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* a reshape target and a constant whose element counts overflow int64
     * (found by tests/fuzz/fuzz_graph) */
    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 4));
    y = mpmd_reshape(g, x, MPMD_SHAPE(1LL << 40, 1LL << 40));
    CHECK(!mpmd_is_value(y) && has(mpmd_graph_error(g), "mpmd_reshape: the target shape [1099511627776,"),
          "reshape 2^40 x 2^40: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    float d[4] = {0};
    y = mpmd_constant(g, MPMD_F32, MPMD_SHAPE(1LL << 40, 1LL << 40), d);
    CHECK(!mpmd_is_value(y) && has(mpmd_graph_error(g), "mpmd_constant: the shape has more elements than fit"),
          "constant 2^40 x 2^40: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    /* also found by the fuzzer: the zero gradient of a 16-bit value the loss
     * does not use has that value's dtype, as a used one's has; a token
     * (an assign's result) cannot be kept, there is nothing to read */
    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(3, 4));
    mpmd_value h = mpmd_cast(g, x, MPMD_F16), gr;
    mpmd_value l = mpmd_sum(g, x, MPMD_ALL_AXES, MPMD_DROP_DIMS);
    CHECK(mpmd_grad(g, l, 1, &h, &gr) == MPMD_OK && mpmd_value_type(g, gr).dtype == MPMD_F16,
          "the gradient of an unused f16 value: %s %s", mpmd_graph_error(g),
          mpmd_dtype_name(mpmd_value_type(g, gr).dtype));
    mpmd_value v = mpmd_variable(g, "v", MPMD_F32, MPMD_SHAPE(3, 4), MPMD_ZEROS);
    mpmd_keep(g, mpmd_assign(g, v, x));
    CHECK(mpmd_graph_status(g) == MPMD_ERR_INVALID && has(mpmd_graph_error(g), "is a token"),
          "keep of a token: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
    g = mpmd_graph_new();
    mpmd_scope_push(g, NULL);
    CHECK(has(mpmd_graph_error(g), "mpmd_scope_push: no name (NULL)"), "scope_push NULL: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);
}

static void null_arguments(void) {
    mpmd_value a = {0}, b = {1};
    /* no graph: no value, no crash */
    CHECK(!mpmd_is_value(mpmd_add(NULL, a, b)) && !mpmd_is_value(mpmd_matmul(NULL, a, b, 0)) &&
              !mpmd_is_value(mpmd_dense(NULL, "d", a, 3, MPMD_BIAS)) &&
              !mpmd_is_value(mpmd_input(NULL, "x", MPMD_F32, MPMD_SHAPE(2))) &&
              !mpmd_is_value(mpmd_lookup(NULL, "x")) && !mpmd_is_value(mpmd_enter_stage(NULL, a)) &&
              mpmd_graph_status(NULL) == MPMD_ERR_INVALID && has(mpmd_graph_error(NULL), "no graph") &&
              mpmd_grad(NULL, a, 1, &a, &b) == MPMD_ERR_INVALID,
          "calls without a graph");
    mpmd_loop_begin(NULL, 2), mpmd_loop_end(NULL), mpmd_keep(NULL, a), mpmd_scope_push(NULL, "s"), mpmd_scope_pop(NULL);

    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, 2, NULL);
    CHECK(!mpmd_is_value(x) && has(mpmd_graph_error(g), "2 dimensions but no dims (NULL)"), "dims NULL: %s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2));
    mpmd_value l = mpmd_sum(g, x, MPMD_ALL_AXES, MPMD_DROP_DIMS);
    CHECK(mpmd_grad(g, l, 1, NULL, NULL) == MPMD_ERR_INVALID && has(mpmd_graph_error(g), "wrt or grads is NULL"),
          "grad NULL: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 8));
    mpmd_keep(g, mpmd_mul_scalar(g, x, 2.0f));
    CHECK(!mpmd_is_value(mpmd_concat(g, 2, NULL, 0)) && has(mpmd_graph_error(g), "2 operands but none given"),
          "concat NULL: %s", mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 8));
    mpmd_value y = mpmd_mul_scalar(g, x, 2.0f);
    mpmd_keep(g, y);
    mpmd_keep(g, x);
    mpmd_exec *ex = tu_exec(g, 1);
    float buf[32];
    tu_fill(buf, 32, 1);
    CHECK(mpmd_exec_read(ex, x, buf, sizeof buf) == MPMD_ERR_INVALID &&
              has(mpmd_exec_error(ex), "input \"x\" was never set"),
          "read of an input never set: %s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_set_input(ex, x, NULL, 128) == MPMD_ERR_INVALID && has(mpmd_exec_error(ex), "no data (NULL)"),
          "set_input NULL: %s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_set_input(ex, x, buf, sizeof buf) == MPMD_OK && mpmd_exec_run(ex) == MPMD_OK &&
              mpmd_exec_read(ex, y, NULL, sizeof buf) == MPMD_ERR_INVALID && has(mpmd_exec_error(ex), "NULL"),
          "read NULL: %s", mpmd_exec_error(ex));
    float back[32];
    CHECK(mpmd_exec_read(ex, x, back, sizeof back) == MPMD_OK && !memcmp(back, buf, sizeof buf),
          "read of an input once set: %s", mpmd_exec_error(ex));
    CHECK(mpmd_exec_run(NULL) == MPMD_ERR_INVALID && mpmd_step_run(NULL) == MPMD_ERR_INVALID &&
              mpmd_step_set_input(NULL, x, buf, sizeof buf) == MPMD_ERR_INVALID,
          "calls without an executor or a step");
    mpmd_exec_free(ex);

    /* the MPI runtime without mpmd_mpi_init: what to call, and whether to
     * start the program with mpirun, which it may already have been */
    if (mpmd_mpi_available()) {
        mpmd_step_opts o = MPMD_STEP_DEFAULTS;
        o.runtime = MPMD_RUNTIME_MPI;
        mpmd_error e;
        char was[64] = "";
        if (getenv("OMPI_COMM_WORLD_SIZE")) snprintf(was, sizeof was, "%s", getenv("OMPI_COMM_WORLD_SIZE"));
        unsetenv("OMPI_COMM_WORLD_SIZE");
        CHECK(!mpmd_jit_with_loop(g, NULL, &o, &e) && has(e.msg, "needs mpmd_mpi_init") &&
                  has(e.msg, "started by mpirun (mpirun -np N"),
              "MPI without init: %s", e.msg);
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        CHECK(!mpmd_jit_with_loop(g, NULL, &o, &e) && has(e.msg, "needs mpmd_mpi_init") &&
                  has(e.msg, "started by an MPI launcher (OMPI_COMM_WORLD_SIZE is set)"),
              "MPI without init under mpirun: %s", e.msg);
        if (*was)
            setenv("OMPI_COMM_WORLD_SIZE", was, 1);
        else
            unsetenv("OMPI_COMM_WORLD_SIZE");
    }
    mpmd_graph_free(g);

    mpmd_error err;
    CHECK(mpmd_schedule_validate(NULL, &err, NULL) == MPMD_ERR_INVALID && has(err.msg, "no schedule (NULL)"),
          "validate NULL: %s", err.msg);
    mpmd_sim *sim;
    CHECK(mpmd_schedule_simulate(NULL, NULL, &sim, &err, NULL) == MPMD_ERR_INVALID && !sim, "simulate NULL: %s",
          err.msg);
}

int main(void) {
    huge_shapes();
    null_arguments();
    return tu_report("test_hardening");
}
