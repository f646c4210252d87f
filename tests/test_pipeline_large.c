/* A large plan: Interleaved1F1B with 48 stages on 8 ranks and 64
 * microbatches, for an MLP with a stage marker after every layer. It must
 * compile, run, and give the one-rank loop's bits; its printed programs
 * must hold every task of the schedule in the schedule's order and a
 * matching receive for every send; mpmd_step_where must put each layer's
 * parameters on the rank of its stage. Under MPMD_TEST_QUICK (sanitizers)
 * the plan shrinks to 24 stages on 4 ranks and 16 microbatches.
 */
#include "testutil.h"

#include <string.h>

/* The text a FILE* callback wrote, through open_memstream. */
typedef struct {
    char *buf;
    size_t len;
} text;

/* One send or receive line of a rank's program. */
typedef struct {
    int rank, node, mb, peer;
} xfer;

static int xfer_cmp(const void *a, const void *b) {
    const xfer *p = a, *q = b;
    if (p->node != q->node) return p->node < q->node ? -1 : 1;
    if (p->mb != q->mb) return p->mb < q->mb ? -1 : 1;
    if (p->rank != q->rank) return p->rank < q->rank ? -1 : 1;
    return p->peer < q->peer ? -1 : p->peer > q->peer;
}

static int kind_of(const char *prefix) {
    static const char *const names[] = {"fwd", "bwd", "bwdA", "bwdW"};
    for (int k = 0; k < 4; k++)
        if (!strcmp(prefix, names[k])) return k;
    return -1;
}

/* The printed programs against the schedule: per rank, the "run" lines
 * are exactly the rank's task list, fused entries unfolded in member
 * order; every "send %N mb M -> rank P" of rank R has one "recv %N mb M
 * <- rank R" on rank P and the other way round; no rank sends to itself. */
static void check_program_text(const char *txt, const mpmd_schedule *s) {
    const int D = s->num_ranks;
    int64_t total = 0;
    for (int r = 0; r < D; r++)
        total += s->ranks[r].num_tasks;
    int64_t cap = 64;
    xfer *sends = malloc((size_t)cap * sizeof *sends), *recvs = malloc((size_t)cap * sizeof *recvs);
    int64_t ns = 0, nr = 0, runs = 0, mismatches = 0;
    int *pos = calloc((size_t)D, sizeof *pos); /* next task index of each rank's list */
    int rank = -1, headers = 0, self_sends = 0;
    char first_mismatch[200] = "";
    for (const char *line = txt; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char l[512];
        if (len >= sizeof l) len = sizeof l - 1;
        memcpy(l, line, len);
        l[len] = '\0';
        line = nl ? nl + 1 : NULL;
        int a, b, c;
        char word[16], kindbuf[16];
        if (sscanf(l, "rank %d program (%d", &a, &b) == 2) {
            rank = a;
            headers++;
            continue;
        }
        if (rank < 0 || rank >= D) continue;
        if (sscanf(l, " run %15[a-zA-Z]_%d microbatch %d", kindbuf, &a, &b) == 3) {
            runs++;
            const mpmd_schedule_rank *rk = &s->ranks[rank];
            int k = kind_of(kindbuf);
            if (pos[rank] >= rk->num_tasks || rk->tasks[pos[rank]].kind != k ||
                rk->tasks[pos[rank]].stage != a || rk->tasks[pos[rank]].microbatch != b) {
                if (!mismatches++)
                    snprintf(first_mismatch, sizeof first_mismatch, "rank %d, task %d: printed \"%.100s\"",
                             rank, pos[rank], l);
            }
            pos[rank]++;
        } else if (sscanf(l, " %15s %%%d:%*s mb %d %*s rank %d", word, &a, &b, &c) == 4 &&
                   (!strcmp(word, "send") || !strcmp(word, "recv"))) {
            int is_send = !strcmp(word, "send");
            if (ns == cap || nr == cap) {
                cap *= 2;
                sends = realloc(sends, (size_t)cap * sizeof *sends);
                recvs = realloc(recvs, (size_t)cap * sizeof *recvs);
            }
            if (c == rank) self_sends++;
            /* key both by (sender, receiver) so that they sort alike */
            if (is_send)
                sends[ns++] = (xfer){rank, a, b, c};
            else
                recvs[nr++] = (xfer){c, a, b, rank};
        }
    }
    CHECK(headers == D, "%d rank programs printed for %d ranks", headers, D);
    CHECK(runs == total, "%lld run lines for %lld scheduled tasks", (long long)runs, (long long)total);
    CHECK(mismatches == 0, "%lld run lines out of the schedule's order; first: %s", (long long)mismatches,
          first_mismatch);
    for (int r = 0; r < D; r++)
        CHECK(pos[r] == s->ranks[r].num_tasks, "rank %d: %d tasks printed, %d scheduled", r, pos[r],
              s->ranks[r].num_tasks);
    CHECK(self_sends == 0, "%d transfers of a rank to itself", self_sends);
    CHECK(ns > 0 && ns == nr, "%lld sends, %lld receives", (long long)ns, (long long)nr);
    if (ns == nr) {
        qsort(sends, (size_t)ns, sizeof *sends, xfer_cmp);
        qsort(recvs, (size_t)nr, sizeof *recvs, xfer_cmp);
        int64_t bad = 0;
        for (int64_t i = 0; i < ns; i++)
            bad += xfer_cmp(&sends[i], &recvs[i]) != 0;
        CHECK(bad == 0, "%lld sends without their receive", (long long)bad);
    }
    /* stages run on rank stage % D: rank 1 receives stage 0's output of microbatch 0 */
    CHECK(strstr(txt, "<- rank 0") && strstr(txt, "-> rank 1"), "no rank 0 -> rank 1 transfer printed");
    free(sends), free(recvs), free(pos);
}

static void test_large_plan(void) {
    const int quick = tu_quick();
    const int S = quick ? 24 : 48, D = quick ? 4 : 8, n = quick ? 16 : 64, rows = 2, width = 4;
    tu_mlp m = tu_build_mlp(S, n, rows, width);
    CHECK(mpmd_graph_status(m.g) == MPMD_OK, "graph: %s", mpmd_graph_error(m.g));
    if (mpmd_graph_status(m.g) != MPMD_OK) return;
    mpmd_schedule *s = NULL;
    mpmd_error err;
    if (mpmd_schedule_interleaved1f1b(S, D, n, 0, &s, &err) != MPMD_OK) {
        CHECK(0, "schedule: %s", err.msg);
        mpmd_graph_free(m.g);
        return;
    }
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = 1;
    so.seed = 3;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &so, &err);
    CHECK(st != NULL, "%s: jit: %s", s->name, err.msg);
    mpmd_exec_opts eo = MPMD_EXEC_DEFAULTS;
    eo.threads = 1;
    eo.seed = 3;
    mpmd_exec *ex = mpmd_exec_new(m.g, &eo, &err);
    CHECK(ex != NULL, "exec: %s", err.msg);
    if (!st || !ex) goto done;
    CHECK(mpmd_step_num_ranks(st) == D, "%d ranks", mpmd_step_num_ranks(st));

    /* two steps, bitwise equal to the one-rank loop after each */
    const int64_t B = (int64_t)n * rows;
    float *x = malloc((size_t)(B * width) * sizeof *x), *y = malloc((size_t)(B * width) * sizeof *y);
    tu_fill(x, B * width, 21);
    tu_fill(y, B * width, 22);
    const size_t bytes = (size_t)(B * width) * sizeof(float);
    for (int step = 0; step < 2; step++) {
        mpmd_exec_set_input(ex, m.x, x, bytes);
        mpmd_exec_set_input(ex, m.y, y, bytes);
        CHECK(mpmd_step_set_input(st, m.x, x, bytes) == MPMD_OK, "%s", mpmd_step_error(st));
        CHECK(mpmd_step_set_input(st, m.y, y, bytes) == MPMD_OK, "%s", mpmd_step_error(st));
        mpmd_status a = mpmd_exec_run(ex), b = mpmd_step_run(st);
        CHECK(a == MPMD_OK, "exec run: %s", mpmd_exec_error(ex));
        CHECK(b == MPMD_OK, "%s: step %d: %s", s->name, step, mpmd_step_error(st));
        if (a || b) break;
        float la = 0, lb = 1;
        mpmd_exec_read(ex, m.loss, &la, sizeof la);
        CHECK(mpmd_step_read(st, m.loss, &lb, sizeof lb) == MPMD_OK, "%s", mpmd_step_error(st));
        CHECK(memcmp(&la, &lb, sizeof la) == 0, "%s, step %d: loss %.9g vs one-rank %.9g", s->name, step, lb,
              la);
        CHECK(la > 0, "loss %g", la);
        char ha[65], hb[65];
        mpmd_exec_params_sha256(ex, ha);
        mpmd_step_params_sha256(st, hb);
        CHECK(strcmp(ha, hb) == 0, "%s, step %d: params %s vs one-rank %s", s->name, step, hb, ha);
    }
    free(x), free(y);

    /* where the parameters live: layer l's on rank l % D, and only there */
    const int layers[] = {0, 1, D - 1, D, S / 2 + 1, S - 2, S - 1};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        const int l = layers[i], want = s->stage_rank[l];
        CHECK(want == l % D, "stage %d on rank %d", l, want);
        static const char *const leaf[] = {"kernel", "bias"};
        for (int j = 0; j < 2; j++) {
            char name[48];
            snprintf(name, sizeof name, "dense_%d/%s", l, leaf[j]);
            mpmd_value p = mpmd_lookup(m.g, name);
            int ranks[16] = {-1};
            int nr = mpmd_step_where(st, p, ranks, 16);
            CHECK(nr == 1 && ranks[0] == want, "%s: %d ranks, first %d; expected rank %d only", name, nr,
                  ranks[0], want);
            /* the rank that holds it has its storage, the others none */
            for (int r = 0; r < D; r++) {
                void *data = mpmd_step_var_data(st, r, p);
                CHECK((data != NULL) == (r == want), "%s: storage on rank %d is %p", name, r, data);
            }
            float got[16], ref[16];
            mpmd_type t = mpmd_value_type(m.g, p);
            size_t pb = mpmd_type_bytes(&t);
            CHECK(pb <= sizeof got, "%s is %zu bytes", name, pb);
            if (pb <= sizeof got && mpmd_step_read(st, p, got, pb) == MPMD_OK &&
                mpmd_exec_read(ex, p, ref, pb) == 0)
                CHECK(memcmp(got, ref, pb) == 0, "%s differs from the one-rank loop", name);
        }
    }
    /* the summed loss is kept on the last stage's rank */
    int lr[16];
    int nl = mpmd_step_where(st, m.loss, lr, 16);
    int on_last = 0;
    for (int i = 0; i < nl && i < 16; i++)
        on_last |= lr[i] == s->stage_rank[S - 1];
    CHECK(nl >= 1 && on_last, "the loss is on %d ranks, not on rank %d", nl, s->stage_rank[S - 1]);
    CHECK(mpmd_step_where(st, MPMD_NONE, lr, 16) == 0, "MPMD_NONE has a place");
    for (int r = 0; r < D; r++)
        CHECK(mpmd_step_peak_bytes(st, r) > 0, "rank %d plans no activations", r);

    /* the printed programs and task lists */
    text prog = {NULL, 0}, tasks = {NULL, 0}, ref = {NULL, 0};
    FILE *f = open_memstream(&prog.buf, &prog.len);
    mpmd_step_print(st, f);
    fclose(f);
    f = open_memstream(&tasks.buf, &tasks.len);
    mpmd_step_print_tasks(st, f);
    fclose(f);
    f = open_memstream(&ref.buf, &ref.len);
    mpmd_schedule_write_text(s, f);
    fclose(f);
    CHECK(prog.len > 0 && strstr(prog.buf, s->name), "the program text does not name %s", s->name);
    char want[64];
    snprintf(want, sizeof want, "task fwd_%d (rank %d", S - 1, s->stage_rank[S - 1]);
    CHECK(strstr(prog.buf, "task fwd_0 (rank 0") && strstr(prog.buf, want) &&
              strstr(prog.buf, "task bwd_0 (rank 0"),
          "task bodies missing from the program text");
    snprintf(want, sizeof want, "run   bwd_%d  microbatch %d", S - 1, n - 1);
    CHECK(strstr(prog.buf, "run   fwd_0  microbatch 0") && strstr(prog.buf, want), "run lines missing");
    CHECK(strstr(prog.buf, "  free  %"), "no free lines");
    check_program_text(prog.buf, s);
    CHECK(tasks.len == ref.len && memcmp(tasks.buf, ref.buf, ref.len) == 0,
          "mpmd_step_print_tasks differs from the schedule's text");
    CHECK(!strncmp(tasks.buf, "rank 0: fwd_0__0 fwd_0__1", 25), "task lists start \"%.40s\"", tasks.buf);
    free(prog.buf), free(tasks.buf), free(ref.buf);

done:
    mpmd_exec_free(ex);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
}

int main(void) {
    test_large_plan();
    return tu_report("test_pipeline_large");
}
