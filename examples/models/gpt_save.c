/* The checkpoints of a training run (gpt_save.h): series names and their
 * rotation, the list --resume latest tries, a background writer, and the
 * handlers of SIGTERM, SIGINT and SIGUSR1.
 */
#if !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* syscall, realpath */
#endif
#include "gpt_save.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#define EXT ".safetensors"

/* ---- series names --------------------------------------------------------------- */

/* path = dir/stem EXT (or dir/stem when it lacks EXT): the lengths of the
 * directory part (up to and with its last '/') and of the stem. */
static void split(const char *path, size_t *dir_len, size_t *stem_len, int *has_ext) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t bl = strlen(base), el = strlen(EXT);
    *dir_len = (size_t)(base - path);
    *has_ext = bl > el && strcmp(base + bl - el, EXT) == 0;
    *stem_len = *has_ext ? bl - el : bl;
}

int gpt_series_name(const char *path, long long step, char *out, size_t cap) {
    size_t dl, sl;
    int ext;
    split(path, &dl, &sl, &ext);
    int n = snprintf(out, cap, "%.*s.step%06lld%s", (int)(dl + sl), path, step, ext ? EXT : "");
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int gpt_series_step(const char *path, const char *name, long long *step) {
    size_t dl, sl;
    int ext;
    split(path, &dl, &sl, &ext);
    const char *stem = path + dl;
    if (strncmp(name, stem, sl) != 0 || strncmp(name + sl, ".step", 5) != 0) return 0;
    const char *d = name + sl + 5, *e = d;
    long long v = 0;
    while (*e >= '0' && *e <= '9' && e - d < 18)
        v = v * 10 + (*e++ - '0');
    if (e == d || strcmp(e, ext ? EXT : "") != 0) return 0;
    *step = v;
    return 1;
}

/* The directory of path, for opendir: "." when it has none. */
static void dir_of(const char *path, char *out, size_t cap) {
    size_t dl, sl;
    int ext;
    split(path, &dl, &sl, &ext);
    if (dl == 0)
        snprintf(out, cap, ".");
    else
        snprintf(out, cap, "%.*s", (int)dl, path);
}

typedef struct member {
    char *path;
    long long step;
} member;

static int newest_first(const void *a, const void *b) {
    long long x = ((const member *)a)->step, y = ((const member *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The series files of path (not the path itself), with the steps their
 * names say. Returns the count, -1 when the directory cannot be read. */
static int series_members(const char *path, member **out) {
    char dir[4200];
    dir_of(path, dir, sizeof dir);
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    size_t dl, sl;
    int ext;
    split(path, &dl, &sl, &ext);
    int n = 0, cap = 0;
    member *m = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long step;
        if (!gpt_series_step(path, de->d_name, &step)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            member *nm = realloc(m, (size_t)cap * sizeof *nm);
            if (!nm) break;
            m = nm;
        }
        size_t len = dl + strlen(de->d_name) + 1;
        char *p = malloc(len);
        if (!p) break;
        snprintf(p, len, "%.*s%s", (int)dl, path, de->d_name);
        m[n++] = (member){p, step};
    }
    closedir(d);
    if (n) qsort(m, (size_t)n, sizeof *m, newest_first);
    *out = m;
    return n;
}

int gpt_series_rotate(const char *path, long long step, int keep, FILE *warn, const char *prog) {
    member *m;
    int n = series_members(path, &m), deleted = 0, older = 0;
    for (int i = 0; i < n; i++) {
        /* only files older than the one just written count against keep:
         * it is one of the keep, and a later one is not this run's */
        if (m[i].step < step && ++older >= keep) {
            if (unlink(m[i].path) == 0)
                deleted++;
            else if (warn && errno != ENOENT)
                fprintf(warn, "%s: warning: cannot delete the old checkpoint %s: %s\n", prog, m[i].path,
                        strerror(errno));
        }
        free(m[i].path);
    }
    free(m);
    return deleted;
}

static int candidate_order(const void *a, const void *b) {
    const gpt_candidate *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    return strcmp(x->path, y->path);
}

mpmd_status gpt_series_list(const char *path, gpt_candidate **out, int *n_out, mpmd_error *err) {
    *out = NULL;
    *n_out = 0;
    member *m;
    int n = series_members(path, &m);
    if (n < 0) {
        char dir[4200];
        dir_of(path, dir, sizeof dir);
        return mpmd_error_set(err, MPMD_ERR_IO, "cannot read the directory %s of %s: %s", dir, path,
                              strerror(errno));
    }
    gpt_candidate *c = calloc((size_t)n + 1, sizeof *c);
    if (!c) {
        for (int i = 0; i < n; i++)
            free(m[i].path);
        free(m);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory listing the checkpoints of %s", path);
    }
    int k = 0;
    if (access(path, F_OK) == 0 && (c[k].path = strdup(path))) c[k++].step = LLONG_MAX;
    for (int i = 0; i < n; i++)
        c[k].path = m[i].path, c[k++].step = m[i].step;
    free(m);
    for (int i = 0; i < k; i++) {
        mpmd_error e;
        if (mpmd_checkpoint_read_info(c[i].path, &c[i].info, &e) != MPMD_OK) {
            c[i].bad = 1; /* ordered by its name's step; the path itself first */
            snprintf(c[i].why, sizeof c[i].why, "%s", e.msg);
        } else {
            c[i].step = c[i].info.step;
        }
    }
    qsort(c, (size_t)k, sizeof *c, candidate_order);
    *out = c;
    *n_out = k;
    return MPMD_OK;
}

void gpt_candidates_free(gpt_candidate *c, int n) {
    for (int i = 0; c && i < n; i++)
        free(c[i].path);
    free(c);
}

/* ---- the model a checkpoint was trained with ------------------------------------------ */

static int kv_heads(const gpt_config *c) { return c->kv_heads > 0 ? c->kv_heads : c->heads; }

static const char *arch_name(int arch) { return arch == GPT_ARCH_LLAMA ? "llama" : "gpt2"; }

/* The RMS norms' epsilon the blocks use (gpt_model.c: 0 means 1e-5). */
static float norm_eps(const gpt_config *c) { return c->norm_eps > 0.0f ? c->norm_eps : 1e-5f; }

/* A float as the shortest %g that reads back as it (1e-05, not 9.99999975e-06). */
static const char *float_text(float f, char buf[32]) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, 32, "%.*g", digits, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return buf;
}

/* rope-scaling's value: "none", or "factor,low_freq_factor,high_freq_factor,original_positions". */
static void scaling_text(const mpmd_rope_scaling *r, char *out, size_t cap) {
    if (r->factor == 0.0f)
        snprintf(out, cap, "none");
    else {
        char a[32], b[32], c[32];
        snprintf(out, cap, "%s,%s,%s,%lld", float_text(r->factor, a), float_text(r->low_freq_factor, b),
                 float_text(r->high_freq_factor, c), (long long)r->original_positions);
    }
}

/* rope-scaling's value back; 0 when it is neither form. */
static int scaling_parse(const char *v, mpmd_rope_scaling *r) {
    if (!strcmp(v, "none")) {
        *r = MPMD_ROPE_NO_SCALING;
        return 1;
    }
    float f, lo, hi;
    long long orig;
    int used = 0;
    if (sscanf(v, "%g,%g,%g,%lld%n", &f, &lo, &hi, &orig, &used) != 4 || v[used] || !(f != 0.0f)) return 0;
    *r = (mpmd_rope_scaling){f, lo, hi, (int64_t)orig};
    return 1;
}

void gpt_config_record(const gpt_config *c, char *out, size_t cap) {
    int n = snprintf(out, cap, "arch=%s layers=%d width=%lld heads=%d vocab=%lld seq=%lld tie-embeddings=%d",
                     arch_name(c->arch), c->layers, (long long)c->width, c->heads, (long long)c->vocab,
                     (long long)c->seq, c->tie_embeddings ? 1 : 0);
    if (c->arch == GPT_ARCH_LLAMA && n > 0 && (size_t)n < cap) {
        char rs[128], base[32], eps[32];
        scaling_text(&c->rope_scaling, rs, sizeof rs);
        snprintf(out + n, cap - (size_t)n,
                 " kv-heads=%d mlp-hidden=%lld rope-base=%s norm-eps=%s rope-scaling=%s", kv_heads(c),
                 (long long)gpt_mlp_hidden(c), float_text(c->rope_base, base), float_text(norm_eps(c), eps),
                 rs);
    }
}

/* The value of `key` in a recorded config ("k=v k=v ..."), copied to buf;
 * 0 when absent. */
static int recorded_value(const char *rec, const char *key, char *buf, size_t cap) {
    size_t kl = strlen(key);
    for (const char *p = rec; *p;) {
        while (*p == ' ')
            p++;
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > kl && p[kl] == '=' && strncmp(p, key, kl) == 0) {
            snprintf(buf, cap, "%.*s", (int)(len - kl - 1), p + kl + 1);
            return 1;
        }
        p += len;
    }
    return 0;
}

/* Append "a" to list a and "b" to list b, comma-separated. */
static void both(char *a, char *b, size_t cap, const char *x, const char *y) {
    size_t la = strlen(a), lb = strlen(b);
    snprintf(a + la, cap - la, "%s%s", la ? ", " : "", x);
    snprintf(b + lb, cap - lb, "%s%s", lb ? ", " : "", y);
}

mpmd_status gpt_config_check_recorded(const gpt_config *c, const char *recorded, const char *file,
                                      mpmd_error *err) {
    char v[64];
    if (!recorded || !recorded_value(recorded, "arch", v, sizeof v)) return MPMD_OK;
    if (strcmp(v, arch_name(c->arch)) != 0)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s was trained with %s blocks (the %s program); this run builds %s blocks",
                              file, v, strcmp(v, "llama") ? "gpt" : "llama", arch_name(c->arch));
    struct {
        const char *key;
        long long have;
        int when; /* 1: always, 2: gpt2 only, 3: llama only */
    } ints[] = {
        {"layers", c->layers, 1},
        {"width", c->width, 1},
        {"heads", c->heads, 1},
        {"vocab", c->vocab, 1},
        {"seq", c->seq, 2},
        {"kv-heads", kv_heads(c), 3},
        {"mlp-hidden", gpt_mlp_hidden(c), 3},
    };
    char was[600] = "", is[600] = "", x[96], y[96];
    int llama = c->arch == GPT_ARCH_LLAMA;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if ((ints[i].when == 2 && llama) || (ints[i].when == 3 && !llama)) continue;
        if (!recorded_value(recorded, ints[i].key, v, sizeof v)) continue;
        char *end;
        errno = 0;
        long long got = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s records %s=%s, not a number", file, ints[i].key,
                                  v);
        if (got == ints[i].have) continue;
        snprintf(x, sizeof x, "--%s %lld", ints[i].key, got);
        snprintf(y, sizeof y, "--%s %lld", ints[i].key, ints[i].have);
        both(was, is, sizeof was, x, y);
    }
    if (recorded_value(recorded, "tie-embeddings", v, sizeof v) &&
        (strcmp(v, "1") == 0) != (c->tie_embeddings != 0))
        both(was, is, sizeof was,
             c->tie_embeddings ? "no --tie-embeddings (an LM head of its own)" : "--tie-embeddings",
             c->tie_embeddings ? "--tie-embeddings" : "no --tie-embeddings");
    if (llama && recorded_value(recorded, "rope-base", v, sizeof v)) {
        char *end;
        double got = strtod(v, &end);
        if (end == v || *end)
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s records rope-base=%s, not a number", file, v);
        if ((float)got != c->rope_base) {
            snprintf(x, sizeof x, "--rope-base %.9g", got);
            snprintf(y, sizeof y, "--rope-base %.9g", (double)c->rope_base);
            both(was, is, sizeof was, x, y);
        }
    }
    /* norm-eps and rope-scaling: no options of their own (they come from --init-from's config.json);
     * a checkpoint from before they were recorded has neither, and builds with the defaults */
    if (llama && recorded_value(recorded, "norm-eps", v, sizeof v)) {
        char *end;
        double got = strtod(v, &end);
        if (end == v || *end)
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s records norm-eps=%s, not a number", file, v);
        if ((float)got != norm_eps(c)) {
            char a[32], b[32];
            snprintf(x, sizeof x, "RMS norm epsilon %s", float_text((float)got, a));
            snprintf(y, sizeof y, "RMS norm epsilon %s", float_text(norm_eps(c), b));
            both(was, is, sizeof was, x, y);
        }
    }
    if (llama && recorded_value(recorded, "rope-scaling", v, sizeof v)) {
        mpmd_rope_scaling got;
        if (!scaling_parse(v, &got))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s records rope-scaling=%s, neither none nor factor,low,high,positions",
                                  file, v);
        const mpmd_rope_scaling *r = &c->rope_scaling;
        int none = r->factor == 0.0f && got.factor == 0.0f;
        if (!none && (got.factor != r->factor || got.low_freq_factor != r->low_freq_factor ||
                      got.high_freq_factor != r->high_freq_factor ||
                      got.original_positions != r->original_positions)) {
            char a[64], b[64];
            scaling_text(&got, a, sizeof a);
            scaling_text(r, b, sizeof b);
            snprintf(x, sizeof x, "rope scaling %s", a);
            snprintf(y, sizeof y, "rope scaling %s", b);
            both(was, is, sizeof was, x, y);
        }
    }
    if (!was[0]) return MPMD_OK;
    return mpmd_error_set(err, MPMD_ERR_INVALID, "%s was trained with %s; this run has %s", file, was, is);
}

mpmd_status gpt_config_from_record(gpt_config *c, const gpt_hf_given *given, const char *recorded,
                                   const char *file, mpmd_error *err) {
    char v[128];
    if (!recorded || !recorded_value(recorded, "arch", v, sizeof v)) return MPMD_OK;
    gpt_config r = *c;
    int llama = c->arch == GPT_ARCH_LLAMA, same_arch = !strcmp(v, arch_name(c->arch));
    struct {
        const char *key;
        int given;
    } ints[] = {{"layers", given->layers},        {"width", given->width}, {"heads", given->heads},
                {"vocab", given->vocab},          {"seq", given->seq},     {"kv-heads", given->kv_heads},
                {"mlp-hidden", given->mlp_hidden}};
    /* what the record holds and the command line left to it (a value that does not parse is left as it
     * is: gpt_config_check_recorded names it) */
    for (size_t i = 0; same_arch && i < sizeof ints / sizeof ints[0]; i++) {
        if (ints[i].given || !recorded_value(recorded, ints[i].key, v, sizeof v)) continue;
        if (!llama && i >= 5) continue;
        char *end;
        errno = 0;
        long long got = strtoll(v, &end, 10);
        if (errno || end == v || *end) continue;
        switch (i) {
        case 0: r.layers = (int)got; break;
        case 1: r.width = got; break;
        case 2: r.heads = (int)got; break;
        case 3: r.vocab = got; break;
        case 4: r.seq = got; break;
        case 5: r.kv_heads = (int)got; break;
        default: r.mlp_hidden = got; break;
        }
    }
    if (same_arch && !given->tie_embeddings && recorded_value(recorded, "tie-embeddings", v, sizeof v))
        r.tie_embeddings = !strcmp(v, "1");
    if (same_arch && llama) {
        char *end;
        double got;
        if (!given->rope_base && recorded_value(recorded, "rope-base", v, sizeof v) &&
            (got = strtod(v, &end), end != v && !*end))
            r.rope_base = (float)got;
        if (recorded_value(recorded, "norm-eps", v, sizeof v) && (got = strtod(v, &end), end != v && !*end))
            r.norm_eps = (float)got;
        mpmd_rope_scaling rs;
        if (recorded_value(recorded, "rope-scaling", v, sizeof v) && scaling_parse(v, &rs))
            r.rope_scaling = rs;
    }
    /* what is left to differ: the options given (and another arch), each named with both values */
    mpmd_status rc = gpt_config_check_recorded(&r, recorded, file, err);
    if (!rc) *c = r;
    return rc;
}

/* ---- stopping on a signal ---------------------------------------------------------- */

/* What the handler reads: lock-free atomics (async-signal-safe) and names
 * that do not change while armed. */
static atomic_int stop_signal;
static atomic_int temp_armed;
static char temp_dir[4300];    /* the directory the temporary file is in */
static char temp_prefix[1100]; /* its name up to the writer's own part: "<name>.tmp.<pid>" */
static size_t temp_prefix_len;
static char prog_name[32] = "gpt";
static int say_first = 1;

/* Remove this process's temporary files of the armed destination: the
 * atomic writer names them "<name>.tmp.<pid>" followed by digits of its
 * own (src/io/atomic_file.h), which only it knows, so the handler lists
 * the directory. open, getdents64 (a plain system call), unlinkat and
 * close are all it calls: nothing that takes a lock the interrupted code
 * may hold. */
static void remove_temp(void) {
    int fd = open(temp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
#if defined(__linux__) && defined(SYS_getdents64)
    _Alignas(8) char buf[4096];
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0) break;
        for (long at = 0; at < n;) {
            /* struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
            const char *rec = buf + at;
            unsigned short reclen;
            memcpy(&reclen, rec + 16, sizeof reclen);
            const char *name = rec + 19;
            size_t k = 0;
            while (k < temp_prefix_len && name[k] == temp_prefix[k])
                k++;
            if (k == temp_prefix_len && (name[k] == '\0' || name[k] == '.')) unlinkat(fd, name, 0);
            if (!reclen) break;
            at += reclen;
        }
    }
#else
    unlinkat(fd, temp_prefix, 0); /* the writer's plain "<name>.tmp.<pid>" */
#endif
    close(fd);
}

static void say(const char *a, const char *b, const char *c) {
    /* write(2) only: the handler may have interrupted anything */
    ssize_t r = write(2, a, strlen(a));
    r = write(2, b, strlen(b));
    r = write(2, c, strlen(c));
    (void)r;
}

static void on_stop_signal(int sig) {
    const char *name = sig == SIGTERM ? ": SIGTERM" : sig == SIGINT ? ": SIGINT" : ": SIGUSR1";
    int expected = 0;
    if (atomic_compare_exchange_strong(&stop_signal, &expected, sig)) {
        if (say_first) say(prog_name, name, ": stopping after this step (a second signal stops at once)\n");
        return;
    }
    if (atomic_load(&temp_armed)) remove_temp();
    say(prog_name, name, " again: stopped at once\n");
    _exit(128 + sig);
}

void gpt_stop_install(const char *prog, int say_it) {
    snprintf(prog_name, sizeof prog_name, "%s", prog);
    say_first = say_it;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    /* the other one waits while a handler runs, so that a second signal
     * cannot interrupt the first one's bookkeeping */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sa.sa_flags = SA_RESTART; /* reads and writes of the run go on */
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    for (int i = 0; i < 3; i++) {
        /* one this process was started with ignored stays so: a shell
         * starts a script's background jobs with SIGINT ignored, so that
         * Ctrl-C does not reach them (Python's handler does the same) */
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGXFSZ, SIG_IGN);
}

int gpt_stop_requested(void) { return atomic_load(&stop_signal); }

void gpt_stop_arm_temp(const char *path) {
    atomic_store(&temp_armed, 0);
    if (!path) return;
    /* the writer writes beside what a symbolic link names */
    char resolved[PATH_MAX];
    struct stat sb;
    const char *dest = path;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && realpath(path, resolved)) dest = resolved;
    const char *slash = strrchr(dest, '/');
    int d = slash ? snprintf(temp_dir, sizeof temp_dir, "%.*s", slash == dest ? 1 : (int)(slash - dest), dest)
                  : snprintf(temp_dir, sizeof temp_dir, ".");
    int p = snprintf(temp_prefix, sizeof temp_prefix, "%s.tmp.%ld", slash ? slash + 1 : dest, (long)getpid());
    if (d < 0 || (size_t)d >= sizeof temp_dir || p < 0 || (size_t)p >= sizeof temp_prefix) return;
    temp_prefix_len = (size_t)p;
    atomic_store(&temp_armed, 1);
}

/* ---- writing ------------------------------------------------------------------------- */

static void *saver_main(void *arg) {
    gpt_saver *s = arg;
    gpt_stop_arm_temp(s->path);
    s->rc = mpmd_checkpoint_snapshot_write(s->snap, s->path, &s->err);
    gpt_stop_arm_temp(NULL);
    mpmd_checkpoint_snapshot_free(s->snap);
    s->snap = NULL;
    if (!s->rc && s->series) gpt_series_rotate(s->series, s->step, s->keep, stderr, s->prog);
    atomic_store(&s->finished, 1);
    return NULL;
}

void gpt_saver_start(gpt_saver *s, mpmd_checkpoint_snapshot *snap, const char *path, long long step,
                     const char *series, int keep, const char *prog) {
    s->snap = snap;
    snprintf(s->path, sizeof s->path, "%s", path);
    s->step = step;
    s->series = series;
    s->keep = keep;
    s->prog = prog;
    s->rc = MPMD_OK;
    s->err.msg[0] = '\0';
    atomic_store(&s->finished, 0);
    s->running = 1;
    s->threaded = pthread_create(&s->thread, NULL, saver_main, s) == 0;
    if (!s->threaded) saver_main(s); /* no thread: write it now */
}

int gpt_saver_busy(gpt_saver *s) { return s->running && !atomic_load(&s->finished); }

mpmd_status gpt_saver_join(gpt_saver *s) {
    if (s->threaded) pthread_join(s->thread, NULL);
    s->threaded = 0;
    s->running = 0;
    mpmd_status rc = s->rc;
    s->rc = MPMD_OK;
    return rc;
}

mpmd_status gpt_save_now(mpmd_step *st, const char *path, const mpmd_checkpoint_info *info,
                         const char *series, int keep, const char *prog, mpmd_error *err) {
    gpt_stop_arm_temp(path);
    mpmd_status rc = mpmd_step_save(st, path, info, err);
    gpt_stop_arm_temp(NULL);
    if (!rc && series && mpmd_mpi_world_rank() == 0)
        gpt_series_rotate(series, info->step, keep, stderr, prog);
    return rc;
}
