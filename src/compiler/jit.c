/* mpmd_jit_with_loop: check the graph against the schedule, then cluster,
 * place, lower, check the programs and set up the ranks. Also the step's
 * accessors and its text printouts. */
#include "compiler/compiler.h"
#include "runtime/transport.h"
#include "schedule/schedule_internal.h"
#include "util/sha256.h"

#include <stdlib.h>
#include <string.h>

/* The step keeps its own copy of the schedule, made with the schedule
 * module's allocator so that mpmd_schedule_free releases it. */
static mpmd_schedule *copy_schedule(const mpmd_schedule *s) {
    mpmd_schedule *c =
        sched_alloc(s->kind, s->num_stages, s->num_ranks, s->num_microbatches, s->split_backward);
    if (!c) return NULL;
    memcpy(c->name, s->name, sizeof c->name);
    c->fuse_steady_state = s->fuse_steady_state;
    memcpy(c->stage_rank, s->stage_rank, (size_t)s->num_stages * sizeof *c->stage_rank);
    for (int r = 0; r < s->num_ranks; r++) {
        const mpmd_schedule_rank *a = &s->ranks[r];
        mpmd_schedule_rank *b = &c->ranks[r];
        b->entry_start = sched_mem_alloc((size_t)(a->num_entries + 1) * sizeof *b->entry_start);
        b->tasks = sched_mem_alloc((size_t)(a->num_tasks + 1) * sizeof *b->tasks);
        if (!b->entry_start || !b->tasks) {
            mpmd_schedule_free(c);
            return NULL;
        }
        b->num_entries = a->num_entries;
        b->num_tasks = a->num_tasks;
        memcpy(b->entry_start, a->entry_start, (size_t)(a->num_entries + 1) * sizeof *b->entry_start);
        memcpy(b->tasks, a->tasks, (size_t)a->num_tasks * sizeof *b->tasks);
    }
    return c;
}

void mpmd_step_free(mpmd_step *st) {
    if (!st) return;
    mpmd_runtime_free(st);
    if (st->prog)
        for (int r = 0; r < st->num_ranks; r++)
            free(st->prog[r].ins);
    free(st->prog);
    if (st->inputs)
        for (int i = 0; i < st->g->n_nodes; i++)
            free(st->inputs[i]);
    free(st->inputs);
    free(st->input_set);
    if (st->free_head)
        for (int k = 0; k < st->num_stages * MPMD_TASK_KINDS; k++)
            free(st->free_head[k]);
    free(st->free_head);
    free(st->free_next), free(st->reduce_head), free(st->reduce_next);
    if (st->mutex_ready) pthread_mutex_destroy(&st->abort_mu);
    mpmd_clusters_free(&st->cl);
    free(st->live), free(st->runs), free(st->home), free(st->cross), free(st->kern);
    if (st->sched) mpmd_schedule_free(st->sched);
    free(st);
}

mpmd_step *mpmd_jit_with_loop(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_step_opts *opts,
                              mpmd_error *err) {
    if (!g || !s) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_jit_with_loop: the graph and the schedule are required");
        return NULL;
    }
    if (g->status != MPMD_OK) {
        mpmd_error_set(err, g->status, "mpmd_jit_with_loop: the graph has an error: %s", g->err);
        return NULL;
    }
    if (g->n_micro < 1) {
        mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "mpmd_jit_with_loop: the graph has no microbatch loop (mpmd_loop_begin ... mpmd_loop_end)");
        return NULL;
    }
    if (g->region == MPMD_REGION_BODY) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_jit_with_loop: the microbatch loop is still open (call mpmd_loop_end)");
        return NULL;
    }
    if (g->n_markers != s->num_stages) {
        mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "mpmd_jit_with_loop: the loop body has %d stage markers (mpmd_enter_stage calls, the last "
            "stage closed by one too) but the schedule %s has %d stages",
            g->n_markers, s->name, s->num_stages);
        return NULL;
    }
    if (g->n_micro != s->num_microbatches) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_jit_with_loop: the graph's loop has %d microbatches but the schedule %s has %d",
                       g->n_micro, s->name, s->num_microbatches);
        return NULL;
    }
    mpmd_error verr;
    if (mpmd_schedule_validate(s, &verr, NULL) != MPMD_OK) {
        mpmd_error_set(err, verr.code, "mpmd_jit_with_loop: %s", verr.msg);
        return NULL;
    }
    mpmd_step_opts o = opts ? *opts : MPMD_STEP_DEFAULTS;
    if (o.threads_per_rank < 0) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_jit_with_loop: threads_per_rank = %d; use 0 or a positive count",
                       o.threads_per_rank);
        return NULL;
    }
    if (o.data_parallel < 0) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_jit_with_loop: data_parallel = %d; use 1 (or 0) for none, or a "
                       "replica count",
                       o.data_parallel);
        return NULL;
    }
    int replicas = o.data_parallel > 1 ? o.data_parallel : 1;
    const mpmd_backend *be = mpmd_backend_get(o.backend);
    if (!be) {
        mpmd_error_set(err, MPMD_ERR_INVALID,
                       "mpmd_jit_with_loop: unknown backend \"%s\"; this build has: %s", o.backend,
                       mpmd_backend_names());
        return NULL;
    }
    char why[512];
    if (be->available(why, sizeof why)) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_jit_with_loop: the %s backend cannot run here: %s",
                       be->name, why);
        return NULL;
    }
    if (o.runtime == MPMD_RUNTIME_MPI && !be->host_memory) {
        mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "mpmd_jit_with_loop: the MPI runtime moves host buffers and runs on the cpu backend only; "
            "run the %s backend with the in-process runtime",
            be->name);
        return NULL;
    }
    int mpi_rank = 0, mpi_replica = 0;
    if (o.runtime == MPMD_RUNTIME_MPI) {
        if (!mpmd_mpi_available()) {
            mpmd_error_set(
                err, MPMD_ERR_INVALID,
                "mpmd_jit_with_loop: this build of mpmd has no MPI runtime (install libopenmpi-dev and "
                "openmpi-bin, then rebuild)");
            return NULL;
        }
        int w = mpmd_mpi_world_rank(), ws = mpmd_mpi_world_size();
        if (ws != s->num_ranks * replicas) {
            mpmd_error_set(
                err, MPMD_ERR_INVALID,
                "mpmd_jit_with_loop: the MPI job has %d processes but the mesh needs %d (%d ranks x %d "
                "replicas): run mpirun -np %d",
                ws, s->num_ranks * replicas, s->num_ranks, replicas, s->num_ranks * replicas);
            return NULL;
        }
        mpi_rank = w % s->num_ranks;
        mpi_replica = w / s->num_ranks;
    } else if (o.runtime != MPMD_RUNTIME_LOCAL) {
        mpmd_error_set(err, MPMD_ERR_INVALID, "mpmd_jit_with_loop: unknown runtime %d", (int)o.runtime);
        return NULL;
    }
    mpmd_step *st = calloc(1, sizeof *st);
    if (!st) goto nomem;
    st->g = g;
    st->be = be;
    st->replicas = replicas;
    st->runtime = o.runtime;
    st->tr = mpmd_transport_for(o.runtime); /* there is one: checked above */
    st->mpi_rank = mpi_rank;
    st->mpi_replica = mpi_replica;
    st->num_ranks = s->num_ranks;
    st->num_stages = s->num_stages;
    st->num_micro = s->num_microbatches;
    st->threads_per_rank = o.threads_per_rank;
    st->seed = o.seed;
    if (!(st->sched = copy_schedule(s))) goto nomem;
    st->stage_rank = st->sched->stage_rank;
    if (!(st->live = mpmd_live_nodes(g))) goto nomem;
    if (mpmd_cluster(g, st->live, s->num_stages, s->split_backward, &st->cl, err)) goto fail;
    for (int k = 0; k < st->num_stages; k++)
        if (st->stage_rank[k] < 0) {
            mpmd_error_set(err, MPMD_ERR_SCHEDULE, "mpmd_jit_with_loop: %s runs stage %d on no rank", s->name,
                           k);
            goto fail;
        }
    if (mpmd_place(st, err)) goto fail;
    if (mpmd_lower(st, err)) goto fail;
    if (mpmd_program_check(st, err)) goto fail;
    st->kern = calloc((size_t)g->n_nodes + 1, sizeof *st->kern);
    if (!st->kern) goto nomem;
    for (int i = 0; i < g->n_nodes; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!st->live[i] || (n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) ||
            n->op == &mpmd_op_assign)
            continue;
        if (!(st->kern[i] = be->find(n->op))) {
            mpmd_error_set(err, MPMD_ERR_INVALID,
                           "mpmd_jit_with_loop: the %s backend has no kernel for %s (%%%d)", be->name,
                           n->op->name, i);
            goto fail;
        }
    }
    if (mpmd_runtime_init(st, err)) goto fail;
    return st;
nomem:
    mpmd_error_set(err, MPMD_ERR_NOMEM, "mpmd_jit_with_loop: out of memory");
fail:
    mpmd_step_free(st);
    return NULL;
}

int mpmd_step_num_ranks(const mpmd_step *st) {
    return st->num_ranks;
}
const char *mpmd_step_error(const mpmd_step *st) {
    return st->err;
}
int64_t mpmd_step_peak_bytes(const mpmd_step *st, int rank) {
    return rank >= 0 && rank < st->num_ranks ? st->prog[rank].peak_bytes : -1;
}

mpmd_status mpmd_step_set_input(mpmd_step *st, mpmd_value input, const void *data, size_t bytes) {
    const mpmd_node *n = mpmd_node_of(st->g, input);
    if (!n || n->op != &mpmd_op_input) {
        snprintf(st->err, sizeof st->err, "mpmd_step_set_input: %%%d is not an input", (int)input.id);
        return MPMD_ERR_INVALID;
    }
    size_t want = mpmd_type_bytes(&n->type), R = (size_t)st->replicas;
    if (bytes != want && bytes != want * R) {
        char tb[160];
        if (R > 1)
            snprintf(st->err, sizeof st->err,
                     "mpmd_step_set_input: input \"%s\" is %s (%zu bytes) per replica, %zu bytes for all %zu "
                     "replicas; given %zu bytes",
                     n->name, mpmd_type_str(&n->type, tb, sizeof tb), want, want * R, R, bytes);
        else
            snprintf(st->err, sizeof st->err,
                     "mpmd_step_set_input: input \"%s\" is %s (%zu bytes), given %zu bytes", n->name,
                     mpmd_type_str(&n->type, tb, sizeof tb), want, bytes);
        return MPMD_ERR_SHAPE;
    }
    char *dst = st->inputs[input.id];
    if (!dst) return MPMD_OK; /* MPI: this process's rank does not read this input */
    for (size_t d = 0; d < R; d++) {
        if (st->runtime == MPMD_RUNTIME_MPI && (int)d != st->mpi_replica) continue;
        /* the same data for every replica, or replica d's share */
        memcpy(dst + d * want, (const char *)data + (bytes == want ? 0 : d * want), want);
    }
    mpmd_status rc = mpmd_runtime_input_set(st, input.id);
    if (rc) return rc;
    st->input_set[input.id] = 1;
    return MPMD_OK;
}

mpmd_status mpmd_step_run(mpmd_step *st) {
    const mpmd_graph *g = st->g;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == &mpmd_op_input && st->live[i] && st->inputs[i] && !st->input_set[i]) {
            snprintf(st->err, sizeof st->err, "input \"%s\" was not set (mpmd_step_set_input) before the run",
                     g->nodes[i].name);
            return MPMD_ERR_INVALID;
        }
    mpmd_status rc = mpmd_runtime_run(st);
    if (rc == MPMD_OK) st->ran = 1;
    return rc;
}

int mpmd_step_where(const mpmd_step *st, mpmd_value v, int *ranks, int cap) {
    const mpmd_node *n = mpmd_node_of(st->g, v);
    if (!n || !st->live[v.id]) return 0;
    int k = 0;
    for (int r = 0; r < st->num_ranks; r++) {
        int holds = n->region == MPMD_REGION_BODY ? st->home[v.id] == r : mpmd_runs_on(st, v.id, r);
        if (!holds) continue;
        if (ranks && k < cap) ranks[k] = r;
        k++;
    }
    return k;
}

void *mpmd_step_var_data(mpmd_step *st, int rank, mpmd_value v) {
    const mpmd_node *n = mpmd_node_of(st->g, v);
    if (!n || !mpmd_node_is_storage(n) || rank < 0 || rank >= st->num_ranks || !mpmd_runs_on(st, v.id, rank))
        return NULL;
    return mpmd_runtime_value(st, rank, v.id);
}

mpmd_status mpmd_step_read(mpmd_step *st, mpmd_value v, void *dst, size_t bytes) {
    const mpmd_node *n = mpmd_node_of(st->g, v);
    if (!n) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %d is not a value of the graph", (int)v.id);
        return MPMD_ERR_INVALID;
    }
    int storage = mpmd_node_is_storage(n);
    if (!storage && !(n->flags & MPMD_NODE_KEEP)) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d (%s) is not kept; call mpmd_keep on it",
                 (int)v.id, n->op->name);
        return MPMD_ERR_INVALID;
    }
    if (!storage && !st->ran) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d has no value before the first run",
                 (int)v.id);
        return MPMD_ERR_INVALID;
    }
    if (bytes != mpmd_type_bytes(&n->type)) {
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d has %zu bytes, asked for %zu", (int)v.id,
                 mpmd_type_bytes(&n->type), bytes);
        return MPMD_ERR_SHAPE;
    }
    int ranks[64];
    int nr = mpmd_step_where(st, v, ranks, 64);
    for (int k = 0; k < nr && k < 64; k++) {
        int replica = st->runtime == MPMD_RUNTIME_MPI ? st->mpi_replica : 0;
        mpmd_status rc = mpmd_runtime_read(st, ranks[k], replica, v.id, dst, bytes);
        if (rc != MPMD_ERR_INVALID) return rc;
    }
    if (st->runtime == MPMD_RUNTIME_MPI && nr > 0)
        snprintf(
            st->err, sizeof st->err,
            "mpmd_step_read: %%%d is held by rank %d, not by this process (rank %d); use mpmd_step_gather",
            (int)v.id, ranks[0], st->mpi_rank);
    else
        snprintf(st->err, sizeof st->err, "mpmd_step_read: %%%d is held by no rank", (int)v.id);
    return MPMD_ERR_INVALID;
}

/* A value of (rank, replica) into dst on this process, by the transport: a
 * local copy, or under MPI a broadcast from the process that runs that rank
 * and replica (every process must make the same calls in the same order). */
static mpmd_status fetch(mpmd_step *st, int rank, int replica, int node, void *dst, size_t bytes) {
    return st->tr->fetch(st, rank, replica, node, dst, bytes);
}

void mpmd_step_replica_params_sha256(mpmd_step *st, int replica, char hex[65]) {
    int np;
    const mpmd_node **ps = mpmd_params_by_name(st->g, &np);
    size_t maxb = 1;
    for (int i = 0; ps && i < np; i++)
        if (mpmd_type_bytes(&ps[i]->type) > maxb) maxb = mpmd_type_bytes(&ps[i]->type);
    void *buf = malloc(maxb);
    mpmd_sha256_ctx c;
    mpmd_sha256_init(&c);
    for (int i = 0; ps && buf && i < np; i++) {
        int r;
        if (mpmd_step_where(st, (mpmd_value){ps[i]->id}, &r, 1) < 1) continue;
        size_t b = mpmd_type_bytes(&ps[i]->type);
        if (fetch(st, r, replica, ps[i]->id, buf, b) == MPMD_OK) mpmd_sha256_update(&c, buf, b);
    }
    free(buf);
    free(ps);
    mpmd_sha256_final_hex(&c, hex);
}

void mpmd_step_params_sha256(mpmd_step *st, char hex[65]) {
    mpmd_step_replica_params_sha256(st, 0, hex);
}

mpmd_status mpmd_step_gather(mpmd_step *st, mpmd_value v, void *dst, size_t bytes) {
    if (st->runtime != MPMD_RUNTIME_MPI) return mpmd_step_read(st, v, dst, bytes);
    const mpmd_node *n = mpmd_node_of(st->g, v);
    int r;
    if (!n || (!mpmd_node_is_storage(n) && !(n->flags & MPMD_NODE_KEEP)) ||
        mpmd_step_where(st, v, &r, 1) < 1) {
        snprintf(st->err, sizeof st->err, "mpmd_step_gather: %%%d is not a kept value, parameter or variable",
                 (int)v.id);
        return MPMD_ERR_INVALID;
    }
    if (bytes != mpmd_type_bytes(&n->type)) {
        snprintf(st->err, sizeof st->err, "mpmd_step_gather: %%%d has %zu bytes, asked for %zu", (int)v.id,
                 mpmd_type_bytes(&n->type), bytes);
        return MPMD_ERR_SHAPE;
    }
    return fetch(st, r, 0, v.id, dst, bytes);
}

/* ---- printing ------------------------------------------------------------- */

void mpmd_step_print_tasks(const mpmd_step *st, FILE *f) {
    mpmd_schedule_write_text(st->sched, f);
}

static const char *kind_prefix(int k) {
    return k == 0 ? "fwd" : k == 1 ? "bwd" : k == 2 ? "bwdA" : "bwdW";
}

void mpmd_step_print(const mpmd_step *st, FILE *f) {
    const mpmd_graph *g = st->g;
    char tb[160];
    fprintf(f, "%s: %d ranks, %d stages, %d microbatches\n", st->sched->name, st->num_ranks, st->num_stages,
            st->num_micro);
    /* the task bodies, once: the ops of each (stage, kind) cluster */
    for (int s = 0; s < st->num_stages; s++)
        for (int k = 0; k < MPMD_TASK_KINDS; k++) {
            int c = s * MPMD_TASK_KINDS + k;
            if (!st->cl.count[c]) continue;
            fprintf(f, "task %s_%d (rank %d, %d ops):\n", kind_prefix(k), s, st->stage_rank[s],
                    st->cl.count[c]);
            for (int q = 0; q < st->cl.count[c]; q++) {
                const mpmd_node *n = &g->nodes[st->cl.nodes[c][q]];
                fprintf(f, "    %%%d:%s = %s", n->id, mpmd_type_str(&n->type, tb, sizeof tb), n->op->name);
                for (int j = 0; j < n->n_in; j++)
                    fprintf(f, "%s%%%d", j ? ", " : " ", (int)n->in[j]);
                fputc('\n', f);
            }
        }
    for (int r = 0; r < st->num_ranks; r++) {
        const mpmd_program *p = &st->prog[r];
        fprintf(f, "rank %d program (%d instructions, peak %lld bytes of activations):\n", r, p->n,
                (long long)p->peak_bytes);
        for (int x = 0; x < p->n; x++) {
            const mpmd_instr *in = &p->ins[x];
            const mpmd_node *n = in->node >= 0 ? &g->nodes[in->node] : NULL;
            switch (in->op) {
            case MPMD_I_RUN_PRE: fprintf(f, "  pre   %%%d = %s\n", in->node, n->op->name); break;
            case MPMD_I_RUN_POST: fprintf(f, "  post  %%%d = %s\n", in->node, n->op->name); break;
            case MPMD_I_TASK:
                fprintf(f, "  run   %s_%d  microbatch %d\n", kind_prefix(in->kind), in->stage, in->mb);
                break;
            case MPMD_I_SEND:
                fprintf(f, "  send  %%%d:%s mb %d -> rank %d%s\n", in->node,
                        mpmd_type_str(&n->type, tb, sizeof tb), in->mb, in->peer,
                        in->moved ? " (moved)" : "");
                break;
            case MPMD_I_RECV:
                fprintf(f, "  recv  %%%d:%s mb %d <- rank %d\n", in->node,
                        mpmd_type_str(&n->type, tb, sizeof tb), in->mb, in->peer);
                break;
            case MPMD_I_FREE: fprintf(f, "  free  %%%d mb %d\n", in->node, in->mb); break;
            }
        }
    }
}
