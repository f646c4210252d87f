/* bench_threads - a program that links libmpmd and sets no environment
 * variable, against the same program with OMP_WAIT_POLICY=passive.
 *
 * The program is examples/basic (the setup check: every step runs
 * pipelined and unpipelined, and the two must agree bit for bit), with 2
 * ranks and with 4 (one Block per rank), each on this machine as it is and
 * with one core kept busy by another process. Each configuration runs R
 * rounds; a round starts basic once without OMP_WAIT_POLICY and once with
 * it set to passive (in alternating order), and times each run from start
 * to exit. Printed per configuration: the median wall time of each and
 * their ratio (default / passive; the target is at most 1.1).
 *
 *     build/bench/bench_threads [--basic PATH] [--rounds R] [--steps N]
 */
#include "bench_util.h"
#include "mpmd.h"
#include "util/pool.h"

#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MAX_ROUNDS = 64 };

/* Seconds basic took with the given environment change, or -1 if it
 * failed. passive: OMP_WAIT_POLICY=passive, else unset. */
static double run_basic(const char *basic, int ranks, int steps, int passive) {
    char r[16], s[16];
    snprintf(r, sizeof r, "%d", ranks);
    snprintf(s, sizeof s, "%d", steps);
    double t0 = bench_now();
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("MPMD_POOL_SPIN_US");
        if (passive)
            setenv("OMP_WAIT_POLICY", "passive", 1);
        else
            unsetenv("OMP_WAIT_POLICY");
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        execl(basic, basic, "--ranks", r, "--blocks", r, "--steps", s, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) return -1;
    return bench_now() - t0;
}

int main(int argc, char **argv) {
    char basic[PATH_MAX + 32] = "";
    int rounds = bench_smoke() ? 1 : 7, steps = bench_smoke() ? 5 : 100;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--basic") && i + 1 < argc)
            snprintf(basic, sizeof basic, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_threads [--basic PATH] [--rounds R (1-%d)] [--steps N]\n",
                    MAX_ROUNDS);
            return 2;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || steps < 1) {
        fprintf(stderr, "bench_threads: --rounds must be in [1, %d] and --steps positive\n", MAX_ROUNDS);
        return 2;
    }
    if (!*basic) { /* beside this program's build folder: build/bench/.. /examples/basic */
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            fprintf(stderr, "bench_threads: cannot find this program's path; give --basic PATH\n");
            return 2;
        }
        self[n] = '\0';
        snprintf(basic, sizeof basic, "%s/../examples/basic", dirname(self));
    }
    if (access(basic, X_OK)) {
        fprintf(stderr, "bench_threads: %s is not an executable; give --basic PATH\n", basic);
        return 2;
    }
    fprintf(stderr, "bench_threads: %s, %d steps, %d rounds; %d cores this process may use\n", basic, steps,
            rounds, mpmd_cores_available());
    const int ranks[] = {2, 4};
    for (int busy = 0; busy < 2; busy++) {
        pid_t spinner = -1;
        if (busy && (spinner = fork()) == 0)
            for (volatile unsigned long spin = 0;; spin++) {
            }
        for (int k = 0; k < 2; k++) {
            double dflt[MAX_ROUNDS], pass[MAX_ROUNDS];
            int bad = 0;
            for (int r = 0; r < rounds && !bad; r++) {
                int first = r % 2; /* alternate which goes first */
                double a = run_basic(basic, ranks[k], steps, first),
                       b = run_basic(basic, ranks[k], steps, !first);
                pass[r] = first ? a : b;
                dflt[r] = first ? b : a;
                bad = a < 0 || b < 0;
            }
            if (bad) {
                fprintf(stderr, "bench_threads: %s --ranks %d failed\n", basic, ranks[k]);
                if (spinner > 0) kill(spinner, SIGKILL), waitpid(spinner, NULL, 0);
                return 1;
            }
            double md = bench_median(dflt, rounds), mp = bench_median(pass, rounds);
            printf("{\"program\": \"basic\", \"ranks\": %d, \"steps\": %d, \"other_process_busy\": %s, "
                   "\"s_no_variable\": %.3f, \"s_omp_wait_policy_passive\": %.3f, \"ratio\": %.3f, "
                   "\"target\": 1.1, \"rounds\": %d}\n",
                   ranks[k], steps, busy ? "true" : "false", md, mp, md / mp, rounds);
            fflush(stdout);
        }
        if (spinner > 0) kill(spinner, SIGKILL), waitpid(spinner, NULL, 0);
    }
    return 0;
}
