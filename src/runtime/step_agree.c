/* The processes of one job agree (mpmd_step_agree, launcher.h).
 *
 * Under MPI every process builds the graph itself: a process given other
 * options (a learning rate, a width, a seed) would train a model no
 * configuration gives, or die in a message of the wrong size. Before a
 * step is made, the processes compare digests of what they built. */
#include "runtime/launcher.h"
#include "schedule/schedule_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) { return fnv(h, s ? s : "", s ? strlen(s) + 1 : 1); }

/* Node i, field by field (what it computes: op, type, operands,
 * attributes, name, initialiser, data, place in the step). */
static uint64_t node_digest(const mpmd_graph *g, int i) {
    const mpmd_node *n = &g->nodes[i];
    uint64_t h = fnv_str(0xcbf29ce484222325ull, n->op->name);
    int32_t head[6] = {(int32_t)n->type.dtype, n->type.ndim, n->n_in, n->region, n->stage, n->flags};
    h = fnv(h, head, sizeof head);
    h = fnv(h, n->type.dim, (size_t)n->type.ndim * sizeof n->type.dim[0]);
    h = fnv(h, n->in, (size_t)n->n_in * sizeof *n->in);
    h = fnv(h, n->ia, sizeof n->ia);
    h = fnv(h, n->fa, sizeof n->fa);
    h = fnv_str(h, n->name);
    int32_t kind = (int32_t)n->init.kind;
    h = fnv(h, &kind, sizeof kind);
    h = fnv(h, &n->init.a, sizeof n->init.a);
    h = fnv(h, &n->init.b, sizeof n->init.b);
    if (n->data) h = fnv(h, n->data, mpmd_type_bytes(&n->type));
    return h;
}

static uint64_t schedule_digest(const mpmd_schedule *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    if (!s) return h;
    h = fnv_str(h, s->name);
    for (int r = 0; r < s->num_ranks; r++) {
        const mpmd_schedule_rank *k = &s->ranks[r];
        h = fnv(h, k->entry_start, (size_t)(k->num_entries + 1) * sizeof *k->entry_start);
        h = fnv(h, k->tasks, (size_t)k->num_tasks * sizeof *k->tasks);
    }
    return fnv(h, s->stage_rank, (size_t)s->num_stages * sizeof *s->stage_rank);
}

static uint64_t options_digest(const mpmd_step_opts *o) {
    uint64_t h = fnv(0xcbf29ce484222325ull, &o->seed, sizeof o->seed);
    int32_t v[4] = {o->data_parallel, o->fsdp, (int32_t)o->fsdp_gather, (int32_t)o->runtime};
    h = fnv(h, v, sizeof v);
    return fnv_str(h, o->backend ? o->backend : "cpu");
}

/* The first node from which process p's digests differ from process 0's
 * (all: procs x n), or -1. */
static int first_difference(const uint64_t *all, int n, int p) {
    for (int i = 0; i < n; i++)
        if (all[(size_t)p * n + i] != all[i]) return i;
    return -1;
}

mpmd_status mpmd_step_agree(const mpmd_launcher *tr, const mpmd_graph *g, const mpmd_schedule *s,
                            const mpmd_step_opts *o, mpmd_error *err) {
    if (!tr->agree || !tr->procs || tr->procs() < 2) return MPMD_OK; /* nobody to agree with */
    const int nn = g->n_nodes;
    uint64_t *node = malloc(((size_t)nn + 1) * sizeof *node), graph = 0xcbf29ce484222325ull;
    if (!node) return mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nn; i++)
        node[i] = node_digest(g, i), graph = fnv(graph, &node[i], sizeof node[i]);
    const uint64_t mine[4] = {graph, (uint64_t)nn, schedule_digest(s), options_digest(o)};
    uint64_t *all = NULL;
    int procs = 0, bad = tr->agree(mine, 4, &all, &procs);
    mpmd_status rc = MPMD_OK;
    if (bad) {
        rc = mpmd_error_set(err, MPMD_ERR_RUNTIME, "comparing the processes' steps failed");
        goto done;
    }
    int p = 1, k = -1;
    for (; p < procs && (k = first_difference(all, 4, p)) < 0; p++)
        ;
    if (k < 0) goto done;
    char here[400] = "";
    if (k <= 1) { /* the graphs: which node, node by node over the longest */
        int most = 0;
        for (int q = 0; q < procs; q++)
            most = (int)all[(size_t)q * 4 + 1] > most ? (int)all[(size_t)q * 4 + 1] : most;
        uint64_t *mine2 = calloc((size_t)most + 1, sizeof *mine2), *all2 = NULL;
        int procs2 = 0;
        if (!mine2) {
            rc = mpmd_error_set(err, MPMD_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(mine2, node, (size_t)nn * sizeof *node);
        if (tr->agree(mine2, most, &all2, &procs2)) {
            free(mine2), free(all2);
            rc = mpmd_error_set(err, MPMD_ERR_RUNTIME, "comparing the processes' graphs failed");
            goto done;
        }
        const int i = first_difference(all2, most, p);
        char ob[256], tb[160];
        char val[64] = ""; /* a scalar constant's value (a learning rate, say) */
        if (i >= 0 && i < nn && g->nodes[i].data && g->nodes[i].type.dtype == MPMD_F32 &&
            mpmd_type_numel(&g->nodes[i].type) == 1)
            snprintf(val, sizeof val, ", %.9g here", (double)*(const float *)g->nodes[i].data);
        if (i >= 0 && i < nn)
            snprintf(here, sizeof here, "its graph, from %s = %s %s%s on (%d values here, %d on process 0)",
                     mpmd_operand_str(g, i, ob, sizeof ob), g->nodes[i].op->name,
                     mpmd_type_str(&g->nodes[i].type, tb, sizeof tb), val, nn, (int)all[1]);
        else
            snprintf(here, sizeof here, "its graph, from value %%%d on (%d values here, %d on process 0)", i,
                     nn, (int)all[1]);
        free(mine2), free(all2);
    } else if (k == 2) {
        snprintf(here, sizeof here, "the schedule (here %s)", s ? s->name : "the loop");
    } else {
        snprintf(here, sizeof here,
                 "the step's options (here seed %llu, data_parallel %d, fsdp %d, fsdp_gather %d, backend %s)",
                 (unsigned long long)o->seed, o->data_parallel, o->fsdp, (int)o->fsdp_gather,
                 o->backend ? o->backend : "cpu");
    }
    rc = mpmd_error_set(err, MPMD_ERR_INVALID,
                        "the processes of this MPI job built different steps: process %d "
                        "differs from process 0 in %s; every process must build the same graph, schedule and "
                        "options (check that all got the same command line)",
                        p, here);
done:
    free(node), free(all);
    return rc;
}
