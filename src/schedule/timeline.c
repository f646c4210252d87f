/* Timelines: per rank, the tasks that ran and when. A simulation makes
 * one; a measured run will make one the same way, so both draw alike. */
#include "schedule_internal.h"

#include <stdlib.h>
#include <string.h>

mpmd_timeline *mpmd_timeline_new(int num_ranks, const char *title) {
    if (num_ranks < 1) return NULL;
    mpmd_timeline *tl = calloc(1, sizeof *tl);
    if (!tl) return NULL;
    tl->num_ranks = num_ranks;
    snprintf(tl->title, sizeof tl->title, "%s", title ? title : "");
    snprintf(tl->unit, sizeof tl->unit, "step");
    tl->unit_us = 1000.0;
    tl->num_events = calloc((size_t)num_ranks, sizeof *tl->num_events);
    tl->cap_events = calloc((size_t)num_ranks, sizeof *tl->cap_events);
    tl->events = calloc((size_t)num_ranks, sizeof *tl->events);
    tl->rank_stages = calloc((size_t)num_ranks, sizeof *tl->rank_stages);
    if (!tl->num_events || !tl->cap_events || !tl->events || !tl->rank_stages) {
        mpmd_timeline_free(tl);
        return NULL;
    }
    return tl;
}

void mpmd_timeline_free(mpmd_timeline *tl) {
    if (!tl) return;
    if (tl->events)
        for (int r = 0; r < tl->num_ranks; r++)
            sched_mem_free(tl->events[r]);
    free(tl->events);
    free(tl->num_events);
    free(tl->cap_events);
    free(tl->rank_stages);
    free(tl);
}

/* Make room for `more` events on rank r. */
static mpmd_status reserve(mpmd_timeline *tl, int r, int64_t more) {
    int64_t need = (int64_t)tl->num_events[r] + more;
    if (need <= tl->cap_events[r]) return MPMD_OK;
    int64_t cap = tl->cap_events[r] ? tl->cap_events[r] : 16;
    while (cap < need)
        cap *= 2;
    if (cap > INT32_MAX) return MPMD_ERR_NOMEM;
    mpmd_timeline_event *p = sched_mem_realloc(tl->events[r], (size_t)cap * sizeof *p);
    if (!p) return MPMD_ERR_NOMEM;
    tl->events[r] = p;
    tl->cap_events[r] = (int32_t)cap;
    return MPMD_OK;
}

mpmd_status mpmd_timeline_add(mpmd_timeline *tl, int rank, const mpmd_timeline_event *ev) {
    if (!tl || !ev || rank < 0 || rank >= tl->num_ranks || !(ev->end >= ev->start)) return MPMD_ERR_INVALID;
    if (reserve(tl, rank, 1)) return MPMD_ERR_NOMEM;
    tl->events[rank][tl->num_events[rank]++] = *ev;
    return MPMD_OK;
}

mpmd_status mpmd_timeline_from_sim(const mpmd_schedule *s, const mpmd_sim *sim, mpmd_timeline **out,
                                   mpmd_error *err) {
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_timeline_from_sim: no place for the timeline (out is NULL)");
    *out = NULL;
    if (!s) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_timeline_from_sim: no schedule (NULL)");
    if (!sim || sim->num_ranks != s->num_ranks)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_timeline_from_sim: the simulation is not of %s",
                              s->name);
    char title[256];
    if (sim->makespan > 0)
        snprintf(title, sizeof title, "%.200s: makespan %g, bubble %.1f%%", s->name, sim->makespan,
                 100.0 * sim->bubble);
    else
        snprintf(title, sizeof title, "%s", s->name);
    mpmd_timeline *tl = mpmd_timeline_new(s->num_ranks, title);
    if (!tl) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the timeline", s->name);
    for (int r = 0; r < s->num_ranks; r++) {
        if (reserve(tl, r, s->ranks[r].num_tasks)) {
            mpmd_timeline_free(tl);
            return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the timeline", s->name);
        }
    }
    for (int st = 0; st < s->num_stages; st++)
        if (s->stage_rank[st] >= 0 && s->stage_rank[st] < s->num_ranks) tl->rank_stages[s->stage_rank[st]]++;
    const mpmd_cost_model *c = &sim->cost;
    int32_t group = 0;
    for (int64_t k = 0; k < sim->num_ops; k++) {
        const mpmd_sim_op *op = &sim->ops[k];
        const mpmd_schedule_rank *rk = &s->ranks[op->rank];
        int b = rk->entry_start[op->entry], e = rk->entry_start[op->entry + op->num_entries];
        /* Members split the unit's time in proportion to their costs. */
        double total = 0;
        for (int i = b; i < e; i++)
            total += sched_task_time(c, &rk->tasks[i]);
        double t = op->start, span = op->end - op->start;
        int32_t g = e - b > 1 ? group++ : -1;
        for (int i = b; i < e; i++) {
            double w = sched_task_time(c, &rk->tasks[i]);
            double len = total > 0 ? span * w / total : span / (e - b);
            double end = i + 1 == e ? op->end : t + len;
            tl->events[op->rank][tl->num_events[op->rank]++] = (mpmd_timeline_event){t, end, rk->tasks[i], g};
            t = end;
        }
    }
    *out = tl;
    return MPMD_OK;
}
