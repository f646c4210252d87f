/* shape_plan.c - host-side planning shared by the CPU and CUDA backends
 * (see shape_plan.h). */
#include "backend/shape_plan.h"

#include "ops/optim.h"

#include <string.h>

/* Dimension d of type t aligned to rank n (1 where t has no such axis). */
static int64_t aligned_dim(const mpmd_type *t, int n, int d) {
    int k = d - (n - t->ndim);
    return k >= 0 ? t->dim[k] : 1;
}

/* ---- broadcasting --------------------------------------------------------------------- */

void mpmd_bcast_plan_make(mpmd_bcast_plan *p, const mpmd_type *out, const mpmd_type *ta,
                          const mpmd_type *tb) {
    int fa[MPMD_MAX_DIMS], fb[MPMD_MAX_DIMS];
    int n = out->ndim, ng = 0;
    for (int d = 0; d < n; d++) {
        int64_t od = out->dim[d];
        if (od == 1) continue;
        int full_a = aligned_dim(ta, n, d) == od;
        int full_b = tb ? aligned_dim(tb, n, d) == od : full_a;
        if (ng > 0 && fa[ng - 1] == full_a && fb[ng - 1] == full_b) {
            p->size[ng - 1] *= od;
        } else {
            fa[ng] = full_a;
            fb[ng] = full_b;
            p->size[ng++] = od;
        }
    }
    if (ng == 0) { /* a single element */
        fa[0] = fb[0] = 1;
        p->size[ng++] = 1;
    }
    p->ng = ng;
    int64_t stride_a = 1, stride_b = 1;
    for (int k = ng - 1; k >= 0; k--) {
        p->sa[k] = fa[k] ? stride_a : 0;
        p->sb[k] = fb[k] ? stride_b : 0;
        if (fa[k]) stride_a *= p->size[k];
        if (fb[k]) stride_b *= p->size[k];
    }
}

/* ---- sum_to ------------------------------------------------------------------------------ */

void mpmd_sum_plan_make(mpmd_sum_plan *p, const mpmd_type *in, const mpmd_type *out) {
    int n = in->ndim, ng = 0, any_red = 0;
    for (int d = 0; d < n; d++) {
        int64_t id = in->dim[d];
        if (id == 1) continue;
        int r = aligned_dim(out, n, d) != id;
        if (ng > 0 && p->red[ng - 1] == r) {
            p->size[ng - 1] *= id;
        } else {
            p->red[ng] = r;
            p->size[ng++] = id;
        }
        any_red |= r;
    }
    p->ng = ng;
    p->any_red = any_red;
    int64_t sx = 1, so = 1;
    for (int k = ng - 1; k >= 0; k--) {
        p->sx[k] = sx;
        p->so[k] = p->red[k] ? 0 : so;
        sx *= p->size[k];
        if (!p->red[k]) so *= p->size[k];
    }
    p->in_numel = mpmd_type_numel(in);
    p->out_numel = mpmd_type_numel(out);
}

/* ---- reductions ---------------------------------------------------------------------------- */

void mpmd_reduce_groups_make(mpmd_reduce_groups *g, const mpmd_type *t, int64_t mask) {
    int m = 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->dim[i];
        int r = (int)((mask >> i) & 1);
        if (d == 1) continue;
        if (m > 0 && g->red[m - 1] == r) {
            g->size[m - 1] *= d;
        } else {
            g->size[m] = d;
            g->red[m] = r;
            m++;
        }
    }
    g->m = m;
    int64_t s = 1;
    for (int k = m - 1; k >= 0; k--) {
        g->stride[k] = s;
        s *= g->size[k];
    }
    g->inner = m > 0 && g->red[m - 1];
    g->len = m > 0 ? g->size[m - 1] : 1;
}

/* ---- permute ---------------------------------------------------------------------------------- */

void mpmd_perm_plan_make(mpmd_perm_plan *P, const mpmd_type *t, const int64_t *perm) {
    memset(P, 0, sizeof *P);
    int newax[MPMD_MAX_DIMS]; /* input axis -> index among the axes of size > 1, or -1 */
    int keep[MPMD_MAX_DIMS], nk = 0;
    for (int i = 0; i < t->ndim; i++) {
        newax[i] = t->dim[i] != 1 ? nk : -1;
        if (t->dim[i] != 1) keep[nk++] = i;
    }
    /* output-order runs of consecutive input axes */
    int gstart[MPMD_MAX_DIMS], glen[MPMD_MAX_DIMS], ng = 0;
    for (int i = 0; i < t->ndim; i++) {
        int p = newax[perm[i]];
        if (p < 0) continue;
        if (ng > 0 && p == gstart[ng - 1] + glen[ng - 1]) {
            glen[ng - 1]++;
        } else {
            gstart[ng] = p;
            glen[ng] = 1;
            ng++;
        }
    }
    /* rank of each run in input order */
    int m = ng;
    P->m = m;
    for (int j = 0; j < ng; j++) {
        int rank = 0;
        for (int k = 0; k < ng; k++)
            rank += gstart[k] < gstart[j];
        int64_t s = 1;
        for (int l = 0; l < glen[j]; l++)
            s *= t->dim[keep[gstart[j] + l]];
        P->q[j] = rank;
        P->in_size[rank] = s;
    }
    int identity = 1;
    for (int k = 0; k < m; k++)
        identity &= P->q[k] == k;
    P->identity = identity;
    int64_t s = 1;
    for (int k = m - 1; k >= 0; k--) {
        P->istr[k] = s;
        s *= P->in_size[k];
    }
    s = 1;
    for (int k = m - 1; k >= 0; k--) {
        P->ostr[k] = s;
        s *= P->in_size[P->q[k]];
    }
    if (identity) return;
    P->last_stays = P->q[m - 1] == m - 1;
    P->ia = P->q[m - 1];
    for (int k = 0; k < m; k++)
        if (P->q[k] == m - 1) P->p = k;
}

/* ---- slice, slice_grad, concat ------------------------------------------------------------------- */

void mpmd_axis_split(const mpmd_type *t, int ax, int64_t *outer, int64_t *d, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < ax; i++)
        *outer *= t->dim[i];
    for (int i = ax + 1; i < t->ndim; i++)
        *inner *= t->dim[i];
    *d = t->dim[ax];
}

/* ---- matmul -------------------------------------------------------------------------------------- */

void mpmd_matmul_dims_make(mpmd_matmul_dims *d, const mpmd_type *ta, const mpmd_type *tb, int64_t flags) {
    int tra = (flags & MPMD_TRANS_A) != 0, trb = (flags & MPMD_TRANS_B) != 0;
    int nd = ta->ndim;
    int64_t m = ta->dim[nd - 2 + tra], k = ta->dim[nd - 1 - tra];
    int64_t n = tb->dim[tb->ndim - 1 - trb];
    int64_t batch = 1;
    for (int i = 0; i < nd - 2; i++)
        batch *= ta->dim[i];
    int shared_b = tb->ndim == 2;
    if (shared_b && !tra) { /* fold the batch into M */
        m *= batch;
        batch = 1;
    }
    d->tra = tra;
    d->trb = trb;
    d->m = m;
    d->n = n;
    d->k = k;
    d->batch = batch;
    d->shared_b = shared_b;
    d->lda = tra ? m : k;
    d->ldb = trb ? k : n;
    d->ldc = n;
    d->sa = m * k;
    d->sb = shared_b ? 0 : k * n;
    d->sc = m * n;
}

/* ---- adamw ----------------------------------------------------------------------------------------- */

void mpmd_adam_consts_make(mpmd_adam_consts *k, const mpmd_node *nd) {
    k->b1 = nd->fa[MPMD_ADAM_B1];
    k->b2 = nd->fa[MPMD_ADAM_B2];
    k->c1 = 1.0f - k->b1;
    k->c2 = 1.0f - k->b2;
    k->bc1 = k->bc2 = 1.0f;
    k->eps = nd->fa[MPMD_ADAM_EPS];
    k->wd = nd->fa[MPMD_ADAM_WD];
    k->lr = 0.0f;
}
