/* libFuzzer: the schedule text parser, and everything a parsed schedule
 * reaches in the tool: validation (with the full report), simulation, the
 * timeline of the simulation as SVG and as a trace, and the text form,
 * which must parse back to the same text. Any input must give a schedule or
 * an error, never a crash, a leak or a hang. Seeds: corpus/schedule. */
#include <mpmd.h>
#include <mpmd_schedule.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* the text form of a schedule, malloc'ed (NULL when out of memory) */
static char *text_of(const mpmd_schedule *s, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    mpmd_schedule_write_text(s, f);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    mpmd_schedule *s = NULL;
    mpmd_error err;
    if (mpmd_schedule_parse((const char *)data, size, "fuzz", &s, &err) != MPMD_OK) {
        if (s) abort();           /* an error leaves no schedule */
        if (!err.msg[0]) abort(); /* and says why */
        return 0;
    }
    char *report = NULL;
    mpmd_sim *sim = NULL;
    if (mpmd_schedule_simulate(s, NULL, &sim, &err, &report) == MPMD_OK) {
        mpmd_timeline *tl = NULL;
        if (mpmd_timeline_from_sim(s, sim, &tl, &err) == MPMD_OK) {
            FILE *null = fopen("/dev/null", "w");
            if (null) {
                mpmd_timeline_write_svg(tl, null);
                mpmd_timeline_write_trace(tl, null);
                mpmd_schedule_write_json(s, null);
                fclose(null);
            }
            mpmd_timeline_free(tl);
        }
        mpmd_sim_free(sim);
    }
    free(report);
    /* what the tool writes reads back as the same schedule */
    size_t len = 0;
    char *text = text_of(s, &len);
    if (text) {
        mpmd_schedule *back = NULL;
        if (mpmd_schedule_parse(text, len, "fuzz-written", &back, &err) != MPMD_OK) {
            fprintf(stderr, "the written text does not parse: %s\n%s\n", err.msg, text);
            abort();
        }
        size_t len2 = 0;
        char *text2 = text_of(back, &len2);
        if (text2 && (len2 != len || memcmp(text, text2, len))) {
            fprintf(stderr, "the text changed on a round trip:\n%s\n---\n%s\n", text, text2);
            abort();
        }
        free(text2);
        mpmd_schedule_free(back);
        free(text);
    }
    mpmd_schedule_free(s);
    return 0;
}
