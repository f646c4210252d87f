/* A timeline as an SVG picture: a title, a legend, one row per rank with a
 * box per task (colour by kind, a lighter shade for a rank's later
 * stages, the microbatch inside and the stage under it where a rank runs
 * several), FusedTask members framed together, idle time hatched grey, and
 * a time axis with grid lines. Hovering a box shows its task and times. */
#include "schedule_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Layout, in px. */
enum {
    LEFT = 70,
    RIGHT = 24,
    TOP_TITLE = 26,
    TOP_LEGEND = 50,
    ROWS_Y = 70,
    ROW_H = 28,
    ROW_GAP = 6,
    AXIS_H = 44
};

/* Colours per kind: a darker base for a rank's first stage, a lighter one
 * for the others; text colour on each. */
static const char *const base_fill[MPMD_TASK_KINDS] = {"#3b6fb6", "#e07b12", "#c8453f", "#3d8f3a"};
static const char *const light_fill[MPMD_TASK_KINDS] = {"#86aee0", "#f5b870", "#ea8f8a", "#8cc784"};
static const char *const text_fill[2] = {"#ffffff", "#1a1a1a"};
static const char *const kind_label[MPMD_TASK_KINDS] = {
    "F forward", "B backward", "A backward, activations (bwdA)", "W backward, weights (bwdW)"};

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A tick step of 1, 2 or 5 times a power of ten giving at most ~16 ticks. */
static double tick_step(double span) {
    if (!(span > 0)) return 1;
    double raw = span / 16, p = pow(10, floor(log10(raw)));
    for (int i = 0; i < 3; i++) {
        double m = (double[]){1, 2, 5}[i];
        if (m * p >= raw) return m * p;
    }
    return 10 * p;
}

/* Index of `stage` among the distinct stages of a row (0 for the lowest). */
static int local_stage(const int32_t *stages, int nst, int32_t stage) {
    int k = 0;
    for (int i = 0; i < nst; i++)
        if (stages[i] < stage) k++;
    return k;
}

/* Pixels per unit of time: the width asked for; else aim at ~1100 px of
 * time, giving a unit at least 22 px (room for two digits) while that
 * keeps the picture under ~2000 px; a simulation's steps at most 40 px
 * each (a measured run's units are chosen from its length: it fills the
 * drawing); and keep pictures of huge runs bounded. */
static double svg_scale(const mpmd_timeline *tl, double makespan) {
    double scale = makespan > 0 ? 1100.0 / makespan : 40;
    if (tl->width > 0 && makespan > 0) {
        scale = tl->width / makespan;
    } else {
        if (makespan > 0 && scale < 22 && 2000.0 / makespan > scale)
            scale = 2000.0 / makespan < 22 ? 2000.0 / makespan : 22;
        if (scale > 40 && !strcmp(tl->unit, "step")) scale = 40;
    }
    return scale < 0.01 ? 0.01 : scale;
}

/* The legend: the kinds present, fused, idle, what the labels mean. */
static void write_legend(FILE *f, const mpmd_timeline *tl, const int *present, int any_fused) {
    /* Legend: the kinds present, fused, idle. */
    double lx = 12;
    for (int k = 0; k < MPMD_TASK_KINDS; k++) {
        if (!present[k]) continue;
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%d\" width=\"14\" height=\"14\" rx=\"2\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"%d\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                lx, TOP_LEGEND - 12, base_fill[k], lx + 19, TOP_LEGEND, kind_label[k]);
        lx += 19 + 7.0 * (double)strlen(kind_label[k]) + 18;
    }
    if (any_fused) {
        fprintf(
            f,
            "<rect x=\"%.0f\" y=\"%d\" width=\"10\" height=\"14\" fill=\"%s\"/>"
            "<rect x=\"%.0f\" y=\"%d\" width=\"10\" height=\"14\" fill=\"%s\"/>"
            "<rect x=\"%.0f\" y=\"%d\" width=\"20\" height=\"14\" rx=\"2\" fill=\"none\" stroke=\"#111\" "
            "stroke-width=\"2\"/><text x=\"%.0f\" y=\"%d\" font-size=\"12\" fill=\"#222\">FusedTask</text>\n",
            lx, TOP_LEGEND - 12, base_fill[0], lx + 10, TOP_LEGEND - 12, base_fill[1], lx, TOP_LEGEND - 12,
            lx + 25, TOP_LEGEND);
        lx += 25 + 7.0 * 9 + 18;
    }
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%d\" width=\"20\" height=\"14\" fill=\"url(#idle)\" stroke=\"#ccc\"/>"
            "<text x=\"%.0f\" y=\"%d\" font-size=\"12\" fill=\"#222\">idle</text>\n",
            lx, TOP_LEGEND - 12, lx + 25, TOP_LEGEND);
    lx += 25 + 7.0 * 4 + 18;
    int any_stages = 0;
    for (int r = 0; r < tl->num_ranks; r++)
        any_stages |= tl->rank_stages[r] > 1;
    for (int r = 0; r < tl->num_ranks && !any_stages; r++)
        for (int i = 1; i < tl->num_events[r] && !any_stages; i++)
            any_stages = tl->events[r][i].task.stage != tl->events[r][0].task.stage;
    fprintf(f,
            "<text x=\"%.0f\" y=\"%d\" font-size=\"11\" fill=\"#555\">number in a box: microbatch%s</text>\n",
            lx, TOP_LEGEND, any_stages ? "; sK: stage K (lighter: the rank's later stages)" : "");
}

/* Grid lines and the time axis under the rows. */
static void write_axis(FILE *f, const mpmd_timeline *tl, double makespan, double scale, double rows_h,
                       double plot_w) {
    /* Grid lines and axis. */
    double step = tick_step(makespan);
    double axis_y = ROWS_Y + rows_h + 4;
    for (double t = 0; t <= makespan + step * 1e-9; t += step) {
        double x = LEFT + t * scale;
        fprintf(
            f,
            "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#c8c8c8\" stroke-width=\"0.6\"/>"
            "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" fill=\"#333\">%g</text>\n",
            x, ROWS_Y - 4, x, axis_y, x, axis_y + 14, t);
    }
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#555\" stroke-width=\"1\"/>"
            "<text x=\"%.2f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">time "
            "(%s)</text>\n",
            LEFT, axis_y, LEFT + plot_w, axis_y, LEFT + plot_w / 2, axis_y + 32, tl->unit);
}

/* Rank r's row: its label, idle background, a box per task, frames
 * around FusedTask groups. stages/cap_st: a scratch list of the row's
 * distinct stages. */
static void write_row(FILE *f, const mpmd_timeline *tl, int r, double scale, double plot_w,
                      int32_t **stages_p, int *cap_st) {
    char name[MPMD_ENTRY_STR_MAX];
    int32_t *stages = *stages_p;
    const double y = ROWS_Y + (double)r * (ROW_H + ROW_GAP);
    const mpmd_timeline_event *ev = tl->events[r];
    const int n = tl->num_events[r];
    /* The row's distinct stages, for shading and stage labels. */
    int nst = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < nst && !seen; j++)
            seen = stages[j] == ev[i].task.stage;
        if (seen) continue;
        if (nst == *cap_st) {
            int c = *cap_st ? *cap_st * 2 : 8;
            int32_t *p = realloc(stages, (size_t)c * sizeof *p);
            if (!p) break;
            *stages_p = stages = p;
            *cap_st = c;
        }
        stages[nst++] = ev[i].task.stage;
    }
    int show_stage = nst > 1 || tl->rank_stages[r] > 1;
    fprintf(f,
            "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\" fill=\"#222\">rank %d</text>\n"
            "<rect x=\"%d\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"url(#idle)\"/>\n",
            LEFT - 8, y + ROW_H / 2.0 + 4, r, LEFT, y, plot_w, ROW_H);
    for (int i = 0; i < n; i++) {
        const mpmd_timeline_event *e = &ev[i];
        int k = (unsigned)e->task.kind < MPMD_TASK_KINDS ? e->task.kind : 0;
        int light = local_stage(stages, nst, e->task.stage) > 0;
        double x = LEFT + e->start * scale, w = (e->end - e->start) * scale;
        mpmd_task_str(&e->task, name, sizeof name);
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"#ffffff\" "
                "stroke-width=\"%.1f\"><title>%s  [%g, %g)</title></rect>\n",
                x, y, w, ROW_H, light ? light_fill[k] : base_fill[k], w > 4 ? 1.0 : 0.0, name, e->start,
                e->end);
        char mb[16], st[16];
        snprintf(mb, sizeof mb, "%d", (int)e->task.microbatch);
        snprintf(st, sizeof st, "s%d", (int)e->task.stage);
        /* ~7.5 px per bold 12 px digit, ~5.5 px per 9 px character. */
        double need = 7.5 * (double)strlen(mb) + 3;
        if (show_stage && 5.5 * (double)strlen(st) + 3 > need) need = 5.5 * (double)strlen(st) + 3;
        if (w >= need) {
            const char *tc = text_fill[light || k == MPMD_TASK_B];
            if (show_stage)
                fprintf(f,
                        "<text x=\"%.2f\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\" "
                        "text-anchor=\"middle\" fill=\"%s\">%s</text>"
                        "<text x=\"%.2f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" "
                        "fill=\"%s\">%s</text>\n",
                        x + w / 2, y + 13, tc, mb, x + w / 2, y + 24, tc, st);
            else
                fprintf(f,
                        "<text x=\"%.2f\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\" "
                        "text-anchor=\"middle\" fill=\"%s\">%s</text>\n",
                        x + w / 2, y + ROW_H / 2.0 + 4.5, tc, mb);
        }
        /* After a group's last member, frame the whole group. */
        if (e->group >= 0 && (i + 1 == n || ev[i + 1].group != e->group)) {
            int j = i;
            while (j > 0 && ev[j - 1].group == e->group)
                j--;
            double gx = LEFT + ev[j].start * scale, gw = (e->end - ev[j].start) * scale;
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" rx=\"3\" fill=\"none\" "
                    "stroke=\"#111\" stroke-width=\"2\"/>\n",
                    gx + 1, y + 1, gw > 2 ? gw - 2 : gw, ROW_H - 2);
        }
    }
}

mpmd_status mpmd_timeline_write_svg(const mpmd_timeline *tl, FILE *f) {
    if (!tl || !f) return MPMD_ERR_INVALID;
    double makespan = 0;
    int present[MPMD_TASK_KINDS] = {0}, any_fused = 0;
    for (int r = 0; r < tl->num_ranks; r++)
        for (int i = 0; i < tl->num_events[r]; i++) {
            const mpmd_timeline_event *ev = &tl->events[r][i];
            if (ev->end > makespan) makespan = ev->end;
            if ((unsigned)ev->task.kind < MPMD_TASK_KINDS) present[ev->task.kind] = 1;
            if (ev->group >= 0) any_fused = 1;
        }
    double scale = svg_scale(tl, makespan);
    double plot_w = makespan * scale;
    double width = LEFT + plot_w + RIGHT;
    if (width < 760) width = 760;
    double rows_h = (double)tl->num_ranks * (ROW_H + ROW_GAP);
    double height = ROWS_Y + rows_h + AXIS_H;

    fprintf(
        f,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
        "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
        width, height, width, height);
    fputs("<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
          "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f2f2f2\"/>"
          "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d6d6d6\" "
          "stroke-width=\"2.5\"/></pattern></defs>\n",
          f);
    fprintf(f, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", width, height);
    fputs("<text x=\"12\" y=\"19\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">", f);
    xml_text(f, tl->title);
    fputs("</text>\n", f);
    write_legend(f, tl, present, any_fused);
    write_axis(f, tl, makespan, scale, rows_h, plot_w);
    int32_t *stages = NULL;
    int cap_st = 0;
    for (int r = 0; r < tl->num_ranks; r++)
        write_row(f, tl, r, scale, plot_w, &stages, &cap_st);
    free(stages);
    fputs("</svg>\n", f);
    return ferror(f) ? MPMD_ERR_IO : MPMD_OK;
}
