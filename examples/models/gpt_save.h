/* gpt_save.h - the checkpoints of a gpt (or llama) training run: a series
 * of periodic checkpoints kept to the newest few, finding the newest one
 * that loads, writing them on a background thread, and stopping a run on
 * SIGTERM, SIGINT or SIGUSR1 without losing its steps.
 *
 * Series names. With rotation (gpt --save-every N --keep-last K) the
 * periodic checkpoints of `--save run.safetensors` are
 *
 *     run.step000120.safetensors        (".stepNNNNNN" before ".safetensors", at least 6 digits)
 *     run.ckpt.step000120               (a path without ".safetensors": appended)
 *
 * in the directory of the path; the final checkpoint is the path itself.
 *
 * Stopping. gpt_stop_install makes SIGTERM, SIGINT (Ctrl-C) and SIGUSR1
 * requests to stop (SIGUSR1: the one Open MPI's mpirun passes on to its
 * processes at once, where it holds a SIGTERM back and then kills them):
 * the first one only sets a flag that the training loop reads after each
 * step (gpt_stop_requested); a second one ends the process at once with
 * exit status 128 + the signal, first removing the temporary file of a
 * checkpoint being written (gpt_stop_arm_temp), so that a stray
 * "<path>.tmp.<pid>..." is not left behind. A signal the process was
 * started with ignored (SIGINT in a script's background job) stays
 * ignored. SIGXFSZ is ignored, so that a file-size limit (ulimit -f) fails
 * a save like a full disk instead of killing the run.
 */
#ifndef GPT_SAVE_H
#define GPT_SAVE_H

#include "gpt_import.h"
#include "gpt_model.h"
#include "mpmd.h"
#include "mpmd_checkpoint.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

/* The series file of `step` for `path` into out (cap bytes). Returns 0, or
 * -1 when it does not fit. */
int gpt_series_name(const char *path, long long step, char *out, size_t cap);

/* Whether `name`, a file name without directory, is a member of the series
 * of `path`; its step in *step. */
int gpt_series_step(const char *path, const char *name, long long *step);

/* Delete the series files of `path` older than `step` but the keep - 1
 * newest of them, so that with the file of `step` `keep` remain. Files of
 * later steps (left by a longer run) are not touched. A file that cannot
 * be deleted is named on `warn`. Returns how many were deleted. */
int gpt_series_rotate(const char *path, long long step, int keep, FILE *warn, const char *prog);

/* A checkpoint of a series, for --resume latest. */
typedef struct gpt_candidate {
    char *path;                   /* owned */
    long long step;               /* the step its header records; when bad, the step in its name (-1: none) */
    int bad;                      /* its header could not be read or checked */
    char why[MPMD_ERROR_MSG_MAX]; /* why, when bad */
    mpmd_checkpoint_info info;    /* when not bad */
} gpt_candidate;

/* The checkpoints of `path`: the file itself and every series file, each
 * with its header read (mpmd_checkpoint_read_info), in the order to try
 * them: newest step first, a bad header at the step its name says (the
 * path itself: first). MPMD_ERR_IO when the directory cannot be read. */
mpmd_status gpt_series_list(const char *path, gpt_candidate **out, int *n, mpmd_error *err);
void gpt_candidates_free(gpt_candidate *c, int n);

/* ---- the model a checkpoint was trained with ------------------------------------ */

/* What rebuilds the model, for a checkpoint's info.config:
 *
 *     arch=gpt2 layers=4 width=128 heads=4 vocab=256 seq=64 tie-embeddings=0
 *     arch=llama ... kv-heads=2 mlp-hidden=344 rope-base=10000 norm-eps=1e-05 rope-scaling=none
 *                                                                 (llama adds these)
 *
 * rope-scaling is "none" or Llama 3.1's "factor,low_freq_factor,
 * high_freq_factor,original_positions" (8,1,4,8192). Other options (lr,
 * batch, microbatches, the layout, precision, dropout, remat) may change
 * when a run resumes and are not recorded. */
void gpt_config_record(const gpt_config *c, char *out, size_t cap);

/* Check the config a checkpoint recorded (gpt_config_record) against the
 * run's: MPMD_ERR_INVALID naming every option that differs with both
 * values ("run.safetensors was trained with --heads 2; this run has
 * --heads 4"). seq counts for gpt (its position table has seq rows), not
 * for llama (rotary positions). A config that records no "arch=" (an older
 * checkpoint, a weights export, another program's text) is not checked:
 * MPMD_OK. */
mpmd_status gpt_config_check_recorded(const gpt_config *c, const char *recorded, const char *file,
                                      mpmd_error *err);

/* Make `c` the model a checkpoint recorded (--resume, --generate from a
 * checkpoint): every model option the record holds and `given` does not
 * say the command line set is taken from it (layers, width, heads, vocab,
 * seq, tie-embeddings; llama's kv-heads, mlp-hidden, rope-base, norm-eps
 * and rope-scaling); then gpt_config_check_recorded, so an option given
 * that contradicts the record is MPMD_ERR_INVALID naming both values, and
 * `c` is unchanged. A key the record lacks (a checkpoint written before
 * norm-eps and rope-scaling were recorded) leaves c's value: the default.
 * A record without "arch=" changes nothing (MPMD_OK). */
mpmd_status gpt_config_from_record(gpt_config *c, const gpt_hf_given *given, const char *recorded,
                                   const char *file, mpmd_error *err);

/* ---- a background writer ---------------------------------------------------- */

/* At most one checkpoint in flight: its snapshot (the state in host
 * memory) and the thread writing it. */
typedef struct gpt_saver {
    pthread_t thread;
    int running;         /* a write was started and its outcome not taken yet (gpt_saver_join) */
    int threaded;        /* on `thread`, not joined yet */
    atomic_int finished; /* the thread has returned */
    mpmd_checkpoint_snapshot *snap;
    char path[4200];
    long long step;
    const char *series; /* rotate this --save path's series after the write, or NULL */
    int keep;
    const char *prog;
    mpmd_status rc;
    mpmd_error err;
} gpt_saver;

/* Write snap to path on a thread of its own (the saver owns snap from
 * here); after a successful write with `series`, rotate it to `keep`
 * files. The saver must not be running. When no thread can be started the
 * write happens here. */
void gpt_saver_start(gpt_saver *s, mpmd_checkpoint_snapshot *snap, const char *path, long long step,
                     const char *series, int keep, const char *prog);
/* Whether a write is in flight and not finished. */
int gpt_saver_busy(gpt_saver *s);
/* Wait for the write in flight, if any; returns its status (MPMD_OK when
 * none), with its message in s->err and its step in s->step. */
mpmd_status gpt_saver_join(gpt_saver *s);

/* Write a checkpoint on this thread (mpmd_step_save), its temporary file
 * armed for a second signal (gpt_stop_arm_temp), then rotate `series`
 * when given and the write succeeded. */
mpmd_status gpt_save_now(mpmd_step *st, const char *path, const mpmd_checkpoint_info *info,
                         const char *series, int keep, const char *prog, mpmd_error *err);

/* ---- stopping on a signal --------------------------------------------------- */

/* Install the handlers (see the top of this file). `say`: print what the
 * first signal does (one process of a job says it). */
void gpt_stop_install(const char *prog, int say);
/* The signal (SIGTERM, SIGINT or SIGUSR1) of the first stop request, 0
 * while none. */
int gpt_stop_requested(void);
/* Arm the handler to remove, on a second signal, the temporary files the
 * atomic writer makes for `path` in this process ("<path>.tmp.<pid>" and
 * its own digits, src/io/atomic_file.h) while `path` is written; NULL
 * disarms. */
void gpt_stop_arm_temp(const char *path);

#endif
