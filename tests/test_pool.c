/* The kernel threads' pool (src/util/pool.h): every part of a run runs
 * exactly once, whatever the pool's size and the parts asked for; runs
 * follow each other without losing a wake-up (thousands of short runs with
 * workers that sleep at once, and with workers that watch first); idle
 * workers sleep (a pool left idle uses next to no CPU time) unless the
 * program asks for spinning (OMP_WAIT_POLICY=active); the environment sets
 * the watch as documented; the cores counted are at least one and at most
 * the online CPUs. */
#include "testutil.h"
#include "util/pool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Atomic int *hits; /* [nt] */
    int nt_seen;
    _Atomic int bad;
} count_ctx;

static void count(void *ctx, int t, int nt) {
    count_ctx *c = ctx;
    if (nt != c->nt_seen || t < 0 || t >= nt)
        atomic_store(&c->bad, 1);
    else
        atomic_fetch_add(&c->hits[t], 1);
}

/* n runs of nt parts each on p: each part exactly once per run */
static int runs_exact(mpmd_pool *p, int nt, int n) {
    _Atomic int *hits = calloc((size_t)nt, sizeof *hits);
    count_ctx c = {hits, nt, 0};
    for (int r = 0; r < n; r++)
        mpmd_pool_run(p, nt, count, &c);
    int ok = !atomic_load(&c.bad);
    for (int t = 0; t < nt; t++)
        ok &= atomic_load(&hits[t]) == n;
    free(hits);
    return ok;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t))
        ;
}

/* CPU time the process uses while p sits idle for `ms`, as a share of it */
static double idle_cpu_share(mpmd_pool *p, long ms) {
    _Atomic int hits[4] = {0};
    count_ctx c = {hits, 4, 0};
    mpmd_pool_run(p, 4, count, &c); /* the workers have just worked */
    double c0 = cpu_seconds();
    nap_ms(ms);
    return (cpu_seconds() - c0) / (ms * 1e-3);
}

static mpmd_pool *pool_with(const char *wait_policy, const char *spin_us, int threads) {
    if (wait_policy)
        setenv("OMP_WAIT_POLICY", wait_policy, 1);
    else
        unsetenv("OMP_WAIT_POLICY");
    if (spin_us)
        setenv("MPMD_POOL_SPIN_US", spin_us, 1);
    else
        unsetenv("MPMD_POOL_SPIN_US");
    char err[200];
    mpmd_pool *p = mpmd_pool_new(threads, err, sizeof err);
    if (!p) fprintf(stderr, "mpmd_pool_new: %s\n", err);
    return p;
}

int main(void) {
    /* the watch the environment sets */
    unsetenv("MPMD_POOL_SPIN_US");
    unsetenv("OMP_WAIT_POLICY");
    CHECK(mpmd_pool_spin_us() == MPMD_POOL_SPIN_DEFAULT_US, "no variables: the default watch");
    setenv("OMP_WAIT_POLICY", "passive", 1);
    CHECK(mpmd_pool_spin_us() == 0, "OMP_WAIT_POLICY=passive: workers sleep at once");
    setenv("OMP_WAIT_POLICY", "ACTIVE", 1);
    CHECK(mpmd_pool_spin_us() < 0, "OMP_WAIT_POLICY=active: workers watch without limit");
    setenv("MPMD_POOL_SPIN_US", "7", 1);
    CHECK(mpmd_pool_spin_us() == 7, "MPMD_POOL_SPIN_US wins over OMP_WAIT_POLICY");
    setenv("MPMD_POOL_SPIN_US", "many", 1);
    CHECK(mpmd_pool_spin_us() < 0, "MPMD_POOL_SPIN_US that is not a number is ignored");

    /* no pool, and a pool of one: every part on the caller */
    CHECK(runs_exact(NULL, 5, 3), "no pool: every part once per run");
    mpmd_pool *one = pool_with(NULL, NULL, 1);
    CHECK(one && mpmd_pool_threads(one) == 1, "a pool of one thread starts no worker");
    CHECK(runs_exact(one, 3, 3), "a pool of one: every part once per run");
    mpmd_pool_free(one);

    /* parts fewer than, equal to and more than the threads, many runs; with
     * workers that sleep at once (every run wakes them) and that watch */
    const char *spins[] = {"0", "50"};
    for (int s = 0; s < 2; s++) {
        mpmd_pool *p = pool_with(NULL, spins[s], 4);
        CHECK(p && mpmd_pool_threads(p) == 4, "a pool of 4 threads (watch %s us)", spins[s]);
        if (!p) continue;
        CHECK(runs_exact(p, 2, 3000), "2 parts on 4 threads, 3000 runs (watch %s us)", spins[s]);
        CHECK(runs_exact(p, 4, 3000), "4 parts on 4 threads, 3000 runs (watch %s us)", spins[s]);
        CHECK(runs_exact(p, 11, 1000), "11 parts on 4 threads, 1000 runs (watch %s us)", spins[s]);
        CHECK(runs_exact(p, 1, 100), "1 part on 4 threads (watch %s us)", spins[s]);
        mpmd_pool_free(p);
    }

    /* idle workers sleep: by default and with OMP_WAIT_POLICY=passive, a
     * pool of 4 threads left idle for 300 ms uses under 5% of one core
     * (the watch is 50 us); with OMP_WAIT_POLICY=active its 3 workers spin */
    mpmd_pool *d = pool_with(NULL, NULL, 4);
    double share = d ? idle_cpu_share(d, 300) : 1;
    CHECK(share < 0.05, "idle default pool: %.3f of a core used while idle (< 0.05)", share);
    mpmd_pool_free(d);
    mpmd_pool *q = pool_with("passive", NULL, 4);
    share = q ? idle_cpu_share(q, 300) : 1;
    CHECK(share < 0.05, "idle pool with OMP_WAIT_POLICY=passive: %.3f of a core (< 0.05)", share);
    mpmd_pool_free(q);
    mpmd_pool *act = pool_with("active", NULL, 3);
    share = act ? idle_cpu_share(act, 300) : 0;
    CHECK(share > 0.3, "idle pool with OMP_WAIT_POLICY=active: its workers spin (%.2f of a core)", share);
    CHECK(act && runs_exact(act, 3, 1000), "spinning workers still run every part once");
    mpmd_pool_free(act); /* stops workers that never sleep */

    char why[128];
    int cores = mpmd_cores_why(why, sizeof why);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(cores >= 1 && cores <= online && strstr(why, "CPU") != NULL,
          "cores this process may use: %d of %ld online (%s)", cores, online, why);
    return tu_report("test_pool");
}
