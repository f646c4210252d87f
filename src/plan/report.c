/* The planner's result as text (mpmd_planner_report) and as JSON. */
#include "plan/plan_internal.h"
#include "util/json_write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *sched_name(int kind) {
    static const char *const names[] = {"gpipe",  "std1f1b",    "eager1f1b", "interleaved1f1b",
                                        "kimik2", "zerobubble", "dualpipev", "interleavedgpipe"};
    return kind == MPMD_PLAN_LOOP ? "loop" : kind >= 0 && kind < 8 ? names[kind] : "?";
}

static const char *remat_name(int r) {
    return r == MPMD_PLAN_REMAT_BLOCK ? "block" : r == MPMD_PLAN_REMAT_DOTS ? "dots" : "none";
}

static const char *fsdp_name(int f) {
    return f == MPMD_PLAN_FSDP_TASK ? "task" : f == MPMD_PLAN_FSDP_STEP ? "step" : "-";
}

int mpmd_run_layout_str(const mpmd_run_layout *l, int microbatches, char *buf, size_t len) {
    if (!l || !buf || !len) return 0;
    return snprintf(buf, len, "tp %d x pp %d x dp %d%s%s, %s %d stage%s, microbatch %d (%d), remat %s", l->tp,
                    l->pp, l->dp, l->fsdp ? ", fsdp per " : "", l->fsdp ? fsdp_name(l->fsdp) : "",
                    sched_name(l->schedule), l->stages, l->stages == 1 ? "" : "s", l->microbatch,
                    microbatches, remat_name(l->remat));
}

/* Bytes with a binary unit: 12.3 KiB, 4.56 MiB, 78.12 GiB. */
static const char *bytes(double b, char *buf, size_t n) {
    if (!isfinite(b))
        snprintf(buf, n, "-");
    else if (b >= GIB)
        snprintf(buf, n, "%.2f GiB", b / GIB);
    else if (b >= 1024.0 * 1024)
        snprintf(buf, n, "%.2f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, n, "%.1f KiB", b / 1024);
    return buf;
}

/* A time with its unit: 12.3 ms, 4.56 s. */
static const char *secs(double t, char *b, size_t n) {
    if (!isfinite(t))
        snprintf(b, n, "-");
    else if (t < 1e-3)
        snprintf(b, n, "%.1f us", t * 1e6);
    else if (t < 1)
        snprintf(b, n, "%.2f ms", t * 1e3);
    else
        snprintf(b, n, "%.3g s", t);
    return b;
}

static void header(FILE *f, const mpmd_cluster *c, const mpmd_transformer *m) {
    static const char *const dt[] = {"f32", "bf16", "f16"};
    fprintf(f, "cluster    %s: %d GPUs a node; a GPU: %.4g TFLOP/s %s dense, %.1f GiB at %.4g GB/s\n",
            c->name, c->gpus_per_node, c->peak_flops[m->dtype] / 1e12, dt[m->dtype], c->memory / GIB,
            c->memory_bandwidth / 1e9);
    fprintf(f,
            "           node links %.4g GB/s and %.3g us, network %.4g GB/s and %.3g us (each way, a GPU's "
            "share)\n",
            c->node_bandwidth / 1e9, c->node_latency * 1e6, c->net_bandwidth / 1e9, c->net_latency * 1e6);
    fprintf(f,
            "model      %s: %d layers, hidden %d, %d heads, MLP %d, vocabulary %d, sequence %d, batch %lld, "
            "%s%s\n"
            "           %.4g billion parameters, %.4g PFLOPs a step (model FLOPs, 3 x the forward)\n",
            m->name, m->layers, m->hidden, m->heads, m->ffn ? m->ffn : 4 * m->hidden, m->vocab, m->seq,
            (long long)m->batch, dt[m->dtype], m->untied ? ", untied head" : "",
            mpmd_transformer_params(m) / 1e9, mpmd_transformer_step_flops(m) / 1e15);
    fprintf(f,
            "efficiency matrix products %.2f of peak, memory-bound kernels %.2f of bandwidth, links %.2f of "
            "bandwidth (every layout)\n",
            MPMD_PLAN_GEMM_EFFICIENCY, MPMD_PLAN_MEMORY_EFFICIENCY, MPMD_PLAN_LINK_EFFICIENCY);
}

static void row(FILE *f, const mpmd_run_prediction *p, const char *tail) {
    const mpmd_run_layout *l = &p->layout;
    char t[32], b[32];
    fprintf(f, "  %4d %4d %4d %5s  %-16s %6d %5d %6d  %5s %10s %6.1f%% %8.1f %13s%s\n", l->tp, l->pp, l->dp,
            fsdp_name(l->fsdp), sched_name(l->schedule), l->stages, l->microbatch, p->microbatches,
            remat_name(l->remat), secs(p->step, t, sizeof t), 100 * p->mfu, p->hw_flops_per_gpu / 1e12,
            bytes(p->peak, b, sizeof b), tail);
}

/* The part of the step where b loses most against the choice a. */
static const char *loses_by(const mpmd_run_prediction *a, const mpmd_run_prediction *b, double *by) {
    const double da[6] = {a->compute, a->tp_comm, a->idle, a->before, a->dp_comm, a->optimizer};
    const double db[6] = {b->compute, b->tp_comm, b->idle, b->before, b->dp_comm, b->optimizer};
    static const char *const names[6] = {"compute",
                                         "tensor-parallel all-reduces",
                                         "waiting in the loop",
                                         "FSDP's gather before the loop",
                                         "combining the gradients",
                                         "the optimizer"};
    int worst = 0;
    for (int i = 1; i < 6; i++)
        if (db[i] - da[i] > db[worst] - da[worst]) worst = i;
    *by = db[worst] - da[worst];
    return names[worst];
}

/* The choice's split of the step and every rank's memory. */
static void detail(FILE *f, const mpmd_cluster *c, const mpmd_transformer *m, const mpmd_planner_result *r) {
    const mpmd_run_prediction *p = &r->layouts[0];
    const mpmd_run_layout *l = &p->layout;
    char a[7][32];
    fprintf(f,
            "the choice: %s a step = compute %s + tensor-parallel all-reduces %s + waiting in the loop %s\n"
            "            + before the loop %s + gradients combined after it %s + optimizer %s (rank %d);\n",
            secs(p->step, a[0], 32), secs(p->compute, a[1], 32), secs(p->tp_comm, a[2], 32),
            secs(p->idle, a[3], 32), secs(p->before, a[4], 32), secs(p->dp_comm, a[5], 32),
            secs(p->optimizer, a[6], 32), p->step_rank);
    fprintf(f, "            %.4g tokens/s, MFU %.1f%%, %.1f TFLOP/s a GPU counting recomputed products\n",
            p->tokens_per_s, 100 * p->mfu, p->hw_flops_per_gpu / 1e12);
    double *peak = malloc((size_t)l->pp * sizeof *peak);
    mpmd_stage_cost *st = malloc((size_t)l->stages * sizeof *st);
    mpmd_run_prediction q;
    if (!peak || !st || mpmd_planner_predict(c, m, l, r->memory_limit, &q, peak, st, NULL) || !q.valid) {
        free(peak), free(st);
        return;
    }
    fprintf(f, "  %4s  %-20s %6s %11s %11s %13s %11s\n", "rank", "stages", "layers", "parameters", "held",
            "kept a micro", "peak");
    for (int rk = 0; rk < l->pp; rk++) {
        if (l->pp > 12 && rk >= 6 && rk < l->pp - 4) {
            if (rk == 6) fprintf(f, "  ... (ranks 6 to %d alike)\n", l->pp - 5);
            continue;
        }
        char list[21] = "";
        size_t n = 0;
        int layers = 0;
        double params = 0, held = 0, kept = 0;
        for (int i = 0; i < l->stages; i++) {
            if (st[i].rank != rk) continue;
            if (n + 8 < sizeof list)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%d%s%s", n ? "," : "", i,
                                      st[i].embedding ? "e" : "", st[i].head ? "h" : "");
            else if (n + 4 < sizeof list)
                n += (size_t)snprintf(list + n, sizeof list - n, ",...");
            layers += st[i].layers, params += st[i].params, held += st[i].static_bytes, kept += st[i].keep_f;
        }
        char b[3][32];
        fprintf(f, "  %4d  %-20s %6d %10.4gG %11s %13s %11s\n", rk, list, layers, params / 1e9,
                bytes(held, b[0], 32), bytes(kept, b[1], 32), bytes(peak[rk], b[2], 32));
    }
    fprintf(
        f,
        "  (stage e holds the embedding, h the LM head; held: parameters, gradient sums, AdamW moments%s; "
        "kept: per microbatch in flight)\n",
        m->dtype == MPMD_PLAN_F32 ? "" : " and the 16-bit copies");
    free(peak), free(st);
}

/* The fastest of each other value of one dimension: key(p) names it. */
static void others(FILE *f, const mpmd_planner_result *r, const char *title,
                   int (*key)(const mpmd_run_prediction *)) {
    int shown = 0;
    for (int i = 1; i < r->fit; i++) {
        int k = key(&r->layouts[i]), seen = key(&r->layouts[0]) == k;
        for (int j = 1; j < i && !seen; j++)
            seen = key(&r->layouts[j]) == k;
        if (seen) continue;
        if (!shown++) fprintf(f, "  the fastest of each other %s:\n", title);
        double by;
        const char *what = loses_by(&r->layouts[0], &r->layouts[i], &by);
        char tail[160], t[32];
        snprintf(tail, sizeof tail, "  +%.1f%%, most in %s (+%s)",
                 100 * (r->layouts[i].step / r->layouts[0].step - 1), what, secs(by, t, sizeof t));
        row(f, &r->layouts[i], tail);
    }
}

static int key_mesh(const mpmd_run_prediction *p) { return p->layout.tp * 65536 + p->layout.pp; }
static int key_sched(const mpmd_run_prediction *p) { return p->layout.schedule; }
static int key_remat(const mpmd_run_prediction *p) { return p->layout.remat * 4 + p->layout.fsdp; }

void mpmd_planner_report(FILE *f, const mpmd_cluster *c, const mpmd_transformer *m,
                         const mpmd_planner_result *r) {
    if (!f || !c || !m || !r) return;
    header(f, c, m);
    fprintf(f, "%d GPUs: %d layout%s predicted, %d fit in %.2f GiB a GPU\n", r->gpus, r->n,
            r->n == 1 ? "" : "s", r->fit, r->memory_limit / GIB);
    fprintf(f, "  %4s %4s %4s %5s  %-16s %6s %5s %6s  %5s %10s %7s %8s %13s\n", "tp", "pp", "dp", "fsdp",
            "schedule", "stages", "mbs", "micro", "remat", "step", "MFU", "TFLOP/s", "peak a GPU");
    for (int i = 0; i < r->fit && i < 5; i++)
        row(f, &r->layouts[i], i == 0 ? "  <- chosen" : "");
    if (r->fit > 5) fprintf(f, "  %d more fit, predicted slower\n", r->fit - 5);
    fprintf(
        f,
        "  (TFLOP/s: a GPU's rate counting recomputed products, Narayanan et al.'s measure; MFU counts the "
        "model's FLOPs only)\n");
    if (r->fit) detail(f, c, m, r);
    if (r->n > 1) fprintf(f, "why the others lose:\n");
    others(f, r, "mesh (tp x pp)", key_mesh);
    others(f, r, "schedule", key_sched);
    others(f, r, "remat policy and FSDP", key_remat);
    int bounded = 0;
    while (r->fit + bounded < r->n && r->layouts[r->fit + bounded].bound)
        bounded++;
    if (bounded)
        fprintf(
            f,
            "  %d not simulated: even their bound (the busiest rank's tasks back to back) is slower than the "
            "choice\n",
            bounded);
    if (r->n > r->fit + bounded) {
        char what[200];
        const mpmd_run_prediction *p = &r->layouts[r->fit + bounded];
        mpmd_run_layout_str(&p->layout, p->microbatches, what, sizeof what);
        char b[2][32];
        fprintf(f, "  %d exceed %s a GPU; the smallest of them needs %s%s (%s)\n", r->n - r->fit - bounded,
                bytes(r->memory_limit, b[0], 32), p->simulated ? "" : "at least ", bytes(p->peak, b[1], 32),
                what);
    }
}

static void num(FILE *f, const char *key, double v) {
    fprintf(f, "\"%s\": ", key);
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

void mpmd_planner_write_json(FILE *f, const mpmd_cluster *c, const mpmd_transformer *m,
                             const mpmd_planner_result *r) {
    if (!f || !c || !m || !r) return;
    fputs("{\"cluster\": ", f);
    mpmd_json_write_string(f, c->name);
    fputs(", \"model\": ", f);
    mpmd_json_write_string(f, m->name);
    fprintf(f, ", \"gpus\": %d, ", r->gpus);
    num(f, "memory_limit", r->memory_limit);
    fprintf(
        f,
        ", \"efficiency\": {\"gemm\": %.3g, \"memory\": %.3g, \"link\": %.3g}, \"fit\": %d, \"layouts\": [",
        MPMD_PLAN_GEMM_EFFICIENCY, MPMD_PLAN_MEMORY_EFFICIENCY, MPMD_PLAN_LINK_EFFICIENCY, r->fit);
    for (int i = 0; i < r->n; i++) {
        const mpmd_run_prediction *p = &r->layouts[i];
        const mpmd_run_layout *l = &p->layout;
        fprintf(f,
                "%s\n  {\"tp\": %d, \"pp\": %d, \"dp\": %d, \"fsdp\": \"%s\", \"schedule\": \"%s\", "
                "\"stages\": %d, "
                "\"microbatch\": %d, \"microbatches\": %d, \"remat\": \"%s\", ",
                i ? "," : "", l->tp, l->pp, l->dp, fsdp_name(l->fsdp), sched_name(l->schedule), l->stages,
                l->microbatch, p->microbatches, remat_name(l->remat));
        num(f, "step", p->step);
        fputs(", ", f);
        num(f, "mfu", p->mfu);
        fputs(", ", f);
        num(f, "hw_flops_per_gpu", p->hw_flops_per_gpu);
        fputs(", ", f);
        num(f, "tokens_per_s", p->tokens_per_s);
        fputs(", ", f);
        num(f, "peak_bytes", p->peak);
        fprintf(f, ", \"peak_rank\": %d, \"fits\": %s, \"simulated\": %s, \"bound\": %s, \"parts\": {",
                p->peak_rank, p->fits ? "true" : "false", p->simulated ? "true" : "false",
                p->bound ? "true" : "false");
        const double v[6] = {p->compute, p->tp_comm, p->idle, p->before, p->dp_comm, p->optimizer};
        static const char *const k[6] = {"compute", "tp_comm", "idle", "before", "dp_comm", "optimizer"};
        for (int j = 0; j < 6; j++) {
            if (j) fputs(", ", f);
            num(f, k[j], v[j]);
        }
        fputs("}}", f);
    }
    fputs("\n]}\n", f);
}
