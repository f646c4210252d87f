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
#include "io/checkpoint_view.h"
#include "io/safetensors.h"
#include "runtime/runtime.h"
#include "util/half.h"
#include "util/sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- state views -------------------------------------------------------------- */

void ckpt_view_free(state_view *v) {
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
     * what it does not load unchanged (ckpt_view_commit) */
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
mpmd_status ckpt_view_commit(const state_view *v, const char *who, mpmd_error *err) {
    for (int i = 0; i < v->nstg; i++) {
        const staged *s = &v->stg[i];
        mpmd_status rc =
            mpmd_runtime_write((mpmd_step *)v->target, s->rank, s->replica, s->node, s->host, s->bytes);
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
        ckpt_view_free(v);
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
    if (rc) ckpt_view_free(v);
    return rc;
}

mpmd_status ckpt_step_view(mpmd_step *st, const char *who, int params_only, state_view *v, mpmd_error *err) {
    if (!st) return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no step", who);
    int replicas = st->plan->replicas > 1 ? st->plan->replicas : 1;
    return view_build(st->plan->g, st, step_holders, st->plan->num_ranks * replicas * st->plan->model,
                      !rt_whole(st), params_only, who, v, err);
}

/* Put "who: " in front of an error message filled by a helper. */
mpmd_status ckpt_prefixed(mpmd_error *err, mpmd_status rc, const char *who) {
    if (err && rc) {
        char msg[MPMD_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        mpmd_error_set(err, rc, "%s: %s", who, msg);
    }
    return rc;
}

const char *ckpt_st_dtype(mpmd_dtype d) { return d == MPMD_I32 ? "I32" : "F32"; }

/* The file's name of an export dtype, NULL for one that cannot be exported. */
static const char *export_dtype(mpmd_dtype d) {
    return d == MPMD_F32 ? "F32" : d == MPMD_BF16 ? "BF16" : d == MPMD_F16 ? "F16" : NULL;
}

/* Whether a tensor of the file's dtype loads into a value of dtype d: f32
 * takes F32 (bit for bit) and BF16 or F16 (widened, exactly); i32 takes
 * I32. */
int ckpt_loads_into(const char *file_dtype, mpmd_dtype d) {
    if (d == MPMD_I32) return strcmp(file_dtype, "I32") == 0;
    return !strcmp(file_dtype, "F32") || !strcmp(file_dtype, "BF16") || !strcmp(file_dtype, "F16");
}

/* The dtypes the loader knows at all. */
int ckpt_loadable_dtype(const char *file_dtype) {
    return ckpt_loads_into(file_dtype, MPMD_F32) || ckpt_loads_into(file_dtype, MPMD_I32);
}

/* "F32[4,16]" for a model type, the file's notation. */
void ckpt_type_str(const char *dtype, int ndim, const int64_t *dim, char *buf, size_t len) {
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
        outs[i] = (mpmd_st_out){e->name, ckpt_st_dtype(e->type.dtype), e->type.ndim, e->type.dim, e->ptr[0]};
    }
    mpmd_status rc = mpmd_st_write(path, n, outs, n_meta, meta, 1, err);
    free(outs);
    return ckpt_prefixed(err, rc, who);
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
        outs[i] = (mpmd_st_out){e->name, ckpt_st_dtype(e->type.dtype), e->type.ndim, e->type.dim, e->ptr[0]};
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
    if (!rc) rc = ckpt_prefixed(err, mpmd_st_write(path, v->n, outs, 3, meta, 1, err), who);
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
    mpmd_status rc = ckpt_step_view(st, who, w->weights, &v, err);
    if (rc) return rc;
    if (rt_whole(st)) {
        rc = write_view(&v, path, w, who, err);
        ckpt_view_free(&v);
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
    ckpt_view_free(&v);
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
    mpmd_status rc = ckpt_step_view(st, who, 0, &v, err);
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
    ckpt_view_free(&v);
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
