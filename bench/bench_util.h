/* bench_util.h - the timing helpers every benchmark shares: a monotonic
 * clock and the median of a set of samples.
 *
 * Header-only (static inline) so that each benchmark stays one program of
 * one source file, as bench/CMakeLists.txt builds them. */
#ifndef MPMD_BENCH_UTIL_H
#define MPMD_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* MPMD_BENCH_SMOKE=1 (make test runs every benchmark so): the smallest
 * sizes and one repetition, to show that a benchmark runs, timing nothing. */
static inline int bench_smoke(void) {
    const char *v = getenv("MPMD_BENCH_SMOKE");
    return v && *v && *v != '0';
}

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): only differences mean
 * anything. */
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort comparator: doubles in ascending order. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0 .. n-1], n >= 1: the middle sample for odd n, the mean
 * of the two middle ones for even n. Sorts v in place, so afterwards v[0]
 * is the fastest sample and v[n - 1] the slowest (callers rely on that). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
