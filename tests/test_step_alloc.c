/* A running step allocates nothing on the host heap: every call mpmd makes
 * to malloc, calloc, realloc, posix_memalign and aligned_alloc while
 * mpmd_step_run runs is counted, after a first run, and must be none.
 *
 * The program is linked with -Wl,--wrap for each of them
 * (tests/CMakeLists.txt), so the calls counted are those of mpmd and of
 * this test: what the C library, OpenBLAS or MPI allocate inside
 * themselves is theirs (docs/pipeline.md says what they do).
 *
 * The steps: a 2-stage pipeline with data parallelism (the replicas'
 * sum), FSDP (reduce-scatter and gather), a gradient clip (the sum over
 * the mesh) and a concatenation of 10 values (a launch wider than the
 * stack's operand lists); and one split over 2 model ranks (the model
 * axis's collectives). In-process by default; with --mpi, the same steps
 * under mpirun -np 4 on the MPI runtime (4 points each). */
#include "testutil.h"

#include <stdatomic.h>
#include <string.h>

/* ---- counting ---- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static atomic_int counting;
static atomic_long calls;

static void count(void) {
    if (atomic_load_explicit(&counting, memory_order_relaxed)) atomic_fetch_add(&calls, 1);
}
void *__wrap_malloc(size_t n) {
    count();
    return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t s) {
    count();
    return __real_calloc(n, s);
}
void *__wrap_realloc(void *p, size_t n) {
    count();
    return __real_realloc(p, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    count();
    return __real_posix_memalign(p, a, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
    count();
    return __real_aligned_alloc(a, n);
}

/* ---- the steps ---- */
enum { ROWS = 4, W = 8, MB = 4, PIECES = 10 };

/* Two stages of tanh(x w); the second also concatenates PIECES slices of
 * its activation (a launch of PIECES operands) into the loss. */
static mpmd_graph *build(int clip, mpmd_value *x_out) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_value x = *x_out = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(ROWS, W));
    mpmd_value w[2] = {mpmd_param(g, "w1", MPMD_SHAPE(W, W), MPMD_NORMAL(0.5f)),
                       mpmd_param(g, "w2", MPMD_SHAPE(W, W), MPMD_NORMAL(0.5f))};
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_tanh(g, mpmd_matmul(g, mpmd_microbatch(g, x), w[0], 0));
    h = mpmd_enter_stage(g, h);
    h = mpmd_tanh(g, mpmd_matmul(g, h, w[1], 0));
    mpmd_value parts[PIECES];
    for (int i = 0; i < PIECES; i++)
        parts[i] = mpmd_mul(g, h, mpmd_scalar(g, (float)(i + 1)));
    mpmd_value cat = mpmd_concat(g, PIECES, parts, 0);
    mpmd_value loss = mpmd_sum(g, mpmd_mul(g, cat, cat), 0, NULL, 0);
    loss = mpmd_enter_stage(g, loss);
    mpmd_value gs[2];
    mpmd_grad(g, loss, 2, w, gs);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < 2; i++)
        gs[i] = mpmd_loop_reduce(g, gs[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    if (clip) {
        mpmd_value norm = mpmd_clip_by_global_norm(g, 2, gs, 1.0f);
        mpmd_keep(g, norm);
    }
    mpmd_sgd(g, 2, w, gs, mpmd_scalar(g, 0.01f));
    mpmd_keep(g, total);
    return g;
}

/* Two stages, the second split over 2 model ranks: its weight's columns,
 * gathered whole and summed across the ranks (all_gather, all_reduce). */
static mpmd_graph *build_split(mpmd_value *x_out) {
    mpmd_graph *g = mpmd_graph_new();
    mpmd_set_tensor_parallel(g, 2);
    mpmd_value x = *x_out = mpmd_input(g, "x", MPMD_F32, MPMD_SHAPE(ROWS, W));
    mpmd_value w[2] = {mpmd_param(g, "w1", MPMD_SHAPE(W, W), MPMD_NORMAL(0.5f)),
                       mpmd_param_split(g, "w2", MPMD_SHAPE(W, W), MPMD_NORMAL(0.5f), 1, 1)};
    mpmd_loop_begin(g, MB);
    mpmd_value h = mpmd_tanh(g, mpmd_matmul(g, mpmd_microbatch(g, x), w[0], 0));
    h = mpmd_enter_stage(g, h);
    mpmd_value hm = mpmd_tanh(g, mpmd_matmul(g, h, w[1], 0)); /* [ROWS, W / 2] on each model rank */
    mpmd_value a = mpmd_all_gather(g, hm, 1, "model"), b = mpmd_all_reduce(g, hm, "model");
    mpmd_value loss =
        mpmd_add(g, mpmd_sum(g, mpmd_mul(g, a, a), 0, NULL, 0), mpmd_sum(g, mpmd_mul(g, b, b), 0, NULL, 0));
    loss = mpmd_enter_stage(g, loss);
    mpmd_value gs[2];
    mpmd_grad(g, loss, 2, w, gs);
    mpmd_value total = mpmd_loop_reduce(g, loss, MPMD_REDUCE_ADD);
    for (int i = 0; i < 2; i++)
        gs[i] = mpmd_loop_reduce(g, gs[i], MPMD_REDUCE_ADD);
    mpmd_loop_end(g);
    mpmd_sgd(g, 2, w, gs, mpmd_scalar(g, 0.01f));
    mpmd_keep(g, total);
    return g;
}

/* Host allocations while `runs` runs of the step after its first. */
static long allocations(const char *label, int mpi, int replicas, int fsdp, int clip) {
    mpmd_value in;
    mpmd_graph *g = replicas == 1 ? build_split(&in) : build(clip, &in);
    mpmd_schedule *s = NULL;
    mpmd_error err;
    CHECK(mpmd_schedule_for_graph(g, MPMD_SCHED_STD1F1B, 2, 0, &s, &err) == MPMD_OK, "%s: %s", label,
          err.msg);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1, o.seed = 7, o.data_parallel = replicas, o.fsdp = fsdp;
    if (mpi) o.runtime = MPMD_RUNTIME_MPI;
    mpmd_step *st = s ? mpmd_jit_with_loop(g, s, &o, &err) : NULL;
    CHECK(st != NULL, "%s: %s", label, err.msg);
    long n = -1;
    if (st) {
        float x[ROWS * W * 4];
        tu_fill(x, ROWS * W * replicas, 3);
        CHECK(mpmd_step_set_input(st, in, x, sizeof(float) * ROWS * W * replicas) == MPMD_OK, "%s: %s", label,
              mpmd_step_error(st));
        CHECK(mpmd_step_run(st) == MPMD_OK, "%s: %s", label, mpmd_step_error(st));
        atomic_store(&calls, 0);
        atomic_store(&counting, 1);
        for (int r = 0; r < 3; r++)
            CHECK(mpmd_step_run(st) == MPMD_OK, "%s: %s", label, mpmd_step_error(st));
        atomic_store(&counting, 0);
        n = atomic_load(&calls);
    }
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    mpmd_graph_free(g);
    return n;
}

int main(int argc, char **argv) {
    const int mpi = argc > 1 && strcmp(argv[1], "--mpi") == 0;
    mpmd_error err;
    if (mpi && mpmd_mpi_init(&argc, &argv, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (mpi && mpmd_mpi_world_size() != 4) {
        fprintf(stderr, "test_step_alloc --mpi runs under mpirun -np 4 (2 ranks x 2 replicas)\n");
        mpmd_mpi_finalize();
        return 1;
    }
    static const struct {
        const char *label;
        int fsdp, clip;
    } cases[] = {
        {"2 ranks x 2 replicas", 0, 0},
        {"2 ranks x 2 replicas, clipped", 0, 1},
        {"2 ranks x 2 replicas, fsdp", 1, 0},
        {"2 ranks x 2 model ranks", 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int replicas = strstr(cases[c].label, "model") ? 1 : 2;
        long n = allocations(cases[c].label, mpi, replicas, cases[c].fsdp, cases[c].clip);
        CHECK(n == 0, "%s (%s): %ld host allocations in 3 runs of the step", cases[c].label,
              mpi ? "MPI" : "in-process", n);
        if (!mpi || mpmd_mpi_world_rank() == 0)
            printf("%s (%s): %ld host allocations in 3 runs\n", cases[c].label, mpi ? "MPI" : "in-process",
                   n);
    }
    int rc = tu_report(mpi ? "step_alloc --mpi" : "step_alloc");
    if (mpi) {
        int bad = rc != 0;
        mpmd_mpi_any(&bad, 1, &err);
        mpmd_mpi_finalize();
        rc = bad;
    }
    return rc;
}
