/* What a weights export loses, counted (mpmd_export_report of
 * include/mpmd_checkpoint.h): values too large for F16 (65520 and more:
 * 65519 still rounds to 65504) or BF16 (FLT_MAX) become infinities and are
 * counted as overflowed, per tensor by name; NaN and infinities already
 * there are counted apart, in every dtype; the file holds what the report
 * says; a NULL report and the plain export count nothing and write the
 * same file. */
#include "mpmd_checkpoint.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

typedef struct model {
    mpmd_graph *g;
    mpmd_exec *ex;
    mpmd_value a, b, c;
} model;

static void fill(model *m) {
    float *a = mpmd_exec_var_data(m->ex, m->a), *b = mpmd_exec_var_data(m->ex, m->b),
          *c = mpmd_exec_var_data(m->ex, m->c);
    /* "a": 2 past f16 (one of each sign), one just inside, one NaN; "b" one
     * past bf16 too; "c" nothing lost */
    const float av[8] = {1.0f, 65520.0f, -1e5f, 65519.0f, NAN, 0.5f, -65504.0f, 2.0f};
    const float bv[4] = {FLT_MAX, -INFINITY, 7e4f, 3.0f};
    memcpy(a, av, sizeof av);
    memcpy(b, bv, sizeof bv);
    for (int i = 0; i < 6; i++)
        c[i] = (float)i;
}

int main(void) {
    model m;
    m.g = mpmd_graph_new();
    mpmd_value x = mpmd_input(m.g, "x", MPMD_F32, MPMD_SHAPE(1, 2));
    m.a = mpmd_param(m.g, "a", MPMD_SHAPE(2, 4), MPMD_ZEROS);
    m.b = mpmd_param(m.g, "b", MPMD_SHAPE(4), MPMD_ZEROS);
    m.c = mpmd_param(m.g, "c", MPMD_SHAPE(6), MPMD_ZEROS);
    mpmd_value y = mpmd_matmul(m.g, x, m.a, 0);
    y = mpmd_add(m.g, mpmd_add(m.g, y, m.b), mpmd_sum(m.g, m.c, MPMD_ALL_AXES, MPMD_DROP_DIMS));
    mpmd_keep(m.g, y);
    m.ex = tu_exec(m.g, 1);
    fill(&m);
    char path[64];
    snprintf(path, sizeof path, "/tmp/mpmd_export_%d.safetensors", (int)getpid());
    mpmd_error err;
    mpmd_export_report r;

    CHECK(mpmd_exec_export_weights_report(m.ex, path, MPMD_F16, &r, &err) == MPMD_OK, "%s", err.msg);
    CHECK(r.overflowed == 4 && r.nonfinite == 2 && r.tensors == 2,
          "f16: %lld overflowed, %lld non-finite, %d tensors", (long long)r.overflowed,
          (long long)r.nonfinite, r.tensors);
    CHECK(!strcmp(r.tensor[0].name, "a") && r.tensor[0].overflowed == 2 && r.tensor[0].nonfinite == 1 &&
              !strcmp(r.tensor[1].name, "b") && r.tensor[1].overflowed == 2 && r.tensor[1].nonfinite == 1,
          "f16 per tensor: %s %lld/%lld, %s %lld/%lld", r.tensor[0].name, (long long)r.tensor[0].overflowed,
          (long long)r.tensor[0].nonfinite, r.tensor[1].name, (long long)r.tensor[1].overflowed,
          (long long)r.tensor[1].nonfinite);
    /* what the file holds: loaded back (widened exactly), the overflows are infinities */
    float *a = mpmd_exec_var_data(m.ex, m.a);
    CHECK(mpmd_exec_load(m.ex, path, NULL, &err) == MPMD_OK, "%s", err.msg);
    CHECK(isinf(a[1]) && a[1] > 0 && isinf(a[2]) && a[2] < 0 && a[3] == 65504.0f && isnan(a[4]),
          "the f16 file holds %g %g %g %g", a[1], a[2], a[3], a[4]);
    fill(&m);

    CHECK(mpmd_exec_export_weights_report(m.ex, path, MPMD_BF16, &r, &err) == MPMD_OK, "%s", err.msg);
    CHECK(r.overflowed == 1 && r.nonfinite == 2 && r.tensors == 2 && !strcmp(r.tensor[1].name, "b") &&
              r.tensor[1].overflowed == 1,
          "bf16: %lld overflowed, %lld non-finite, %d tensors", (long long)r.overflowed,
          (long long)r.nonfinite, r.tensors);
    CHECK(mpmd_exec_export_weights_report(m.ex, path, MPMD_F32, &r, &err) == MPMD_OK, "%s", err.msg);
    CHECK(r.overflowed == 0 && r.nonfinite == 2 && r.tensors == 2, "f32: %lld overflowed, %lld non-finite",
          (long long)r.overflowed, (long long)r.nonfinite);

    /* nothing lost: a zero report */
    float *b = mpmd_exec_var_data(m.ex, m.b);
    b[0] = 1.0f, b[1] = 1.0f, b[2] = 1.0f, a[1] = 1.0f, a[2] = 1.0f, a[4] = 1.0f;
    memset(&r, 0x5a, sizeof r);
    CHECK(mpmd_exec_export_weights_report(m.ex, path, MPMD_F16, &r, &err) == MPMD_OK && r.overflowed == 0 &&
              r.nonfinite == 0 && r.tensors == 0,
          "a clean f16 export: %lld overflowed, %lld non-finite, %d tensors", (long long)r.overflowed,
          (long long)r.nonfinite, r.tensors);
    CHECK(mpmd_exec_export_weights_report(m.ex, path, MPMD_F16, NULL, &err) == MPMD_OK, "NULL report: %s",
          err.msg);

    /* a pipelined step the same */
    mpmd_step *st = tu_step(m.g, NULL, 1, "export report");
    if (st) {
        mpmd_step_write(st, m.a, (float[8]){1e6f, 0, 0, 0, 0, 0, 0, 0}, 8 * sizeof(float));
        CHECK(mpmd_step_export_weights_report(st, path, MPMD_F16, &r, &err) == MPMD_OK && r.overflowed == 1 &&
                  r.tensors == 1 && !strcmp(r.tensor[0].name, "a"),
              "a step's f16 export: %lld overflowed in %d tensors (%s)", (long long)r.overflowed, r.tensors,
              err.msg);
        CHECK(mpmd_step_export_weights_report(st, path, MPMD_I32, &r, &err) == MPMD_ERR_INVALID &&
                  r.tensors == 0,
              "an i32 export: %s", err.msg);
        mpmd_step_free(st);
    }
    unlink(path);
    mpmd_exec_free(m.ex);
    mpmd_graph_free(m.g);
    return tu_report("test_export_report");
}
