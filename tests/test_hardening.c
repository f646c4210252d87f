/* Bad input gets an error, never a crash:
 *
 * - a type whose element count or byte size does not fit (a 2^31 x 2^31
 *   input, then an op on it; f32[2^62 + 1, 4] summed over an axis; a
 *   broadcast to a huge shape) is refused where it is built;
 * - NULL arguments to the public functions: no graph, no dims, no wrt or
 *   grads, no data, no schedule, no step, no executor, no output pointer,
 *   no buffer, no file: an error, a neutral answer, or nothing for a
 *   printer or a free function, never a crash. */
#include "testutil.h"

#include <math.h>
#include <string.h>

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static void huge_shapes(void) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(1LL << 31, 1LL << 31));
    mpmd_value y = mpmd_mul_scalar(g, x, 2.0f);
    CHECK(!mpmd_is_value(y) && mpmd_graph_status(g) == MPMD_ERR_SHAPE &&
              has(mpmd_graph_error(g), "more elements than fit"),
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
    CHECK(!mpmd_is_value(y) &&
              has(mpmd_graph_error(g), "mpmd_constant: the shape has more elements than fit"),
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
    CHECK(has(mpmd_graph_error(g), "mpmd_scope_push: no name (NULL)"), "scope_push NULL: %s",
          mpmd_graph_error(g));
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
    mpmd_loop_begin(NULL, 2), mpmd_loop_end(NULL), mpmd_keep(NULL, a), mpmd_scope_push(NULL, "s"),
        mpmd_scope_pop(NULL);

    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = mpmd_input(g, "x", MPMD_F32, 2, NULL);
    CHECK(!mpmd_is_value(x) && has(mpmd_graph_error(g), "2 dimensions but no dims (NULL)"), "dims NULL: %s",
          mpmd_graph_error(g));
    mpmd_graph_free(g);

    g = mpmd_graph_new();
    x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(2));
    mpmd_value l = mpmd_sum(g, x, MPMD_ALL_AXES, MPMD_DROP_DIMS);
    CHECK(mpmd_grad(g, l, 1, NULL, NULL) == MPMD_ERR_INVALID &&
              has(mpmd_graph_error(g), "wrt or grads is NULL"),
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
    CHECK(mpmd_exec_set_input(ex, x, NULL, 128) == MPMD_ERR_INVALID &&
              has(mpmd_exec_error(ex), "no data (NULL)"),
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
    CHECK(mpmd_schedule_simulate(NULL, NULL, &sim, &err, NULL) == MPMD_ERR_INVALID && !sim,
          "simulate NULL: %s", err.msg);
}

/* A two-stage pipeline of two dense layers, run once with recording on. */
static mpmd_graph *two_stages(mpmd_value *x) {
    mpmd_graph *g = mpmd_graph_new();
    *x = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(4, 8));
    mpmd_loop_begin(g, 2);
    mpmd_value h = mpmd_dense(g, "d0", mpmd_microbatch(g, *x), 8, MPMD_BIAS);
    h = mpmd_enter_stage(g, h);
    h = mpmd_dense(g, "d1", h, 8, MPMD_BIAS);
    mpmd_value l = mpmd_enter_stage(g, mpmd_sum(g, h, MPMD_ALL_AXES, MPMD_DROP_DIMS));
    mpmd_value lr = mpmd_loop_reduce(g, l, MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_keep(g, lr);
    return g;
}

/* The rest of the public functions with a NULL step, graph, schedule,
 * output pointer, buffer or file: an error (MPMD_ERR_INVALID, with a
 * message where there is an error record), a neutral answer (0, -1, NULL,
 * NAN, an empty string) or nothing at all for printers and free functions,
 * as free(NULL) does; never a crash. Each of these crashed before. */
static void null_arguments_more(void) {
    mpmd_value x;
    mpmd_graph *g = two_stages(&x);
    mpmd_error err;
    mpmd_schedule *s = NULL;
    CHECK(mpmd_schedule_new(MPMD_SCHED_GPIPE, 2, 2, 2, 0, &s, &err) == MPMD_OK, "%s", err.msg);
    mpmd_step *st = tu_step(g, s, 1, "null arguments");
    if (!st) return;
    mpmd_step_set_recording(st, 1);
    float buf[32] = {0};
    CHECK(mpmd_step_set_input(st, x, buf, sizeof buf) == MPMD_OK && mpmd_step_run(st) == MPMD_OK, "run: %s",
          mpmd_step_error(st));

    /* the step's accessors */
    mpmd_memory_stats ms;
    CHECK(mpmd_step_memory(NULL, 0, &ms) == MPMD_ERR_INVALID &&
              mpmd_step_memory(st, 0, NULL) == MPMD_ERR_INVALID && mpmd_step_memory(st, 0, &ms) == MPMD_OK,
          "mpmd_step_memory with NULL");
    mpmd_prediction pr;
    CHECK(mpmd_predict(g, s, NULL, NULL, NULL, &err) == MPMD_ERR_INVALID &&
              has(err.msg, "mpmd_predict: no place"),
          "mpmd_predict out NULL: %s", err.msg);
    CHECK(mpmd_predict(g, s, NULL, NULL, &pr, &err) == MPMD_OK, "mpmd_predict: %s", err.msg);
    mpmd_prediction_free(&pr);
    mpmd_prediction_free(NULL);
    mpmd_step_stats ss;
    CHECK(mpmd_step_summary(NULL, &ss, &err) == MPMD_ERR_INVALID &&
              has(err.msg, "mpmd_step_summary: no step (NULL)"),
          "mpmd_step_summary(NULL): %s", err.msg);
    CHECK(mpmd_step_summary(st, NULL, &err) == MPMD_ERR_INVALID && has(err.msg, "no place for the summary"),
          "mpmd_step_summary out NULL: %s", err.msg);
    CHECK(mpmd_step_summary(NULL, &ss, NULL) == MPMD_ERR_INVALID, "mpmd_step_summary without err");
    CHECK(mpmd_step_summary(st, &ss, &err) == MPMD_OK, "summary: %s", err.msg);
    mpmd_step_stats_free(&ss);
    mpmd_step_stats_free(NULL);
    mpmd_timeline *tl = NULL;
    CHECK(mpmd_step_timeline(NULL, &tl, &err) == MPMD_ERR_INVALID && !tl && has(err.msg, "no step (NULL)"),
          "mpmd_step_timeline(NULL): %s", err.msg);
    CHECK(mpmd_step_timeline(st, NULL, &err) == MPMD_ERR_INVALID && has(err.msg, "no place for the timeline"),
          "mpmd_step_timeline out NULL: %s", err.msg);
    CHECK(mpmd_step_write_trace(NULL, stdout, &err) == MPMD_ERR_INVALID && has(err.msg, "no step (NULL)"),
          "mpmd_step_write_trace(NULL): %s", err.msg);
    CHECK(mpmd_step_write_trace(st, NULL, &err) == MPMD_ERR_INVALID && has(err.msg, "no file (NULL)"),
          "mpmd_step_write_trace file NULL: %s", err.msg);
    CHECK(mpmd_step_print_summary(NULL, stdout, &err) == MPMD_ERR_INVALID &&
              mpmd_step_print_summary(st, NULL, &err) == MPMD_ERR_INVALID && has(err.msg, "no file (NULL)"),
          "mpmd_step_print_summary with NULL: %s", err.msg);
    mpmd_step_print(NULL, stdout), mpmd_step_print(st, NULL);
    mpmd_step_print_tasks(NULL, stdout), mpmd_step_print_tasks(st, NULL);
    mpmd_step_print_memory(NULL, 0, stdout), mpmd_step_print_memory(st, 0, NULL);
    mpmd_step_print_profile(NULL, stdout), mpmd_step_print_profile(st, NULL);
    mpmd_step_set_recording(NULL, 1);
    char hex[65] = "x";
    mpmd_step_params_sha256(NULL, hex);
    mpmd_step_params_sha256(st, NULL);
    mpmd_step_replica_params_sha256(NULL, 0, NULL);
    int ranks[4];
    CHECK(!*hex && mpmd_step_num_ranks(NULL) == 0 && mpmd_step_peak_bytes(NULL, 0) == -1 &&
              mpmd_step_arena_bytes(NULL, 0) == 0 && mpmd_step_where(NULL, x, ranks, 4) == 0 &&
              !mpmd_step_var_data(NULL, 0, x) && !mpmd_step_backend(NULL) &&
              has(mpmd_step_error(NULL), "no step") && mpmd_step_set_profiling(NULL, 1) == MPMD_ERR_INVALID &&
              mpmd_step_gather(NULL, x, buf, 4) == MPMD_ERR_INVALID,
          "the step's accessors without a step");
    mpmd_schedule *s2 = NULL;
    CHECK(mpmd_schedule_for_graph(g, MPMD_SCHED_GPIPE, 0, 0, NULL, &err) == MPMD_ERR_INVALID &&
              has(err.msg, "out is NULL"),
          "mpmd_schedule_for_graph out NULL: %s", err.msg);

    /* the executor's */
    mpmd_exec *ex = tu_exec(g, 1);
    CHECK(!mpmd_exec_var_data(NULL, x) && !mpmd_exec_backend(NULL) && !mpmd_exec_graph(NULL) &&
              mpmd_exec_arena_bytes(NULL) == 0 && mpmd_exec_set_profiling(NULL, 1) == MPMD_ERR_INVALID &&
              has(mpmd_exec_error(NULL), "no executor"),
          "the executor's accessors without an executor");
    strcpy(hex, "x");
    mpmd_exec_params_sha256(NULL, hex);
    CHECK(!*hex, "the hash of no executor: '%s'", hex);
    mpmd_exec_print_plan(NULL, stdout), mpmd_exec_print_plan(ex, NULL);
    mpmd_exec_print_profile(NULL, stdout), mpmd_exec_print_profile(ex, NULL);
    mpmd_exec_free(ex);

    /* schedules, their text, simulations and timelines */
    CHECK(mpmd_schedule_new(MPMD_SCHED_GPIPE, 2, 2, 2, 0, NULL, &err) == MPMD_ERR_INVALID &&
              has(err.msg, "mpmd_schedule_new: no place for the schedule"),
          "mpmd_schedule_new out NULL: %s", err.msg);
    CHECK(mpmd_schedule_gpipe(2, 2, NULL, &err) == MPMD_ERR_INVALID &&
              mpmd_schedule_dualpipev(4, 2, 4, NULL, &err) == MPMD_ERR_INVALID &&
              mpmd_schedule_interleaved1f1b(4, 2, 4, 0, NULL, &err) == MPMD_ERR_INVALID,
          "the builders with out NULL: %s", err.msg);
    CHECK(mpmd_schedule_parse(NULL, 5, "x", &s2, &err) == MPMD_ERR_INVALID &&
              has(err.msg, "no text (NULL)") &&
              mpmd_schedule_parse("fwd_0__0 bwd_0__0", 17, "x", NULL, &err) == MPMD_ERR_INVALID &&
              mpmd_schedule_parse(NULL, 5, "x", &s2, NULL) == MPMD_ERR_INVALID,
          "mpmd_schedule_parse with NULL: %s", err.msg);
    CHECK(mpmd_schedule_load(NULL, &s2, &err) == MPMD_ERR_INVALID && has(err.msg, "no file name") &&
              mpmd_schedule_load("/etc/hostname", NULL, &err) == MPMD_ERR_INVALID,
          "mpmd_schedule_load with NULL: %s", err.msg);
    char tb[64];
    const mpmd_task *t0 = &s->ranks[0].tasks[0];
    CHECK(mpmd_task_str(NULL, tb, sizeof tb) == 0 && !*tb && mpmd_task_str(t0, NULL, 10) == 8 &&
              mpmd_entry_str(NULL, 1, tb, sizeof tb) == 0 && mpmd_entry_str(t0, 1, NULL, 0) == 8,
          "the task strings with NULL");
    CHECK(mpmd_schedule_write_text(NULL, stdout) == MPMD_ERR_INVALID &&
              mpmd_schedule_write_text(s, NULL) == MPMD_ERR_INVALID &&
              mpmd_schedule_write_json(NULL, stdout) == MPMD_ERR_INVALID &&
              mpmd_schedule_write_json(s, NULL) == MPMD_ERR_INVALID,
          "the schedule's writers with NULL");
    CHECK(isnan(mpmd_schedule_analytic_bubble(NULL, NULL, tb, sizeof tb)) && has(tb, "no schedule") &&
              mpmd_schedule_analytic_bubble(s, NULL, NULL, 0) > 0,
          "mpmd_schedule_analytic_bubble with NULL: %s", tb);
    mpmd_layout lay[1];
    memset(lay, 0, sizeof lay);
    int64_t b = 0;
    CHECK(mpmd_layouts_rank(NULL, 3, 0) == 0 && mpmd_parse_bytes("5", NULL) != 0 &&
              mpmd_parse_bytes("5", &b) == 0 && b == 5,
          "mpmd_layouts_rank, mpmd_parse_bytes with NULL");
    mpmd_layouts_report(stdout, NULL, 3, 0, ""), mpmd_layouts_report(NULL, lay, 1, 0, "");
    mpmd_sim *sim = NULL;
    CHECK(mpmd_schedule_simulate(s, NULL, &sim, &err, NULL) == MPMD_OK, "%s", err.msg);
    CHECK(mpmd_timeline_from_sim(NULL, sim, &tl, &err) == MPMD_ERR_INVALID &&
              has(err.msg, "no schedule (NULL)") &&
              mpmd_timeline_from_sim(s, sim, NULL, &err) == MPMD_ERR_INVALID && has(err.msg, "out is NULL") &&
              mpmd_timeline_from_sim(NULL, NULL, &tl, NULL) == MPMD_ERR_INVALID,
          "mpmd_timeline_from_sim with NULL: %s", err.msg);
    CHECK(mpmd_timeline_from_sim(s, sim, &tl, &err) == MPMD_OK, "%s", err.msg);
    CHECK(mpmd_timeline_add(tl, 0, NULL) == MPMD_ERR_INVALID &&
              mpmd_timeline_write_svg(NULL, stdout) == MPMD_ERR_INVALID &&
              mpmd_timeline_write_svg(tl, NULL) == MPMD_ERR_INVALID &&
              mpmd_timeline_write_trace(NULL, stdout) == MPMD_ERR_INVALID &&
              mpmd_timeline_write_trace(tl, NULL) == MPMD_ERR_INVALID,
          "the timeline's calls with NULL");
    mpmd_timeline_free(tl);
    mpmd_sim_free(sim);

    /* the graph's */
    mpmd_type ty = mpmd_value_type(g, x);
    CHECK(mpmd_type_numel(NULL) == 0 && mpmd_type_bytes(NULL) == 0 && mpmd_type_str(&ty, NULL, 10) == NULL &&
              !strcmp(mpmd_type_str(NULL, tb, sizeof tb), "(no type)") && mpmd_graph_flops(NULL, x, x) == 0,
          "types and flops with NULL");
    mpmd_graph_print(NULL, stdout), mpmd_graph_print(g, NULL);
    mpmd_enter_stage_n(NULL, 1, NULL);
    CHECK(mpmd_sgd(NULL, 1, NULL, NULL, x) == MPMD_ERR_INVALID &&
              mpmd_adamw(NULL, 1, NULL, NULL, x, MPMD_ADAM_DEFAULTS) == MPMD_ERR_INVALID,
          "the optimizers without a graph");
    mpmd_graph *g2 = mpmd_graph_new();
    mpmd_loop_begin(g2, 2);
    mpmd_enter_stage_n(g2, 1, NULL);
    CHECK(has(mpmd_graph_error(g2), "mpmd_enter_stage: 1 operands but none given (NULL)"),
          "mpmd_enter_stage_n xs NULL: %s", mpmd_graph_error(g2));
    mpmd_graph_free(g2);
    CHECK(mpmd_backend_check("nope", NULL, 60) == 1 && mpmd_backend_check("cpu", NULL, 0) == 0,
          "mpmd_backend_check without a buffer");
    mpmd_backend_defaults bd = {MPMD_I32, -1}, bn = {MPMD_I32, -1};
    CHECK(
        mpmd_backend_defaults_of("cpu", &bd) == MPMD_OK && bd.compute == MPMD_F32 &&
            bd.fused_attention == 1 && mpmd_backend_defaults_of(NULL, &bn) == MPMD_OK &&
            bn.compute == MPMD_F32 && mpmd_backend_defaults_of("nope", &bd) == MPMD_ERR_INVALID &&
            mpmd_backend_defaults_of("cpu", NULL) == MPMD_ERR_INVALID,
        "mpmd_backend_defaults_of: the CPU computes in f32 with the fused attention; unknown names refused");
    if (strstr(mpmd_backends(), "cuda"))
        CHECK(mpmd_backend_defaults_of("cuda", &bd) == MPMD_OK && bd.compute == MPMD_BF16 &&
                  !bd.fused_attention,
              "mpmd_backend_defaults_of: CUDA computes in bf16 with the composed attention");
    uint8_t d32[32] = {1};
    mpmd_sha256("a", 1, NULL);
    mpmd_sha256(NULL, 4, d32);
    CHECK(d32[0] == 1, "mpmd_sha256 of NULL data wrote a hash");

    mpmd_step_free(st);
    mpmd_schedule_free(s);
    mpmd_graph_free(g);
}

int main(void) {
    huge_shapes();
    null_arguments();
    null_arguments_more();
    return tu_report("test_hardening");
}
