/* The schedule object: allocation, the builder the built-in schedules emit
 * through, names, and the text and JSON forms (include/mpmd_schedule.h). */
#include "schedule_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* JaxPP's class names, and the command-line names, by kind. */
static const char *const kind_names[MPMD_SCHED_NUM_KINDS] = {
    "GPipe",     "Std1F1B",          "Eager1F1B", "Interleaved1F1B", "KimiK2", "ZeroBubble",
    "DualPipeV", "InterleavedGPipe", "User"};
static const char *const cli_names[MPMD_SCHED_NUM_KINDS] = {
    "gpipe",     "std1f1b",          "eager1f1b", "interleaved1f1b", "kimik2", "zerobubble",
    "dualpipev", "interleavedgpipe", NULL};

/* Text prefixes of the task kinds, JaxPP's mk_task_name. */
static const char *const task_prefix[MPMD_TASK_KINDS] = {"fwd_", "bwd_", "bwdA_", "bwdW_"};
static const char task_letter[MPMD_TASK_KINDS] = {'F', 'B', 'A', 'W'};

const char *mpmd_schedule_kind_name(mpmd_schedule_kind kind) {
    return (unsigned)kind < MPMD_SCHED_NUM_KINDS ? kind_names[kind] : "unknown";
}

int mpmd_schedule_kind_from_name(const char *name) {
    if (!name) return -1;
    for (int k = 0; k < MPMD_SCHED_NUM_KINDS; k++) {
        if (cli_names[k] && strcasecmp(name, cli_names[k]) == 0) return k;
        if (k != MPMD_SCHED_USER && strcasecmp(name, kind_names[k]) == 0) return k;
    }
    return -1;
}

mpmd_schedule *sched_alloc(mpmd_schedule_kind kind, int S, int D, int n, int split) {
    mpmd_schedule *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->kind = kind;
    s->num_stages = S;
    s->num_ranks = D;
    s->num_microbatches = n;
    s->split_backward = split;
    s->stage_rank = malloc((size_t)(S > 0 ? S : 1) * sizeof *s->stage_rank);
    s->ranks = calloc((size_t)(D > 0 ? D : 1), sizeof *s->ranks);
    if (!s->stage_rank || !s->ranks) {
        mpmd_schedule_free(s);
        return NULL;
    }
    for (int i = 0; i < S; i++)
        s->stage_rank[i] = -1;
    return s;
}

void sched_set_name(mpmd_schedule *s) {
    int interleaved = s->kind == MPMD_SCHED_INTERLEAVED1F1B || s->kind == MPMD_SCHED_KIMIK2;
    snprintf(s->name, sizeof s->name, "%s(S=%d, D=%d, n=%d%s)", mpmd_schedule_kind_name(s->kind),
             s->num_stages, s->num_ranks, s->num_microbatches,
             interleaved && s->fuse_steady_state ? ", fuse_steady_state" : "");
}

void mpmd_schedule_free(mpmd_schedule *s) {
    if (!s) return;
    if (s->ranks) {
        for (int r = 0; r < s->num_ranks; r++) {
            sched_mem_free(s->ranks[r].entry_start);
            sched_mem_free(s->ranks[r].tasks);
        }
    }
    free(s->ranks);
    free(s->stage_rank);
    free(s);
}

mpmd_status sb_init(sched_builder *b, mpmd_schedule *s, mpmd_error *err) {
    memset(b, 0, sizeof *b);
    b->s = s;
    int S = s->num_stages, D = s->num_ranks;
    b->next_mb = calloc((size_t)MPMD_TASK_KINDS * (size_t)S, sizeof *b->next_mb);
    b->cap = calloc((size_t)D, sizeof *b->cap);
    if (!b->next_mb || !b->cap) goto nomem;
    /* Room per rank: each of its stages has n forwards and n backwards
     * (B, or A and W). */
    int64_t *stages = calloc((size_t)D, sizeof *stages);
    if (!stages) goto nomem;
    for (int st = 0; st < S; st++)
        stages[s->stage_rank[st]]++;
    int per = s->split_backward ? 3 : 2;
    for (int r = 0; r < D; r++) {
        int64_t cap = stages[r] * s->num_microbatches * per;
        if (cap > SCHED_MAX_RANK_TASKS) {
            free(stages);
            free(b->next_mb);
            free(b->cap);
            return mpmd_error_set(err, MPMD_ERR_INVALID,
                                  "%s: rank %d would run %lld tasks, more than the %lld a rank may hold",
                                  s->name, r, (long long)cap, (long long)SCHED_MAX_RANK_TASKS);
        }
        b->cap[r] = (int32_t)cap;
        s->ranks[r].tasks = sched_mem_alloc((size_t)(cap > 0 ? cap : 1) * sizeof(mpmd_task));
        s->ranks[r].entry_start = sched_mem_alloc((size_t)(cap + 1) * sizeof(int32_t));
        if (!s->ranks[r].tasks || !s->ranks[r].entry_start) {
            free(stages);
            goto nomem;
        }
        s->ranks[r].entry_start[0] = 0;
    }
    free(stages);
    return MPMD_OK;
nomem:
    free(b->next_mb);
    free(b->cap);
    b->next_mb = NULL;
    b->cap = NULL;
    return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the task lists", s->name);
}

mpmd_status sb_finish(sched_builder *b, mpmd_error *err) {
    mpmd_schedule *s = b->s;
    int short_rank = -1;
    for (int r = 0; r < s->num_ranks; r++)
        if (s->ranks[r].num_tasks != b->cap[r]) short_rank = r;
    free(b->next_mb);
    free(b->cap);
    if (b->overflow || short_rank >= 0)
        return mpmd_error_set(err, MPMD_ERR_SCHEDULE,
                              "%s: internal error: the rules emitted a wrong number of tasks (rank %d); "
                              "please report this with the numbers",
                              s->name, short_rank);
    return MPMD_OK;
}

int mpmd_task_str(const mpmd_task *t, char *buf, size_t len) {
    if (!buf) len = 0; /* no buffer: the length alone, as snprintf(NULL, 0, ...) */
    if (!t) return snprintf(buf, len, "%s", "");
    const char *p = (unsigned)t->kind < MPMD_TASK_KINDS ? task_prefix[t->kind] : "task?_";
    return snprintf(buf, len, "%s%d__%d", p, (int)t->stage, (int)t->microbatch);
}

int mpmd_entry_str(const mpmd_task *tasks, int ntasks, char *buf, size_t len) {
    if (!buf) len = 0; /* no buffer: the length alone, as snprintf(NULL, 0, ...) */
    if (!tasks || ntasks < 1) return snprintf(buf, len, "%s", "");
    if (ntasks == 1) return mpmd_task_str(&tasks[0], buf, len);
    /* Build in a local buffer so that a short `len` still gets a correct
     * prefix and the full length is returned. */
    char tmp[MPMD_ENTRY_STR_MAX * 2];
    int n = snprintf(tmp, sizeof tmp, "FusedTask(");
    for (int i = 0; i < ntasks && n < (int)sizeof tmp; i++) {
        if (i) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ", ");
        if (n < (int)sizeof tmp) n += mpmd_task_str(&tasks[i], tmp + n, sizeof tmp - (size_t)n);
    }
    if (n < (int)sizeof tmp) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ")");
    if (len) snprintf(buf, len, "%s", tmp);
    return n;
}

char *sched_cell_str(const mpmd_task *t, int nt, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < nt && n < len; i++) {
        char c = (unsigned)t[i].kind < MPMD_TASK_KINDS ? task_letter[t[i].kind] : '?';
        n += (size_t)snprintf(buf + n, len - n, "%s%c%d.%d", i ? "+" : "", c, (int)t[i].stage,
                              (int)t[i].microbatch);
    }
    return buf;
}

char *sched_entry_text(const mpmd_schedule *s, int r, int e, char *buf, size_t len) {
    int nt;
    const mpmd_task *t = mpmd_schedule_entry(s, r, e, &nt);
    mpmd_entry_str(t, nt, buf, len);
    return buf;
}

void ss_printf(sched_str *s, const char *fmt, ...) {
    if (s->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = s->cap - s->len;
        int n = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < room) {
            s->len += (size_t)n;
            return;
        }
        size_t cap = s->cap ? s->cap * 2 : 256;
        while (cap - s->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->failed = 1;
            return;
        }
        s->p = p;
        s->cap = cap;
    }
}

mpmd_status mpmd_schedule_write_text(const mpmd_schedule *s, FILE *f) {
    if (!s || !f) return MPMD_ERR_INVALID;
    char buf[MPMD_ENTRY_STR_MAX];
    for (int r = 0; r < s->num_ranks; r++) {
        fprintf(f, "rank %d:", r);
        for (int e = 0; e < s->ranks[r].num_entries; e++) {
            fputc(' ', f);
            fputs(sched_entry_text(s, r, e, buf, sizeof buf), f);
        }
        fputc('\n', f);
    }
    return ferror(f) ? MPMD_ERR_IO : MPMD_OK;
}

mpmd_status mpmd_schedule_write_json(const mpmd_schedule *s, FILE *f) {
    if (!s || !f) return MPMD_ERR_INVALID;
    char buf[MPMD_ENTRY_STR_MAX];
    fputs("[\n", f);
    for (int r = 0; r < s->num_ranks; r++) {
        fputs("  [", f);
        for (int e = 0; e < s->ranks[r].num_entries; e++)
            fprintf(f, "%s\"%s\"", e ? ", " : "", sched_entry_text(s, r, e, buf, sizeof buf));
        fputs(r + 1 < s->num_ranks ? "],\n" : "]\n", f);
    }
    fputs("]\n", f);
    return ferror(f) ? MPMD_ERR_IO : MPMD_OK;
}
