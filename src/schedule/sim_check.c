/* A schedule's static checks before it is simulated (every task named
 * once, stage 0's backward, counts and shape) and the report of a
 * deadlock after: which rank waits for what, and the grid of who ran. */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Static checks                                                             */
/* ------------------------------------------------------------------------ */

static char *task_text(const mpmd_task *t, char *buf, size_t len) {
    mpmd_task_str(t, buf, len);
    return buf;
}

/* Where (rank, entry) a task first appears; -1 if nowhere. */
static void find_task(const mpmd_schedule *s, const mpmd_task *t, int *rank, int *entry) {
    *rank = *entry = -1;
    for (int r = 0; r < s->num_ranks; r++) {
        const mpmd_schedule_rank *rk = &s->ranks[r];
        for (int e = 0; e < rk->num_entries; e++)
            for (int i = rk->entry_start[e]; i < rk->entry_start[e + 1]; i++)
                if (rk->tasks[i].kind == t->kind && rk->tasks[i].stage == t->stage &&
                    rk->tasks[i].microbatch == t->microbatch) {
                    *rank = r;
                    *entry = e;
                    return;
                }
    }
}

/* The header of a schedule: counts, placement, and each rank's
 * entry_start bounds. The entries and tasks are checked in check_tasks. */
mpmd_status sim_check_shape(const mpmd_schedule *s, mpmd_error *err) {
    const char *nm = s->name;
    int S = s->num_stages, D = s->num_ranks, n = s->num_microbatches;
    if (S < 1 || D < 1 || n < 1 || !s->ranks || !s->stage_rank)
        return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                              "%s: needs at least 1 stage, rank and microbatch (S=%d, D=%d, n=%d)", nm, S, D,
                              n);
    for (int st = 0; st < S; st++)
        if (s->stage_rank[st] < 0 || s->stage_rank[st] >= D)
            return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                                  s->stage_rank[st] < 0
                                      ? "%s: stage %d runs on no rank (no rank's list names it)"
                                      : "%s: stage %d is placed on rank %d, but there are %d ranks",
                                  nm, st, s->stage_rank[st], D);
    for (int r = 0; r < D; r++) {
        const mpmd_schedule_rank *rk = &s->ranks[r];
        if (rk->num_entries < 0 || rk->num_tasks < 0 || !rk->entry_start ||
            (rk->num_tasks > 0 && !rk->tasks) || rk->entry_start[0] != 0 ||
            rk->entry_start[rk->num_entries] != rk->num_tasks)
            return mpmd_error_set(
                err, MPMD_ERR_SCHEDULE,
                "%s: rank %d's list is malformed (entry_start must run from 0 to num_tasks)", nm, r);
    }
    return MPMD_OK;
}

/* The message for a task that is out of range or on the wrong rank. */
static mpmd_status bad_task(const mpmd_schedule *s, int r, int e, const mpmd_task *t, mpmd_error *err) {
    const char *nm = s->name;
    char buf[MPMD_TASK_STR_MAX];
    if ((unsigned)t->kind >= MPMD_TASK_KINDS)
        return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                              "%s: rank %d entry %d: task kind %d is not F, B, A or W", nm, r, e,
                              (int)t->kind);
    if (t->stage < 0 || t->stage >= s->num_stages)
        return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                              "%s: rank %d entry %d: %s names stage %d, but the schedule has stages 0..%d",
                              nm, r, e, task_text(t, buf, sizeof buf), (int)t->stage, s->num_stages - 1);
    if (t->microbatch < 0 || t->microbatch >= s->num_microbatches)
        return mpmd_error_set(
            err, MPMD_ERR_SCHEDULE,
            "%s: rank %d entry %d: %s names microbatch %d, but the schedule has microbatches 0..%d", nm, r, e,
            task_text(t, buf, sizeof buf), (int)t->microbatch, s->num_microbatches - 1);
    return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                          "%s: rank %d entry %d: %s belongs on rank %d, which runs stage %d", nm, r, e,
                          task_text(t, buf, sizeof buf), s->stage_rank[t->stage], (int)t->stage);
}

/* Stage 0's backward is never split: an A(0, m) must be immediately
 * followed by W(0, m), inside the same FusedTask or as the next entry when
 * both are single tasks. Returns 1 when entry e of rank r starts a unit of
 * two entries (a lone A(0) with its lone W(0) after it). */
static mpmd_status check_stage0(const mpmd_schedule *s, int r, int e, int *two, mpmd_error *err) {
    const mpmd_schedule_rank *rk = &s->ranks[r];
    int b = rk->entry_start[e], nt = rk->entry_start[e + 1] - b;
    *two = 0;
    for (int i = 0; i < nt; i++) {
        const mpmd_task *t = &rk->tasks[b + i];
        if (t->kind != MPMD_TASK_A || t->stage != 0) continue;
        const mpmd_task *next = NULL;
        char found[MPMD_ENTRY_STR_MAX] = "the end of the list";
        if (i + 1 < nt) {
            next = &rk->tasks[b + i + 1];
            mpmd_task_str(next, found, sizeof found);
        } else if (nt == 1 && e + 1 < rk->num_entries) {
            sched_entry_text(s, r, e + 1, found, sizeof found);
            if (rk->entry_start[e + 2] - rk->entry_start[e + 1] == 1)
                next = &rk->tasks[rk->entry_start[e + 1]];
        } else if (nt > 1) {
            snprintf(found, sizeof found, "the end of the FusedTask");
        }
        if (!next || next->kind != MPMD_TASK_W || next->stage != 0 || next->microbatch != t->microbatch)
            return mpmd_error_set(
                err, MPMD_ERR_SCHEDULE,
                "%s: rank %d entry %d: bwdA_0__%d must be immediately followed by bwdW_0__%d "
                "(stage 0's backward is never split: its A and W run as one task), found %s",
                s->name, r, e, (int)t->microbatch, (int)t->microbatch, found);
        if (nt == 1) *two = 1;
    }
    return MPMD_OK;
}

/* Every entry 1..3 tasks, every task in range and on its stage's rank and
 * there once; stage 0's A followed by its W. Fills c->flags with the SEEN
 * bits and counts the units. Then: B everywhere or A and W everywhere,
 * and every (stage, microbatch) complete. */
mpmd_status sim_check_tasks(sim_ctx *c, int64_t *units, mpmd_error *err) {
    const mpmd_schedule *s = c->s;
    const int32_t *stage_rank = s->stage_rank;
    const uint32_t S = (uint32_t)c->S, n = (uint32_t)c->n;
    char b1[MPMD_TASK_STR_MAX];
    int64_t merged = 0;
    *units = 0;
    for (int r = 0; r < c->D; r++) {
        const mpmd_schedule_rank *rk = &s->ranks[r];
        const int32_t *es = rk->entry_start;
        *units += rk->num_entries;
        for (int e = 0; e < rk->num_entries; e++) {
            int nt = es[e + 1] - es[e];
            if (nt < 1 || nt > MPMD_FUSED_MAX)
                return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                                      "%s: rank %d entry %d has %d tasks; an entry holds 1 to %d", s->name, r,
                                      e, nt, MPMD_FUSED_MAX);
            for (int i = es[e]; i < es[e + 1]; i++) {
                const mpmd_task *t = &rk->tasks[i];
                if ((uint32_t)t->kind >= MPMD_TASK_KINDS || (uint32_t)t->stage >= S ||
                    (uint32_t)t->microbatch >= n || stage_rank[t->stage] != r)
                    return bad_task(s, r, e, t, err);
                uint8_t *f = &c->flags[idx(c, t->stage, t->microbatch)];
                if (*f & SEEN(t->kind)) {
                    int r0, e0;
                    find_task(s, t, &r0, &e0);
                    return mpmd_error_set(
                        err, MPMD_ERR_SCHEDULE,
                        "%s: %s appears twice: rank %d entry %d and rank %d entry %d; every task "
                        "runs exactly once",
                        s->name, task_text(t, b1, sizeof b1), r0, e0, r, e);
                }
                *f |= SEEN(t->kind);
                if (t->kind == MPMD_TASK_A && t->stage == 0) {
                    int two;
                    mpmd_status st = check_stage0(s, r, e, &two, err);
                    if (st) return st;
                    merged += two;
                }
            }
        }
    }
    *units -= merged;
    const int split = s->split_backward, fwd = s->forward_only;
    const uint8_t want = SEEN(MPMD_TASK_F) | (fwd     ? 0
                                              : split ? SEEN(MPMD_TASK_A) | SEEN(MPMD_TASK_W)
                                                      : SEEN(MPMD_TASK_B));
    const uint8_t wrong = fwd     ? SEEN(MPMD_TASK_B) | SEEN(MPMD_TASK_A) | SEEN(MPMD_TASK_W)
                          : split ? SEEN(MPMD_TASK_B)
                                  : SEEN(MPMD_TASK_A) | SEEN(MPMD_TASK_W);
    int64_t missing = 0;
    mpmd_task first = {0, 0, 0};
    for (int32_t st = 0; st < c->S; st++) {
        const uint8_t *f = &c->flags[idx(c, st, 0)];
        for (int32_t m = 0; m < c->n; m++) {
            if (f[m] & wrong && fwd) {
                mpmd_task t = {f[m] & SEEN(MPMD_TASK_B)   ? MPMD_TASK_B
                               : f[m] & SEEN(MPMD_TASK_A) ? MPMD_TASK_A
                                                          : MPMD_TASK_W,
                               st, m};
                return mpmd_error_set(err, MPMD_ERR_SCHEDULE, "%s: a forward-only schedule has %s", s->name,
                                      task_text(&t, b1, sizeof b1));
            }
            if (f[m] & wrong) {
                mpmd_task t = {split ? MPMD_TASK_B : (f[m] & SEEN(MPMD_TASK_A) ? MPMD_TASK_A : MPMD_TASK_W),
                               st, m};
                return mpmd_error_set(
                    err, MPMD_ERR_SCHEDULE,
                    split ? "%s: the backward is split into bwdA_ and bwdW_ tasks, yet the schedule "
                            "also has %s; use bwdA_ and bwdW_ everywhere or bwd_ everywhere"
                          : "%s: the backward is full (bwd_ tasks), yet the schedule has %s; use "
                            "bwd_ everywhere or bwdA_ and bwdW_ everywhere",
                    s->name, task_text(&t, b1, sizeof b1));
            }
            uint8_t lack = (uint8_t)(want & ~f[m]);
            if (lack) {
                for (int k = 0; k < MPMD_TASK_KINDS; k++)
                    if (lack & SEEN(k)) {
                        if (!missing) first = (mpmd_task){k, st, m};
                        missing++;
                    }
            }
        }
    }
    if (missing)
        return mpmd_error_set(
            err, MPMD_ERR_SCHEDULE,
            "%s: %lld task%s missing, the first is %s (stage %d runs on rank %d); every stage "
            "needs, for every microbatch, a fwd_%s%s",
            s->name, (long long)missing, missing == 1 ? " is" : "s are", task_text(&first, b1, sizeof b1),
            (int)first.stage, s->stage_rank[first.stage], fwd ? "" : " and ",
            fwd     ? ""
            : split ? "a bwdA_ and a bwdW_"
                    : "a bwd_");
    return MPMD_OK;
}

/* ------------------------------------------------------------------------ */
/* The deadlock report                                                       */
/* ------------------------------------------------------------------------ */

/* Position (entry) of the task `d` names in its rank's list at or after
 * `from`; -1 if not there. */
static int find_dep(const mpmd_schedule *s, const dep *d, int from, mpmd_task *out) {
    int q = s->stage_rank[d->stage];
    const mpmd_schedule_rank *rk = &s->ranks[q];
    for (int e = from; e < rk->num_entries; e++)
        for (int i = rk->entry_start[e]; i < rk->entry_start[e + 1]; i++) {
            const mpmd_task *t = &rk->tasks[i];
            if (t->stage != d->stage || t->microbatch != d->mb) continue;
            if (d->bwd ? (t->kind == MPMD_TASK_B || t->kind == MPMD_TASK_A) : t->kind == MPMD_TASK_F) {
                *out = *t;
                return e;
            }
        }
    return -1;
}

/* One line per rank: its next unit and what it waits for. */
static void wait_lines(const sim_ctx *c, sched_str *o) {
    const mpmd_schedule *s = c->s;
    char b1[MPMD_ENTRY_STR_MAX], b2[80], b3[MPMD_ENTRY_STR_MAX];
    for (int r = 0; r < c->D; r++) {
        const mpmd_schedule_rank *rk = &s->ranks[r];
        int e = c->pos[r];
        if (e >= rk->num_entries) {
            ss_printf(o, "  rank %d: finished its %d entries\n", r, rk->num_entries);
            continue;
        }
        double start;
        dep d;
        if (sim_unit_ready(c, r, &start, &d)) { /* cannot happen after a deadlock; say so plainly */
            ss_printf(o, "  rank %d: next %s (entry %d) is ready\n", r,
                      sched_entry_text(s, r, e, b1, sizeof b1), e);
            continue;
        }
        mpmd_task t = {d.bwd ? MPMD_TASK_B : MPMD_TASK_F, d.stage, d.mb};
        int q = s->stage_rank[d.stage];
        int at = find_dep(s, &d, q == r ? e : c->pos[q], &t);
        mpmd_task_str(&t, b2, sizeof b2);
        if (d.bwd && at < 0)
            snprintf(b2, sizeof b2, "the backward of stage %d, microbatch %d", d.stage, d.mb);
        ss_printf(o, "  rank %d: next %s (entry %d) waits for %s, ", r,
                  sched_entry_text(s, r, e, b1, sizeof b1), e, b2);
        if (q == r && at == e)
            ss_printf(o, "which comes later in the same FusedTask\n");
        else if (q == r)
            ss_printf(o, "which comes later in its own list (entry %d)\n", at);
        else if (c->pos[q] >= s->ranks[q].num_entries)
            ss_printf(o, "which rank %d never runs\n", q);
        else
            ss_printf(o, "rank %d's entry %d; rank %d is stuck at entry %d (%s)\n", q, at, q, c->pos[q],
                      sched_entry_text(s, q, c->pos[q], b3, sizeof b3));
    }
}

/* The grid: one column per rank, one row per list position, up to the
 * furthest stuck entry; [x] marks the entry each rank cannot start. */
static void grid(const sim_ctx *c, sched_str *o) {
    enum { MAX_COLS = 24, MAX_ROWS = 80, MAX_CELL = 40 };
    const mpmd_schedule *s = c->s;
    int last = 0;
    for (int r = 0; r < c->D; r++)
        if (c->pos[r] < s->ranks[r].num_entries && c->pos[r] > last) last = c->pos[r];
    int first = last + 1 > MAX_ROWS ? last + 1 - MAX_ROWS : 0;
    int cols = c->D < MAX_COLS ? c->D : MAX_COLS;
    char cell[MAX_CELL + 3], tmp[MAX_CELL];
    int width = 6;
    for (int r = 0; r < cols; r++)
        for (int e = first; e <= last && e < s->ranks[r].num_entries && e <= c->pos[r]; e++) {
            int nt;
            const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);
            int w = (int)strlen(sched_cell_str(t, nt, tmp, sizeof tmp)) + (e == c->pos[r] ? 2 : 0);
            if (w > width) width = w;
        }
    ss_printf(o,
              "\nEach rank's list up to where it stuck; [x] is the entry a rank cannot start.\n"
              "Cells: F2.0 is fwd_2__0 (kind, stage.microbatch; B bwd_, A bwdA_, W bwdW_), a FusedTask joins "
              "its tasks with '+'.\n");
    if (first > 0) ss_printf(o, "(entries 0..%d not shown)\n", first - 1);
    if (cols < c->D) ss_printf(o, "(ranks %d..%d not shown)\n", cols, c->D - 1);
    ss_printf(o, "entry |");
    for (int r = 0; r < cols; r++) {
        snprintf(tmp, sizeof tmp, "rank %d", r);
        ss_printf(o, " %-*s", width, tmp);
    }
    ss_printf(o, "\n------+");
    for (int r = 0; r < cols; r++)
        for (int i = 0; i <= width; i++)
            ss_printf(o, "-");
    ss_printf(o, "\n");
    for (int e = first; e <= last; e++) {
        ss_printf(o, "%5d |", e);
        for (int r = 0; r < cols; r++) {
            cell[0] = 0;
            if (e < s->ranks[r].num_entries && e <= c->pos[r]) {
                int nt;
                const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);
                sched_cell_str(t, nt, tmp, sizeof tmp);
                snprintf(cell, sizeof cell, e == c->pos[r] ? "[%s]" : "%s", tmp);
            }
            ss_printf(o, " %-*s", width, cell);
        }
        /* trim the trailing blanks of the row */
        while (o->len > 0 && o->p[o->len - 1] == ' ')
            o->p[--o->len] = 0;
        ss_printf(o, "\n");
    }
}

mpmd_status sim_deadlock(const sim_ctx *c, int64_t units, mpmd_error *err, char **report) {
    sched_str head = {0}, lines = {0};
    ss_printf(&head,
              "%s does not honour its data dependencies: %lld of %lld programs ran, then no rank could start "
              "its next task:\n",
              c->s->name, (long long)c->units_done, (long long)units);
    wait_lines(c, &lines);
    /* The message: the head and as many whole rank lines as fit. */
    char msg[MPMD_ERROR_MSG_MAX];
    size_t room = sizeof msg - 64, n = 0;
    n = (size_t)snprintf(msg, sizeof msg, "%s", head.p ? head.p : "");
    const char *p = lines.p ? lines.p : "";
    int shown = 0, total = 0;
    for (const char *q = p; *q; q++)
        total += *q == '\n';
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t ln = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (n + ln >= room) break;
        memcpy(msg + n, p, ln);
        n += ln;
        msg[n] = 0;
        p += ln;
        shown++;
    }
    if (shown < total)
        snprintf(msg + n, sizeof msg - n, "  ... and %d more ranks (see the full report)\n", total - shown);
    size_t ml = strlen(msg);
    if (ml && msg[ml - 1] == '\n') msg[ml - 1] = 0;
    mpmd_error_set(err, MPMD_ERR_SCHEDULE, "%s", msg);
    if (report) {
        sched_str full = {0};
        ss_printf(&full, "%s%s", head.p ? head.p : "", lines.p ? lines.p : "");
        grid(c, &full);
        *report = full.failed ? NULL : full.p;
        if (full.failed) free(full.p);
    }
    free(head.p);
    free(lines.p);
    return MPMD_ERR_SCHEDULE;
}
