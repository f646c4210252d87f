/* The simulation: the bubble against the textbook values at unit costs,
 * the dispatch order and every op's times recomputed independently, the
 * cost model (transfers, per-stage multipliers), peak in-flight counts,
 * and the timeline with its SVG and trace writers. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "testutil.h"

#include <math.h>
#include <string.h>

static mpmd_schedule *make(mpmd_schedule_kind kind, int S, int D, int n) {
    mpmd_schedule *s = NULL;
    mpmd_error err;
    if (mpmd_schedule_new(kind, S, D, n, 0, &s, &err)) return NULL;
    return s;
}

static mpmd_sim *simulate(const mpmd_schedule *s, const mpmd_cost_model *c) {
    mpmd_sim *sim = NULL;
    mpmd_error err;
    mpmd_status st = mpmd_schedule_simulate(s, c, &sim, &err, NULL);
    CHECK(st == MPMD_OK, "%s: %s", s->name, err.msg);
    return sim;
}

/* GPipe and 1F1B: (p-1)/(m+p-1) with B = 2F; interleaved: (p-1)/(v m+p-1)
 * when p divides m; ZB-H1: (p-1)/(3m+p-1), a third of 1F1B's idle time. */
static void test_analytic_bubbles(void) {
    int maxD = tu_quick() ? 4 : 8, maxn = tu_quick() ? 12 : 24, cases = 0;
    for (int kind = 0; kind < MPMD_SCHED_USER; kind++) {
        if (kind == MPMD_SCHED_DUALPIPEV) continue;
        int interleaved = kind == MPMD_SCHED_INTERLEAVED1F1B || kind == MPMD_SCHED_KIMIK2 ||
                          kind == MPMD_SCHED_INTERLEAVED_GPIPE;
        for (int D = 1; D <= maxD; D++)
            for (int v = 1; v <= (interleaved ? 3 : 1); v++)
                for (int n = 1; n <= maxn; n++) {
                    mpmd_schedule *s = make((mpmd_schedule_kind)kind, D * v, D, n);
                    if (!s) continue;
                    mpmd_sim *sim = simulate(s, NULL);
                    if (sim) {
                        double p = D, m = n, want;
                        if (kind == MPMD_SCHED_ZEROBUBBLE)
                            want = (p - 1) / (3 * m + p - 1);
                        else if (interleaved)
                            want = n % D ? NAN : (p - 1) / (v * m + p - 1);
                        else
                            want = (p - 1) / (m + p - 1);
                        if (isnan(want)) {
                            CHECK(isnan(sim->analytic_bubble) && strstr(sim->analytic_formula, "divide"),
                                  "%s: no analytic value when D does not divide n (%s)", s->name,
                                  sim->analytic_formula);
                        } else {
                            CHECK(fabs(sim->analytic_bubble - want) < 1e-12, "%s: analytic %g, want %g",
                                  s->name, sim->analytic_bubble, want);
                            CHECK(fabs(sim->bubble - want) < 1e-12,
                                  "%s: simulated bubble %.6f, analytic %.6f", s->name, sim->bubble, want);
                            cases++;
                        }
                        mpmd_sim_free(sim);
                    }
                    mpmd_schedule_free(s);
                }
    }
    CHECK(cases > 300, "%d analytic cases", cases);
    /* ZB-H1 idles a third of what 1F1B idles (F = A = W = 1, B = 2). */
    for (int S = 2; S <= maxD; S++)
        for (int n = S; n <= maxn; n += 3) {
            mpmd_schedule *zb = make(MPMD_SCHED_ZEROBUBBLE, S, S, n), *ob = make(MPMD_SCHED_STD1F1B, S, S, n);
            mpmd_sim *a = zb ? simulate(zb, NULL) : NULL, *b = ob ? simulate(ob, NULL) : NULL;
            if (a && b) {
                double idle_zb = a->makespan * S * a->bubble, idle_1f1b = b->makespan * S * b->bubble;
                CHECK(fabs(idle_zb / idle_1f1b - 1.0 / 3.0) < 1e-9, "ZeroBubble(%d) n=%d idles %g, 1F1B %g",
                      S, n, idle_zb, idle_1f1b);
                CHECK(a->bubble < b->bubble / 2, "ZB bubble %g vs 1F1B %g", a->bubble, b->bubble);
            }
            mpmd_sim_free(a);
            mpmd_sim_free(b);
            mpmd_schedule_free(zb);
            mpmd_schedule_free(ob);
        }
    /* No textbook value for DualPipeV. */
    mpmd_schedule *s = make(MPMD_SCHED_DUALPIPEV, 8, 4, 8);
    mpmd_sim *sim = s ? simulate(s, NULL) : NULL;
    CHECK(sim && isnan(sim->analytic_bubble) && strstr(sim->analytic_formula, "DualPipeV"),
          "DualPipeV: none");
    mpmd_sim_free(sim);
    mpmd_schedule_free(s);
}

static double cost_of(const mpmd_cost_model *c, const mpmd_task *t) {
    return c->latency[t->kind] * (c->stage_scale ? c->stage_scale[t->stage] : 1.0);
}

/* Recompute every op from the rules: per-rank order, start = max(rank
 * free, inputs' ends (+ transfer across ranks)), end = start + cost, and
 * the dispatch order sorted by (start, rank) (costs > 0). */
static void check_ops(const mpmd_schedule *s, const mpmd_sim *sim, const char *label) {
    int S = s->num_stages, n = s->num_microbatches, D = s->num_ranks;
    const mpmd_cost_model *c = &sim->cost;
    double *fend = malloc(sizeof(double) * (size_t)S * n), *bend = malloc(sizeof(double) * (size_t)S * n);
    int *next = calloc((size_t)D, sizeof *next);
    double *free_at = calloc((size_t)D, sizeof *free_at), *busy = calloc((size_t)D, sizeof *busy);
    for (int i = 0; i < S * n; i++)
        fend[i] = bend[i] = NAN;
    int bad = 0;
    int64_t entries = 0;
    for (int64_t k = 0; k < sim->num_ops && !bad; k++) {
        const mpmd_sim_op *op = &sim->ops[k];
        int r = op->rank;
        if (op->entry != next[r]) {
            CHECK(0, "%s: op %lld is rank %d entry %d, expected entry %d", label, (long long)k, r, op->entry,
                  next[r]);
            bad = 1;
            break;
        }
        if (k > 0) {
            const mpmd_sim_op *pr = &sim->ops[k - 1];
            if (!(pr->start < op->start || (pr->start == op->start && pr->rank < op->rank))) {
                CHECK(0, "%s: dispatch order not by (start, rank) at op %lld", label, (long long)k);
                bad = 1;
            }
        }
        const mpmd_schedule_rank *rk = &s->ranks[r];
        int b = rk->entry_start[op->entry], e = rk->entry_start[op->entry + op->num_entries];
        double ready = free_at[r], cost = 0;
        for (int i = b; i < e; i++) {
            const mpmd_task *t = &rk->tasks[i];
            cost += cost_of(c, t);
            /* inputs not made inside this op */
            int st = t->stage, m = t->microbatch;
            double in[2] = {-1, -1};
            int in_stage[2] = {-1, -1};
            /* Is an input made by an earlier member of this op? */
            int prev_f = 0, own_f = 0, own_a = 0, next_b = 0;
            for (int j = b; j < i; j++) {
                const mpmd_task *u = &rk->tasks[j];
                if (u->microbatch != m) continue;
                prev_f |= u->kind == MPMD_TASK_F && u->stage == st - 1;
                own_f |= u->kind == MPMD_TASK_F && u->stage == st;
                own_a |= u->kind == MPMD_TASK_A && u->stage == st;
                next_b |= (u->kind == MPMD_TASK_B || u->kind == MPMD_TASK_A) && u->stage == st + 1;
            }
            if (t->kind == MPMD_TASK_F) {
                if (st > 0 && !prev_f) {
                    in[0] = fend[(st - 1) * n + m];
                    in_stage[0] = st - 1;
                }
            } else if (t->kind == MPMD_TASK_W) {
                if (!own_a) {
                    in[0] = bend[st * n + m];
                    in_stage[0] = st;
                }
            } else {
                int inside_b = next_b;
                if (!own_f) {
                    in[0] = fend[st * n + m];
                    in_stage[0] = st;
                }
                if (st + 1 < S && !inside_b) {
                    in[1] = bend[(st + 1) * n + m];
                    in_stage[1] = st + 1;
                }
            }
            for (int q = 0; q < 2; q++) {
                if (in_stage[q] < 0) continue;
                if (isnan(in[q])) {
                    CHECK(0, "%s: op %lld runs before its input exists", label, (long long)k);
                    bad = 1;
                }
                double x = in[q] + (s->stage_rank[in_stage[q]] != r ? c->transfer : 0);
                if (x > ready) ready = x;
            }
        }
        CHECK(fabs(op->start - ready) < 1e-9, "%s: op %lld (rank %d entry %d) starts %g, expected %g", label,
              (long long)k, r, op->entry, op->start, ready);
        CHECK(fabs(op->end - (op->start + cost)) < 1e-9, "%s: op %lld ends %g, expected %g", label,
              (long long)k, op->end, op->start + cost);
        for (int i = b; i < e; i++) {
            const mpmd_task *t = &rk->tasks[i];
            if (t->kind == MPMD_TASK_F) fend[t->stage * n + t->microbatch] = op->end;
            if (t->kind == MPMD_TASK_B || t->kind == MPMD_TASK_A)
                bend[t->stage * n + t->microbatch] = op->end;
        }
        free_at[r] = op->end;
        busy[r] += cost;
        next[r] = op->entry + op->num_entries;
        entries += op->num_entries;
    }
    double makespan = 0;
    for (int r = 0; r < D; r++) {
        if (free_at[r] > makespan) makespan = free_at[r];
        CHECK(bad || next[r] == s->ranks[r].num_entries, "%s: rank %d ran %d of its entries", label, r,
              next[r]);
        CHECK(fabs(busy[r] - sim->busy[r]) < 1e-9, "%s: rank %d busy %g, expected %g", label, r, sim->busy[r],
              busy[r]);
    }
    CHECK(fabs(makespan - sim->makespan) < 1e-9, "%s: makespan %g, expected %g", label, sim->makespan,
          makespan);
    free(fend);
    free(bend);
    free(next);
    free(free_at);
    free(busy);
}

static void test_dispatch_order(void) {
    double scale8[8] = {1, 1.5, 0.5, 2, 1, 1, 3, 0.25};
    mpmd_cost_model costs[3] = {MPMD_COST_DEFAULTS,
                                MPMD_COST_DEFAULTS,
                                {{1.0, 3.0, 2.0, 0.5}, 0.25, scale8, 0.0, 0.0, 0.0, NULL, NULL, NULL}};
    costs[1].transfer = 0.5;
    static const struct {
        mpmd_schedule_kind kind;
        int S, D, n;
    } cases[] = {{MPMD_SCHED_GPIPE, 4, 4, 5},           {MPMD_SCHED_STD1F1B, 4, 4, 7},
                 {MPMD_SCHED_EAGER1F1B, 8, 8, 8},       {MPMD_SCHED_ZEROBUBBLE, 4, 4, 6},
                 {MPMD_SCHED_INTERLEAVED1F1B, 8, 4, 8}, {MPMD_SCHED_KIMIK2, 8, 2, 6},
                 {MPMD_SCHED_DUALPIPEV, 8, 4, 9},       {MPMD_SCHED_INTERLEAVED_GPIPE, 8, 4, 5}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int k = 0; k < 3; k++) {
            mpmd_schedule *s = make(cases[i].kind, cases[i].S, cases[i].D, cases[i].n);
            if (!s || (costs[k].stage_scale && s->num_stages != 8)) {
                mpmd_schedule_free(s);
                continue;
            }
            mpmd_sim *sim = simulate(s, &costs[k]);
            if (sim) {
                char label[300];
                snprintf(label, sizeof label, "%.256s cost %d", s->name, k);
                check_ops(s, sim, label);
                mpmd_sim_free(sim);
            }
            mpmd_schedule_free(s);
        }
}

/* Numbers worked out by hand. */
static void test_cost_model(void) {
    mpmd_schedule *s = make(MPMD_SCHED_GPIPE, 2, 2, 1);
    if (!s) return;
    mpmd_cost_model c = MPMD_COST_DEFAULTS;
    c.transfer = 0.5;
    /* F0 [0,1], F1 [1.5,2.5], B1 [2.5,4.5], B0 [5,7] */
    mpmd_sim *sim = simulate(s, &c);
    CHECK(sim && fabs(sim->makespan - 7.0) < 1e-12, "GPipe(2) n=1 with transfer 0.5: makespan %g",
          sim->makespan);
    CHECK(sim && fabs(sim->bubble - (1 - 6.0 / 14.0)) < 1e-12, "bubble %g", sim->bubble);
    mpmd_sim_free(sim);
    double scale[2] = {1, 3};
    c = (mpmd_cost_model)MPMD_COST_DEFAULTS;
    c.stage_scale = scale;
    /* F0 [0,1], F1 [1,4], B1 [4,10], B0 [10,12] */
    sim = simulate(s, &c);
    CHECK(sim && fabs(sim->makespan - 12.0) < 1e-12 && fabs(sim->busy[1] - 9.0) < 1e-12,
          "GPipe(2) n=1 with stage 1 x3: makespan %g", sim ? sim->makespan : -1);
    CHECK(sim && sim->cost.stage_scale != scale && sim->cost.stage_scale[1] == 3.0,
          "the sim keeps its own copy");
    mpmd_sim_free(sim);
    /* Bad cost models. */
    mpmd_error err;
    mpmd_cost_model bad = MPMD_COST_DEFAULTS;
    bad.latency[MPMD_TASK_B] = -1;
    CHECK(mpmd_schedule_simulate(s, &bad, &sim, &err, NULL) == MPMD_ERR_INVALID &&
              strstr(err.msg, "cost of B") && sim == NULL,
          "negative cost: %s", err.msg);
    bad = (mpmd_cost_model)MPMD_COST_DEFAULTS;
    bad.transfer = NAN;
    CHECK(mpmd_schedule_simulate(s, &bad, &sim, &err, NULL) == MPMD_ERR_INVALID &&
              strstr(err.msg, "transfer"),
          "NaN transfer: %s", err.msg);
    double neg[2] = {1, -2};
    bad = (mpmd_cost_model)MPMD_COST_DEFAULTS;
    bad.stage_scale = neg;
    CHECK(mpmd_schedule_simulate(s, &bad, &sim, &err, NULL) == MPMD_ERR_INVALID && strstr(err.msg, "stage 1"),
          "negative multiplier: %s", err.msg);
    mpmd_schedule_free(s);

    /* Stage 0's bwdA and bwdW run as one program of cost A + W. */
    s = make(MPMD_SCHED_ZEROBUBBLE, 2, 2, 2);
    sim = s ? simulate(s, NULL) : NULL;
    int pairs = 0;
    for (int64_t k = 0; sim && k < sim->num_ops; k++) {
        const mpmd_sim_op *op = &sim->ops[k];
        int nt;
        const mpmd_task *t = mpmd_schedule_entry(s, op->rank, op->entry, &nt);
        if (t->kind == MPMD_TASK_A && t->stage == 0) {
            pairs++;
            CHECK(op->num_entries == 2 && fabs(op->end - op->start - 2.0) < 1e-12, "A(0)+W(0) as one op");
        } else {
            CHECK(op->num_entries == 1, "other ops are one entry");
        }
    }
    CHECK(pairs == 2, "two merged stage-0 backwards, got %d", pairs);
    mpmd_sim_free(sim);
    mpmd_schedule_free(s);
}

/* Peak (stage, microbatch) pairs in flight. */
static void test_peak_in_flight(void) {
    for (int S = 1; S <= 6; S++)
        for (int n = 1; n <= 10; n += 3) {
            mpmd_schedule *a = make(MPMD_SCHED_STD1F1B, S, S, n), *g = make(MPMD_SCHED_GPIPE, S, S, n);
            mpmd_sim *sa = a ? simulate(a, NULL) : NULL, *sg = g ? simulate(g, NULL) : NULL;
            for (int r = 0; sa && sg && r < S; r++) {
                int want = S - r < n ? S - r : n;
                CHECK(sa->peak_in_flight[r] == want, "Std1F1B(%d) n=%d rank %d: peak %d, want %d", S, n, r,
                      sa->peak_in_flight[r], want);
                CHECK(sg->peak_in_flight[r] == n, "GPipe(%d) n=%d rank %d: peak %d", S, n, r,
                      sg->peak_in_flight[r]);
            }
            mpmd_sim_free(sa);
            mpmd_sim_free(sg);
            mpmd_schedule_free(a);
            mpmd_schedule_free(g);
        }
}

/* The memory terms: without a split backward a rank's peak is its stages'
 * static bytes plus its peak in flight times keep_f; with one, keep_w of
 * each pair stays past A, so the peak lies between keep_f and that bound;
 * bad terms are refused. And byte counts as people write them. */
static void test_memory(void) {
    static const mpmd_schedule_kind kinds[] = {MPMD_SCHED_GPIPE, MPMD_SCHED_STD1F1B, MPMD_SCHED_EAGER1F1B,
                                               MPMD_SCHED_ZEROBUBBLE};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int n = 4; n <= 8; n += 4) {
            mpmd_schedule *s = make(kinds[k], 4, 4, n);
            if (!s) continue;
            mpmd_cost_model c = MPMD_COST_DEFAULTS;
            c.keep_f = 1000, c.keep_w = s->split_backward ? 400 : 0, c.static_bytes = 5e6;
            mpmd_sim *sim = simulate(s, &c);
            for (int r = 0; sim && r < 4; r++) {
                double bound = 5e6 + sim->peak_in_flight[r] * 1000.0;
                if (!s->split_backward)
                    CHECK(sim->peak_bytes[r] == bound, "%s rank %d: peak %.0f bytes, want %.0f", s->name, r,
                          sim->peak_bytes[r], bound);
                else
                    CHECK(sim->peak_bytes[r] >= 5e6 + 1000 && sim->peak_bytes[r] <= bound,
                          "%s rank %d: peak %.0f bytes, outside [%.0f, %.0f]", s->name, r, sim->peak_bytes[r],
                          5e6 + 1000, bound);
            }
            mpmd_sim_free(sim);
            /* not modelled: zero */
            sim = simulate(s, NULL);
            CHECK(sim && sim->peak_bytes[0] == 0, "%s: memory not modelled, yet a peak", s->name);
            mpmd_sim_free(sim);
            c.keep_w = 2000;
            mpmd_error err;
            CHECK(mpmd_schedule_simulate(s, &c, &sim, &err, NULL) == MPMD_ERR_INVALID &&
                      strstr(err.msg, "cannot exceed"),
                  "keep_w > keep_f: %s", err.msg);
            c.keep_w = 0, c.keep_f = -1;
            CHECK(mpmd_schedule_simulate(s, &c, &sim, &err, NULL) == MPMD_ERR_INVALID &&
                      strstr(err.msg, "keep_f must be finite"),
                  "negative keep_f: %s", err.msg);
            mpmd_schedule_free(s);
        }
    static const struct {
        const char *s;
        int64_t want; /* -1: refused */
    } bytes[] = {{"0", 0},
                 {"1048576", 1048576},
                 {"2G", 2LL << 30},
                 {"512M", 512LL << 20},
                 {"3k", 3072},
                 {"1KiB", 1024},
                 {"7GB", 7LL << 30},
                 {"5T", 5LL << 40},
                 {"64B", 64},
                 {"", -1},
                 {"-1", -1},
                 {"1.5G", -1},
                 {"2X", -1},
                 {"G", -1},
                 {"99999999999999999999", -1},
                 {"4194305T", -1}};
    for (size_t k = 0; k < sizeof bytes / sizeof bytes[0]; k++) {
        int64_t v = -7;
        int rc = mpmd_parse_bytes(bytes[k].s, &v);
        if (bytes[k].want < 0)
            CHECK(rc != 0, "\"%s\" accepted as %lld", bytes[k].s, (long long)v);
        else
            CHECK(rc == 0 && v == bytes[k].want, "\"%s\": %lld, want %lld", bytes[k].s, (long long)v,
                  (long long)bytes[k].want);
    }
}

/* Each stage's own times: the same makespans as latency x stage_scale when
 * they agree, and a one-microbatch pipeline takes the sum of its tasks. */
/* Stages that differ: each boundary's own transfer time and each stage's
 * own bytes, by hand on Std1F1B(2) and GPipe(2). */
static void test_stage_links_and_memory(void) {
    mpmd_schedule *s = make(MPMD_SCHED_STD1F1B, 2, 2, 1);
    const double link[2] = {0.5, 99}; /* the last entry is never read */
    mpmd_cost_model c = MPMD_COST_DEFAULTS;
    c.link_time = link;
    c.transfer = 0.25;
    mpmd_sim *sim = simulate(s, &c);
    /* F0 1, link 0.75, F1 1, B1 2, link 0.75, B0 2 */
    CHECK(sim && fabs(sim->makespan - 7.5) < 1e-12, "one microbatch over a 0.5 link: %g, by hand 7.5",
          sim ? sim->makespan : -1);
    mpmd_sim_free(sim);
    mpmd_schedule_free(s);
    s = make(MPMD_SCHED_GPIPE, 2, 2, 3);
    const double mem[6] = {100, 0, 1e6, 10, 0, 2e6}; /* keep_f, keep_w, static of stages 0 and 1 */
    c = MPMD_COST_DEFAULTS;
    c.stage_memory = mem;
    c.keep_f = 1e9, c.static_bytes = 1e9; /* not read: stage_memory is */
    sim = simulate(s, &c);
    /* GPipe keeps every forward until its backward: 3 microbatches on each rank */
    CHECK(sim && sim->peak_bytes[0] == 1e6 + 300 && sim->peak_bytes[1] == 2e6 + 30,
          "each stage its own bytes: %.0f and %.0f, by hand 1000300 and 2000030",
          sim ? sim->peak_bytes[0] : -1, sim ? sim->peak_bytes[1] : -1);
    mpmd_sim_free(sim);
    const double bad[6] = {100, 200, 0, 0, 0, 0};
    c.stage_memory = bad;
    mpmd_error err;
    CHECK(mpmd_schedule_simulate(s, &c, &sim, &err, NULL) == MPMD_ERR_INVALID &&
              strstr(err.msg, "stage 0's keep_w (200 bytes kept until W) is part of its keep_f (100)"),
          "a stage's keep_w above its keep_f: %s", err.msg);
    const double neg[2] = {-1, 0};
    c.stage_memory = NULL, c.link_time = neg;
    CHECK(mpmd_schedule_simulate(s, &c, &sim, &err, NULL) == MPMD_ERR_INVALID &&
              strstr(err.msg, "the link time between stages 0 and 1 must be finite and >= 0"),
          "a negative link: %s", err.msg);
    mpmd_schedule_free(s);
}

static void test_stage_latency(void) {
    double scale[4] = {1, 1.5, 0.5, 2}, own[16];
    mpmd_cost_model a = MPMD_COST_DEFAULTS, b = MPMD_COST_DEFAULTS;
    a.stage_scale = scale;
    for (int st = 0; st < 4; st++)
        for (int k = 0; k < MPMD_TASK_KINDS; k++)
            own[st * 4 + k] = a.latency[k] * scale[st];
    b.stage_latency = own;
    static const mpmd_schedule_kind kinds[] = {MPMD_SCHED_GPIPE, MPMD_SCHED_STD1F1B, MPMD_SCHED_ZEROBUBBLE};
    for (size_t k = 0; k < 3; k++) {
        mpmd_schedule *s = make(kinds[k], 4, 4, 8);
        mpmd_sim *x = s ? simulate(s, &a) : NULL, *y = s ? simulate(s, &b) : NULL;
        CHECK(x && y && x->makespan == y->makespan && x->bubble == y->bubble, "%s: %g vs %g",
              s ? s->name : "?", x ? x->makespan : -1, y ? y->makespan : -1);
        mpmd_sim_free(x), mpmd_sim_free(y);
        mpmd_schedule_free(s);
    }
    double two[8] = {3, 7, 0, 0, 5, 11, 0, 0}; /* stage 0: F 3, B 7; stage 1: F 5, B 11 */
    mpmd_cost_model c = MPMD_COST_DEFAULTS;
    c.stage_latency = two;
    mpmd_schedule *s = make(MPMD_SCHED_STD1F1B, 2, 2, 1);
    mpmd_sim *sim = s ? simulate(s, &c) : NULL;
    CHECK(sim && sim->makespan == 3 + 5 + 11 + 7, "one microbatch: makespan %g, want 26",
          sim ? sim->makespan : -1);
    mpmd_sim_free(sim);
    two[5] = -1;
    mpmd_error err;
    CHECK(s && mpmd_schedule_simulate(s, &c, &sim, &err, NULL) == MPMD_ERR_INVALID &&
              strstr(err.msg, "stage 1's B must be finite"),
          "a negative stage time: %s", err.msg);
    mpmd_schedule_free(s);
}

static int count(const char *hay, const char *needle) {
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        k++;
    return k;
}

static void test_timeline(void) {
    mpmd_schedule *s = make(MPMD_SCHED_INTERLEAVED1F1B, 8, 4, 4);
    mpmd_sim *sim = s ? simulate(s, NULL) : NULL;
    if (!sim) return;
    mpmd_timeline *tl = NULL;
    mpmd_error err;
    CHECK(mpmd_timeline_from_sim(s, sim, &tl, &err) == MPMD_OK, "timeline: %s", err.msg);
    if (!tl) return;
    int tasks = 0, events = 0, fused_groups = 0;
    for (int r = 0; r < s->num_ranks; r++) {
        tasks += s->ranks[r].num_tasks;
        events += tl->num_events[r];
        for (int i = 0; i < tl->num_events[r]; i++) {
            const mpmd_timeline_event *e = &tl->events[r][i];
            CHECK(e->end > e->start, "event times");
            if (i) CHECK(e->start >= tl->events[r][i - 1].end - 1e-12, "events in time order");
            if (e->group >= 0 && (i == 0 || tl->events[r][i - 1].group != e->group)) fused_groups++;
        }
    }
    CHECK(events == tasks, "one event per task: %d vs %d", events, tasks);
    CHECK(fused_groups == 4, "rank 3's four FusedTask(fwd_7, bwd_7): %d", fused_groups);
    /* FusedTask(fwd_7__0, bwd_7__0): F takes 1 of its 3 steps. */
    for (int i = 0; i < tl->num_events[3]; i++) {
        const mpmd_timeline_event *e = &tl->events[3][i];
        if (e->group >= 0 && e->task.kind == MPMD_TASK_F) {
            const mpmd_timeline_event *b = &tl->events[3][i + 1];
            CHECK(fabs(e->end - e->start - 1) < 1e-12 && fabs(b->end - b->start - 2) < 1e-12 &&
                      b->group == e->group,
                  "fused members split by cost");
            break;
        }
    }
    CHECK(strstr(tl->title, "Interleaved1F1B(S=8, D=4, n=4): makespan") == tl->title, "title %s", tl->title);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(mpmd_timeline_write_svg(tl, f) == MPMD_OK, "svg written");
    fclose(f);
    CHECK(strncmp(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39) == 0, "svg header");
    CHECK(strcmp(buf + len - 7, "</svg>\n") == 0, "svg end");
    CHECK(count(buf, "<title>") == tasks, "a hover title per task: %d", count(buf, "<title>"));
    CHECK(count(buf, "stroke=\"#111\" stroke-width=\"2\"/>") == 4 + 1,
          "a frame per FusedTask, plus the legend's");
    CHECK(strstr(buf, ">rank 3</text>") && strstr(buf, "F forward") && strstr(buf, "B backward") &&
              !strstr(buf, "bwdA)") && strstr(buf, "time (step)") && strstr(buf, "url(#idle)"),
          "labels, legend of the present kinds, axis, idle pattern");
    free(buf);

    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK(mpmd_timeline_write_trace(tl, f) == MPMD_OK, "trace written");
    fclose(f);
    CHECK(count(buf, "\"thread_name\"") == 4, "a named track per rank");
    CHECK(count(buf, "\"ph\":\"X\"") == tasks + 4, "an X event per task and per FusedTask");
    CHECK(strstr(buf, "\"name\":\"FusedTask(fwd_7__0, bwd_7__0)\",\"cat\":\"fused\"") != NULL, "fused event");
    free(buf);

    /* The timeline API on its own (a measured run would use it so). */
    mpmd_timeline *t2 = mpmd_timeline_new(2, "measured");
    mpmd_timeline_event ev = {0.5, 1.5, {MPMD_TASK_F, 0, 0}, -1};
    CHECK(t2 && mpmd_timeline_add(t2, 0, &ev) == MPMD_OK && t2->num_events[0] == 1, "add");
    CHECK(mpmd_timeline_add(t2, 2, &ev) == MPMD_ERR_INVALID, "bad rank");
    ev.end = 0;
    CHECK(mpmd_timeline_add(t2, 1, &ev) == MPMD_ERR_INVALID, "end before start");
    mpmd_timeline_free(t2);
    mpmd_timeline_free(tl);
    mpmd_sim_free(sim);
    mpmd_schedule_free(s);
}

/* The planner's report: the five fastest that fit, then each FSDP gather
 * policy's fastest when none of the five gathers so. */
static void test_layouts_report(void) {
    mpmd_layout l[8];
    memset(l, 0, sizeof l);
    for (int i = 0; i < 8; i++) {
        snprintf(l[i].schedule, sizeof l[i].schedule, "gpipe");
        l[i].stages = l[i].ranks = 2, l[i].microbatches = 4;
        snprintf(l[i].gather, sizeof l[i].gather, "%s", i == 6 ? "task" : "step");
        l[i].predicted = 8 - i, l[i].peak_bytes = 1000 + i;
    }
    l[7].peak_bytes = 5000; /* over the limit */
    CHECK(mpmd_layouts_rank(l, 8, 4096) == 7 && l[0].predicted == 2 && l[0].gather[0] == 't' && !l[7].fits,
          "ranked: fastest first, the one over the limit last");
    l[0].predicted = 7.5, mpmd_layouts_rank(l, 8, 4096); /* the task row falls to sixth */
    CHECK(!strcmp(l[5].gather, "task"), "task sixth");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mpmd_layouts_report(f, l, 8, 4096, "ms");
    fclose(f);
    CHECK(count(buf, "<- chosen") == 1 && count(buf, "    task ") == 1 &&
              strstr(buf, "<- fastest gathering per task") && !strstr(buf, "gathering per step") &&
              strstr(buf, "2 more fit") && strstr(buf, "1 exceed the limit"),
          "the report: %s", buf);
    free(buf);
}

int main(void) {
    test_layouts_report();
    test_analytic_bubbles();
    test_dispatch_order();
    test_cost_model();
    test_peak_in_flight();
    test_memory();
    test_stage_latency();
    test_stage_links_and_memory();
    test_timeline();
    return tu_report("test_schedule_sim");
}
