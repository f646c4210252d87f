/* Validation and the discrete-event simulation of a schedule.
 *
 * The rules are docs/schedules.md's "What the compiler does with a task
 * list". Data dependencies of (stage s, microbatch m):
 *   F(s, m)            needs F(s-1, m)                     (s > 0)
 *   B(s, m) / A(s, m)  needs F(s, m) and B-or-A(s+1, m)    (s < S-1)
 *   W(s, m)            needs A(s, m)
 * A unit is one program run on a rank: an entry (a task or a FusedTask),
 * or stage 0's A entry together with the W entry right after it. A unit
 * starts at max(rank clock, inputs ready), where an input is ready when
 * the unit producing it ends, plus the transfer latency if that unit ran
 * on another rank; it ends start + the sum of its members' costs.
 *
 * Dispatch order: among the ranks whose next unit has all its inputs, the
 * one with the smallest (start, rank) goes next. A binary heap holds the
 * ready ranks; when a unit ends, only the ranks that can consume its
 * outputs are re-examined (the rank of stage s+1 after a forward, of s-1
 * after a backward, and the rank itself), so the whole run is
 * O(tasks log ranks). Nothing is rescanned. */
#include "sim_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The simulation                                                            */
/* ------------------------------------------------------------------------ */

static inline int heap_less(heap_item a, heap_item b) {
    return a.start < b.start || (a.start == b.start && a.rank < b.rank);
}

static void heap_push(sim_ctx *c, heap_item it) {
    int32_t i = c->hn++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!heap_less(it, c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = it;
}

static heap_item heap_pop(sim_ctx *c) {
    heap_item top = c->heap[0], last = c->heap[--c->hn];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1;
        if (l >= c->hn) break;
        if (l + 1 < c->hn && heap_less(c->heap[l + 1], c->heap[l])) l++;
        if (!heap_less(c->heap[l], last)) break;
        c->heap[i] = c->heap[l];
        i = l;
    }
    if (c->hn > 0) c->heap[i] = last;
    return top;
}

/* Queue rank r if it is not queued yet and has entries left: timed, onto
 * the heap once its next unit is ready; untimed, onto the work stack (the
 * run loop checks readiness). */
static void wake(sim_ctx *c, int r) {
    if (c->queued[r] || c->pos[r] >= c->s->ranks[r].num_entries) return;
    if (!c->fend) {
        c->queued[r] = 1;
        c->work[c->hn++] = r;
        return;
    }
    double start;
    if (sim_unit_ready(c, r, &start, NULL)) {
        c->queued[r] = 1;
        heap_push(c, (heap_item){start, r});
    }
}

double sched_task_time(const mpmd_cost_model *c, const mpmd_task *t) {
    if (c->stage_latency) return c->stage_latency[(size_t)t->stage * MPMD_TASK_KINDS + (size_t)t->kind];
    double x = c->latency[t->kind];
    return c->stage_scale ? x * c->stage_scale[t->stage] : x;
}

/* Run rank r's next unit from `start`; wake the ranks that consume it. */
static void dispatch(sim_ctx *c, int r, double start) {
    const mpmd_schedule_rank *rk = &c->s->ranks[r];
    int e = c->pos[r], ne = unit_entries(rk, e);
    const mpmd_task *u = rk->tasks + rk->entry_start[e];
    int nt = rk->entry_start[e + ne] - rk->entry_start[e];
    c->pos[r] = e + ne;
    c->units_done++;
    if (!c->fend) { /* untimed: record what exists, wake the consumers */
        for (int i = 0; i < nt; i++) {
            int32_t st = u[i].stage;
            uint8_t *f = &c->flags[idx(c, st, u[i].microbatch)];
            if (u[i].kind == MPMD_TASK_F) {
                *f |= DONE_F;
                if (st + 1 < c->S && c->s->stage_rank[st + 1] != r) wake(c, c->s->stage_rank[st + 1]);
            } else if (u[i].kind != MPMD_TASK_W) {
                *f |= DONE_BWD;
                if (st > 0 && c->s->stage_rank[st - 1] != r) wake(c, c->s->stage_rank[st - 1]);
            }
        }
        return;
    }
    double cost = 0;
    for (int i = 0; i < nt; i++)
        cost += sched_task_time(c->cost, &u[i]);
    double end = start + cost;
    int32_t infl = c->inflight[r];
    int32_t peak = c->out ? c->out->peak_in_flight[r] : 0;
    double kept = c->kept[r], kpeak = c->out ? c->out->peak_bytes[r] : 0;
    for (int i = 0; i < nt; i++) {
        size_t x = idx(c, u[i].stage, u[i].microbatch);
        const double keep_f = stage_mem(c->cost, u[i].stage, 0), keep_w = stage_mem(c->cost, u[i].stage, 1);
        switch (u[i].kind) {
        case MPMD_TASK_F:
            c->flags[x] |= DONE_F;
            c->fend[x] = end;
            if (++infl > peak) peak = infl;
            if ((kept += keep_f) > kpeak) kpeak = kept;
            break;
        case MPMD_TASK_B:
            c->flags[x] |= DONE_BWD;
            c->bend[x] = end;
            infl--;
            kept -= keep_f;
            break;
        case MPMD_TASK_A:
            c->flags[x] |= DONE_BWD;
            c->bend[x] = end;
            kept -= keep_f - keep_w;
            break;
        default: /* W: the last use of the stage's saved inputs */
            infl--;
            kept -= keep_w;
            break;
        }
    }
    c->inflight[r] = infl;
    c->kept[r] = kept;
    if (c->out) c->out->peak_bytes[r] = kpeak;
    c->clock[r] = end;
    if (c->out) {
        mpmd_sim *o = c->out;
        o->peak_in_flight[r] = peak;
        o->busy[r] += cost;
        if (o->ops) o->ops[c->units_done - 1] = (mpmd_sim_op){r, e, ne, start, end};
    }
    for (int i = 0; i < nt; i++) {
        int32_t st = u[i].stage;
        if (u[i].kind == MPMD_TASK_F && st + 1 < c->S && c->s->stage_rank[st + 1] != r)
            wake(c, c->s->stage_rank[st + 1]);
        else if ((u[i].kind == MPMD_TASK_B || u[i].kind == MPMD_TASK_A) && st > 0 &&
                 c->s->stage_rank[st - 1] != r)
            wake(c, c->s->stage_rank[st - 1]);
    }
}

/* Untimed: run every rank as far as it goes; a rank whose input appears
 * is put back on the work stack. When the stack is empty, either every
 * list is done or no rank can go on. Progress only ever adds outputs, so
 * where each rank stops does not depend on the order the ranks are
 * visited: this stops exactly where the timed run would. */
static void run_untimed(sim_ctx *c) {
    for (int r = c->D - 1; r >= 0; r--)
        wake(c, r);
    while (c->hn > 0) {
        int r = c->work[--c->hn];
        c->queued[r] = 0;
        while (c->pos[r] < c->s->ranks[r].num_entries && sim_unit_ready(c, r, NULL, NULL))
            dispatch(c, r, 0.0);
    }
}

static void run(sim_ctx *c) {
    if (!c->fend) {
        run_untimed(c);
        return;
    }
    for (int r = 0; r < c->D; r++)
        wake(c, r);
    while (c->hn > 0) {
        heap_item it = heap_pop(c);
        int r = it.rank;
        c->queued[r] = 0;
        dispatch(c, r, it.start);
        /* The same rank usually goes on at once (warm-up forwards, a
         * steady state): dispatch it directly while it is the smallest. */
        double start;
        while (c->pos[r] < c->s->ranks[r].num_entries && sim_unit_ready(c, r, &start, NULL)) {
            heap_item me = {start, r};
            if (c->hn > 0 && !heap_less(me, c->heap[0])) {
                c->queued[r] = 1;
                heap_push(c, me);
                break;
            }
            dispatch(c, r, start);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

static mpmd_status check_cost(const mpmd_schedule *s, const mpmd_cost_model *cost, mpmd_error *err) {
    static const char *const names[MPMD_TASK_KINDS] = {"F", "B", "A", "W"};
    for (int k = 0; k < MPMD_TASK_KINDS; k++)
        if (!isfinite(cost->latency[k]) || cost->latency[k] < 0)
            return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: the cost of %s must be finite and >= 0, got %g",
                                  s->name, names[k], cost->latency[k]);
    if (!isfinite(cost->transfer) || cost->transfer < 0)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: the transfer latency must be finite and >= 0, got %g", s->name,
                              cost->transfer);
    const double mem[3] = {cost->keep_f, cost->keep_w, cost->static_bytes};
    static const char *const mem_names[3] = {"keep_f", "keep_w", "static_bytes"};
    for (int k = 0; k < 3; k++)
        if (!isfinite(mem[k]) || mem[k] < 0)
            return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: %s must be finite and >= 0, got %g", s->name,
                                  mem_names[k], mem[k]);
    if (cost->keep_w > cost->keep_f)
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "%s: keep_w (%g bytes kept until W) is part of keep_f (%g) and cannot exceed it", s->name,
            cost->keep_w, cost->keep_f);
    if (cost->stage_latency)
        for (int i = 0; i < s->num_stages * MPMD_TASK_KINDS; i++)
            if (!isfinite(cost->stage_latency[i]) || cost->stage_latency[i] < 0)
                return mpmd_error_set(
                    err, MPMD_ERR_INVALID, "%s: the time of stage %d's %s must be finite and >= 0, got %g",
                    s->name, i / MPMD_TASK_KINDS, names[i % MPMD_TASK_KINDS], cost->stage_latency[i]);
    if (cost->stage_scale)
        for (int i = 0; i < s->num_stages; i++)
            if (!isfinite(cost->stage_scale[i]) || cost->stage_scale[i] < 0)
                return mpmd_error_set(err, MPMD_ERR_INVALID,
                                      "%s: the cost multiplier of stage %d must be finite and >= 0, got %g",
                                      s->name, i, cost->stage_scale[i]);
    if (cost->link_time)
        for (int i = 0; i + 1 < s->num_stages; i++)
            if (!isfinite(cost->link_time[i]) || cost->link_time[i] < 0)
                return mpmd_error_set(
                    err, MPMD_ERR_INVALID,
                    "%s: the link time between stages %d and %d must be finite and >= 0, got %g", s->name, i,
                    i + 1, cost->link_time[i]);
    if (cost->stage_memory)
        for (int i = 0; i < s->num_stages; i++) {
            const double *m = cost->stage_memory + (size_t)i * 3;
            for (int k = 0; k < 3; k++)
                if (!isfinite(m[k]) || m[k] < 0)
                    return mpmd_error_set(err, MPMD_ERR_INVALID,
                                          "%s: stage %d's %s must be finite and >= 0, got %g", s->name, i,
                                          mem_names[k], m[k]);
            if (m[1] > m[0])
                return mpmd_error_set(
                    err, MPMD_ERR_INVALID,
                    "%s: stage %d's keep_w (%g bytes kept until W) is part of its keep_f (%g) and "
                    "cannot exceed it",
                    s->name, i, m[1], m[0]);
        }
    return MPMD_OK;
}

static void free_ctx(sim_ctx *c) {
    sched_mem_free(c->flags);
    sched_mem_free(c->fend);
    sched_mem_free(c->bend);
    free(c->pos);
    free(c->clock);
    free(c->queued);
    free(c->inflight);
    free(c->kept);
    free(c->heap);
    free(c->work);
}

/* Validate s and, unless a check fails, simulate it into `out` (which may
 * be NULL: validation only). */
/* Each stage's tasks of one kind take microbatches 0, 1, 2, ... in that
 * order: a pipeline sums over microbatches as the one-rank loop does
 * (acc = x_0; acc += x_m), so a task list out of order cannot be run with
 * the loop's numbers. The one place this rule lives; mpmd_jit_with_loop
 * gets it through mpmd_schedule_validate. */
static mpmd_status check_order(const mpmd_schedule *s, mpmd_error *err) {
    int slots = s->num_stages * MPMD_TASK_KINDS;
    int *next = calloc((size_t)(slots > 0 ? slots : 1), sizeof *next);
    if (!next) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", s->name);
    static const char letter[MPMD_TASK_KINDS] = {'F', 'B', 'A', 'W'};
    mpmd_status st = MPMD_OK;
    for (int r = 0; r < s->num_ranks && !st; r++)
        for (int e = 0; e < s->ranks[r].num_entries && !st; e++) {
            int nt;
            const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);
            for (int q = 0; q < nt && !st; q++) {
                int k = t[q].stage * MPMD_TASK_KINDS + t[q].kind;
                if (t[q].microbatch != next[k]) {
                    char tb[MPMD_TASK_STR_MAX];
                    mpmd_task_str(&t[q], tb, sizeof tb);
                    st = mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                                        "%s: rank %d runs %s where microbatch %d of %c(%d) comes next; each "
                                        "stage's tasks must take microbatches in order, so that sums over "
                                        "microbatches keep the one-rank loop's order",
                                        s->name, r, tb, next[k], letter[t[q].kind], t[q].stage);
                }
                next[k]++;
            }
        }
    free(next);
    return st;
}

static mpmd_status check_and_run(const mpmd_schedule *s, const mpmd_cost_model *cost, mpmd_sim *out,
                                 int record, mpmd_error *err, char **report) {
    if (report) *report = NULL;
    mpmd_error local;
    if (!err) err = &local;
    mpmd_status st = sim_check_shape(s, err);
    if (st) goto fail_plain;
    sim_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.S = s->num_stages;
    c.n = s->num_microbatches;
    c.D = s->num_ranks;
    /* A list that names stage S-1 and microbatch n-1 but holds fewer than
     * the 2 S n tasks every schedule needs is incomplete; say so before
     * allocating S n flags for it. */
    int64_t tasks = 0;
    for (int r = 0; r < c.D; r++)
        tasks += s->ranks[r].num_tasks;
    int64_t need = (int64_t)c.S * c.n * (s->forward_only ? 1 : s->split_backward ? 3 : 2);
    if (tasks < need && (int64_t)c.S * c.n > ((int64_t)1 << 26)) {
        st = mpmd_error_set(
            err, MPMD_ERR_SCHEDULE,
            "%s: incomplete: %d stages and %d microbatches need %lld tasks, the lists hold %lld", s->name,
            c.S, c.n, (long long)need, (long long)tasks);
        goto fail_plain;
    }
    /* Validation needs only which outputs exist; the timed run also
     * keeps when each one appeared. */
    size_t sn = (size_t)c.S * (size_t)c.n;
    int timed = out != NULL;
    c.flags = sched_mem_calloc(sn);
    c.pos = calloc((size_t)c.D, sizeof *c.pos);
    c.queued = calloc((size_t)c.D, 1);
    int ok = c.flags && c.pos && c.queued;
    if (timed) {
        c.fend = sched_mem_alloc(sn * sizeof *c.fend);
        c.bend = sched_mem_alloc(sn * sizeof *c.bend);
        c.clock = calloc((size_t)c.D, sizeof *c.clock);
        c.inflight = calloc((size_t)c.D, sizeof *c.inflight);
        c.kept = calloc((size_t)c.D, sizeof *c.kept);
        c.heap = malloc((size_t)c.D * sizeof *c.heap);
        ok = ok && c.fend && c.bend && c.clock && c.inflight && c.kept && c.heap;
    } else {
        c.work = malloc((size_t)c.D * sizeof *c.work);
        ok = ok && c.work;
    }
    if (!ok) {
        free_ctx(&c);
        st = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the simulation", s->name);
        goto fail_plain;
    }
    int64_t units;
    if ((st = sim_check_tasks(&c, &units, err))) {
        free_ctx(&c);
        goto fail_plain;
    }
    c.cost = cost;
    c.transfer = cost->transfer;
    c.out = out;
    if (out && record) {
        out->ops = sched_mem_alloc((size_t)(units > 0 ? units : 1) * sizeof *out->ops);
        if (!out->ops) {
            free_ctx(&c);
            st = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the dispatch order", s->name);
            goto fail_plain;
        }
    }
    run(&c);
    if (c.units_done < units) {
        st = sim_deadlock(&c, units, err, report);
        free_ctx(&c);
        return st;
    }
    if (out) {
        out->num_ops = units;
        double makespan = 0, busy = 0;
        for (int r = 0; r < c.D; r++) {
            if (c.clock[r] > makespan) makespan = c.clock[r];
            busy += out->busy[r];
        }
        out->makespan = makespan;
        out->bubble = makespan > 0 ? 1.0 - busy / ((double)c.D * makespan) : 0.0;
    }
    free_ctx(&c);
    /* complete and free of deadlocks: last, the order of microbatches */
    if ((st = check_order(s, err))) goto fail_plain;
    return MPMD_OK;
fail_plain:
    if (report) {
        size_t l = strlen(err->msg);
        *report = malloc(l + 2);
        if (*report) {
            memcpy(*report, err->msg, l);
            (*report)[l] = '\n';
            (*report)[l + 1] = 0;
        }
    }
    return st;
}

mpmd_status mpmd_schedule_validate(const mpmd_schedule *s, mpmd_error *err, char **report) {
    if (report) *report = NULL;
    if (!s) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_schedule_validate: no schedule (NULL)");
    mpmd_cost_model cost = MPMD_COST_DEFAULTS;
    return check_and_run(s, &cost, NULL, 0, err, report);
}

void mpmd_sim_free(mpmd_sim *sim) {
    if (!sim) return;
    sched_mem_free(sim->ops);
    free(sim->busy);
    free(sim->peak_in_flight);
    free(sim->peak_bytes);
    free((double *)sim->cost.stage_scale);
    free((double *)sim->cost.stage_latency);
    free((double *)sim->cost.link_time);
    free((double *)sim->cost.stage_memory);
    free(sim);
}

/* A malloc'ed copy of n doubles (NULL for NULL, or when out of memory). */
static double *copy_of(const double *a, size_t n) {
    if (!a) return NULL;
    double *b = malloc((n ? n : 1) * sizeof *b);
    if (b) memcpy(b, a, n * sizeof *b);
    return b;
}

mpmd_status mpmd_schedule_simulate(const mpmd_schedule *s, const mpmd_cost_model *cost, mpmd_sim **out,
                                   mpmd_error *err, char **report) {
    if (report) *report = NULL;
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_schedule_simulate: no place for the result (NULL)");
    *out = NULL;
    if (!s) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_schedule_simulate: no schedule (NULL)");
    mpmd_error local;
    if (!err) err = &local;
    mpmd_cost_model defaults = MPMD_COST_DEFAULTS;
    if (!cost) cost = &defaults;
    mpmd_status st = check_cost(s, cost, err);
    if (st) {
        if (report) {
            *report = malloc(strlen(err->msg) + 2);
            if (*report) sprintf(*report, "%s\n", err->msg);
        }
        return st;
    }
    mpmd_sim *sim = calloc(1, sizeof *sim);
    if (sim) {
        sim->num_ranks = s->num_ranks;
        sim->busy = calloc((size_t)(s->num_ranks > 0 ? s->num_ranks : 1), sizeof *sim->busy);
        sim->peak_in_flight =
            calloc((size_t)(s->num_ranks > 0 ? s->num_ranks : 1), sizeof *sim->peak_in_flight);
        sim->peak_bytes = calloc((size_t)(s->num_ranks > 0 ? s->num_ranks : 1), sizeof *sim->peak_bytes);
        sim->cost = *cost;
        sim->cost.stage_scale = NULL;
        if (cost->stage_scale) {
            double *sc = malloc((size_t)s->num_stages * sizeof *sc);
            if (sc) memcpy(sc, cost->stage_scale, (size_t)s->num_stages * sizeof *sc);
            sim->cost.stage_scale = sc;
        }
        sim->cost.stage_latency = copy_of(cost->stage_latency, (size_t)s->num_stages * MPMD_TASK_KINDS);
        sim->cost.link_time = copy_of(cost->link_time, (size_t)s->num_stages);
        sim->cost.stage_memory = copy_of(cost->stage_memory, (size_t)s->num_stages * 3);
    }
    if (!sim || !sim->busy || !sim->peak_in_flight || !sim->peak_bytes ||
        (cost->stage_scale && !sim->cost.stage_scale) || (cost->stage_latency && !sim->cost.stage_latency) ||
        (cost->link_time && !sim->cost.link_time) || (cost->stage_memory && !sim->cost.stage_memory)) {
        mpmd_sim_free(sim);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the simulation", s->name);
    }
    if ((st = check_and_run(s, &sim->cost, sim, 1, err, report))) {
        mpmd_sim_free(sim);
        return st;
    }
    if (!isfinite(sim->makespan)) {
        mpmd_sim_free(sim);
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "%s: the task times add up beyond what a double holds (the makespan is infinite); "
            "use smaller units",
            s->name);
    }
    for (int k = 0; k < s->num_stages; k++) /* every stage's own bytes, on its rank */
        if (s->stage_rank[k] >= 0) sim->peak_bytes[s->stage_rank[k]] += stage_mem(cost, k, 2);
    sim->analytic_bubble =
        mpmd_schedule_analytic_bubble(s, cost, sim->analytic_formula, sizeof sim->analytic_formula);
    *out = sim;
    return MPMD_OK;
}

double mpmd_schedule_analytic_bubble(const mpmd_schedule *s, const mpmd_cost_model *cost, char *buf,
                                     size_t len) {
    mpmd_cost_model defaults = MPMD_COST_DEFAULTS;
    if (!cost) cost = &defaults;
    if (buf && len) buf[0] = 0;
    if (!s) {
        if (buf) snprintf(buf, len, "no schedule (NULL)");
        return NAN;
    }
    double p = s->num_ranks, m = s->num_microbatches;
    switch (s->kind) {
    case MPMD_SCHED_GPIPE:
    case MPMD_SCHED_STD1F1B:
    case MPMD_SCHED_EAGER1F1B:
        if (buf) snprintf(buf, len, "(p-1)/(m+p-1) with p=%d, m=%d", s->num_ranks, s->num_microbatches);
        return (p - 1) / (m + p - 1);
    case MPMD_SCHED_INTERLEAVED1F1B:
    case MPMD_SCHED_KIMIK2:
    case MPMD_SCHED_INTERLEAVED_GPIPE: {
        double v = (double)s->num_stages / s->num_ranks;
        if (s->num_microbatches % s->num_ranks) {
            if (buf)
                snprintf(buf, len, "(p-1)/(v*m+p-1) holds when the ranks (%d) divide the microbatches (%d)",
                         s->num_ranks, s->num_microbatches);
            return NAN;
        }
        if (buf)
            snprintf(buf, len, "(p-1)/(v*m+p-1) with p=%d, v=%d, m=%d", s->num_ranks,
                     s->num_stages / s->num_ranks, s->num_microbatches);
        return (p - 1) / (v * m + p - 1);
    }
    case MPMD_SCHED_ZEROBUBBLE: {
        /* ZB-H1: each rank idles (p-1)(F+A-W) in all, against m(F+A+W) of work. */
        double F = cost->latency[MPMD_TASK_F], A = cost->latency[MPMD_TASK_A], W = cost->latency[MPMD_TASK_W];
        double idle = (p - 1) * (F + A - W), work = m * (F + A + W);
        if (idle < 0 || idle + work <= 0) {
            if (buf) snprintf(buf, len, "the ZB-H1 formula needs F + A >= W");
            return NAN;
        }
        if (buf)
            snprintf(buf, len, "(p-1)(F+A-W)/(m(F+A+W)+(p-1)(F+A-W)) with p=%d, m=%d, F=%g, A=%g, W=%g",
                     s->num_ranks, s->num_microbatches, F, A, W);
        return idle / (idle + work);
    }
    default:
        if (buf) snprintf(buf, len, "no textbook formula for %s schedules", mpmd_schedule_kind_name(s->kind));
        return NAN;
    }
}
