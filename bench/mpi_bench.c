/* mpi_bench: the MPI runtime against the in-process runtime, same plan.
 *
 *   tests/mpirun.sh shm 2 build/bench/mpi_bench     (make bench runs it)
 *
 * The GPT small configuration (4 layers, width 256, 4 heads, vocab 8192,
 * seq 64, batch 8 in 8 microbatches) as 2 stages on 2 ranks with Std1F1B,
 * one kernel thread per rank. Process 0 first times the in-process runtime
 * (both ranks as threads) while process 1 sleeps; then both processes time
 * the MPI runtime. Both runs are checked against each other (same loss
 * bits) before timing counts. Prints one JSON line: median step times, their
 * ratio (target: MPI within 10% of in-process), and each rank's time
 * waiting on communication per step.
 */
#include "program.h"
#include "bench_util.h"
#include "gpt_model.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 7

static void die(const char *what, const char *msg) {
    fprintf(stderr, "mpi_bench: %s: %s\n", what, msg);
    mpmd_mpi_abort(1);
}

int main(int argc, char **argv) {
    program_start("mpi_bench", argv);
    mpmd_error err;
    if (mpmd_mpi_init(&argc, &argv, &err)) die("init", err.msg);
    int w = mpmd_mpi_world_rank(), np = mpmd_mpi_world_size();
    if (np != 2) {
        if (w == 0) fprintf(stderr, "mpi_bench: run with 2 processes: tests/mpirun.sh shm 2 %s\n", argv[0]);
        mpmd_mpi_finalize();
        return 2;
    }
    gpt_config cfg = gpt_config_default();
    cfg.vocab = 8192, cfg.seq = 64, cfg.width = 256, cfg.heads = 4, cfg.layers = 4;
    cfg.batch = 8, cfg.microbatches = 8, cfg.stages = 2;
    gpt_model m;
    if (gpt_build(&cfg, 1, &m, &err)) die("build", err.msg);
    mpmd_schedule *s;
    if (mpmd_schedule_std1f1b(2, 8, &s, &err)) die("schedule", err.msg);
    size_t nb = (size_t)(cfg.batch * cfg.seq) * sizeof(int32_t);
    int32_t *tok = malloc(nb), *tgt = malloc(nb);
    gpt_random_batch(cfg.vocab, cfg.batch, cfg.seq, 3, 0, tok, tgt);

    /* 1. in-process, on process 0 only */
    double local[STEPS];
    float local_loss = 0;
    if (w == 0) {
        mpmd_step_opts o = MPMD_STEP_DEFAULTS;
        o.threads_per_rank = 1;
        mpmd_step *st = mpmd_jit_with_loop(m.g, s, &o, &err);
        if (!st) die("jit (local)", err.msg);
        for (int k = 0; k < STEPS + 1; k++) {
            mpmd_step_set_input(st, m.tokens, tok, nb);
            mpmd_step_set_input(st, m.targets, tgt, nb);
            double t0 = bench_now();
            if (mpmd_step_run(st)) die("run (local)", mpmd_step_error(st));
            if (k > 0) local[k - 1] = bench_now() - t0;
            if (k == 0) mpmd_step_read(st, m.loss, &local_loss, sizeof local_loss);
        }
        mpmd_step_free(st);
        int done = 1;
        MPI_Send(&done, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
    } else {
        /* wait without spinning, so the in-process run has both cores */
        int flag = 0, done;
        while (!flag) {
            MPI_Iprobe(0, 0, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            if (!flag) nanosleep(&(struct timespec){0, 10000000}, NULL);
        }
        MPI_Recv(&done, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }

    /* 2. MPI: one rank per process */
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    o.threads_per_rank = 1;
    o.runtime = MPMD_RUNTIME_MPI;
    mpmd_step *st = mpmd_jit_with_loop(m.g, s, &o, &err);
    if (!st) die("jit (mpi)", err.msg);
    mpmd_step_set_recording(st, 1);
    double dist[STEPS], wait[STEPS];
    float mpi_loss = 0;
    for (int k = 0; k < STEPS + 1; k++) {
        mpmd_step_set_input(st, m.tokens, tok, nb);
        mpmd_step_set_input(st, m.targets, tgt, nb);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        if (mpmd_step_run(st)) die("run (mpi)", mpmd_step_error(st));
        double t = bench_now() - t0, tmax;
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (k == 0) mpmd_step_gather(st, m.loss, &mpi_loss, sizeof mpi_loss);
        if (k > 0) {
            dist[k - 1] = tmax;
            mpmd_step_stats stats;
            wait[k - 1] = 0;
            if (mpmd_step_summary(st, &stats, &err) == MPMD_OK) {
                wait[k - 1] = stats.ranks[w].wait_ms;
                mpmd_step_stats_free(&stats);
            }
        }
    }
    double my_wait = bench_median(wait, STEPS), waits[2];
    MPI_Gather(&my_wait, 1, MPI_DOUBLE, waits, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (w == 0) {
        if (memcmp(&local_loss, &mpi_loss, sizeof mpi_loss) != 0) {
            fprintf(stderr, "mpi_bench: the MPI run's loss %.9g differs from the in-process run's %.9g\n",
                    mpi_loss, local_loss);
            mpmd_mpi_abort(1);
        }
        double lm = 1e3 * bench_median(local, STEPS), dm = 1e3 * bench_median(dist, STEPS);
        printf(
            "{\"bench\": \"mpi_vs_local\", \"model\": \"gpt_small_4l\", \"schedule\": \"%s\", \"ranks\": 2, "
            "\"threads_per_rank\": 1, \"local_ms_per_step\": %.2f, \"mpi_ms_per_step\": %.2f, "
            "\"mpi_over_local\": %.3f, \"mpi_wait_ms_per_step\": [%.2f, %.2f], \"target_max\": 1.10}\n",
            s->name, lm, dm, dm / lm, waits[0], waits[1]);
    }
    mpmd_step_free(st);
    mpmd_schedule_free(s);
    gpt_model_free(&m);
    free(tok), free(tgt);
    mpmd_mpi_finalize();
    return 0;
}
