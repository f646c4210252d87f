/* checkpoint_view.h - what checkpoint.c (views, saving) and
 * checkpoint_load.c (loading, inspection) share: a step's state as a view
 * of named entries, one per state value, with each holder's storage. */
#ifndef MPMD_CHECKPOINT_VIEW_H
#define MPMD_CHECKPOINT_VIEW_H

#include "mpmd_checkpoint.h"

#include "graph/graph.h"

#define FORMAT_NAME "mpmd-checkpoint"
#define WEIGHTS_FORMAT "mpmd-weights"

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

/* A file dtype a load reads (F32, BF16, F16, I32). */
int ckpt_loadable_dtype(const char *file_dtype);
/* A tensor of file_dtype loads into a value of dtype d. */
int ckpt_loads_into(const char *file_dtype, mpmd_dtype d);
/* Put "who: " in front of an error message filled by a helper; returns rc. */
mpmd_status ckpt_prefixed(mpmd_error *err, mpmd_status rc, const char *who);
/* The safetensors dtype a checkpoint stores d as. */
const char *ckpt_st_dtype(mpmd_dtype d);
/* The view of st's state (params_only: its parameters alone); free with
 * ckpt_view_free. */
mpmd_status ckpt_step_view(mpmd_step *st, const char *who, int params_only, state_view *v, mpmd_error *err);
/* "F32[4,16]": a type in the file's notation, for messages. */
void ckpt_type_str(const char *dtype, int ndim, const int64_t *dim, char *buf, size_t len);
/* Write every host copy back to its device holder. */
mpmd_status ckpt_view_commit(const state_view *v, const char *who, mpmd_error *err);
void ckpt_view_free(state_view *v);

#endif
