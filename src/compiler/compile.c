/* mpmd_compile, the compiler's entry point: check the graph against the
 * schedule, then cluster, place, lower, check the programs, build the
 * in-task lists and look up the backend's kernels, giving one plan. Also
 * the plan's release and its text printout. Nothing here runs anything. */
#include "compiler/compiler.h"
#include "schedule/schedule_internal.h"

#include <stdlib.h>
#include <string.h>

/* The plan keeps its own copy of the schedule, made with the schedule
 * module's allocator so that mpmd_schedule_free releases it. */
static mpmd_schedule *copy_schedule(const mpmd_schedule *s) {
    mpmd_schedule *c =
        sched_alloc(s->kind, s->num_stages, s->num_ranks, s->num_microbatches, s->split_backward);
    if (!c) return NULL;
    memcpy(c->name, s->name, sizeof c->name);
    c->fuse_steady_state = s->fuse_steady_state;
    c->forward_only = s->forward_only;
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

/* A loop body without gradients (inference, evaluation) has nothing for
 * the backward tasks to run: drop them from every rank's list, keeping the
 * forward tasks in their order (a fused entry keeps its forward member).
 * GPipe is then fill and drain, and 1F1B's order degenerates to it: each
 * rank runs its forwards in microbatch order as their inputs arrive. */
static void keep_forward_tasks(mpmd_schedule *s) {
    for (int r = 0; r < s->num_ranks; r++) {
        mpmd_schedule_rank *rk = &s->ranks[r];
        int ne = 0, nt = 0;
        for (int e = 0; e < rk->num_entries; e++) {
            int start = nt;
            for (int t = rk->entry_start[e]; t < rk->entry_start[e + 1]; t++)
                if (rk->tasks[t].kind == MPMD_TASK_F) rk->tasks[nt++] = rk->tasks[t];
            if (nt > start) rk->entry_start[ne++] = start;
        }
        rk->entry_start[ne] = nt;
        rk->num_entries = ne, rk->num_tasks = nt;
    }
    s->forward_only = 1;
    size_t len = strlen(s->name);
    snprintf(s->name + len, sizeof s->name - len, ", forward only");
}

mpmd_status mpmd_compile_check(const mpmd_graph *g, const mpmd_schedule *s, mpmd_error *err) {
    if (!g || !s) return mpmd_error_set(err, MPMD_ERR_INVALID, "the graph and the schedule are required");
    if (g->status != MPMD_OK) return mpmd_error_set(err, g->status, "the graph has an error: %s", g->err);
    if (g->n_micro < 1)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the graph has no microbatch loop (mpmd_loop_begin ... mpmd_loop_end)");
    if (mpmd_loop_open(g))
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the microbatch loop is still open (call mpmd_loop_end)");
    if (g->n_markers != s->num_stages)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the loop body has %d stage markers (mpmd_enter_stage calls, the last "
                              "stage closed by one too) but the schedule %s has %d stages",
                              g->n_markers, s->name, s->num_stages);
    if (g->n_micro != s->num_microbatches)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "the graph's loop has %d microbatches but the schedule %s has %d", g->n_micro,
                              s->name, s->num_microbatches);
    mpmd_error verr;
    if (mpmd_schedule_validate(s, &verr, NULL) != MPMD_OK)
        return mpmd_error_set(err, verr.code, "%s", verr.msg);
    return MPMD_OK;
}

void mpmd_plan_free(mpmd_plan *pl) {
    if (!pl) return;
    if (pl->prog)
        for (int r = 0; r < pl->num_ranks; r++)
            free(pl->prog[r].ins);
    free(pl->prog);
    if (pl->free_head)
        for (int k = 0; k < pl->num_stages * MPMD_TASK_KINDS; k++)
            free(pl->free_head[k]);
    free(pl->free_head);
    free(pl->free_next), free(pl->reduce_head), free(pl->reduce_next);
    mpmd_clusters_free(&pl->cl);
    if (pl->mem)
        for (int r = 0; r < pl->num_ranks; r++) {
            mpmd_rank_memory *m = &pl->mem[r];
            free(m->slot), free(m->slot_node), free(m->body_buf), free(m->val_buf), free(m->comb_buf);
            free(m->buf), free(m->pos), free(m->reuse_head), free(m->reuse_next), free(m->gath_buf);
        }
    free(pl->mem);
    if (pl->gather)
        for (int l = 0; l < pl->n_gather; l++)
            free(pl->gather[l]);
    free(pl->gather), free(pl->gather_n), free(pl->whole);
    mpmd_mesh_free(&pl->mesh);
    free(pl->live), free(pl->runs), free(pl->home), free(pl->cross), free(pl->kern), free(pl->task_meets);
    if (pl->sched) mpmd_schedule_free(pl->sched);
    free(pl);
}

/* The passes after clustering, the same for a schedule and for the loop. */
static mpmd_status finish(mpmd_plan *pl, mpmd_error *err) {
    const mpmd_graph *g = pl->g;
    /* the model axis' ops run in the body's tasks only (no kernel, no
     * transport group elsewhere); the graph refuses them where it can */
    char why[MPMD_ERROR_MSG_MAX];
    for (int i = 0; i < g->n_nodes; i++)
        if (mpmd_model_axis_misplaced(g, i, why, sizeof why))
            return mpmd_error_set(err, MPMD_ERR_INVALID, "%s", why);
    if (mpmd_mesh_init(&pl->mesh, g, pl->replicas, pl->model))
        return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    if (mpmd_place(pl, err)) return err->code;
    if (mpmd_plan_shards(pl, err)) return err->code;
    if (mpmd_lower(pl, err)) return err->code;
    if (mpmd_program_check(pl, err)) return err->code;
    pl->kern = calloc((size_t)g->n_nodes + 1, sizeof *pl->kern);
    if (!pl->kern) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        const mpmd_node *n = &g->nodes[i];
        if (!pl->live[i] || (n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL | MPMD_OPF_COLLECTIVE)) ||
            n->op == &mpmd_op_assign)
            continue;
        if (n->op->flags & MPMD_OPF_MESH) { /* run by the runtime, on the backend's sum of squares */
            if (!pl->be->kernels.sumsq)
                return mpmd_error_set(err, MPMD_ERR_INVALID,
                                      "the %s backend cannot take %s (%%%d): it has no exact "
                                      "sum of squares",
                                      pl->be->name, n->op->name, i);
            continue;
        }
        if (!(pl->kern[i] = pl->be->kernels.find(n->op)))
            return mpmd_error_set(err, MPMD_ERR_INVALID, "the %s backend has no kernel for %s (%%%d)",
                                  pl->be->name, n->op->name, i);
    }
    /* the tasks whose ops meet the other model ranks (a collective): they
     * wait on the host, so a recording of the rank's work stops there */
    pl->task_meets = calloc((size_t)pl->num_stages * MPMD_TASK_KINDS + 1, 1);
    if (!pl->task_meets) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    for (int k = 0; k < pl->num_stages * MPMD_TASK_KINDS; k++)
        for (int c = 0; c < pl->cl.count[k]; c++)
            if (g->nodes[pl->cl.nodes[k][c]].op->flags & MPMD_OPF_COLLECTIVE) pl->task_meets[k] = 1;
    if (mpmd_lower_task_lists(pl, err)) return err->code;
    return mpmd_plan_memory(pl, err);
}

mpmd_plan *mpmd_compile_loop(const mpmd_graph *g, const mpmd_backend *be, int replicas, int fsdp,
                             int recv_ahead, mpmd_error *err) {
    mpmd_plan *pl = calloc(1, sizeof *pl);
    mpmd_error local;
    if (!err) err = &local;
    if (!pl) goto nomem;
    pl->g = g;
    pl->be = be;
    pl->replicas = replicas;
    pl->fsdp = replicas > 1 ? fsdp : MPMD_FSDP_OFF;
    pl->model = g->model_parallel > 1 ? g->model_parallel : 1;
    pl->recv_ahead = recv_ahead;
    pl->num_ranks = 1;
    pl->num_stages = 1;
    pl->num_micro = g->n_micro;
    pl->stage_rank = pl->own_stage_rank;
    if (!(pl->live = mpmd_live_nodes(g))) goto nomem;
    /* one cluster: every live body op, in creation order, as stage 0's forward */
    mpmd_clusters *c = &pl->cl;
    c->num_stages = 1;
    c->stage = malloc((size_t)(g->n_nodes + 1) * sizeof *c->stage);
    c->kind = calloc((size_t)g->n_nodes + 1, 1);
    c->nodes = calloc(MPMD_TASK_KINDS, sizeof *c->nodes);
    c->count = calloc(MPMD_TASK_KINDS, sizeof *c->count);
    if (!c->stage || !c->kind || !c->nodes || !c->count) goto nomem;
    for (int k = 0; k < MPMD_TASK_KINDS; k++)
        if (!(c->nodes[k] = malloc((size_t)(g->n_nodes + 1) * sizeof **c->nodes))) goto nomem;
    for (int i = 0; i < g->n_nodes; i++) {
        int body = g->nodes[i].region == MPMD_REGION_BODY && pl->live[i];
        c->stage[i] = body ? 0 : -1;
        if (body) c->nodes[MPMD_TASK_F][c->count[MPMD_TASK_F]++] = i;
    }
    if (finish(pl, err)) goto fail;
    return pl;
nomem:
    mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory planning the loop");
fail:
    mpmd_plan_free(pl);
    return NULL;
}

mpmd_plan *mpmd_compile(const mpmd_graph *g, const mpmd_schedule *s, const mpmd_backend *be, int replicas,
                        int fsdp, int recv_ahead, mpmd_error *err) {
    mpmd_error local; /* g and s were checked together (mpmd_compile_check) by the caller */
    if (!err) err = &local;
    mpmd_plan *pl = calloc(1, sizeof *pl);
    if (!pl) goto nomem;
    pl->g = g;
    pl->be = be;
    pl->replicas = replicas;
    pl->fsdp = replicas > 1 ? fsdp : MPMD_FSDP_OFF;
    pl->model = g->model_parallel > 1 ? g->model_parallel : 1;
    pl->recv_ahead = recv_ahead;
    pl->num_ranks = s->num_ranks;
    pl->num_stages = s->num_stages;
    pl->num_micro = s->num_microbatches;
    if (!(pl->sched = copy_schedule(s))) goto nomem;
    pl->stage_rank = pl->sched->stage_rank;
    if (!(pl->live = mpmd_live_nodes(g))) goto nomem;
    if (mpmd_cluster(g, pl->live, s->num_stages, s->split_backward, &pl->cl, err)) goto fail;
    int backward_ops = 0;
    for (int k = 0; k < pl->num_stages * MPMD_TASK_KINDS; k++)
        if (k % MPMD_TASK_KINDS != MPMD_TASK_F) backward_ops += pl->cl.count[k];
    if (!backward_ops) keep_forward_tasks(pl->sched);
    /* a stage whose forward computes nothing: most likely a dropped marker */
    for (int st = 0; st < pl->num_stages; st++) {
        const int k = st * MPMD_TASK_KINDS + MPMD_TASK_F;
        int ops = 0;
        for (int c = 0; c < pl->cl.count[k]; c++) {
            const mpmd_node *n = &g->nodes[pl->cl.nodes[k][c]];
            ops += !(n->op->flags & (MPMD_OPF_LEAF | MPMD_OPF_STRUCTURAL)) && n->op != &mpmd_op_stage_marker;
        }
        if (!ops) {
            mpmd_error_set(err, MPMD_ERR_INVALID,
                           "stage %d of %d has no operations, so its rank would idle: a "
                           "stage marker whose result was dropped (`mpmd_enter_stage(g, h);` instead of `h = "
                           "mpmd_enter_stage(g, h);`) leaves the ops after it in the stage before",
                           st, pl->num_stages);
            goto fail;
        }
    }
    for (int k = 0; k < pl->num_stages; k++)
        if (pl->stage_rank[k] < 0) {
            mpmd_error_set(err, MPMD_ERR_SCHEDULE, "%s runs stage %d on no rank", s->name, k);
            goto fail;
        }
    if (finish(pl, err)) goto fail;
    return pl;
nomem:
    mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
fail:
    mpmd_plan_free(pl);
    return NULL;
}

/* ---- printing ------------------------------------------------------------- */

static const char *kind_prefix(int k) { return k == 0 ? "fwd" : k == 1 ? "bwd" : k == 2 ? "bwdA" : "bwdW"; }

void mpmd_plan_print(const mpmd_plan *pl, FILE *f) {
    const mpmd_graph *g = pl->g;
    char tb[160], ob[320];
    fprintf(f, "%s: %d ranks, %d stages, %d microbatches", pl->sched ? pl->sched->name : "the loop",
            pl->num_ranks, pl->num_stages, pl->num_micro);
    if (pl->replicas > 1) fprintf(f, ", %d data-parallel replicas", pl->replicas);
    if (pl->fsdp)
        fprintf(f, ", FSDP (%d parameters sharded, gathered %s)", mpmd_plan_sharded_params(pl),
                pl->fsdp == MPMD_FSDP_PER_STEP ? "once per step" : "per task");
    if (pl->model > 1) fprintf(f, ", %d model ranks (tensor parallel)", pl->model);
    fputc('\n', f);
    /* the task bodies, once: the ops of each (stage, kind) cluster */
    for (int s = 0; s < pl->num_stages; s++)
        for (int k = 0; k < MPMD_TASK_KINDS; k++) {
            int c = s * MPMD_TASK_KINDS + k;
            if (!pl->cl.count[c]) continue;
            fprintf(f, "task %s_%d (rank %d, %d ops):\n", kind_prefix(k), s, pl->stage_rank[s],
                    pl->cl.count[c]);
            for (int q = 0; q < pl->cl.count[c]; q++) {
                const mpmd_node *n = &g->nodes[pl->cl.nodes[c][q]];
                fprintf(f, "    %%%d:%s = %s", n->id, mpmd_type_str(&n->type, tb, sizeof tb), n->op->name);
                for (int j = 0; j < n->n_in; j++)
                    fprintf(f, "%s%s", j ? ", " : " ", mpmd_operand_str(g, n->in[j], ob, sizeof ob));
                /* the loop results this value is folded into, microbatch by microbatch */
                for (int r = pl->reduce_head ? pl->reduce_head[n->id] : -1; r >= 0; r = pl->reduce_next[r])
                    fprintf(f, "   -> loop %s into %%%d",
                            g->nodes[r].ia[0] == MPMD_REDUCE_ADD   ? "sum"
                            : g->nodes[r].ia[0] == MPMD_REDUCE_MAX ? "max"
                                                                   : "concat",
                            r);
                fputc('\n', f);
            }
        }
    for (int r = 0; r < pl->num_ranks; r++) {
        const mpmd_program *p = &pl->prog[r];
        const mpmd_rank_memory *m = &pl->mem[r];
        fprintf(f,
                "rank %d program (%d instructions, peak %lld bytes of activations; allocates %zu bytes: "
                "parameters %zu, optimizer state and constants %zu, inputs %zu, arena %zu, workspace %zu):\n",
                r, p->n, (long long)p->peak_bytes, m->total_bytes, m->params_bytes, m->state_bytes,
                m->input_bytes, m->arena_bytes, m->scratch_bytes);
        for (int x = 0; x < p->n; x++) {
            const mpmd_instr *in = &p->ins[x];
            const mpmd_node *n = in->node >= 0 ? &g->nodes[in->node] : NULL;
            switch (in->op) {
            case MPMD_I_RUN_PRE:
            case MPMD_I_RUN_POST:
                fprintf(f, "  %-5s %%%d:%s = %s", in->op == MPMD_I_RUN_PRE ? "pre" : "post", in->node,
                        mpmd_type_str(&n->type, tb, sizeof tb), n->op->name);
                for (int j = 0; j < n->n_in; j++)
                    fprintf(f, "%s%s", j ? ", " : " ", mpmd_operand_str(g, n->in[j], ob, sizeof ob));
                fputc('\n', f);
                break;
            case MPMD_I_TASK:
                fprintf(f, "  run   %s_%d  microbatch %d\n", kind_prefix(in->kind), in->stage, in->mb);
                break;
            case MPMD_I_SEND:
                fprintf(f, "  send  %%%d:%s mb %d -> rank %d%s\n", in->node,
                        mpmd_type_str(&n->type, tb, sizeof tb), in->mb, in->peer,
                        in->moved ? " (last use)" : "");
                break;
            case MPMD_I_RECV:
                fprintf(f, "  recv  %%%d:%s mb %d <- rank %d\n", in->node,
                        mpmd_type_str(&n->type, tb, sizeof tb), in->mb, in->peer);
                break;
            case MPMD_I_FREE: fprintf(f, "  free  %%%d mb %d\n", in->node, in->mb); break;
            case MPMD_I_ALLREDUCE:
            case MPMD_I_REDUCE_SCATTER:
                fprintf(f, "  %s %%%d:%s over the replicas%s\n",
                        in->op == MPMD_I_ALLREDUCE ? "all_reduce" : "reduce_scatter", in->node,
                        mpmd_type_str(&n->type, tb, sizeof tb),
                        in->op == MPMD_I_ALLREDUCE ? "" : " (this replica's shard)");
                break;
            case MPMD_I_GATHER: {
                int ng;
                const int32_t *list = mpmd_gather_list(pl, in, &ng);
                if (in->stage >= 0)
                    fprintf(f, "  all_gather for %s_%d mb %d:", kind_prefix(in->kind), in->stage, in->mb);
                else
                    fprintf(f, "  all_gather for the step:");
                for (int q = 0; q < ng; q++)
                    fprintf(f, " %s", mpmd_operand_str(g, list[q], ob, sizeof ob));
                fputc('\n', f);
                break;
            }
            }
        }
    }
}
