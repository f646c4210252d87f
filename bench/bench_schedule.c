/* Time to generate and validate a large schedule: Interleaved1F1B with
 * 1024 stages on 512 ranks and 4096 microbatches (8.4 million tasks),
 * and, for comparison, the timed simulation that also records the
 * dispatch order. Prints one JSON line with the medians of several runs.
 *
 *   build/bench/bench_schedule [runs]       (default 5) */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "program.h"
#include "bench_util.h"
#include "mpmd.h"

#include <stdlib.h>

int main(int argc, char **argv) {
    program_start("bench_schedule", argv);
    enum { S = 1024, D = 512, N = 4096, MAX_RUNS = 64 };
    int runs = bench_smoke() ? 1 : argc > 1 ? atoi(argv[1]) : 5;
    if (runs < 1 || runs > MAX_RUNS) runs = 5;
    double gen[MAX_RUNS], val[MAX_RUNS], tot[MAX_RUNS], sim[MAX_RUNS];
    long long tasks = 0;
    mpmd_error err;
    for (int i = 0; i < runs; i++) {
        mpmd_schedule *s;
        double t0 = bench_now();
        if (mpmd_schedule_interleaved1f1b(S, D, N, 0, &s, &err)) {
            fprintf(stderr, "bench_schedule: %s\n", err.msg);
            return 1;
        }
        double t1 = bench_now();
        if (mpmd_schedule_validate(s, &err, NULL)) {
            fprintf(stderr, "bench_schedule: %s\n", err.msg);
            return 1;
        }
        double t2 = bench_now();
        gen[i] = t1 - t0;
        val[i] = t2 - t1;
        tot[i] = t2 - t0;
        tasks = 0;
        for (int r = 0; r < s->num_ranks; r++)
            tasks += s->ranks[r].num_tasks;
        /* The timed simulation with the dispatch order, fewer runs. */
        sim[i] = 0;
        if (i < 3) {
            mpmd_sim *sm;
            double t3 = bench_now();
            if (mpmd_schedule_simulate(s, NULL, &sm, &err, NULL)) {
                fprintf(stderr, "bench_schedule: %s\n", err.msg);
                return 1;
            }
            sim[i] = bench_now() - t3;
            mpmd_sim_free(sm);
        }
        mpmd_schedule_free(s);
    }
    int nsim = runs < 3 ? runs : 3;
    printf(
        "{\"bench\": \"schedule\", \"schedule\": \"Interleaved1F1B\", \"stages\": %d, \"ranks\": %d, "
        "\"microbatches\": %d, \"tasks\": %lld, \"runs\": %d, \"generate_ms\": %.1f, \"validate_ms\": %.1f, "
        "\"generate_and_validate_ms\": %.1f, \"simulate_ms\": %.1f}\n",
        S, D, N, tasks, runs, 1e3 * bench_median(gen, runs), 1e3 * bench_median(val, runs),
        1e3 * bench_median(tot, runs), 1e3 * bench_median(sim, nsim));
    return 0;
}
