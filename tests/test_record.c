/* Measured runs: a 4-rank GPT step records a timeline, a Chrome trace that
 * is valid JSON with one track per rank and well-nested events, and a
 * summary whose numbers agree with the timeline. */
#include "gpt_model.h"
#include "testutil.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

/* ---- a strict little JSON checker: value := object | array | string | number | literal */
static const char *jp;
static int json_value(void);
static void ws(void) {
    while (*jp == ' ' || *jp == '\n' || *jp == '\t' || *jp == '\r')
        jp++;
}
static int json_string(void) {
    if (*jp != '"') return 0;
    for (jp++; *jp && *jp != '"'; jp++) {
        if ((unsigned char)*jp < 0x20) return 0;
        if (*jp == '\\') {
            jp++;
            if (!strchr("\"\\/bfnrtu", *jp)) return 0;
        }
    }
    if (*jp != '"') return 0;
    jp++;
    return 1;
}
static int json_number(void) {
    const char *s = jp;
    if (*jp == '-') jp++;
    if (!isdigit((unsigned char)*jp)) return 0;
    while (isdigit((unsigned char)*jp))
        jp++;
    if (*jp == '.') {
        jp++;
        if (!isdigit((unsigned char)*jp)) return 0;
        while (isdigit((unsigned char)*jp))
            jp++;
    }
    if (*jp == 'e' || *jp == 'E') {
        jp++;
        if (*jp == '+' || *jp == '-') jp++;
        if (!isdigit((unsigned char)*jp)) return 0;
        while (isdigit((unsigned char)*jp))
            jp++;
    }
    return jp > s;
}
static int json_value(void) {
    ws();
    if (*jp == '{') {
        jp++;
        ws();
        if (*jp == '}') return jp++, 1;
        for (;;) {
            ws();
            if (!json_string()) return 0;
            ws();
            if (*jp++ != ':') return 0;
            if (!json_value()) return 0;
            ws();
            if (*jp == ',') {
                jp++;
                continue;
            }
            if (*jp == '}') return jp++, 1;
            return 0;
        }
    }
    if (*jp == '[') {
        jp++;
        ws();
        if (*jp == ']') return jp++, 1;
        for (;;) {
            if (!json_value()) return 0;
            ws();
            if (*jp == ',') {
                jp++;
                continue;
            }
            if (*jp == ']') return jp++, 1;
            return 0;
        }
    }
    if (*jp == '"') return json_string();
    if (!strncmp(jp, "true", 4) || !strncmp(jp, "null", 4)) return jp += 4, 1;
    if (!strncmp(jp, "false", 5)) return jp += 5, 1;
    return json_number();
}

typedef struct {
    int pid;
    double ts, dur;
} xev;

/* The task boxes of an SVG: the smallest x and the largest x + width of
 * the rects that carry a title (every task box does), and the picture's width. */
static void box_extent(const char *svg, double *lo, double *hi, double *width) {
    *lo = 1e30, *hi = -1e30, *width = 0;
    sscanf(strstr(svg, "width=\""), "width=\"%lf", width);
    for (const char *p = svg; (p = strstr(p, "<rect x=\"")); p++) {
        double x, w;
        const char *end = strchr(p, '>');
        if (!end || sscanf(p, "<rect x=\"%lf\" y=\"%*f\" width=\"%lf\"", &x, &w) != 2 || end[1] != '<' ||
            strncmp(end + 1, "<title>", 7) != 0)
            continue;
        if (x < *lo) *lo = x;
        if (x + w > *hi) *hi = x + w;
    }
}

/* A step of a fraction of a millisecond draws across the picture, in us;
 * a width asked for is the width drawn. */
static void short_step_drawing(void) {
    tu_mlp m = tu_build_mlp(2, 2, 1, 4);
    mpmd_schedule *s;
    mpmd_error err;
    mpmd_schedule_std1f1b(2, 2, &s, &err);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &o, &err);
    float x[2 * 4], y[2 * 4];
    tu_fill(x, 8, 1), tu_fill(y, 8, 2);
    mpmd_step_set_recording(st, 1);
    mpmd_step_set_input(st, m.x, x, sizeof x), mpmd_step_set_input(st, m.y, y, sizeof y);
    for (int k = 0; k < 3; k++)
        mpmd_step_run(st);
    mpmd_step_stats stats;
    mpmd_timeline *tl;
    CHECK(mpmd_step_summary(st, &stats, &err) == MPMD_OK && mpmd_step_timeline(st, &tl, &err) == MPMD_OK,
          "%s", err.msg);
    if (stats.step_ms < 1.0)
        CHECK(!strcmp(tl->unit, "us"), "a %.3f ms step drawn in %s", stats.step_ms, tl->unit);
    /* the share of the drawn time the tasks cover, first start to last end */
    double first = 1e30, last = 0;
    for (int r = 0; r < tl->num_ranks; r++)
        for (int k = 0; k < tl->num_events[r]; k++) {
            if (tl->events[r][k].start < first) first = tl->events[r][k].start;
            if (tl->events[r][k].end > last) last = tl->events[r][k].end;
        }
    const double frac = last > 0 ? (last - first) / last : 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) tl->width = 600;
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        mpmd_timeline_write_svg(tl, f);
        fclose(f);
        double lo, hi, width;
        box_extent(buf, &lo, &hi, &width);
        /* ~1100 px of time unless a width is asked for (a step capped at
         * 40 px per unit drew a 0.5 ms step 20 px wide) */
        if (pass)
            CHECK(fabs((hi - lo) - 600 * frac) <= 0.02 * 600 * frac + 2,
                  "width 600: the task boxes span %.0f px, want %.0f", hi - lo, 600 * frac);
        else
            CHECK(hi - lo >= 0.95 * 1100 * frac && hi - lo <= 1.02 * 2000 * frac + 2,
                  "a %.3f ms step: its task boxes span %.0f px of %.0f, want 1100 to 2000 px of time x %.2f",
                  stats.step_ms, hi - lo, width, frac);
        free(buf);
    }
    mpmd_timeline_free(tl);
    mpmd_step_stats_free(&stats);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    mpmd_graph_free(m.g);
}

/* A split whose last stage carries a big LM head: the summary names that
 * stage as the slowest and reports the imbalance; the simulation with each
 * stage's own times predicts more bubble than the textbook's. */
static void uneven_split(void) {
    gpt_config cfg = gpt_config_default();
    cfg.vocab = 4096, cfg.seq = 16, cfg.width = 32, cfg.heads = 2, cfg.layers = 2, cfg.stages = 2;
    cfg.microbatches = 4, cfg.batch = 8;
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&cfg, 1, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mpmd_schedule *s;
    mpmd_schedule_std1f1b(2, 4, &s, &err);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &o, &err);
    int32_t tok[8 * 16], tgt[8 * 16];
    gpt_random_batch(cfg.vocab, 8, 16, 1, 1, tok, tgt);
    mpmd_step_set_recording(st, 1);
    mpmd_step_set_input(st, m.tokens, tok, sizeof tok), mpmd_step_set_input(st, m.targets, tgt, sizeof tgt);
    for (int k = 0; k < 2; k++)
        mpmd_step_run(st);
    mpmd_step_stats stats;
    CHECK(mpmd_step_summary(st, &stats, &err) == MPMD_OK, "%s", err.msg);
    CHECK(stats.slowest_stage == 1 && stats.imbalance > 1.3 && stats.slowest_stage_ms > 0,
          "uneven split: slowest stage %d, imbalance %.2f", stats.slowest_stage, stats.imbalance);
    CHECK(stats.simulated_bubble > stats.analytic_bubble,
          "uneven split: simulated bubble %.3f with each stage's times, textbook %.3f",
          stats.simulated_bubble, stats.analytic_bubble);
    CHECK(stats.transfer_ms >= 0, "transfers %.3f ms", stats.transfer_ms);
    /* the wake-ups are the part of each wait after the value was sent: rank
     * 0 waits mostly for the slow last stage to send */
    double wait = 0, wake = 0;
    for (int r = 0; r < 2; r++) {
        CHECK(stats.ranks[r].wake_ms >= 0 && stats.ranks[r].wake_ms <= stats.ranks[r].wait_ms,
              "rank %d: wake-ups %.3f ms of a %.3f ms wait", r, stats.ranks[r].wake_ms,
              stats.ranks[r].wait_ms);
        wait += stats.ranks[r].wait_ms, wake += stats.ranks[r].wake_ms;
    }
    printf("uneven split: waits %.3f ms, of them wake-ups %.3f ms\n", wait, wake);
    CHECK(wait > 0 && wake < wait, "the ranks waited %.3f ms, %.3f ms of it after the value was sent", wait,
          wake);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mpmd_step_print_summary(st, f, &err);
    fclose(f);
    CHECK(buf && strstr(buf, "slowest stage 1:") && strstr(buf, "(imbalance)") &&
              strstr(buf, "points from a send"),
          "the printed summary: %s", buf);
    free(buf);
    /* the per-rank programs and the messages name the parameters */
    f = open_memstream(&buf, &len);
    mpmd_step_print(st, f);
    fclose(f);
    CHECK(buf && strstr(buf, "= embedding %5 \"wte/embedding\"") && strstr(buf, "-> loop sum into") &&
              strstr(buf, "= adamw %"),
          "the per-rank programs name the parameters and the loop sums");
    free(buf);
    tok[3] = 5000; /* an id outside the vocabulary */
    mpmd_step_set_input(st, m.tokens, tok, sizeof tok);
    CHECK(mpmd_step_run(st) != MPMD_OK && strstr(mpmd_step_error(st), "embedding of \"wte/embedding\"") &&
              strstr(mpmd_step_error(st), "5000"),
          "a failing op names its parameter: %s", mpmd_step_error(st));
    mpmd_step_stats_free(&stats);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    gpt_model_free(&m);
}

int main(void) {
    gpt_config cfg = gpt_config_default();
    cfg.vocab = 64, cfg.seq = 16, cfg.width = 32, cfg.heads = 2, cfg.layers = 4, cfg.stages = 4;
    cfg.microbatches = 8, cfg.batch = 8, cfg.tie_embeddings = 1;
    gpt_model m;
    mpmd_error err;
    if (gpt_build(&cfg, 1, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    mpmd_schedule *s;
    mpmd_schedule_std1f1b(4, 8, &s, &err);
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    if (!st) return tu_report("test_record");
    mpmd_timeline *tl;
    CHECK(mpmd_step_timeline(st, &tl, &err) == MPMD_ERR_INVALID && strstr(err.msg, "no recorded run"), "%s",
          err.msg);
    int32_t tok[8 * 16], tgt[8 * 16];
    gpt_random_batch(64, 8, 16, 1, 0, tok, tgt);
    mpmd_step_set_input(st, m.tokens, tok, sizeof tok);
    mpmd_step_set_input(st, m.targets, tgt, sizeof tgt);
    mpmd_step_set_recording(st, 1);
    for (int i = 0; i < 2; i++)
        CHECK(mpmd_step_run(st) == MPMD_OK, "%s", mpmd_step_error(st));

    /* the timeline: every task of each rank, in time order */
    CHECK(mpmd_step_timeline(st, &tl, &err) == MPMD_OK, "%s", err.msg);
    mpmd_step_stats stats;
    CHECK(mpmd_step_summary(st, &stats, &err) == MPMD_OK, "%s", err.msg);
    for (int r = 0; r < 4; r++) {
        CHECK(tl->num_events[r] == 16, "rank %d: %d task events, expected 16", r, tl->num_events[r]);
        double sum = 0;
        for (int k = 0; k < tl->num_events[r]; k++) {
            const mpmd_timeline_event *e = &tl->events[r][k];
            CHECK(e->end >= e->start && (k == 0 || e->start >= tl->events[r][k - 1].end),
                  "rank %d event %d order", r, k);
            sum += e->end - e->start;
        }
        /* busy = tasks + the before/after-loop ops, so at least the tasks */
        CHECK(stats.ranks[r].busy_ms >= sum - 1e-9 && stats.ranks[r].tasks == 16,
              "rank %d busy %.4f vs tasks %.4f", r, stats.ranks[r].busy_ms, sum);
        CHECK(stats.ranks[r].busy_ms <= stats.step_ms * 1.0001, "rank %d busy beyond the step", r);
        CHECK(stats.ranks[r].peak_bytes > 0 && stats.ranks[r].planned_peak_bytes == stats.ranks[r].peak_bytes,
              "rank %d: activations measured %lld, planned %lld", r, (long long)stats.ranks[r].peak_bytes,
              (long long)stats.ranks[r].planned_peak_bytes);
    }
    CHECK(stats.bubble >= 0 && stats.bubble < 1, "bubble %g", stats.bubble);
    CHECK(fabs(stats.analytic_bubble - 3.0 / 11.0) < 1e-9, "analytic %g", stats.analytic_bubble);
    CHECK(!isnan(stats.simulated_bubble), "simulated");
    FILE *svg = fopen("test_record.svg", "w");
    if (svg) {
        CHECK(mpmd_timeline_write_svg(tl, svg) == MPMD_OK, "svg");
        fclose(svg);
    }
    mpmd_timeline_free(tl);
    mpmd_step_stats_free(&stats);
    short_step_drawing();
    uneven_split();

    /* the trace: valid JSON, one process per rank, events nested or disjoint */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(mpmd_step_write_trace(st, f, &err) == MPMD_OK, "%s", err.msg);
    fclose(f);
    jp = buf;
    CHECK(json_value() && (ws(), *jp == '\0'), "trace is not valid JSON near byte %ld", (long)(jp - buf));
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof want, "\"args\": {\"name\": \"rank %d\"}", r);
        CHECK(strstr(buf, want) != NULL, "no track named rank %d", r);
    }
    xev *xs = malloc(20000 * sizeof *xs);
    int nx = 0;
    for (const char *p = strstr(buf, "\"ph\": \"X\""); p && nx < 20000; p = strstr(p + 1, "\"ph\": \"X\"")) {
        xev e;
        const char *q = strstr(p, "\"pid\": ");
        const char *t = strstr(p, "\"ts\": ");
        const char *d = strstr(p, "\"dur\": ");
        if (!q || !t || !d) break;
        e.pid = atoi(q + 7), e.ts = atof(t + 6), e.dur = atof(d + 7);
        xs[nx++] = e;
    }
    CHECK(nx > 4 * 16, "only %d complete events", nx);
    /* within a track, in file order: an event starts after the previous one
     * ends, or lies inside it (a receive's wait) */
    int nested_ok = 1;
    for (int i = 1; i < nx; i++) {
        if (xs[i].pid != xs[i - 1].pid) continue;
        const xev *a = &xs[i - 1], *b = &xs[i];
        int after = b->ts >= a->ts + a->dur - 1e-3;
        int inside = b->ts >= a->ts - 1e-3 && b->ts + b->dur <= a->ts + a->dur + 1e-3;
        if (!after && !inside) nested_ok = 0;
    }
    CHECK(nested_ok, "overlapping events in a track");
    free(xs);
    free(buf);
    mpmd_step_set_recording(st, 0);
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    gpt_model_free(&m);
    return tu_report("test_record");
}
