/* backend.h - what the runtime needs of a device: buffers, copies,
 * kernels, the loop fold, the replica combine, and a queue to wait on.
 *
 * A backend is a table of functions registered by name ("cpu", "cuda").
 * Each rank opens its own instance (the `dev` pointer every member takes:
 * the CPU's thread count, or a GPU, a stream and a cuBLAS handle), and
 * every byte of a step lives in buffers that instance allocated. Work is queued in order on the instance:
 * a kernel launch, a copy or a fold may return before it has run (CUDA) or
 * after (CPU); `sync` waits for everything queued, and events order one
 * instance's queue after a point in another's (a receive after its send).
 * Callers never touch a buffer's bytes: data enters with `upload`, leaves
 * with `download`, and moves with `copy`.
 *
 * Kernels are looked up by op descriptor; each backend keeps one table per
 * op family (src/backend/<name>/<family>.c or .cu). A kernel gets the node,
 * its input and output buffers and the instance, and returns 0 or writes a
 * message. A new backend fills an mpmd_backend and adds itself to the list
 * in backend.c.
 */
#ifndef MPMD_BACKEND_H
#define MPMD_BACKEND_H

#include "graph/graph.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mpmd_kargs {
    const mpmd_graph *g;
    const mpmd_node *node;
    void *out;                       /* output buffer (may alias in[node->op->inplace]) */
    void *const *in;                 /* input buffers */
    const mpmd_type *const *in_type; /* input types */
    int nthreads;                    /* CPU threads this kernel may use */
    void *scratch;                   /* scratch of the size the entry asked for, or NULL */
    int mb;                          /* microbatch index inside the loop body, else 0 */
    char *err;                       /* message buffer for errors found at launch */
    size_t err_len;
    void *dev; /* the backend's per-rank instance */
} mpmd_kargs;

/* Returns 0, or non-zero after writing a message to a->err. */
typedef int (*mpmd_kernel_fn)(const mpmd_kargs *a);
/* Scratch bytes a kernel needs for this node (0: none). */
typedef size_t (*mpmd_scratch_fn)(const mpmd_graph *g, const mpmd_node *n);

/* What a kernel reads and writes itself besides f32 and i32. A float value
 * in a dtype the kernel does not take (bf16, f16) is widened to f32 by the
 * backend before the kernel runs and its output rounded back after (see
 * `launch`): the same numbers as a native kernel that computes in f32 and
 * rounds once on store, the rule every 16-bit kernel follows. */
enum { MPMD_KERNEL_BF16 = 1u << 0, MPMD_KERNEL_F16 = 1u << 1 };

typedef struct mpmd_kernel {
    const mpmd_op_desc *op;
    mpmd_kernel_fn fn;
    mpmd_scratch_fn scratch;
    unsigned dtypes; /* MPMD_KERNEL_*: 16-bit floats the kernel takes natively */
} mpmd_kernel;

/* 1 when kernel k takes every dtype of node n's operands and output itself
 * (f32 and i32 always; bf16, f16 as its flags say). */
int mpmd_kernel_native(const mpmd_kernel *k, const mpmd_graph *g, const mpmd_node *n);

/* The workspace a launch of k for node n needs, the size of kargs.scratch
 * the runtime passes: the kernel's own scratch first, then (when k does
 * not take every dtype of n natively) one f32 block per 16-bit operand and
 * one for a 16-bit result. Planned with the rank's memory; a launch
 * allocates nothing. */
size_t mpmd_kernel_workspace(const mpmd_kernel *k, const mpmd_graph *g, const mpmd_node *n);

/* dst (dtype `to`) = src (dtype `from`), n elements, queued on dev. */
typedef int (*mpmd_convert_fn)(void *dev, void *dst, mpmd_dtype to, const void *src, mpmd_dtype from,
                               int64_t n);
/* Run k on f32 copies of the 16-bit operands it does not take natively, in
 * the widening part of a->scratch, and round its result back once: the
 * backends' launch when mpmd_kernel_native says no. */
int mpmd_launch_widened(void *dev, const mpmd_kernel *k, const mpmd_kargs *a, mpmd_convert_fn convert);

typedef struct mpmd_backend {
    const char *name;
    /* Buffers are ordinary host memory (the CPU): inputs may be shared
     * between ranks and storage read in place. */
    int host_memory;
    /* What runs best here, for programs' defaults (mpmd_backend_defaults_of):
     * the compute dtype, and whether the fused attention op (1) or the
     * composed ops (0) are the faster attention. */
    mpmd_dtype compute;
    int fused_attention;
    /* The device: whether it is here, its instances (one per rank), what
     * they hold, the host memory it copies from fastest. */
    struct {
        /* 0 when this backend can run here; else non-zero with the reason
         * ("built without CUDA", "no CUDA device: ..."). */
        int (*available)(char *why, size_t len);
        /* Whether this process can map what the backend's libraries map for
         * `threads` threads computing at once, its own buffers already
         * allocated (CPU: OpenBLAS's work buffer per thread, which it retries
         * forever when the address-space limit refuses it): 0, or non-zero
         * with the reason and what to do. NULL: nothing to check. */
        int (*room)(int threads, char *why, size_t len);
        /* One instance for pipeline rank `rank` (of `ranks` in this process)
         * with `nthreads` CPU threads; NULL with a message on failure. */
        void *(*open)(int rank, int nthreads, char *err, size_t len);
        void (*close)(void *dev);
        /* Make the calling thread use this instance (a GPU: its device). */
        void (*enter)(void *dev);
        /* What this instance holds: *peak the most bytes of buffers from alloc
         * at once (as rounded), *own what it keeps for itself (CUDA: the cuBLAS
         * workspace and error words). Counted by the backend, for comparing
         * with the memory plan. */
        void (*memory)(void *dev, size_t *peak, size_t *own);
        /* Host memory that copies to and from this backend's buffers move
         * fastest (CUDA: page-locked), for staging messages; NULL where plain
         * malloc is as good. host_alloc returns NULL when out of memory. */
        void *(*host_alloc)(size_t bytes);
        void (*host_free)(void *p);
    } device;
    /* The queue of an instance: its buffers, the copies in and out, waiting,
     * ordering between instances, timing and recording. */
    struct {
        /* A buffer of `bytes` (aligned for every dtype), NULL when out of memory. */
        void *(*alloc)(void *dev, size_t bytes);
        void (*free)(void *dev, void *p);
        /* An allocation of b bytes takes mpmd_backend_alloc_bytes(be, b): b
         * rounded up to this granule. */
        size_t granule;
        /* host -> buffer; `src` may be reused when the call returns. */
        int (*upload)(void *dev, void *dst, const void *src, size_t bytes);
        /* buffer -> host, after everything queued on dev; the bytes are there
         * when the call returns. */
        int (*download)(void *dev, void *dst, const void *src, size_t bytes);
        /* buffer -> buffer, queued on dev. */
        int (*copy)(void *dev, void *dst, const void *src, size_t bytes);
        /* Wait for everything queued on dev; non-zero with a message when
         * queued work failed (a kernel fault, an id out of range). */
        int (*sync)(void *dev, char *err, size_t len);
        /* A point in dev's queue (NULL where work runs when queued, as on the
         * CPU); another instance's later work waits for it with event_wait. */
        void *(*event_record)(void *dev);
        int (*event_wait)(void *dev, void *ev);
        void (*event_free)(void *dev, void *ev);
        /* Timing an asynchronous queue (NULL where work runs when queued, as on
         * the CPU, whose ops the host clock times): a mark is a point in dev's
         * queue that records when the device reached it; mark_seconds is the
         * time between two marks once dev has been synced (negative when it
         * cannot tell). */
        void *(*mark)(void *dev);
        double (*mark_seconds)(void *dev, void *from, void *to);
        void (*mark_free)(void *dev, void *m);
        /* Recording queued work once and replaying it (NULL where there is
         * nothing to gain, as on the CPU): between capture_begin and
         * capture_end nothing runs, every kernel, copy and fold queued on dev is
         * recorded instead; capture_end returns the recording (NULL with a
         * message on failure, the capture ended either way), replay queues it
         * again with the same buffers and arguments. */
        int (*capture_begin)(void *dev, char *err, size_t len);
        void *(*capture_end)(void *dev, char *err, size_t len);
        int (*replay)(void *dev, void *graph, char *err, size_t len);
        void (*graph_free)(void *dev, void *graph);
    } queue;
    /* The kernels: an op's kernel and how it is run, the loop's and the
     * mesh's reductions. */
    struct {
        /* The kernel for an op, or NULL. */
        const mpmd_kernel *(*find)(const mpmd_op_desc *op);
        /* Fold microbatch mb's x into a loop reduction's accumulator acc (in
         * microbatch order, as mpmd_cpu_fold does), queued on dev. */
        int (*fold)(void *dev, const mpmd_graph *g, const mpmd_node *reduce, void *acc, const void *x,
                    int mb);
        /* out = the combination of the first `count` elements of loop result
         * `n`'s replica buffers (the mean for ADD, the max for MAX), summed in
         * replica order, queued on dev: the whole value, or (FSDP's
         * reduce-scatter) one replica's part with every pointer at its start.
         * bufs must be complete (their writers synced). */
        int (*combine)(void *dev, const mpmd_graph *g, const mpmd_node *n, void *const *bufs, int replicas,
                       void *out, int64_t count);
        /* Tensor parallelism (src/ops/collective.c): what model rank m of M
         * computes for collective `node` (all_reduce, all_gather,
         * reduce_scatter) from the ranks' inputs ins[0 .. M), into out, queued
         * on dev: sums in rank order in f32, so every rank gets the same bits.
         * The inputs are this backend's buffers, complete, and readable from
         * dev (in-process model ranks share a device); the caller waits for
         * the queue before any input changes. NULL: no tensor parallelism. */
        int (*model_combine)(void *dev, const mpmd_graph *g, int node, int m, int M, const void *const *ins,
                             void *out, char *err, size_t len);
        /* The model-axis ops that read only the rank's own values (pvary,
         * axis_slice, the vocabulary-parallel axis_embedding, axis_pick and
         * their gradients) for model rank m: out from in[] (the node's inputs),
         * queued on dev. */
        int (*model_local)(void *dev, const mpmd_graph *g, int node, int m, void *const *in, void *out,
                           char *err, size_t len);
        /* acc (host memory, util/exact.h) += the exact sum of the squares of
         * the f32 vectors x[i] of count[i] elements each, after everything
         * queued on dev: the partial sums of a global norm, the same bits
         * however they are split and added. NULL: this backend has none. */
        int (*sumsq)(void *dev, int n, const void *const *x, const int64_t *count, uint32_t *acc, char *err,
                     size_t len);
        /* Run kernel k: widen the 16-bit operands k does not take natively to
         * f32, run it, round its output back (mpmd_kernel_native). */
        int (*launch)(void *dev, const mpmd_kernel *k, const mpmd_kargs *a);
    } kernels;
} mpmd_backend;

static inline size_t mpmd_backend_alloc_bytes(const mpmd_backend *be, size_t bytes) {
    size_t q = be->queue.granule ? be->queue.granule : 1;
    return ((bytes ? bytes : 1) + q - 1) / q * q;
}

/* The backend of this name, or NULL. NULL or "" is "cpu". */
const mpmd_backend *mpmd_backend_get(const char *name);
/* "cpu, cuda": the backends this build has, for messages. */
const char *mpmd_backend_names(void);
/* The backends compiled in. */
extern const mpmd_backend mpmd_backend_cpu;
#ifdef MPMD_HAVE_CUDA
extern const mpmd_backend mpmd_backend_cuda;
#endif

/* Run the kernel of value `node` (or an assign) with inputs from ptr(ctx,
 * v) and output `out`. Returns 0, or non-zero with a message in err. */
typedef void *(*mpmd_ptr_fn)(void *ctx, int value);
int mpmd_backend_run(const mpmd_backend *be, void *dev, const mpmd_graph *g, int node, const mpmd_kernel *k,
                     void *out, mpmd_ptr_fn ptr, void *ctx, int nthreads, void *scratch, int mb, char *err,
                     size_t errlen);

/* Host room for a launch's operand lists (pointers, types and flattened
 * types, cap of each) when a node has more operands than fit on the stack
 * (MPMD_LAUNCH_SMALL): the runtime plans one per rank for the graph's
 * widest node, so that a launch allocates nothing. */
enum { MPMD_LAUNCH_SMALL = 8 };
typedef struct mpmd_launch_room {
    void **in;
    const mpmd_type **ty;
    mpmd_type *flat;
    int cap;
} mpmd_launch_room;

/* The same for a part of the values (FSDP's shards, run after the loop by
 * element-wise ops): node `node` and each operand i with part[i] set are
 * seen as flat vectors of `count` elements (part NULL: none is); the
 * others as they are. A node of more than MPMD_LAUNCH_SMALL operands lists
 * them in `room` (NULL, or too small: allocated for the call). */
int mpmd_backend_run_part(const mpmd_backend *be, void *dev, const mpmd_graph *g, int node,
                          const mpmd_kernel *k, void *out, mpmd_ptr_fn ptr, void *ctx, int nthreads,
                          void *scratch, int mb, const unsigned char *part, int64_t count,
                          const mpmd_launch_room *room, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
