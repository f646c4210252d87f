/* A timeline as a Chrome trace-event JSON file (the "JSON Object Format"
 * of the Trace Event Format, read by Perfetto and chrome://tracing): one
 * process, one thread track per rank named "rank R", one "X" (complete)
 * event per task; a FusedTask is an enclosing event with its members
 * nested inside it on the same track. */
#include "schedule_internal.h"
#include "util/json_write.h"

#include <string.h>

static const char *const kind_cat[MPMD_TASK_KINDS] = {"F", "B", "A", "W"};

mpmd_status mpmd_timeline_write_trace(const mpmd_timeline *tl, FILE *f) {
    if (!tl || !f) return MPMD_ERR_INVALID;
    double us = tl->unit_us > 0 ? tl->unit_us : 1.0;
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":", f);
    mpmd_json_write_string(f, tl->title);
    fputs("},\"traceEvents\":[\n", f);
    fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":", f);
    mpmd_json_write_string(f, tl->title[0] ? tl->title : "mpmd");
    fputs("}}", f);
    char name[MPMD_ENTRY_STR_MAX];
    for (int r = 0; r < tl->num_ranks; r++) {
        fprintf(
            f,
            ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}"
            ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"sort_index\":%"
            "d}}",
            r, r, r, r);
        const mpmd_timeline_event *ev = tl->events[r];
        int n = tl->num_events[r];
        for (int i = 0; i < n; i++) {
            /* A group's enclosing event first, then its members. */
            if (ev[i].group >= 0 && (i == 0 || ev[i - 1].group != ev[i].group)) {
                int j = i;
                mpmd_task members[MPMD_FUSED_MAX];
                int nm = 0;
                while (j < n && ev[j].group == ev[i].group) {
                    if (nm < MPMD_FUSED_MAX) members[nm++] = ev[j].task;
                    j++;
                }
                mpmd_entry_str(members, nm, name, sizeof name);
                fprintf(f,
                        ",\n{\"name\":\"%s\",\"cat\":\"fused\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                        "\"dur\":%.3f}",
                        name, r, ev[i].start * us, (ev[j - 1].end - ev[i].start) * us);
            }
            const mpmd_task *t = &ev[i].task;
            mpmd_task_str(t, name, sizeof name);
            fprintf(f,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                    "\"dur\":%.3f,"
                    "\"args\":{\"stage\":%d,\"microbatch\":%d}}",
                    name, (unsigned)t->kind < MPMD_TASK_KINDS ? kind_cat[t->kind] : "task", r,
                    ev[i].start * us, (ev[i].end - ev[i].start) * us, (int)t->stage, (int)t->microbatch);
        }
    }
    fputs("\n]}\n", f);
    return ferror(f) ? MPMD_ERR_IO : MPMD_OK;
}
