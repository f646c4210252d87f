/* mpmd_checkpoint.h - save and resume training: checkpoints in the
 * safetensors format.
 *
 * A checkpoint holds the whole persistent state of a step (mpmd_graph_state:
 * every parameter and variable, optimizer moments "optim/mu/<param>",
 * "optim/nu/<param>" and the counter "optim/step" included), each tensor under
 * its full name, plus the training step number and the run's seed and RNG
 * state. The file is a plain safetensors file, so PyTorch, JAX, numpy and the
 * Hugging Face tools read it (docs/checkpoints.md shows how).
 *
 * The file does not depend on the pipeline layout: a step saved from a
 * 4-stage, 4-rank pipeline loads into a 2-stage, 2-rank one, or into a
 * one-rank executor, and back, as long as the graphs have the same state
 * names, dtypes and shapes.
 *
 *     mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
 *     info.step = 3;                         // steps completed
 *     info.seed = seed;
 *     if (mpmd_step_save(st, "run.safetensors", &info, &err)) { fprintf(stderr, "%s\n", err.msg); ... }
 *     ...
 *     mpmd_checkpoint_info got;
 *     if (mpmd_exec_load(ex, "run.safetensors", &got, &err)) { fprintf(stderr, "%s\n", err.msg); ... }
 *     for (int64_t step = got.step + 1; step <= total_steps; step++) ...  // steps 4, 5, ...
 *
 * Guarantees.
 * - Saving is atomic: the file is written as "<path>.tmp.<pid>.<random>"
 *   in the same directory, synced to disk, and renamed over <path>; on any failure the
 *   temporary file is removed and an existing <path> is left as it was.
 * - Loading changes nothing unless everything is right: the file is parsed
 *   and checked (structure, checksums of header and data, every name, dtype
 *   and shape against the target) before the first byte of state is
 *   written. A mismatch with the target lists every missing, unexpected and
 *   mis-shaped tensor in one message.
 * - A truncated, corrupted or hostile file is an error that names the file,
 *   the tensor and what is wrong; never a crash, never a partial load.
 * - Saving and loading must not run at the same time as a run of the same
 *   executor or step. Load needs memory for the file's data section once
 *   (it is read and verified in full before anything is copied).
 *
 * Weights exports. mpmd_exec_export_weights / mpmd_step_export_weights
 * write only the trainable parameters (mpmd_graph_params; no optimizer
 * state, no other variables) in F32, BF16 or F16, for inference or for
 * starting another run. The load functions read such a file too: they load
 * the parameters and leave every other state value (optimizer moments,
 * "optim/step", other variables) as it is.
 *
 *     if (mpmd_step_export_weights(st, "model.bf16.safetensors", MPMD_BF16, &err)) ...
 *     ...
 *     if (mpmd_exec_load(ex2, "model.bf16.safetensors", &got, &err)) ...  // got.weights_only == 1
 *
 * Dtypes on load: an f32 value accepts an F32 tensor (copied bit for bit)
 * and a BF16 or F16 one (widened, which is exact); an i32 value accepts
 * I32. A tensor of any other dtype (F64, I8, F8_E4M3, ...) is an
 * MPMD_ERR_FORMAT error naming the tensor and its dtype; a dtype the
 * safetensors format does not define ("FP8") is one as well.
 *
 * Errors: MPMD_ERR_IO (a file that cannot be opened, read, written or
 * renamed), MPMD_ERR_FORMAT (not a valid safetensors file, a checksum that
 * does not match, bad mpmd metadata, a dtype mpmd cannot load),
 * MPMD_ERR_SHAPE (a valid checkpoint of another model: names, dtypes or
 * shapes differ), MPMD_ERR_NOMEM, MPMD_ERR_INVALID (NULL arguments, an
 * export dtype other than f32, bf16 and f16). The message is in err->msg.
 */
#ifndef MPMD_CHECKPOINT_H
#define MPMD_CHECKPOINT_H

#include "mpmd.h"

#ifdef __cplusplus
extern "C" {
#endif

MPMD_API_BEGIN

/* The checkpoint format version this library writes and reads. */
#define MPMD_CHECKPOINT_VERSION 1
/* The weights-export format version this library writes and reads. */
#define MPMD_WEIGHTS_VERSION 1
/* Capacity of mpmd_checkpoint_info.config, terminator included. */
#define MPMD_CHECKPOINT_CONFIG_MAX 512

/* What a checkpoint says besides the tensors; stored in the safetensors
 * "__metadata__" (all values are strings there):
 *   "format": "mpmd-checkpoint", "version": "1",
 *   "step": "3", "seed": "42", "rng_state": "0,0,0,0", "config": "...",
 *   "sha256": <data section>, "header_sha256": <header> (docs/checkpoints.md). */
typedef struct mpmd_checkpoint_info {
    int version;           /* on load: the file's format version; ignored on save */
    int64_t step;          /* training steps completed (>= 0); a resumed run goes on with step + 1 */
    uint64_t seed;         /* the run's seed (initialisation and data order) */
    uint64_t rng_state[4]; /* a caller's RNG state, saved and restored verbatim (zeros when unused) */
    /* Free text kept with the checkpoint, e.g. the model's configuration
     * ("layers=4 width=128 ..."); "" for none. Not interpreted by the loader;
     * a longer text in a file is cut to fit. */
    char config[MPMD_CHECKPOINT_CONFIG_MAX];
    /* On load: 1 when the file was a weights export ("format":
     * "mpmd-weights"): only the parameters were loaded, the optimizer state
     * was left as it was, and version is the export's format version with
     * step, seed, rng_state and config zero/empty. Ignored on save. */
    int weights_only;
} mpmd_checkpoint_info;

#define MPMD_CHECKPOINT_INFO_INIT                                                                            \
    ((mpmd_checkpoint_info){MPMD_CHECKPOINT_VERSION, 0, 0, {0, 0, 0, 0}, {0}, 0})

/* Write the executor's state (every parameter and variable) to `path`.
 * info may be NULL (step 0, seed 0). */
mpmd_status mpmd_exec_save(mpmd_exec *ex, const char *path, const mpmd_checkpoint_info *info,
                           mpmd_error *err);

/* Read `path` into the executor's state; info_out (may be NULL) gets the
 * file's metadata. On any error the state is unchanged. `path` may be a
 * checkpoint (every state value is loaded), a weights export (only the
 * parameters are loaded: optimizer state and other variables are left
 * untouched, info_out->weights_only is 1) or a plain safetensors file
 * (loaded as a checkpoint at step 0). */
mpmd_status mpmd_exec_load(mpmd_exec *ex, const char *path, mpmd_checkpoint_info *info_out, mpmd_error *err);

/* The same for a pipelined step. Each value is written once, from the first
 * rank holding it (mpmd_step_where), replica 0; a value held by several
 * ranks (a tied embedding, "optim/step") or by data-parallel replicas is
 * loaded into every copy. Under the MPI runtime both calls are collective
 * (every process calls them, in the same order as its other collective
 * calls): save gathers each value and process 0 writes the file (the other
 * processes return MPMD_OK without writing, so only process 0 sees a write
 * error); load reads the file on every process (a file system they share)
 * and fills the copies that process holds. */
mpmd_status mpmd_step_save(mpmd_step *st, const char *path, const mpmd_checkpoint_info *info,
                           mpmd_error *err);
mpmd_status mpmd_step_load(mpmd_step *st, const char *path, mpmd_checkpoint_info *info_out, mpmd_error *err);

/* Saving in two halves, so that training need not wait for the disk: a
 * snapshot copies the state to host memory (what mpmd_step_save would
 * write, with info), and mpmd_checkpoint_snapshot_write writes it to a
 * file later, on any thread, while the step runs on. The file is byte for
 * byte the one mpmd_step_save writes at the moment of the snapshot, with
 * the same atomic protocol and errors.
 *
 *     mpmd_checkpoint_snapshot *snap;
 *     if (mpmd_step_snapshot(st, &info, &snap, &err)) ...      // the training thread
 *     ... mpmd_checkpoint_snapshot_write(snap, "run.safetensors", &err) ...  // a writer thread
 *     mpmd_checkpoint_snapshot_free(snap);
 *
 * The snapshot holds the whole state in host memory (mpmd_checkpoint_
 * snapshot_bytes) and nothing of the step: it may be written after the
 * step ran again or was freed. mpmd_step_snapshot must not run at the same
 * time as a run of the step; under the MPI runtime it is collective like
 * mpmd_step_save (every value gathered), and only process 0's snapshot
 * holds the bytes: on the other processes it holds none and writing it
 * returns MPMD_OK without writing. Two writes to one path must not run at
 * the same time (they would share the temporary file). */
typedef struct mpmd_checkpoint_snapshot mpmd_checkpoint_snapshot;
mpmd_status mpmd_step_snapshot(mpmd_step *st, const mpmd_checkpoint_info *info,
                               mpmd_checkpoint_snapshot **out, mpmd_error *err);
mpmd_status mpmd_exec_snapshot(mpmd_exec *ex, const mpmd_checkpoint_info *info,
                               mpmd_checkpoint_snapshot **out, mpmd_error *err);
mpmd_status mpmd_checkpoint_snapshot_write(const mpmd_checkpoint_snapshot *snap, const char *path,
                                           mpmd_error *err);
/* Bytes of state the snapshot holds in this process (0 for NULL and on MPI
 * processes other than 0). */
int64_t mpmd_checkpoint_snapshot_bytes(const mpmd_checkpoint_snapshot *snap);
/* NULL is fine. */
void mpmd_checkpoint_snapshot_free(mpmd_checkpoint_snapshot *snap);

/* Parameters alone, by name, as PyTorch's load_state_dict(strict=False):
 * into an eval step (no optimizer), a step with another optimizer, or part
 * of a model. Every parameter of the step whose name the file has (under
 * `only` and the name map) is set from it; the file's other tensors
 * (optimizer state, parameters this step lacks) are counted as unexpected
 * and left alone, the step's parameters the file lacks as missing and left
 * as they are. A tensor of another shape or dtype is an error, before
 * anything changes. Checksums are checked as for mpmd_step_load. */
typedef struct mpmd_param_load_opts {
    const char *only;      /* load only parameters whose name starts with this; NULL: all */
    const char *from, *to; /* the step's parameter to + X is read from from + X; NULL: same names */
} mpmd_param_load_opts;
typedef struct mpmd_param_load_report {
    int loaded;     /* parameters set */
    int missing;    /* parameters (under `only`) the source lacks */
    int unexpected; /* tensors of the source nothing read */
} mpmd_param_load_report;
mpmd_status mpmd_step_load_params(mpmd_step *st, const char *path, const mpmd_param_load_opts *opts,
                                  mpmd_param_load_report *report, mpmd_error *err);
/* The same from another step of this process, without a file: an eval
 * step shares a training step's parameters (each copy dst holds is set
 * from src's). */
mpmd_status mpmd_step_copy_params(mpmd_step *dst, mpmd_step *src, const mpmd_param_load_opts *opts,
                                  mpmd_param_load_report *report, mpmd_error *err);

/* Write the trainable parameters (mpmd_graph_params, by their full names;
 * no optimizer state, no other variables) to `path` as a safetensors file
 * of `dtype`: MPMD_F32 (bit for bit), MPMD_BF16 or MPMD_F16 (rounded to
 * nearest, ties to even; in F16 a magnitude of 65520 or more becomes
 * infinity).
 * The metadata is {"format": "mpmd-weights", "version": "1", "dtype":
 * "F32" | "BF16" | "F16"} plus the two checksums of a checkpoint. Written
 * atomically like a checkpoint; the load functions read it back (see
 * above). */
mpmd_status mpmd_exec_export_weights(mpmd_exec *ex, const char *path, mpmd_dtype dtype, mpmd_error *err);
/* The same for a pipelined step, as mpmd_step_save: each parameter from its
 * first holder, replica 0; under the MPI runtime collective (every process
 * calls it), gathered, and written by process 0 only. */
mpmd_status mpmd_step_export_weights(mpmd_step *st, const char *path, mpmd_dtype dtype, mpmd_error *err);

/* What an export could not keep, for a program to warn about: values too
 * large for the dtype (a magnitude of 65520 or more in F16, past BF16's
 * largest finite value in BF16) are written as infinities, and values that
 * were NaN or infinite already are written as they are; a model loaded
 * from such a file computes NaN. The tensors holding any, in name order,
 * the first MPMD_EXPORT_REPORT_TENSORS of them named with their counts. */
#define MPMD_EXPORT_REPORT_TENSORS 8
typedef struct mpmd_export_report {
    int64_t overflowed; /* finite values written as infinities */
    int64_t nonfinite;  /* values NaN or infinite before the export */
    int tensors;        /* tensors holding any of those */
    struct {
        char name[128]; /* cut to fit */
        int64_t overflowed, nonfinite;
    } tensor[MPMD_EXPORT_REPORT_TENSORS];
} mpmd_export_report;
/* The exports above, counting into report (zeroed first; may be NULL).
 * Under MPI only process 0, which writes the file, counts. */
mpmd_status mpmd_exec_export_weights_report(mpmd_exec *ex, const char *path, mpmd_dtype dtype,
                                            mpmd_export_report *report, mpmd_error *err);
mpmd_status mpmd_step_export_weights_report(mpmd_step *st, const char *path, mpmd_dtype dtype,
                                            mpmd_export_report *report, mpmd_error *err);

/* Read only the metadata of a checkpoint or weights export (the header is
 * checked, checksum included; the data is not read). For a plain
 * safetensors file without mpmd metadata, info gets version 0, step 0 and
 * seed 0. */
mpmd_status mpmd_checkpoint_read_info(const char *path, mpmd_checkpoint_info *info, mpmd_error *err);

/* Check a checkpoint completely without a model: structure, metadata and
 * both checksums (the data is streamed, not held). With `list` not NULL,
 * print one line per tensor: name, dtype[shape], bytes. */
mpmd_status mpmd_checkpoint_verify(const char *path, FILE *list, mpmd_error *err);

MPMD_API_END

#ifdef __cplusplus
}
#endif

#endif
