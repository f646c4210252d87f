/* Ranking and reporting a planner's layouts (include/mpmd_schedule.h). */
#include "mpmd_schedule.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int by_choice(const void *pa, const void *pb) {
    const mpmd_layout *a = pa, *b = pb;
    if (a->fits != b->fits) return b->fits - a->fits;
    if (a->fits) return (a->predicted > b->predicted) - (a->predicted < b->predicted);
    return (a->peak_bytes > b->peak_bytes) - (a->peak_bytes < b->peak_bytes);
}

int mpmd_layouts_rank(mpmd_layout *l, int n, int64_t limit) {
    if (!l || n < 1) return 0;
    int fit = 0;
    for (int i = 0; i < n; i++)
        fit += l[i].fits = !limit || l[i].peak_bytes <= limit;
    qsort(l, (size_t)n, sizeof *l, by_choice);
    return fit;
}

static void bytes(FILE *f, int64_t b) {
    if (b == INT64_MAX) /* a planner's saturated count: more than int64 holds */
        fputs("over 8 EiB", f);
    else if (b >= (int64_t)1 << 30)
        fprintf(f, "%.2f GiB", (double)b / (1 << 30));
    else if (b >= (int64_t)1 << 20)
        fprintf(f, "%.1f MiB", (double)b / (1 << 20));
    else
        fprintf(f, "%.1f KiB", (double)b / 1024);
}

static void row(FILE *f, const mpmd_layout *l, int gathers, const char *unit, const char *note) {
    fprintf(f, "  %-18s %6d %6d %6d %6s", l->schedule, l->stages, l->ranks, l->microbatches,
            l->remat[0] ? l->remat : "-");
    if (gathers) fprintf(f, "  %6s", l->gather[0] ? l->gather : "-");
    fprintf(f, " %9.4g %-2s     ", l->predicted, unit);
    bytes(f, l->peak_bytes);
    fprintf(f, "%s\n", note);
}

void mpmd_layouts_report(FILE *f, const mpmd_layout *l, int n, int64_t limit, const char *unit) {
    if (!f || (!l && n > 0)) return;
    if (!unit) unit = "";
    int fit = 0;
    while (fit < n && l[fit].fits)
        fit++;
    fprintf(f, "%d layouts, memory limit ", n);
    if (limit)
        bytes(f, limit);
    else
        fputs("none", f);
    int gathers = 0; /* an FSDP column when the planner weighed FSDP's gathers */
    for (int i = 0; i < n; i++)
        gathers |= l[i].gather[0] != 0;
    fprintf(f, " per rank\n  %-18s %6s %6s %6s %6s%s %12s %14s\n", "schedule", "stages", "ranks", "micro",
            "remat", gathers ? "  gather" : "", "predicted", "peak per rank");
    for (int i = 0; i < n && i < 5 && i < fit; i++)
        row(f, &l[i], gathers, unit, i == 0 ? "   <- chosen" : "");
    if (fit > 5) fprintf(f, "  %d more fit, predicted slower than those\n", fit - 5);
    /* each gather policy's best layout, so the report shows what the policy
       not among the fastest five would cost */
    for (int i = 5; gathers && i < fit; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(l[j].gather, l[i].gather) == 0;
        char note[48];
        snprintf(note, sizeof note, "   <- fastest gathering per %s", l[i].gather);
        if (!seen) row(f, &l[i], gathers, unit, note);
    }
    if (n > fit) {
        fprintf(f, "  %d exceed the limit (the smallest of them needs ", n - fit);
        bytes(f, l[fit].peak_bytes);
        fprintf(f, ": %s, %d stages, %d microbatches%s%s%s%s)\n", l[fit].schedule, l[fit].stages,
                l[fit].microbatches, l[fit].remat[0] ? ", remat " : "", l[fit].remat,
                l[fit].gather[0] ? ", fsdp gathered per " : "", l[fit].gather);
    }
}
