/* User schedules as text: one line per rank (the grammar is in
 * include/mpmd_schedule.h and docs/schedules.md). The parser is defensive:
 * every byte is checked, numbers are bounded, and an error names the
 * source, line and column, what was expected and what was found. */
#include "schedule_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* One rank's lists while parsing. */
typedef struct rank_buf {
    mpmd_task *tasks;
    int32_t ntasks, cap_tasks;
    int32_t *entry_start;
    int32_t nentries, cap_entries;
} rank_buf;

typedef struct parser {
    const char *src;        /* the source name for messages */
    const char *p, *end;    /* cursor and end of the text */
    const char *line_start; /* first byte of the current line */
    int line;               /* 1-based */
    mpmd_error *err;
    rank_buf *ranks;
    int nranks, cap_ranks;
    int32_t *stage_rank, *stage_line; /* per stage seen: its rank and first line */
    int nstages_seen, cap_stages;
    int max_stage, max_mb, any_split;
} parser;

static int col(const parser *ps, const char *at) { return (int)(at - ps->line_start) + 1; }

static int at_eol(const parser *ps) { return ps->p >= ps->end || *ps->p == '\n'; }

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

static void skip_space(parser *ps) {
    while (ps->p < ps->end && is_space(*ps->p))
        ps->p++;
}

/* "found 'xyz'" text for messages: the token at `at` (up to 24 bytes, up
 * to white space), or "end of line". Non-printable bytes are shown as \xNN. */
static const char *found(const parser *ps, const char *at, char *buf, size_t len) {
    if (at >= ps->end || *at == '\n') return "end of line";
    size_t n = 0;
    n += (size_t)snprintf(buf, len, "'");
    for (int i = 0; i < 24 && at + i < ps->end && n + 6 < len; i++) {
        unsigned char c = (unsigned char)at[i];
        if (is_space((char)c) || c == '\n') break;
        if (c >= 0x20 && c < 0x7f)
            buf[n++] = (char)c;
        else
            n += (size_t)snprintf(buf + n, len - n, "\\x%02x", c);
    }
    snprintf(buf + n, len - n, "'");
    return buf;
}

static mpmd_status fail(parser *ps, const char *at, const char *what) {
    char f[128];
    return mpmd_error_set(ps->err, MPMD_ERR_FORMAT, "%s:%d:%d: expected %s, found %s", ps->src, ps->line,
                          col(ps, at), what, found(ps, at, f, sizeof f));
}

/* A decimal number < SCHED_MAX_COUNT, no sign. */
static mpmd_status number(parser *ps, const char *what, int32_t *out) {
    const char *at = ps->p;
    int64_t v = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, at, what);
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        if (v < SCHED_MAX_COUNT) v = v * 10 + (*ps->p - '0');
        ps->p++;
    }
    if (v >= SCHED_MAX_COUNT) {
        int nd = (int)(ps->p - at);
        return mpmd_error_set(ps->err, MPMD_ERR_FORMAT,
                              "%s:%d:%d: the number %.*s%s is too large (at most %d)", ps->src, ps->line,
                              col(ps, at), nd > 20 ? 20 : nd, at, nd > 20 ? "..." : "", SCHED_MAX_COUNT - 1);
    }
    *out = (int32_t)v;
    return MPMD_OK;
}

static int starts_with(const parser *ps, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(ps->end - ps->p) >= n && memcmp(ps->p, lit, n) == 0;
}

/* Grow an array to hold `need` elements (doubling). */
static int grow(void **arr, int32_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 1;
    int64_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    if (c > SCHED_MAX_RANK_TASKS + 1) c = SCHED_MAX_RANK_TASKS + 1;
    if (c < need) return 0;
    void *p = sched_mem_realloc(*arr, (size_t)c * elem);
    if (!p) return 0;
    *arr = p;
    *cap = (int32_t)c;
    return 1;
}

/* Note that `stage` runs on the current rank; a stage on two ranks is an error. */
static mpmd_status own_stage(parser *ps, int32_t stage, const char *at) {
    int rank = ps->nranks - 1;
    if (stage >= ps->cap_stages) {
        int32_t c = ps->cap_stages ? ps->cap_stages : 64;
        while (c <= stage)
            c *= 2;
        int32_t *a = realloc(ps->stage_rank, (size_t)c * sizeof *a);
        if (a) ps->stage_rank = a;
        int32_t *l = a ? realloc(ps->stage_line, (size_t)c * sizeof *l) : NULL;
        if (!a || !l) return mpmd_error_set(ps->err, MPMD_ERR_NOMEM, "%s: out of memory", ps->src);
        ps->stage_line = l;
        for (int32_t i = ps->cap_stages; i < c; i++)
            ps->stage_rank[i] = -1;
        ps->cap_stages = c;
    }
    if (ps->stage_rank[stage] < 0) {
        ps->stage_rank[stage] = rank;
        ps->stage_line[stage] = ps->line;
    } else if (ps->stage_rank[stage] != rank) {
        return mpmd_error_set(ps->err, MPMD_ERR_FORMAT,
                              "%s:%d:%d: stage %d is already on rank %d (line %d); a stage runs on one rank, "
                              "and this line is rank %d",
                              ps->src, ps->line, col(ps, at), stage, ps->stage_rank[stage],
                              ps->stage_line[stage], rank);
    }
    return MPMD_OK;
}

/* task := ("fwd_" | "bwd_" | "bwdA_" | "bwdW_") NUMBER "__" NUMBER */
static mpmd_status task(parser *ps, mpmd_task *t) {
    static const struct {
        const char *lit;
        int kind;
    } prefixes[] = {
        {"fwd_", MPMD_TASK_F}, {"bwdA_", MPMD_TASK_A}, {"bwdW_", MPMD_TASK_W}, {"bwd_", MPMD_TASK_B}};
    const char *at = ps->p;
    int kind = -1;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (starts_with(ps, prefixes[i].lit)) {
            kind = prefixes[i].kind;
            ps->p += strlen(prefixes[i].lit);
            break;
        }
    if (kind < 0) return fail(ps, at, "a task (fwd_S__M, bwd_S__M, bwdA_S__M, bwdW_S__M or FusedTask(...))");
    mpmd_status st = number(ps, "a stage number", &t->stage);
    if (st) return st;
    if (!starts_with(ps, "__")) return fail(ps, ps->p, "'__' between the stage and the microbatch");
    ps->p += 2;
    if ((st = number(ps, "a microbatch number", &t->microbatch))) return st;
    t->kind = kind;
    /* A task ends at white space, a comma, ')', a comment or the line's end. */
    if (!at_eol(ps) && !is_space(*ps->p) && *ps->p != ',' && *ps->p != ')' && *ps->p != '#')
        return fail(ps, ps->p, "white space, ',' or ')' after the task");
    if ((st = own_stage(ps, t->stage, at))) return st;
    if (t->stage > ps->max_stage) ps->max_stage = t->stage;
    if (t->microbatch > ps->max_mb) ps->max_mb = t->microbatch;
    if (kind == MPMD_TASK_A || kind == MPMD_TASK_W) ps->any_split = 1;
    return MPMD_OK;
}

/* entry := task | "FusedTask(" task ("," task){1,2} ")" */
static mpmd_status entry(parser *ps, rank_buf *rb) {
    mpmd_task t[MPMD_FUSED_MAX];
    int nt = 0;
    mpmd_status st;
    const char *at = ps->p;
    if (starts_with(ps, "FusedTask(")) {
        ps->p += strlen("FusedTask(");
        for (;;) {
            skip_space(ps);
            if (nt == MPMD_FUSED_MAX)
                return mpmd_error_set(ps->err, MPMD_ERR_FORMAT,
                                      "%s:%d:%d: a FusedTask holds at most %d tasks; this one has more",
                                      ps->src, ps->line, col(ps, at), MPMD_FUSED_MAX);
            if ((st = task(ps, &t[nt++]))) return st;
            skip_space(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == ')') {
                ps->p++;
                break;
            }
            return fail(ps, ps->p, "',' or ')' in the FusedTask");
        }
        if (nt < 2)
            return mpmd_error_set(ps->err, MPMD_ERR_FORMAT,
                                  "%s:%d:%d: a FusedTask holds 2 or 3 tasks; write a single task without "
                                  "FusedTask(...)",
                                  ps->src, ps->line, col(ps, at));
        if (!at_eol(ps) && !is_space(*ps->p) && *ps->p != ',' && *ps->p != '#')
            return fail(ps, ps->p, "white space or ',' after the FusedTask");
    } else {
        if ((st = task(ps, &t[nt++]))) return st;
    }
    if (!grow((void **)&rb->tasks, &rb->cap_tasks, (int64_t)rb->ntasks + nt, sizeof *rb->tasks) ||
        !grow((void **)&rb->entry_start, &rb->cap_entries, (int64_t)rb->nentries + 2,
              sizeof *rb->entry_start))
        return mpmd_error_set(ps->err, MPMD_ERR_NOMEM,
                              "%s:%d: out of memory (or more than %lld tasks on a rank)", ps->src, ps->line,
                              (long long)SCHED_MAX_RANK_TASKS);
    if (rb->nentries == 0) rb->entry_start[0] = 0;
    memcpy(rb->tasks + rb->ntasks, t, (size_t)nt * sizeof *t);
    rb->ntasks += nt;
    rb->entry_start[++rb->nentries] = rb->ntasks;
    return MPMD_OK;
}

/* The optional "rank R:" prefix of a line. */
static mpmd_status rank_prefix(parser *ps) {
    if (!starts_with(ps, "rank")) return MPMD_OK;
    const char *at = ps->p;
    ps->p += 4;
    skip_space(ps);
    int32_t r;
    mpmd_status st = number(ps, "a rank number after 'rank'", &r);
    if (st) return st;
    skip_space(ps);
    if (ps->p >= ps->end || *ps->p != ':') return fail(ps, ps->p, "':' after 'rank R'");
    ps->p++;
    if (r != ps->nranks - 1)
        return mpmd_error_set(
            ps->err, MPMD_ERR_FORMAT,
            "%s:%d:%d: this line says rank %d, but it is the line of rank %d (ranks come one "
            "line each, in order, from rank 0; blank and comment lines do not count)",
            ps->src, ps->line, col(ps, at), r, ps->nranks - 1);
    return MPMD_OK;
}

static mpmd_status parse_line(parser *ps) {
    skip_space(ps);
    if (at_eol(ps) || *ps->p == '#') return MPMD_OK; /* blank or comment: no rank */
    if (ps->nranks >= SCHED_MAX_COUNT)
        return mpmd_error_set(ps->err, MPMD_ERR_FORMAT, "%s:%d: more than %d ranks", ps->src, ps->line,
                              SCHED_MAX_COUNT);
    if (ps->nranks == ps->cap_ranks) {
        int c = ps->cap_ranks ? ps->cap_ranks * 2 : 8;
        rank_buf *rb = realloc(ps->ranks, (size_t)c * sizeof *rb);
        if (!rb) return mpmd_error_set(ps->err, MPMD_ERR_NOMEM, "%s: out of memory", ps->src);
        memset(rb + ps->cap_ranks, 0, (size_t)(c - ps->cap_ranks) * sizeof *rb);
        ps->ranks = rb;
        ps->cap_ranks = c;
    }
    rank_buf *rb = &ps->ranks[ps->nranks++];
    mpmd_status st = rank_prefix(ps);
    if (st) return st;
    for (;;) {
        skip_space(ps);
        if (at_eol(ps) || *ps->p == '#') return MPMD_OK;
        if ((st = entry(ps, rb))) return st;
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_space(ps);
            if (at_eol(ps) || *ps->p == '#' || *ps->p == ',') return fail(ps, ps->p, "a task after ','");
        }
    }
}

mpmd_status mpmd_schedule_parse(const char *text, size_t len, const char *source, mpmd_schedule **out,
                                mpmd_error *err) {
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_schedule_parse: no place for the schedule (out is NULL)");
    *out = NULL;
    if (!text && len) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_schedule_parse: no text (NULL)");
    if (!text) text = "";
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.src = source ? source : "schedule text";
    ps.p = ps.line_start = text;
    ps.end = text + len;
    ps.err = err;
    ps.max_stage = ps.max_mb = -1;
    mpmd_status st = MPMD_OK;
    for (ps.line = 1; ps.p < ps.end; ps.line++) {
        ps.line_start = ps.p;
        if ((st = parse_line(&ps))) goto done;
        /* Skip the rest of the line (a comment). */
        while (ps.p < ps.end && *ps.p != '\n')
            ps.p++;
        if (ps.p < ps.end) ps.p++;
    }
    if (ps.nranks == 0) {
        st = mpmd_error_set(err, MPMD_ERR_FORMAT,
                            "%s: no ranks: expected one line of tasks per rank (blank and '#' comment lines "
                            "are skipped)",
                            ps.src);
        goto done;
    }
    if (ps.max_stage < 0) {
        st = mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: no tasks on any of its %d ranks", ps.src, ps.nranks);
        goto done;
    }
    mpmd_schedule *s = sched_alloc(MPMD_SCHED_USER, ps.max_stage + 1, ps.nranks, ps.max_mb + 1, ps.any_split);
    if (!s) {
        st = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", ps.src);
        goto done;
    }
    snprintf(s->name, sizeof s->name, "%s (S=%d, D=%d, n=%d)", ps.src, s->num_stages, s->num_ranks,
             s->num_microbatches);
    memcpy(s->stage_rank, ps.stage_rank, (size_t)s->num_stages * sizeof *s->stage_rank);
    for (int r = 0; r < ps.nranks; r++) {
        rank_buf *rb = &ps.ranks[r];
        if (rb->nentries == 0) { /* an empty rank still needs entry_start[0] */
            rb->entry_start = sched_mem_alloc(sizeof *rb->entry_start);
            if (!rb->entry_start) {
                mpmd_schedule_free(s);
                st = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", ps.src);
                goto done;
            }
            rb->entry_start[0] = 0;
        }
        s->ranks[r].num_entries = rb->nentries;
        s->ranks[r].num_tasks = rb->ntasks;
        s->ranks[r].entry_start = rb->entry_start;
        s->ranks[r].tasks = rb->tasks;
        rb->entry_start = NULL;
        rb->tasks = NULL;
    }
    *out = s;
done:
    for (int r = 0; r < ps.nranks; r++) {
        sched_mem_free(ps.ranks[r].tasks);
        sched_mem_free(ps.ranks[r].entry_start);
    }
    free(ps.ranks);
    free(ps.stage_rank);
    free(ps.stage_line);
    return st;
}

mpmd_status mpmd_schedule_load(const char *path, mpmd_schedule **out, mpmd_error *err) {
    if (!out)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "mpmd_schedule_load: no place for the schedule (out is NULL)");
    *out = NULL;
    if (!path) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_schedule_load: no file name (NULL)");
    char source[256];
    snprintf(source, sizeof source, "file:%s", path);
    FILE *f = fopen(path, "rb");
    if (!f) return mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot open: %s", source, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode))) {
        fclose(f);
        return mpmd_error_set(err, MPMD_ERR_IO, "%s: a device, not a file", source);
    }
    /* a schedule's text is small: more than 64 MiB is not one (a pipe that
     * does not end) */
    const size_t limit = (size_t)64 << 20;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int too_big = 0;
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        if (cap >= limit) {
            too_big = 1;
            break;
        }
        char *p = realloc(buf, cap * 2);
        if (!p) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        cap *= 2;
    }
    int bad = ferror(f), why = errno;
    fclose(f);
    if (!buf) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory reading the file", source);
    if (too_big || bad) {
        free(buf);
        if (too_big)
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: more than 64 MiB: not a schedule's text",
                                  source);
        return mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read it: %s", source, strerror(why));
    }
    mpmd_status st = mpmd_schedule_parse(buf, len, source, out, err);
    free(buf);
    return st;
}
