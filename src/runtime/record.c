/* Measured runs: the recorded instructions of a step as a timeline (drawn
 * like a simulated schedule), as a Chrome trace of every instruction, and
 * as a per-rank summary next to the schedule's predictions. */
#include "backend/shape_plan.h"
#include "ops/nn.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mpmd_step_set_recording(mpmd_step *st, int on) {
    if (st) st->record = on ? 1 : 0;
}

static const char *kind_prefix(int k) { return k == 0 ? "fwd" : k == 1 ? "bwd" : k == 2 ? "bwdA" : "bwdW"; }

static int has_run(const mpmd_step *st, mpmd_error *err, const char *fn) {
    if (!st) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step (NULL)", fn);
        return 0;
    }
    if (!st->record || !st->ran) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "%s: no recorded run (call mpmd_step_set_recording(st, 1), then mpmd_step_run)", fn);
        return 0;
    }
    return 1;
}

/* The schedule's name, or what runs without one. */
static const char *plan_name(const mpmd_plan *pl) { return pl->sched ? pl->sched->name : "Loop (one rank)"; }

mpmd_status mpmd_step_timeline(const mpmd_step *st, mpmd_timeline **out, mpmd_error *err) {
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_step_timeline: no place for the timeline (out is NULL)");
    *out = NULL;
    if (!has_run(st, err, "mpmd_step_timeline")) return MPMD_ERR_INVALID;
    /* the unit from the step's length: us, ms, s or min */
    const double len = st->t_end - st->t_start;
    static const struct {
        const char *name;
        double seconds;
    } units[] = {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}, {"min", 60.0}};
    int u = len < 1e-3 ? 0 : len < 1.0 ? 1 : len < 120.0 ? 2 : 3;
    const double per = 1.0 / units[u].seconds; /* seconds to the unit */
    char title[256];
    snprintf(title, sizeof title, "%.200s, measured: %.3g %s", plan_name(st->plan), len * per, units[u].name);
    mpmd_timeline *tl = mpmd_timeline_new(st->plan->num_ranks, title);
    if (!tl) return mpmd_error_set(err, MPMD_ERR_NOMEM, "mpmd_step_timeline: out of memory");
    snprintf(tl->unit, sizeof tl->unit, "%s", units[u].name);
    tl->unit_us = units[u].seconds * 1e6;
    for (int s = 0; s < st->plan->num_stages; s++)
        tl->rank_stages[st->plan->stage_rank[s]]++;
    for (int r = 0; r < st->plan->num_ranks; r++) {
        int n;
        const mpmd_event *ev = mpmd_runtime_events(st, r, &n, NULL);
        const mpmd_program *p = &st->plan->prog[r];
        const mpmd_schedule_rank *rk = st->plan->sched ? &st->plan->sched->ranks[r] : NULL;
        for (int k = 0; k < n; k++) {
            const mpmd_instr *in = &p->ins[ev[k].instr];
            if (in->op != MPMD_I_TASK) continue;
            int fused = rk && rk->entry_start[in->entry + 1] - rk->entry_start[in->entry] > 1;
            mpmd_timeline_event te;
            te.start = per * ev[k].t0;
            te.end = per * ev[k].t1;
            te.task.kind = in->kind;
            te.task.stage = in->stage;
            te.task.microbatch = in->mb;
            te.group = fused ? in->entry : -1;
            mpmd_status rc = mpmd_timeline_add(tl, r, &te);
            if (rc) {
                mpmd_timeline_free(tl);
                return mpmd_error_set(err, rc, "mpmd_step_timeline: could not add an event of rank %d", r);
            }
        }
    }
    *out = tl;
    return MPMD_OK;
}

/* s as a JSON string's characters: a schedule loaded from a file is named
 * after its path, which may hold quotes and backslashes. */
static void json_chars(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

mpmd_status mpmd_step_write_trace(const mpmd_step *st, FILE *f, mpmd_error *err) {
    if (!f) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_step_write_trace: no file (NULL)");
    if (!has_run(st, err, "mpmd_step_write_trace")) return MPMD_ERR_INVALID;
    const mpmd_graph *g = st->plan->g;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"schedule\": \"");
    json_chars(f, plan_name(st->plan));
    fprintf(f, "\"}, \"traceEvents\": [\n");
    int first = 1;
    for (int r = 0; r < st->plan->num_ranks; r++) {
        fprintf(f,
                "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": "
                "\"rank %d\"}}",
                first ? "" : ",\n", r, r);
        fprintf(f,
                ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": "
                "{\"sort_index\": %d}}",
                r, r);
        first = 0;
        int n;
        const mpmd_event *ev = mpmd_runtime_events(st, r, &n, NULL);
        const mpmd_program *p = &st->plan->prog[r];
        for (int k = 0; k < n; k++) {
            const mpmd_instr *in = &p->ins[ev[k].instr];
            char name[128];
            const char *cat = "op";
            switch (in->op) {
            case MPMD_I_TASK:
                snprintf(name, sizeof name, "%s_%d__%d", kind_prefix(in->kind), in->stage, in->mb);
                cat = "task";
                break;
            case MPMD_I_SEND:
                snprintf(name, sizeof name, "send %%%d mb %d to %d", in->node, in->mb, in->peer);
                cat = "send";
                break;
            case MPMD_I_RECV:
                snprintf(name, sizeof name, "recv %%%d mb %d from %d", in->node, in->mb, in->peer);
                cat = "recv";
                break;
            case MPMD_I_FREE: continue; /* instantaneous; no box */
            case MPMD_I_RUN_PRE:
                snprintf(name, sizeof name, "%s %%%d", g->nodes[in->node].op->name, in->node);
                cat = "before_loop";
                break;
            case MPMD_I_RUN_POST:
                snprintf(name, sizeof name, "%s %%%d", g->nodes[in->node].op->name, in->node);
                cat = "after_loop";
                break;
            /* the data axis' collectives, named as the rank's program prints them */
            case MPMD_I_ALLREDUCE:
            case MPMD_I_REDUCE_SCATTER:
                snprintf(name, sizeof name, "%s %%%d over the replicas",
                         in->op == MPMD_I_ALLREDUCE ? "all_reduce" : "reduce_scatter", in->node);
                cat = "collective";
                break;
            case MPMD_I_GATHER: /* FSDP: before a task, or once for the step */
                if (in->stage >= 0)
                    snprintf(name, sizeof name, "all_gather for %s_%d__%d", kind_prefix(in->kind), in->stage,
                             in->mb);
                else
                    snprintf(name, sizeof name, "all_gather for the step");
                cat = "collective";
                break;
            default: /* an instruction this writer does not know yet: still a valid, named event */
                snprintf(name, sizeof name, "instruction %d", (int)in->op);
                break;
            }
            double ts = 1e6 * ev[k].t0, dur = 1e6 * (ev[k].t1 - ev[k].t0);
            fprintf(f,
                    ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"ts\": "
                    "%.3f, "
                    "\"dur\": %.3f}",
                    name, cat, r, ts, dur);
            if (in->op == MPMD_I_RECV && ev[k].wait > 0) {
                double w = 1e6 * ev[k].wait;
                fprintf(f,
                        ",\n{\"name\": \"wait\", \"cat\": \"wait\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, "
                        "\"ts\": %.3f, \"dur\": %.3f}",
                        r, ts, w < dur ? w : dur);
            }
        }
    }
    fprintf(f, "\n]}\n");
    return ferror(f) ? mpmd_error_set(err, MPMD_ERR_IO, "mpmd_step_write_trace: write error") : MPMD_OK;
}

/* FSDP's textbook volume for rank r per step, what one replica takes from
 * the others: (R - 1) / R of each parameter its stages gather (in the
 * dtype it is gathered in: a cast parameter's compute dtype), twice per
 * microbatch (forward and backward) when gathered per task, once when
 * gathered per step; and of each gradient it reduce-scatters, once. */
static int64_t fsdp_textbook_bytes(const mpmd_plan *pl, int r) {
    if (!pl->mesh.shard) return 0;
    const mpmd_graph *g = pl->g;
    double bytes = 0;
    if (pl->fsdp == MPMD_FSDP_PER_STEP) {
        const int l = pl->num_stages * MPMD_TASK_KINDS + r; /* the rank's list */
        for (int q = 0; q < pl->gather_n[l]; q++)
            bytes += (double)rt_bytes(g, pl->gather[l][q]);
    } else {
        unsigned char *seen = calloc((size_t)g->n_nodes + 1, 1);
        if (!seen) return -1;
        for (int s = 0; s < pl->num_stages; s++) {
            if (pl->stage_rank[s] != r) continue;
            memset(seen, 0, (size_t)g->n_nodes);
            for (int k = s * MPMD_TASK_KINDS; k < (s + 1) * MPMD_TASK_KINDS; k++)
                for (int q = 0; q < pl->gather_n[k]; q++)
                    if (!seen[pl->gather[k][q]]++)
                        bytes += 2.0 * pl->num_micro * (double)rt_bytes(g, pl->gather[k][q]);
        }
        free(seen);
    }
    const mpmd_program *p = &pl->prog[r];
    for (int x = 0; x < p->n; x++)
        if (p->ins[x].op == MPMD_I_REDUCE_SCATTER) bytes += (double)rt_bytes(g, p->ins[x].node);
    return (int64_t)(bytes * (pl->replicas - 1) / pl->replicas);
}

mpmd_status mpmd_step_summary(const mpmd_step *st, mpmd_step_stats *out, mpmd_error *err) {
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_step_summary: no place for the summary (out is NULL)");
    memset(out, 0, sizeof *out);
    if (!has_run(st, err, "mpmd_step_summary")) return MPMD_ERR_INVALID;
    const int D = st->plan->num_ranks;
    out->num_ranks = D;
    out->threads_per_rank = st->threads;
    snprintf(out->threads_reason, sizeof out->threads_reason, "%s", st->threads_why);
    out->step_ms = 1e3 * (st->t_end - st->t_start);
    out->ranks = calloc((size_t)D, sizeof *out->ranks);
    if (!out->ranks) return mpmd_error_set(err, MPMD_ERR_NOMEM, "mpmd_step_summary: out of memory");
    double busy_total = 0;
    const int S = st->plan->num_stages;
    double *stage_time = calloc((size_t)S * MPMD_TASK_KINDS + 1, sizeof *stage_time);
    int *stage_count = calloc((size_t)S * MPMD_TASK_KINDS + 1, sizeof *stage_count);
    if (!stage_time || !stage_count) {
        free(stage_time), free(stage_count), free(out->ranks);
        out->ranks = NULL;
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "mpmd_step_summary: out of memory");
    }
    for (int r = 0; r < D; r++) {
        int n;
        int64_t peak;
        const mpmd_event *ev = mpmd_runtime_events(st, r, &n, &peak);
        mpmd_rank_stats *rs = &out->ranks[r];
        for (int k = 0; k < n; k++) {
            const mpmd_instr *in = &st->plan->prog[r].ins[ev[k].instr];
            double d = 1e3 * (ev[k].t1 - ev[k].t0);
            if (in->op == MPMD_I_TASK) {
                rs->busy_ms += d;
                rs->tasks++;
                stage_time[in->stage * MPMD_TASK_KINDS + in->kind] += d;
                stage_count[in->stage * MPMD_TASK_KINDS + in->kind]++;
            } else if (in->op == MPMD_I_RUN_PRE || in->op == MPMD_I_RUN_POST) {
                rs->busy_ms += d;
            } else if (in->op == MPMD_I_RECV) {
                rs->wait_ms += 1e3 * ev[k].wait;
                rs->wake_ms += 1e3 * (ev[k].late < ev[k].wait ? ev[k].late : ev[k].wait);
                out->transfer_ms += d - 1e3 * ev[k].wait;
            } else if (in->op == MPMD_I_SEND) {
                rs->sent_bytes += (int64_t)mpmd_held_bytes(&st->plan->mesh, in->node);
                out->transfer_ms += d;
            } else if (in->op == MPMD_I_GATHER || in->op == MPMD_I_REDUCE_SCATTER ||
                       in->op == MPMD_I_ALLREDUCE) {
                rs->wait_ms += 1e3 * ev[k].wait;
                out->transfer_ms += d - 1e3 * ev[k].wait;
            }
        }
        rs->collective_bytes = mpmd_runtime_collective_bytes(st, r, &rs->gathered_bytes);
        rs->collective_expected = fsdp_textbook_bytes(st->plan, r);
        rs->peak_bytes = peak;
        rs->planned_peak_bytes = st->plan->prog[r].peak_bytes;
        mpmd_memory_stats ms;
        mpmd_step_memory(st, r, &ms);
        rs->memory_planned = ms.planned;
        rs->memory_measured = ms.measured;
        rs->bubble = out->step_ms > 0 ? 1.0 - rs->busy_ms / out->step_ms : 0;
        busy_total += rs->busy_ms;
    }
    out->bubble = out->step_ms > 0 ? 1.0 - busy_total / (D * out->step_ms) : 0;
    out->analytic_bubble = NAN;
    out->simulated_bubble = NAN;
    /* each stage's mean task times, and per microbatch the stage's total */
    double total = 0, slowest = -1;
    for (int s = 0; s < S; s++) {
        double per_mb = 0;
        for (int k = 0; k < MPMD_TASK_KINDS; k++) {
            int q = s * MPMD_TASK_KINDS + k;
            if (stage_count[q]) stage_time[q] /= stage_count[q];
            per_mb += stage_time[q];
        }
        total += per_mb;
        if (per_mb > slowest) slowest = per_mb, out->slowest_stage = s;
    }
    out->slowest_stage_ms = slowest;
    out->imbalance = total > 0 ? slowest / (total / S) : 1.0;
    if (st->plan->sched) {
        out->analytic_bubble = mpmd_schedule_analytic_bubble(st->plan->sched, NULL, out->analytic_formula,
                                                             sizeof out->analytic_formula);
        /* the schedule simulated with each stage's own measured times */
        mpmd_cost_model cost = MPMD_COST_DEFAULTS;
        cost.stage_latency = stage_time;
        mpmd_sim *sim = NULL;
        mpmd_error e2;
        if (mpmd_schedule_simulate(st->plan->sched, &cost, &sim, &e2, NULL) == MPMD_OK) {
            out->simulated_bubble = sim->bubble;
            out->simulated_ms = sim->makespan;
            mpmd_sim_free(sim);
        }
    }
    free(stage_time), free(stage_count);
    return MPMD_OK;
}

void mpmd_step_stats_free(mpmd_step_stats *s) {
    if (!s) return;
    free(s->ranks);
    s->ranks = NULL;
}

/* The parameters FSDP left whole, each with why (at most 12 lines). */
static void print_whole(const mpmd_plan *pl, FILE *f) {
    int n = 0;
    char why[400];
    for (int i = 0; i < pl->g->n_nodes; i++)
        n += mpmd_plan_whole_reason(pl, i, why, sizeof why);
    if (!n) return;
    fprintf(f, "  FSDP left %d parameter%s whole on every replica:\n", n, n == 1 ? "" : "s");
    int k = 0;
    for (int i = 0; i < pl->g->n_nodes && k < 12; i++)
        if (mpmd_plan_whole_reason(pl, i, why, sizeof why))
            fprintf(f, "    \"%s\" %s\n", pl->g->nodes[i].name, why), k++;
    if (n > k) fprintf(f, "    and %d more\n", n - k);
}

mpmd_status mpmd_step_print_summary(const mpmd_step *st, FILE *f, mpmd_error *err) {
    if (!f) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_step_print_summary: no file (NULL)");
    mpmd_step_stats s;
    mpmd_status rc = mpmd_step_summary(st, &s, err);
    if (rc) return rc;
    fprintf(f,
            "%s: step %.2f ms, bubble %.1f%% measured, %.1f%% simulated with each stage's measured task "
            "times (%.2f "
            "ms)",
            plan_name(st->plan), s.step_ms, 100 * s.bubble, 100 * s.simulated_bubble, s.simulated_ms);
    if (!isnan(s.analytic_bubble))
        fprintf(f, ", %.1f%% analytic (%s)", 100 * s.analytic_bubble, s.analytic_formula);
    fprintf(f, "\n  %d kernel thread%s per rank (%s)", s.threads_per_rank, s.threads_per_rank == 1 ? "" : "s",
            s.threads_reason);
    fprintf(f,
            "\n  rank   tasks    busy ms    wait ms (wake)   bubble   peak activations      planned   memory "
            "planned    measured\n");
    double wait = 0, wake = 0;
    for (int r = 0; r < s.num_ranks; r++) {
        const mpmd_rank_stats *q = &s.ranks[r];
        fprintf(f, "  %4d  %6d  %9.2f  %9.2f %6.2f   %5.1f%%   %14lld B %10lld B   %12lld B  %10lld B\n", r,
                q->tasks, q->busy_ms, q->wait_ms, q->wake_ms, 100 * q->bubble, (long long)q->peak_bytes,
                (long long)q->planned_peak_bytes, (long long)q->memory_planned,
                (long long)q->memory_measured);
        wait += q->wait_ms, wake += q->wake_ms;
    }
    if (st->plan->num_stages > 1)
        fprintf(
            f,
            "  slowest stage %d: %.3f ms per microbatch, %.2fx the mean stage (imbalance); transfers %.3f ms "
            "in all (waiting left out)\n",
            s.slowest_stage, s.slowest_stage_ms, s.imbalance, s.transfer_ms);
    if (st->plan->num_stages > 1 && s.step_ms > 0 && rt_whole(st)) { /* wake-ups: in-process */
        const double pts = 100 / (s.num_ranks * s.step_ms);          /* points of bubble per ms of a rank */
        fprintf(
            f,
            "  of the measured bubble: %.1f points waiting (for values not yet sent, or in collectives), "
            "%.1f points from a send to its receiver running again (wake-ups, %.3f ms in all), %.1f points "
            "in transfers\n",
            pts * (wait - wake), pts * wake, wake, pts * s.transfer_ms);
    }
    if (st->plan->mesh.shard || st->plan->model > 1) {
        fprintf(
            f,
            "  per rank (its replica 0, model rank 0): parameters, optimizer state, gradients at the arena's "
            "fullest, gathered parameters (planned bytes)\n");
        for (int r = 0; r < s.num_ranks; r++) {
            mpmd_memory_stats ms;
            if (mpmd_step_memory(st, r, &ms)) continue;
            fprintf(f, "  %4d  %12lld B %12lld B %12lld B %12lld B\n", r, (long long)ms.parameters,
                    (long long)ms.optimizer_state, (long long)ms.loop_results, (long long)ms.gathered);
        }
    }
    if (st->plan->mesh.shard) {
        const int per_step = st->plan->fsdp == MPMD_FSDP_PER_STEP;
        fprintf(f,
                "  FSDP over %d replicas (%d parameters sharded, gathered %s): bytes a replica took from the "
                "others this step\n",
                st->plan->replicas, mpmd_plan_sharded_params(st->plan),
                per_step ? "once per step" : "per task");
        for (int r = 0; r < s.num_ranks; r++)
            fprintf(
                f,
                "  %4d  %14lld B measured (%lld B of them gathered), %14lld B textbook (params gathered %s, "
                "gradients reduce-scattered once)\n",
                r, (long long)s.ranks[r].collective_bytes, (long long)s.ranks[r].gathered_bytes,
                (long long)s.ranks[r].collective_expected, per_step ? "once a step" : "twice a microbatch");
        print_whole(st->plan, f);
    }
    mpmd_step_stats_free(&s);
    return MPMD_OK;
}

/* ---- op profile ---------------------------------------------------------- */

typedef struct prof_row {
    char name[64];
    double s;
    int calls;
} prof_row;

static int by_time(const void *a, const void *b) {
    double x = ((const prof_row *)a)->s, y = ((const prof_row *)b)->s;
    return (x < y) - (x > y);
}

/* A profile row's name: the op's, and for a matrix product its shape as
 * the backends run it, "matmul 16384x2304x768 NT" (M x N x K after folding
 * the batch into M where it can be, "x 192" for a batch, N or T for each
 * operand), since products of different shapes run at different rates. */
static void prof_name(const mpmd_graph *g, int i, char *buf, size_t len) {
    const mpmd_node *n = &g->nodes[i];
    if (n->op != &mpmd_op_matmul) {
        snprintf(buf, len, "%s", n->op->name);
        return;
    }
    mpmd_matmul_dims d;
    mpmd_matmul_dims_make(&d, &g->nodes[n->in[0]].type, &g->nodes[n->in[1]].type, n->ia[0]);
    int w = snprintf(buf, len, "matmul %lldx%lldx%lld %c%c", (long long)d.m, (long long)d.n, (long long)d.k,
                     d.tra ? 'T' : 'N', d.trb ? 'T' : 'N');
    if (d.batch > 1 && w > 0 && (size_t)w < len)
        snprintf(buf + w, len - (size_t)w, " x%lld", (long long)d.batch);
}

void mpmd_step_print_profile(const mpmd_step *st, FILE *f) {
    if (!st || !f) return;
    const mpmd_graph *g = st->plan->g;
    if (!st->profiling || !st->prof_runs) {
        fprintf(f, "no profiled run (mpmd_step_set_profiling or mpmd_exec_set_profiling, then a run)\n");
        return;
    }
    prof_row *rows = calloc((size_t)g->n_nodes + 1, sizeof *rows);
    if (!rows) return;
    int nr = 0;
    double total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        double t = 0; /* over the rank states of this process */
        for (int li = 0; mpmd_runtime_op_seconds(st, li); li++)
            t += mpmd_runtime_op_seconds(st, li)[i];
        if (t <= 0) continue;
        char name[64];
        prof_name(g, i, name, sizeof name);
        int k = 0;
        while (k < nr && strcmp(rows[k].name, name) != 0)
            k++;
        if (k == nr) snprintf(rows[nr++].name, sizeof rows[0].name, "%s", name);
        rows[k].s += t;
        rows[k].calls += g->nodes[i].region == MPMD_REGION_BODY ? g->n_micro : 1;
        total += t;
    }
    qsort(rows, (size_t)nr, sizeof *rows, by_time);
    fprintf(f, "time by op over %d run%s (%s backend; %s), per run:\n", st->prof_runs,
            st->prof_runs == 1 ? "" : "s", st->plan->be->name,
            st->plan->be->queue.mark ? "device time of each op, between marks in its queue"
                                     : "each op waited for");
    fprintf(f, "  %-34s %7s %11s %7s\n", "op", "calls", "ms", "share");
    for (int k = 0; k < nr; k++)
        fprintf(f, "  %-34s %7d %11.3f %6.1f%%\n", rows[k].name, rows[k].calls,
                1e3 * rows[k].s / st->prof_runs, 100.0 * rows[k].s / (total > 0 ? total : 1));
    fprintf(f, "  %-34s %7s %11.3f\n", "total", "", 1e3 * total / st->prof_runs);
    free(rows);
}
