/* Checkpoints (include/mpmd_checkpoint.h): a step's state as a safetensors
 * file (src/io/safetensors.c), independent of the pipeline layout; and
 * weights exports, the parameters alone in F32, BF16 or F16.
 *
 * A step (and the executor, which is a step of the unpipelined loop) is
 * first turned into a "state view": every state value's name, type and the
 * storage of each holder (one per rank and replica holding it), sorted by
 * name. Saving writes each value once, from its first
 * holder; loading checks the file against the view completely, reads and
 * verifies the data, and only then copies it into every holder. A weights
 * export is the same with a view of the parameters alone (mpmd_graph_params
 * instead of mpmd_graph_state), converted to the export's dtype when
 * written and widened back to f32 when loaded.
 *
 * A holder on a backend whose buffers are not host memory (a GPU) is seen
 * through a host copy: read from the device when the view is built, and
 * written back to it when a load commits.
 */
#include "mpmd_checkpoint.h"

#include "graph/graph.h"
#include "io/safetensors.h"
#include "runtime/runtime.h"
#include "util/half.h"
#include "util/sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_NAME "mpmd-checkpoint"
#define WEIGHTS_FORMAT "mpmd-weights"

/* ---- state views -------------------------------------------------------------- */

typedef struct entry {
    mpmd_value value;
    const char *name;
    mpmd_type type;
    int nptr;
    void **ptr; /* each holder's storage; ptr[0] is the one saved */
} entry;

/* A host copy standing for a device holder: (rank, replica) of a step. */
typedef struct staged {
    int node, rank, replica;
    size_t bytes;
    void *host;
} staged;

typedef struct state_view {
    int n;
    entry *e;    /* sorted by name */
    void **ptrs; /* backing store of every entry's ptr */
    void *target;
    staged *stg; /* host copies of device holders */
    int nstg, capstg;
    int failed; /* a device copy failed while building */
} state_view;

static void view_free(state_view *v) {
    free(v->e);
    free(v->ptrs);
    for (int i = 0; i < v->nstg; i++)
        free(v->stg[i].host);
    free(v->stg);
    memset(v, 0, sizeof *v);
}

/* A host copy of a device holder's value, filled from the device; NULL on
 * failure (v->failed set). */
static void *stage(state_view *v, int node, int rank, int replica, size_t bytes) {
    if (v->nstg == v->capstg) {
        int cap = v->capstg ? 2 * v->capstg : 64;
        staged *ns = realloc(v->stg, (size_t)cap * sizeof *ns);
        if (!ns) return v->failed = 1, NULL;
        v->stg = ns, v->capstg = cap;
    }
    void *host = calloc(1, bytes ? bytes : 1);
    if (!host) return v->failed = 1, NULL;
    mpmd_step *st = v->target;
    /* an MPI process holds one part of a sharded value (FSDP) or one split
     * over the model axis: a save gathers it whole (step_write); the host
     * copy has this process's part in its place, so that a load writes back
     * what it does not load unchanged (view_commit) */
    mpmd_status rc = mpmd_mesh_partial(&st->plan->mesh, node) && !rt_whole(st)
                         ? mpmd_runtime_read_own(st, rank, replica, node, host)
                         : mpmd_runtime_read(st, rank, replica, node, host, bytes);
    if (rc) {
        free(host);
        return v->failed = 1, NULL;
    }
    v->stg[v->nstg++] = (staged){node, rank, replica, bytes, host};
    return host;
}

/* Write every host copy back to its device holder. */
static mpmd_status view_commit(const state_view *v, const char *who, mpmd_error *err) {
    for (int i = 0; i < v->nstg; i++) {
        const staged *s = &v->stg[i];
        mpmd_status rc = mpmd_runtime_write((mpmd_step *)v->target, s->rank, s->replica, s->node, s->host, s->bytes);
        if (rc) return mpmd_error_set(err, rc, "%s: copying state %%%d to its device failed", who, s->node);
    }
    return MPMD_OK;
}

static int entry_by_name(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

/* Build the view: `holders` fills up to cap storage pointers of value v and
 * returns how many it found. */
typedef int (*holders_fn)(state_view *view, mpmd_value v, void **out, int cap);

/* Every copy of a step's state value: each rank holding it, each
 * data-parallel replica of that rank, in (rank, replica) order. Under MPI
 * only the copies this process holds. A device holder, or a replica holding
 * a shard (FSDP), is a host copy of the whole value (stage). */
static int step_holders(state_view *view, mpmd_value v, void **out, int cap) {
    mpmd_step *st = view->target;
    int replicas = st->plan->replicas > 1 ? st->plan->replicas : 1, k = 0;
    for (int r = 0; r < st->plan->num_ranks; r++) {
        if (!mpmd_runs_on(st->plan, v.id, r)) continue;
        for (int d = 0; d < replicas && k < cap; d++) {
            int m0 = 0; /* the lowest model rank this process runs (under MPI: its own) */
            while (m0 < st->plan->model && !mpmd_runtime_state(st, r, d, m0))
                m0++;
            if (m0 == st->plan->model) continue;
            void *p = mpmd_runtime_replica_value(st, r, d, m0, v.id);
            mpmd_type whole = mpmd_split_whole_type(st->plan->g, v.id);
            if (!p && (!st->plan->be->host_memory || mpmd_mesh_partial(&st->plan->mesh, v.id)) &&
                mpmd_runtime_holds(st, r, d, v.id))
                p = stage(view, v.id, r, d, mpmd_type_bytes(&whole)); /* written back to every model rank */
            if (p) out[k++] = p;
            /* tensor parallelism: every model rank's copy of a value each holds whole */
            for (int m = m0 + 1; p && m < st->plan->model && k < cap && st->plan->be->host_memory &&
                                 !mpmd_mesh_partial(&st->plan->mesh, v.id);
                 m++) {
                void *pm = mpmd_runtime_replica_value(st, r, d, m, v.id);
                if (pm) out[k++] = pm;
            }
        }
    }
    return k;
}

/* `partial`: a value may have no copy here (an MPI process holds only its
 * own rank's state). `params_only`: the trainable parameters alone (a
 * weights export) instead of the whole state. */
static mpmd_status view_build(const mpmd_graph *g, void *target, holders_fn holders, int max_holders,
                              int partial, int params_only, const char *who, state_view *v, mpmd_error *err) {
    memset(v, 0, sizeof *v);
    v->target = target;
    int (*list)(const mpmd_graph *, mpmd_value *, int) = params_only ? mpmd_graph_params : mpmd_graph_state;
    int n = list(g, NULL, 0);
    mpmd_value *vals = malloc((size_t)(n ? n : 1) * sizeof *vals);
    v->e = malloc((size_t)(n ? n : 1) * sizeof *v->e);
    v->ptrs = malloc((size_t)(n ? n : 1) * (size_t)max_holders * sizeof *v->ptrs);
    if (!vals || !v->e || !v->ptrs) {
        free(vals);
        view_free(v);
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    }
    list(g, vals, n);
    mpmd_status rc = MPMD_OK;
    for (int i = 0; i < n && !rc; i++) {
        entry *e = &v->e[i];
        e->value = vals[i];
        e->name = mpmd_value_name(g, vals[i]);
        e->type = mpmd_split_whole_type(g, vals[i].id); /* a parameter split over the model axis: whole */
        e->ptr = v->ptrs + (size_t)i * (size_t)max_holders;
        e->nptr = holders(v, vals[i], e->ptr, max_holders);
        if (v->failed)
            rc = mpmd_error_set(err, MPMD_ERR_RUNTIME, "%s: copying state \"%s\" from its device failed", who,
                                e->name ? e->name : "?");
        else if (!e->name || !*e->name)
            rc = mpmd_error_set(err, MPMD_ERR_INVALID, "%s: state value %%%d has no name", who,
                                (int)vals[i].id);
        else if (e->type.dtype != MPMD_F32 && e->type.dtype != MPMD_I32)
            rc = mpmd_error_set(err, MPMD_ERR_INVALID, "%s: state \"%s\" is %s; checkpoints hold f32 and i32",
                                who, e->name, mpmd_dtype_name(e->type.dtype));
        else if (e->nptr < 1 && !partial)
            rc = mpmd_error_set(err, MPMD_ERR_RUNTIME, "%s: state \"%s\" has no storage", who, e->name);
    }
    free(vals);
    v->n = n;
    if (!rc) {
        qsort(v->e, (size_t)n, sizeof *v->e, entry_by_name);
        for (int i = 1; i < n && !rc; i++)
            if (strcmp(v->e[i - 1].name, v->e[i].name) == 0)
                rc = mpmd_error_set(err, MPMD_ERR_INVALID, "%s: two state values are named \"%s\"", who,
                                    v->e[i].name);
    }
    if (rc) view_free(v);
    return rc;
}

static mpmd_status step_view(mpmd_step *st, const char *who, int params_only, state_view *v,
                             mpmd_error *err) {
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    int replicas = st->plan->replicas > 1 ? st->plan->replicas : 1;
    return view_build(st->plan->g, st, step_holders, st->plan->num_ranks * replicas * st->plan->model,
                      !rt_whole(st), params_only, who, v, err);
}

/* Put "who: " in front of an error message filled by a helper. */
static mpmd_status prefixed(mpmd_error *err, mpmd_status rc, const char *who) {
    if (err && rc) {
        char msg[MPMD_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        mpmd_error_set(err, rc, "%s: %s", who, msg);
    }
    return rc;
}

static const char *st_dtype(mpmd_dtype d) { return d == MPMD_I32 ? "I32" : "F32"; }

/* The file's name of an export dtype, NULL for one that cannot be exported. */
static const char *export_dtype(mpmd_dtype d) {
    return d == MPMD_F32 ? "F32" : d == MPMD_BF16 ? "BF16" : d == MPMD_F16 ? "F16" : NULL;
}

/* Whether a tensor of the file's dtype loads into a value of dtype d: f32
 * takes F32 (bit for bit) and BF16 or F16 (widened, exactly); i32 takes
 * I32. */
static int loads_into(const char *file_dtype, mpmd_dtype d) {
    if (d == MPMD_I32) return strcmp(file_dtype, "I32") == 0;
    return !strcmp(file_dtype, "F32") || !strcmp(file_dtype, "BF16") || !strcmp(file_dtype, "F16");
}

/* The dtypes the loader knows at all. */
static int loadable_dtype(const char *file_dtype) {
    return loads_into(file_dtype, MPMD_F32) || loads_into(file_dtype, MPMD_I32);
}

/* "F32[4,16]" for a model type, the file's notation. */
static void type_str(const char *dtype, int ndim, const int64_t *dim, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "%s[", dtype);
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? "," : "", (long long)dim[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

/* ---- saving ------------------------------------------------------------------- */

/* The info of a save, checked: a step count >= 0 and a terminated config. */
static mpmd_status check_info(const mpmd_checkpoint_info *info, const char *who, mpmd_error *err) {
    if (info->step < 0)
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: info.step is %lld; a step count is >= 0", who,
                              (long long)info->step);
    if (!memchr(info->config, '\0', sizeof info->config))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: info.config is not terminated", who);
    return MPMD_OK;
}

/* Write n entries (sorted by name, each from ptr[0]) as a checkpoint. */
static mpmd_status save_entries(const entry *es, int n, const char *path, const mpmd_checkpoint_info *info,
                                const char *who, mpmd_error *err) {
    if (!path || !*path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no file name", who);
    mpmd_checkpoint_info none = MPMD_CHECKPOINT_INFO_INIT;
    if (!info) info = &none;
    if (check_info(info, who, err)) return MPMD_ERR_INVALID;
    char step[32], seed[32], rng[96];
    snprintf(step, sizeof step, "%lld", (long long)info->step);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)info->seed);
    snprintf(rng, sizeof rng, "%llu,%llu,%llu,%llu", (unsigned long long)info->rng_state[0],
             (unsigned long long)info->rng_state[1], (unsigned long long)info->rng_state[2],
             (unsigned long long)info->rng_state[3]);
    mpmd_st_kv meta[6] = {{"format", FORMAT_NAME}, {"version", "1"},   {"step", step},
                          {"seed", seed},          {"rng_state", rng}, {"config", info->config}};
    int n_meta = info->config[0] ? 6 : 5;
    mpmd_st_out *outs = malloc((size_t)(n ? n : 1) * sizeof *outs);
    if (!outs) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; i < n; i++) {
        const entry *e = &es[i];
        outs[i] = (mpmd_st_out){e->name, st_dtype(e->type.dtype), e->type.ndim, e->type.dim, e->ptr[0]};
    }
    mpmd_status rc = mpmd_st_write(path, n, outs, n_meta, meta, 1, err);
    free(outs);
    return prefixed(err, rc, who);
}

static mpmd_status save_view(const state_view *v, const char *path, const mpmd_checkpoint_info *info,
                             const char *who, mpmd_error *err) {
    return save_entries(v->e, v->n, path, info, who, err);
}

/* Count, in report, what the export of an f32 tensor loses: finite values
 * the dtype cannot hold (rounded to an infinity: |x| >= 65520 in f16, past
 * bf16's largest finite value in bf16) and values that are NaN or infinite
 * already. */
static void count_lost(const char *name, const float *src, size_t numel, mpmd_dtype dtype,
                       mpmd_export_report *report) {
    int64_t over = 0, nonfinite = 0;
    for (size_t k = 0; k < numel; k++) {
        if (!isfinite(src[k])) {
            nonfinite++;
        } else if (dtype != MPMD_F32) {
            uint16_t h = dtype == MPMD_BF16 ? mpmd_f32_to_bf16(src[k]) : mpmd_f32_to_f16(src[k]);
            float back = dtype == MPMD_BF16 ? mpmd_bf16_to_f32(h) : mpmd_f16_to_f32(h);
            over += isinf(back) != 0; /* glibc's isinf says -1 for -inf */
        }
    }
    if (!over && !nonfinite) return;
    report->overflowed += over;
    report->nonfinite += nonfinite;
    if (report->tensors < MPMD_EXPORT_REPORT_TENSORS) {
        snprintf(report->tensor[report->tensors].name, sizeof report->tensor[0].name, "%s", name);
        report->tensor[report->tensors].overflowed = over;
        report->tensor[report->tensors].nonfinite = nonfinite;
    }
    report->tensors++;
}

/* A weights export of a parameter view: each f32 value converted to dtype
 * (rounded to nearest even), i32 values as they are; what the conversion
 * loses counted in report (may be NULL). */
static mpmd_status export_view(const state_view *v, const char *path, mpmd_dtype dtype,
                               mpmd_export_report *report, const char *who, mpmd_error *err) {
    if (!path || !*path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no file name", who);
    const char *dn = export_dtype(dtype);
    mpmd_st_kv meta[3] = {{"format", WEIGHTS_FORMAT}, {"version", "1"}, {"dtype", dn}};
    mpmd_st_out *outs = malloc((size_t)(v->n ? v->n : 1) * sizeof *outs);
    void **conv = calloc((size_t)(v->n ? v->n : 1), sizeof *conv);
    mpmd_status rc = MPMD_OK;
    if (!outs || !conv) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; i < v->n && !rc; i++) {
        const entry *e = &v->e[i];
        outs[i] = (mpmd_st_out){e->name, st_dtype(e->type.dtype), e->type.ndim, e->type.dim, e->ptr[0]};
        if (e->type.dtype != MPMD_F32) continue;
        size_t numel = (size_t)mpmd_type_numel(&e->type);
        if (report) count_lost(e->name, e->ptr[0], numel, dtype, report);
        if (dtype == MPMD_F32) continue;
        uint16_t *h = malloc(numel ? numel * sizeof *h : 1);
        if (!h) {
            rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory converting \"%s\"", who, e->name);
            break;
        }
        const float *src = e->ptr[0];
        if (dtype == MPMD_BF16)
            for (size_t k = 0; k < numel; k++)
                h[k] = mpmd_f32_to_bf16(src[k]);
        else
            for (size_t k = 0; k < numel; k++)
                h[k] = mpmd_f32_to_f16(src[k]);
        conv[i] = h;
        outs[i].dtype = dn;
        outs[i].data = h;
    }
    if (!rc) rc = prefixed(err, mpmd_st_write(path, v->n, outs, 3, meta, 1, err), who);
    for (int i = 0; conv && i < v->n; i++)
        free(conv[i]);
    free(conv);
    free(outs);
    return rc;
}

/* What a write produces: a checkpoint (the whole state, with info) or a
 * weights export (the parameters, in dtype). */
typedef struct write_spec {
    int weights;
    mpmd_dtype dtype;
    const mpmd_checkpoint_info *info;
    mpmd_export_report *report; /* a weights export's losses (NULL: not counted) */
} write_spec;

static mpmd_status write_view(const state_view *v, const char *path, const write_spec *w, const char *who,
                              mpmd_error *err) {
    return w->weights ? export_view(v, path, w->dtype, w->report, who, err)
                      : save_view(v, path, w->info, who, err);
}

static mpmd_status check_export_dtype(mpmd_dtype dtype, const char *who, mpmd_error *err) {
    if (export_dtype(dtype)) return MPMD_OK;
    return mpmd_error_set(err, MPMD_ERR_INVALID,
                          "%s: cannot export weights as %s; the dtypes are f32, bf16 and f16", who,
                          mpmd_dtype_name(dtype));
}

static mpmd_status step_write_held(mpmd_step *st, const char *path, const write_spec *w, const char *who,
                              mpmd_error *err) {
    state_view v;
    mpmd_status rc = step_view(st, who, w->weights, &v, err);
    if (rc) return rc;
    if (rt_whole(st)) {
        rc = write_view(&v, path, w, who, err);
        view_free(&v);
        return rc;
    }
    /* MPI: every process takes part in gathering each value (in name order,
     * the same on every process); process 0 writes the file. */
    void **bufs = calloc((size_t)(v.n ? v.n : 1), sizeof *bufs);
    if (!bufs) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; i < v.n && !rc; i++) {
        entry *e = &v.e[i];
        size_t bytes = mpmd_type_bytes(&e->type);
        bufs[i] = malloc(bytes ? bytes : 1);
        if (!bufs[i]) {
            rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory gathering \"%s\"", who, e->name);
            break;
        }
        rc = mpmd_step_gather(st, e->value, bufs[i], bytes);
        if (rc) mpmd_error_set(err, rc, "%s: gathering \"%s\": %s", who, e->name, mpmd_step_error(st));
        e->ptr[0] = bufs[i];
        e->nptr = 1;
    }
    if (!rc && rt_writer(st)) rc = write_view(&v, path, w, who, err);
    for (int i = 0; bufs && i < v.n; i++)
        free(bufs[i]);
    free(bufs);
    view_free(&v);
    return rc;
}

/* step_write_held with the step held by this thread (one thread at a time) */
static mpmd_status step_write(mpmd_step *st, const char *path, const write_spec *w, const char *who,
                              mpmd_error *err) {
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    if (rt_step_enter(st, who)) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(st));
    mpmd_status rc = step_write_held(st, path, w, who, err);
    rt_step_leave(st);
    return rc;
}

mpmd_status mpmd_step_save(mpmd_step *st, const char *path, const mpmd_checkpoint_info *info,
                           mpmd_error *err) {
    write_spec w = {0, MPMD_F32, info, NULL};
    return step_write(st, path, &w, "mpmd_step_save", err);
}

mpmd_status mpmd_step_export_weights_report(mpmd_step *st, const char *path, mpmd_dtype dtype,
                                            mpmd_export_report *report, mpmd_error *err) {
    const char *who = report ? "mpmd_step_export_weights_report" : "mpmd_step_export_weights";
    if (report) memset(report, 0, sizeof *report);
    if (check_export_dtype(dtype, who, err)) return MPMD_ERR_INVALID;
    write_spec w = {1, dtype, NULL, report};
    return step_write(st, path, &w, who, err);
}

mpmd_status mpmd_step_export_weights(mpmd_step *st, const char *path, mpmd_dtype dtype, mpmd_error *err) {
    return mpmd_step_export_weights_report(st, path, dtype, NULL, err);
}

mpmd_status mpmd_exec_save(mpmd_exec *ex, const char *path, const mpmd_checkpoint_info *info,
                           mpmd_error *err) {
    write_spec w = {0, MPMD_F32, info, NULL};
    if (!ex) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_save: no executor");
    return step_write(mpmd_exec_step(ex), path, &w, "mpmd_exec_save", err);
}

mpmd_status mpmd_exec_export_weights_report(mpmd_exec *ex, const char *path, mpmd_dtype dtype,
                                            mpmd_export_report *report, mpmd_error *err) {
    const char *who = report ? "mpmd_exec_export_weights_report" : "mpmd_exec_export_weights";
    if (report) memset(report, 0, sizeof *report);
    if (!ex) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no executor", who);
    if (check_export_dtype(dtype, who, err)) return MPMD_ERR_INVALID;
    write_spec w = {1, dtype, NULL, report};
    return step_write(mpmd_exec_step(ex), path, &w, who, err);
}

mpmd_status mpmd_exec_export_weights(mpmd_exec *ex, const char *path, mpmd_dtype dtype, mpmd_error *err) {
    return mpmd_exec_export_weights_report(ex, path, dtype, NULL, err);
}

/* ---- snapshots: a checkpoint copied to host memory, written later ------------ */

/* What mpmd_step_save would write, held in memory: every entry's name,
 * type and bytes (ptr[0] points into data), owned, so that writing it
 * needs nothing of the step and may run on another thread while the step
 * trains on. */
struct mpmd_checkpoint_snapshot {
    mpmd_checkpoint_info info;
    int writes; /* 0 under MPI on a process other than 0: nothing to write */
    int n;
    entry *e;    /* sorted by name */
    void **ptrs; /* e[i].ptr = ptrs + i */
    char *names; /* the names, back to back */
    unsigned char *data;
    int64_t bytes; /* of data */
};

void mpmd_checkpoint_snapshot_free(mpmd_checkpoint_snapshot *s) {
    if (!s) return;
    free(s->e);
    free(s->ptrs);
    free(s->names);
    free(s->data);
    free(s);
}

int64_t mpmd_checkpoint_snapshot_bytes(const mpmd_checkpoint_snapshot *s) { return s ? s->bytes : 0; }

/* Each entry starts 8-aligned in the snapshot's data. */
static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

static mpmd_status snapshot_held(mpmd_step *st, const mpmd_checkpoint_info *info,
                                 mpmd_checkpoint_snapshot **out, const char *who, mpmd_error *err) {
    if (!out) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: out is NULL", who);
    *out = NULL;
    mpmd_checkpoint_info none = MPMD_CHECKPOINT_INFO_INIT;
    if (!info) info = &none;
    if (check_info(info, who, err)) return MPMD_ERR_INVALID;
    state_view v;
    mpmd_status rc = step_view(st, who, 0, &v, err);
    if (rc) return rc;
    int mpi = !rt_whole(st);
    mpmd_checkpoint_snapshot *s = calloc(1, sizeof *s);
    size_t total = 0, names = 0, largest = 1;
    for (int i = 0; i < v.n; i++) {
        size_t b = mpmd_type_bytes(&v.e[i].type);
        total += align8(b);
        names += strlen(v.e[i].name) + 1;
        if (b > largest) largest = b;
    }
    if (s) {
        s->info = *info;
        s->writes = rt_writer(st);
        s->n = v.n;
        s->e = malloc((size_t)(v.n ? v.n : 1) * sizeof *s->e);
        s->ptrs = malloc((size_t)(v.n ? v.n : 1) * sizeof *s->ptrs);
        s->names = malloc(names ? names : 1);
        /* a process that writes nothing still takes part in every gather,
         * through one buffer of the largest value */
        s->data = malloc(s->writes ? (total ? total : 1) : largest);
        s->bytes = s->writes ? (int64_t)total : 0;
    }
    if (!s || !s->e || !s->ptrs || !s->names || !s->data)
        rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for a copy of the %zu bytes of state",
                            who, total);
    size_t at = 0, nat = 0;
    for (int i = 0; i < v.n && !rc; i++) {
        const entry *e = &v.e[i];
        size_t b = mpmd_type_bytes(&e->type);
        unsigned char *dst = s->writes ? s->data + at : s->data;
        if (mpi) {
            /* collective: every process gathers every value, in name order */
            rc = mpmd_step_gather(st, e->value, dst, b);
            if (rc) mpmd_error_set(err, rc, "%s: gathering \"%s\": %s", who, e->name, mpmd_step_error(st));
        } else if (b) {
            memcpy(dst, e->ptr[0], b);
        }
        size_t nl = strlen(e->name) + 1;
        memcpy(s->names + nat, e->name, nl);
        s->e[i] = *e;
        s->e[i].name = s->names + nat;
        s->e[i].nptr = 1;
        s->e[i].ptr = s->ptrs + i;
        s->ptrs[i] = dst;
        nat += nl;
        at += align8(b);
    }
    view_free(&v);
    if (rc) {
        mpmd_checkpoint_snapshot_free(s);
        return rc;
    }
    if (!s->writes) { /* keep no bytes a write will not use */
        free(s->data);
        s->data = NULL;
        s->n = 0;
    }
    *out = s;
    return MPMD_OK;
}

/* snapshot_held with the step held by this thread (one thread at a time) */
static mpmd_status snapshot_of(mpmd_step *st, const mpmd_checkpoint_info *info,
                               mpmd_checkpoint_snapshot **out, const char *who, mpmd_error *err) {
    if (out) *out = NULL;
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    if (rt_step_enter(st, who)) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(st));
    mpmd_status rc = snapshot_held(st, info, out, who, err);
    rt_step_leave(st);
    return rc;
}

mpmd_status mpmd_step_snapshot(mpmd_step *st, const mpmd_checkpoint_info *info,
                               mpmd_checkpoint_snapshot **out, mpmd_error *err) {
    return snapshot_of(st, info, out, "mpmd_step_snapshot", err);
}

mpmd_status mpmd_exec_snapshot(mpmd_exec *ex, const mpmd_checkpoint_info *info,
                               mpmd_checkpoint_snapshot **out, mpmd_error *err) {
    if (out) *out = NULL;
    if (!ex) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_snapshot: no executor");
    return snapshot_of(mpmd_exec_step(ex), info, out, "mpmd_exec_snapshot", err);
}

mpmd_status mpmd_checkpoint_snapshot_write(const mpmd_checkpoint_snapshot *s, const char *path,
                                           mpmd_error *err) {
    const char *who = "mpmd_checkpoint_snapshot_write";
    if (!s) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no snapshot", who);
    if (!s->writes) return MPMD_OK;
    return save_entries(s->e, s->n, path, &s->info, who, err);
}

/* ---- metadata ----------------------------------------------------------------- */

/* A decimal integer that fills the whole string, at most `max`. */
static int parse_dec(const char *s, uint64_t max, uint64_t *out) {
    if (!*s || (s[0] == '0' && s[1])) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (max - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

static int parse_hex32(const char *s, uint8_t out[32]) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (h < 0) return 0;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(h << 4);
        else
            out[i / 2] |= (uint8_t)h;
    }
    return 1;
}

/* A weights export's metadata (both checksums are checked by the caller):
 * "version" and "dtype". */
static mpmd_status read_weights_meta(const mpmd_st_header *h, mpmd_checkpoint_info *info, mpmd_error *err) {
    static const char *const required[] = {"version", "dtype"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!mpmd_st_meta_find(h, required[i]))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: __metadata__ of an mpmd weights file lacks \"%s\"", h->path,
                                  required[i]);
    uint64_t u;
    const char *s = mpmd_st_meta_find(h, "version")->value;
    if (!parse_dec(s, INT32_MAX, &u) || u < 1)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: weights file version \"%.40s\" is not a version number", h->path, s);
    if (u > MPMD_WEIGHTS_VERSION)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: weights file version %llu was written by a newer mpmd; this library reads "
                              "version %d",
                              h->path, (unsigned long long)u, MPMD_WEIGHTS_VERSION);
    s = mpmd_st_meta_find(h, "dtype")->value;
    if (strcmp(s, "F32") && strcmp(s, "BF16") && strcmp(s, "F16"))
        return mpmd_error_set(
            err, MPMD_ERR_FORMAT,
            "%s: __metadata__ \"dtype\" of a weights file is \"%.40s\", not F32, BF16 or F16", h->path, s);
    info->version = (int)u;
    info->weights_only = 1;
    return MPMD_OK;
}

/* Check the header checksum and read the metadata into info. An mpmd
 * checkpoint or weights export must carry every entry; a plain safetensors
 * file (no "format": "mpmd-checkpoint" or "mpmd-weights") loads as version
 * 0, step 0, with its checksums verified only if present. *has_hash tells
 * whether data_hash holds "sha256". */
static mpmd_status read_meta(const mpmd_st_header *h, mpmd_checkpoint_info *info, int *has_hash,
                             uint8_t data_hash[32], mpmd_error *err) {
    *info = MPMD_CHECKPOINT_INFO_INIT;
    info->version = 0;
    *has_hash = 0;
    const mpmd_st_meta *fmt = mpmd_st_meta_find(h, "format");
    int weights = fmt && strcmp(fmt->value, WEIGHTS_FORMAT) == 0;
    int ours = weights || (fmt && strcmp(fmt->value, FORMAT_NAME) == 0);
    mpmd_status rc = mpmd_st_check_header_sha256(h, err);
    if (rc == MPMD_ERR_INVALID) {
        if (ours)
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: __metadata__ lacks \"header_sha256\" (an mpmd %s always has it): the "
                                  "header is corrupted",
                                  h->path, weights ? "weights file" : "checkpoint");
        rc = MPMD_OK;
    }
    if (rc) return rc;
    const mpmd_st_meta *sha = mpmd_st_meta_find(h, "sha256");
    if (sha) {
        if (!parse_hex32(sha->value, data_hash))
            return mpmd_error_set(err, MPMD_ERR_FORMAT,
                                  "%s: __metadata__ \"sha256\" is not 64 lowercase hex digits: \"%.80s\"",
                                  h->path, sha->value);
        *has_hash = 1;
    } else if (ours) {
        return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: __metadata__ lacks \"sha256\" (the data checksum)",
                              h->path);
    }
    if (!ours) return MPMD_OK;
    if (weights) return read_weights_meta(h, info, err);

    static const char *const required[] = {"version", "step", "seed", "rng_state"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!mpmd_st_meta_find(h, required[i]))
            return mpmd_error_set(err, MPMD_ERR_FORMAT, "%s: __metadata__ of an mpmd checkpoint lacks \"%s\"",
                                  h->path, required[i]);
    uint64_t u;
    const char *s = mpmd_st_meta_find(h, "version")->value;
    if (!parse_dec(s, INT32_MAX, &u) || u < 1)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: checkpoint version \"%.40s\" is not a version number", h->path, s);
    if (u > MPMD_CHECKPOINT_VERSION)
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: checkpoint version %llu was written by a newer mpmd; this library reads "
                              "version %d",
                              h->path, (unsigned long long)u, MPMD_CHECKPOINT_VERSION);
    info->version = (int)u;
    s = mpmd_st_meta_find(h, "step")->value;
    if (!parse_dec(s, INT64_MAX, &u))
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: __metadata__ \"step\" is \"%.40s\", not a step count", h->path, s);
    info->step = (int64_t)u;
    s = mpmd_st_meta_find(h, "seed")->value;
    if (!parse_dec(s, UINT64_MAX, &info->seed))
        return mpmd_error_set(err, MPMD_ERR_FORMAT,
                              "%s: __metadata__ \"seed\" is \"%.40s\", not a 64-bit seed", h->path, s);
    s = mpmd_st_meta_find(h, "rng_state")->value;
    char word[24];
    const char *p = s;
    for (int i = 0; i < 4; i++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        int ok = len < sizeof word && (i < 3 ? c != NULL : c == NULL);
        if (ok) {
            memcpy(word, p, len);
            word[len] = '\0';
            ok = parse_dec(word, UINT64_MAX, &info->rng_state[i]);
        }
        if (!ok)
            return mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: __metadata__ \"rng_state\" is \"%.120s\", not four comma-separated 64-bit "
                "numbers",
                h->path, s);
        p = c ? c + 1 : p + len;
    }
    const mpmd_st_meta *cfg = mpmd_st_meta_find(h, "config");
    if (cfg) snprintf(info->config, sizeof info->config, "%s", cfg->value);
    return MPMD_OK;
}

/* ---- loading ------------------------------------------------------------------ */

/* A message listing problems: items are added while they fit, the rest is
 * counted and reported as "... and N more". */
typedef struct report {
    char *buf;
    size_t cap, len;
    int omitted;
} report;

static void report_add(report *r, const char *item) {
    size_t need = strlen(item) + 2;
    if (r->len + need + 24 >= r->cap) { /* room for "; ... and 999999 more" */
        r->omitted++;
        return;
    }
    r->len += (size_t)snprintf(r->buf + r->len, r->cap - r->len, "; %s", item);
}

/* Whether the file's tensor t loads into entry e: the same shape and a
 * dtype that loads into e's (loads_into). */
static int fits(const entry *e, const mpmd_st_tensor *t) {
    int same = loads_into(t->dtype, e->type.dtype) && t->ndim == e->type.ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = t->dim[d] == e->type.dim[d];
    return same;
}

/* Check every tensor of the file against the view; on a mismatch fill err
 * with every problem found and return MPMD_ERR_SHAPE. */
static mpmd_status match(const state_view *v, const mpmd_st_header *h, const char *who, mpmd_error *err) {
    int missing = 0, unexpected = 0, wrong = 0;
    for (int i = 0, j = 0; i < v->n || j < h->n_tensors;) {
        int c = i == v->n ? 1 : j == h->n_tensors ? -1 : strcmp(v->e[i].name, h->tensors[j].name);
        if (c < 0)
            missing++, i++;
        else if (c > 0)
            unexpected++, j++;
        else {
            wrong += !fits(&v->e[i], &h->tensors[j]);
            i++, j++;
        }
    }
    if (!missing && !unexpected && !wrong) return MPMD_OK;
    if (!err) return MPMD_ERR_SHAPE;
    report r = {err->msg, sizeof err->msg, 0, 0};
    r.len = (size_t)snprintf(
        r.buf, r.cap,
        "%s: %.300s does not fit this model: %d missing, %d unexpected, %d with another dtype "
        "or shape (file vs model)",
        who, h->path, missing, unexpected, wrong);
    if (r.len >= r.cap) r.len = r.cap - 1;
    char item[600], a[160], b[160];
    for (int i = 0, j = 0; i < v->n || j < h->n_tensors;) {
        int c = i == v->n ? 1 : j == h->n_tensors ? -1 : strcmp(v->e[i].name, h->tensors[j].name);
        if (c < 0) {
            const entry *e = &v->e[i++];
            type_str(st_dtype(e->type.dtype), e->type.ndim, e->type.dim, a, sizeof a);
            snprintf(item, sizeof item, "missing \"%.200s\" %s", e->name, a);
            report_add(&r, item);
        } else if (c > 0) {
            const mpmd_st_tensor *t = &h->tensors[j++];
            type_str(t->dtype, t->ndim, t->dim, a, sizeof a);
            snprintf(item, sizeof item, "unexpected \"%.200s\" %s", t->name, a);
            report_add(&r, item);
        } else {
            const entry *e = &v->e[i++];
            const mpmd_st_tensor *t = &h->tensors[j++];
            type_str(t->dtype, t->ndim, t->dim, a, sizeof a);
            type_str(st_dtype(e->type.dtype), e->type.ndim, e->type.dim, b, sizeof b);
            if (!fits(e, t)) {
                snprintf(item, sizeof item, "\"%.200s\" %s vs %s", e->name, a, b);
                report_add(&r, item);
            }
        }
    }
    if (r.omitted) snprintf(r.buf + r.len, r.cap - r.len, "; ... and %d more", r.omitted);
    err->code = MPMD_ERR_SHAPE;
    return MPMD_ERR_SHAPE;
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* A file being loaded: its header and metadata, read before the target's
 * view is built (a weights export is loaded into a view of the parameters
 * alone). */
typedef struct loading {
    const char *path;
    mpmd_st_header h;
    FILE *f;
    mpmd_checkpoint_info info;
    int has_hash;
    uint8_t want[32];
} loading;

static mpmd_status load_open(const char *path, loading *L, const char *who, mpmd_error *err) {
    memset(L, 0, sizeof *L);
    if (!path || !*path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no file name", who);
    L->path = path;
    mpmd_status rc = mpmd_st_open(path, &L->h, &L->f, err);
    if (rc) return prefixed(err, rc, who);
    rc = read_meta(&L->h, &L->info, &L->has_hash, L->want, err);
    if (rc) {
        fclose(L->f);
        mpmd_st_header_free(&L->h);
        L->f = NULL;
        return prefixed(err, rc, who);
    }
    return MPMD_OK;
}

static void load_close(loading *L) {
    if (L->f) fclose(L->f);
    mpmd_st_header_free(&L->h);
    L->f = NULL;
}

/* Widen n 16-bit floats (little-endian bytes) to f32. */
static void widen(const uint8_t *src, size_t n, int bf16, float *dst) {
    for (size_t k = 0; k < n; k++) {
        uint16_t x = (uint16_t)(src[2 * k] | src[2 * k + 1] << 8);
        float f = bf16 ? mpmd_bf16_to_f32(x) : mpmd_f16_to_f32(x);
        memcpy(dst + k, &f, sizeof f);
    }
}

/* Check the file against the view, read and verify its data, then copy it
 * into every holder (nothing is written before every check passed). */
/* Read and verify the file's data, then copy tensor src[i] into view entry
 * i (NULL: entry i stays as it is) and commit. */
static mpmd_status load_from(const state_view *v, loading *L, const mpmd_st_tensor *const *src_of,
                             mpmd_checkpoint_info *info_out, const char *who, mpmd_error *err);

static mpmd_status load_into(const state_view *v, loading *L, mpmd_checkpoint_info *info_out, const char *who,
                             mpmd_error *err) {
    const mpmd_st_header *h = &L->h;
    for (int j = 0; j < h->n_tensors; j++)
        if (!loadable_dtype(h->tensors[j].dtype))
            return mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: %s: tensor \"%.200s\" has dtype %s, which mpmd cannot load (it loads F32, "
                "BF16 and F16 into f32 values and I32 into i32 values)",
                who, L->path, h->tensors[j].name, h->tensors[j].dtype);
    mpmd_status rc = match(v, h, who, err);
    if (rc) return rc;
    const mpmd_st_tensor **src_of = malloc((size_t)(v->n + 1) * sizeof *src_of);
    if (!src_of) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; i < v->n; i++)
        src_of[i] = mpmd_st_find(h, v->e[i].name);
    rc = load_from(v, L, src_of, info_out, who, err);
    free(src_of);
    return rc;
}

static mpmd_status load_from(const state_view *v, loading *L, const mpmd_st_tensor *const *src_of,
                             mpmd_checkpoint_info *info_out, const char *who, mpmd_error *err) {
    const mpmd_st_header *h = &L->h;
    const char *path = L->path;
    mpmd_status rc = MPMD_OK;
    /* read and verify everything before the first byte of state changes */
    uint8_t *data = malloc(h->data_len ? (size_t)h->data_len : 1);
    if (!data)
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory for the %llu bytes of %s", who,
                              (unsigned long long)h->data_len, path);
    if (h->data_len && fread(data, 1, (size_t)h->data_len, L->f) != h->data_len) {
        rc = mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read the data of %s: %s", who, path,
                            ferror(L->f) ? strerror(errno) : "the file shrank while reading");
        goto done;
    }
    if (L->has_hash) {
        uint8_t got[32];
        char a[65], b[65];
        mpmd_sha256(data, (size_t)h->data_len, got);
        if (memcmp(got, L->want, 32) != 0) {
            mpmd_sha256_hex(L->want, a);
            mpmd_sha256_hex(got, b);
            rc = mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: %s: data checksum mismatch (sha256 %s in the header, the data hashes to %s): "
                "the tensor data is corrupted",
                who, path, a, b);
            goto done;
        }
    }
    for (int i = 0; i < v->n; i++) {
        const entry *e = &v->e[i];
        const mpmd_st_tensor *t = src_of[i];
        if (!t) continue;
        uint8_t *src = data + t->begin;
        size_t bytes = (size_t)(t->end - t->begin);
        if (t->elem_size == 2) { /* BF16 or F16 into f32 (match checked it) */
            if (e->nptr < 1) continue;
            widen(src, bytes / 2, strcmp(t->dtype, "BF16") == 0, e->ptr[0]);
            for (int k = 1; k < e->nptr; k++)
                memcpy(e->ptr[k], e->ptr[0], bytes * 2);
            continue;
        }
        if (!host_is_little_endian()) /* F32 or I32: 4-byte elements */
            for (size_t k = 0; k + 4 <= bytes; k += 4) {
                uint8_t x = src[k];
                src[k] = src[k + 3], src[k + 3] = x;
                x = src[k + 1], src[k + 1] = src[k + 2], src[k + 2] = x;
            }
        for (int k = 0; k < e->nptr; k++)
            memcpy(e->ptr[k], src, bytes);
    }
    if ((rc = view_commit(v, who, err))) goto done;
    if (info_out) *info_out = L->info;
done:
    free(data);
    return rc;
}

static mpmd_status load_held(mpmd_step *st, const char *path, mpmd_checkpoint_info *info_out, const char *who,
                        mpmd_error *err) {
    loading L;
    mpmd_status rc = load_open(path, &L, who, err);
    if (rc) return rc;
    state_view v;
    rc = step_view(st, who, L.info.weights_only, &v, err);
    if (!rc) {
        rc = load_into(&v, &L, info_out, who, err);
        view_free(&v);
    }
    load_close(&L);
    return rc;
}

/* load_held with the step held by this thread (one thread at a time) */
static mpmd_status load(mpmd_step *st, const char *path, mpmd_checkpoint_info *info_out, const char *who,
                        mpmd_error *err) {
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    if (rt_step_enter(st, who)) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(st));
    mpmd_status rc = load_held(st, path, info_out, who, err);
    rt_step_leave(st);
    return rc;
}

/* ---- parameters alone, by name ------------------------------------------------- */

/* Whether parameter `name` is wanted, and the name it has in the source. */
static int source_name(const mpmd_param_load_opts *o, const char *name, char *buf, size_t len) {
    if (o && o->only && strncmp(name, o->only, strlen(o->only)) != 0) return 0;
    if (o && o->to && o->from) {
        size_t n = strlen(o->to);
        if (strncmp(name, o->to, n) != 0) return 0;
        snprintf(buf, len, "%s%s", o->from, name + n);
    } else {
        snprintf(buf, len, "%s", name);
    }
    return 1;
}

static mpmd_status load_params_held(mpmd_step *st, const char *path, const mpmd_param_load_opts *opts,
                                    mpmd_param_load_report *out, mpmd_error *err) {
    const char *who = "mpmd_step_load_params";
    mpmd_param_load_report r = {0, 0, 0};
    if (out) *out = r;
    if (!st || !path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step or no path", who);
    loading L;
    mpmd_status rc = load_open(path, &L, who, err);
    if (rc) return rc;
    state_view v;
    rc = step_view(st, who, 1, &v, err);
    const mpmd_st_tensor **src_of = NULL;
    unsigned char *used = NULL;
    if (!rc) {
        src_of = calloc((size_t)v.n + 1, sizeof *src_of);
        used = calloc((size_t)L.h.n_tensors + 1, 1);
        if (!src_of || !used) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    }
    for (int i = 0; !rc && i < v.n; i++) {
        char name[512];
        if (!source_name(opts, v.e[i].name, name, sizeof name)) continue;
        const mpmd_st_tensor *t = mpmd_st_find(&L.h, name);
        if (!t) {
            r.missing++;
            continue;
        }
        if (!loadable_dtype(t->dtype) || !fits(&v.e[i], t)) {
            char a[160], b[160];
            type_str(t->dtype, t->ndim, t->dim, a, sizeof a);
            type_str(st_dtype(v.e[i].type.dtype), v.e[i].type.ndim, v.e[i].type.dim, b, sizeof b);
            rc = mpmd_error_set(err, MPMD_ERR_SHAPE, "%s: %.300s: \"%s\" is %s in the file but parameter \"%s\" is %s",
                                who, path, name, a, v.e[i].name, b);
            break;
        }
        src_of[i] = t;
        used[t - L.h.tensors] = 1;
        r.loaded++;
    }
    for (int j = 0; !rc && j < L.h.n_tensors; j++)
        r.unexpected += !used[j];
    if (!rc) rc = load_from(&v, &L, src_of, NULL, who, err);
    if (!rc && out) *out = r;
    free(src_of), free(used);
    if (v.e) view_free(&v);
    load_close(&L);
    return rc;
}

mpmd_status mpmd_step_load_params(mpmd_step *st, const char *path, const mpmd_param_load_opts *opts,
                                  mpmd_param_load_report *out, mpmd_error *err) {
    if (st && rt_step_enter(st, "mpmd_step_load_params"))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(st));
    mpmd_status rc = load_params_held(st, path, opts, out, err);
    if (st) rt_step_leave(st);
    return rc;
}

static mpmd_status copy_params_held(mpmd_step *dst, mpmd_step *src, const mpmd_param_load_opts *opts,
                                    mpmd_param_load_report *out, mpmd_error *err) {
    const char *who = "mpmd_step_copy_params";
    mpmd_param_load_report r = {0, 0, 0};
    if (out) *out = r;
    if (!dst || !src) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    if (!rt_whole(dst) || !rt_whole(src))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: both steps must run in this process (under MPI, save and load a file)", who);
    state_view dv, sv;
    mpmd_status rc = step_view(dst, who, 1, &dv, err);
    if (rc) return rc;
    if ((rc = step_view(src, who, 1, &sv, err))) {
        view_free(&dv);
        return rc;
    }
    unsigned char *used = calloc((size_t)sv.n + 1, 1);
    if (!used) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; !rc && i < dv.n; i++) {
        char name[512];
        if (!source_name(opts, dv.e[i].name, name, sizeof name)) continue;
        int lo = 0, hi = sv.n - 1, at = -1; /* both views are sorted by name */
        while (lo <= hi && at < 0) {
            int mid = (lo + hi) / 2, c = strcmp(sv.e[mid].name, name);
            if (!c)
                at = mid;
            else if (c < 0)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        if (at < 0 || sv.e[at].nptr < 1) {
            r.missing++;
            continue;
        }
        const mpmd_type *a = &sv.e[at].type, *b = &dv.e[i].type;
        if (!mpmd_type_equal(a, b)) {
            char ta[160], tb[160];
            rc = mpmd_error_set(
                err, MPMD_ERR_SHAPE, "%s: \"%s\" is %s in the source but parameter \"%s\" is %s", who, name,
                mpmd_type_str(a, ta, sizeof ta), dv.e[i].name, mpmd_type_str(b, tb, sizeof tb));
            break;
        }
        for (int k = 0; k < dv.e[i].nptr; k++)
            memcpy(dv.e[i].ptr[k], sv.e[at].ptr[0], mpmd_type_bytes(b));
        used[at] = 1;
        r.loaded++;
    }
    for (int j = 0; !rc && j < sv.n; j++)
        r.unexpected += !used[j];
    if (!rc) rc = view_commit(&dv, who, err);
    if (!rc && out) *out = r;
    free(used);
    view_free(&dv), view_free(&sv);
    return rc;
}

mpmd_status mpmd_step_copy_params(mpmd_step *dst, mpmd_step *src, const mpmd_param_load_opts *opts,
                                  mpmd_param_load_report *out, mpmd_error *err) {
    if (dst && rt_step_enter(dst, "mpmd_step_copy_params"))
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(dst));
    if (src && src != dst && rt_step_enter(src, "mpmd_step_copy_params")) {
        if (dst) rt_step_leave(dst);
        return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", mpmd_step_error(src));
    }
    mpmd_status rc = copy_params_held(dst, src, opts, out, err);
    if (src && src != dst) rt_step_leave(src);
    if (dst) rt_step_leave(dst);
    return rc;
}

mpmd_status mpmd_exec_load(mpmd_exec *ex, const char *path, mpmd_checkpoint_info *info_out, mpmd_error *err) {
    if (!ex) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_exec_load: no executor");
    return load(mpmd_exec_step(ex), path, info_out, "mpmd_exec_load", err);
}

mpmd_status mpmd_step_load(mpmd_step *st, const char *path, mpmd_checkpoint_info *info_out, mpmd_error *err) {
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_step_load: no step");
    return load(st, path, info_out, "mpmd_step_load", err);
}

/* ---- inspection --------------------------------------------------------------- */

mpmd_status mpmd_checkpoint_read_info(const char *path, mpmd_checkpoint_info *info, mpmd_error *err) {
    const char *who = "mpmd_checkpoint_read_info";
    if (!path || !info) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: NULL path or info", who);
    mpmd_st_header h;
    FILE *f;
    mpmd_status rc = mpmd_st_open(path, &h, &f, err);
    if (rc) return prefixed(err, rc, who);
    fclose(f);
    int has_hash;
    uint8_t want[32];
    mpmd_checkpoint_info got;
    rc = read_meta(&h, &got, &has_hash, want, err);
    mpmd_st_header_free(&h);
    if (rc) return prefixed(err, rc, who);
    *info = got;
    return MPMD_OK;
}

mpmd_status mpmd_checkpoint_verify(const char *path, FILE *list, mpmd_error *err) {
    const char *who = "mpmd_checkpoint_verify";
    if (!path) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: NULL path", who);
    mpmd_st_header h;
    FILE *f;
    mpmd_status rc = mpmd_st_open(path, &h, &f, err);
    if (rc) return prefixed(err, rc, who);
    int has_hash;
    uint8_t want[32];
    mpmd_checkpoint_info info;
    rc = read_meta(&h, &info, &has_hash, want, err);
    if (rc) {
        prefixed(err, rc, who);
    } else {
        enum { CHUNK = 1 << 20 };
        uint8_t *buf = malloc(CHUNK);
        mpmd_sha256_ctx c;
        mpmd_sha256_init(&c);
        uint64_t left = h.data_len;
        if (!buf) rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", who);
        while (!rc && left) {
            size_t n = left < CHUNK ? (size_t)left : CHUNK;
            if (fread(buf, 1, n, f) != n)
                rc = mpmd_error_set(err, MPMD_ERR_IO, "%s: cannot read the data of %s: %s", who, path,
                                    ferror(f) ? strerror(errno) : "the file shrank while reading");
            mpmd_sha256_update(&c, buf, n);
            left -= n;
        }
        free(buf);
        uint8_t got[32];
        mpmd_sha256_final(&c, got);
        if (!rc && has_hash && memcmp(got, want, 32) != 0) {
            char a[65], b[65];
            mpmd_sha256_hex(want, a);
            mpmd_sha256_hex(got, b);
            rc = mpmd_error_set(
                err, MPMD_ERR_FORMAT,
                "%s: %s: data checksum mismatch (sha256 %s in the header, the data hashes to %s): "
                "the tensor data is corrupted",
                who, path, a, b);
        }
    }
    if (!rc && list) {
        char ts[200];
        for (int i = 0; i < h.n_tensors; i++) {
            const mpmd_st_tensor *t = &h.tensors[i];
            type_str(t->dtype, t->ndim, t->dim, ts, sizeof ts);
            fprintf(list, "%s %s %llu\n", t->name, ts, (unsigned long long)(t->end - t->begin));
        }
    }
    fclose(f);
    mpmd_st_header_free(&h);
    return rc;
}
