/* The built-in schedules: JaxPP's task lists, rule for rule.
 *
 * Every rule here is the one written in docs/schedules.md (which follows
 * shared/SCHEDULES.md). "Emit F(s)" means: the forward of stage s for the
 * next microbatch that (F, s) has not yet had; the builder's per
 * (kind, stage) counters hand microbatches out in order. */
#include "schedule_internal.h"

#include <stdlib.h>

#define F MPMD_TASK_F
#define B MPMD_TASK_B
#define A MPMD_TASK_A
#define W MPMD_TASK_W

static int imin(int a, int b) { return a < b ? a : b; }

/* A builder's first check: somewhere to put the schedule. */
static mpmd_status no_place(const char *fn, mpmd_error *err) {
    return mpmd_error_set(err, MPMD_ERR_INVALID, "%s: no place for the schedule (out is NULL)", fn);
}

/* Counts every schedule needs: S, D, n >= 1 and not absurdly large. */
static mpmd_status check_counts(const char *what, int S, int D, int n, mpmd_error *err) {
    if (S < 1 || D < 1 || n < 1)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: stages, ranks and microbatches must be >= 1; got %d stages, %d ranks, "
                              "%d microbatches",
                              what, S, D, n);
    if (S > SCHED_MAX_COUNT || D > SCHED_MAX_COUNT || n > SCHED_MAX_COUNT)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: at most %d stages, ranks and microbatches; got %d stages, %d ranks, "
                              "%d microbatches",
                              what, SCHED_MAX_COUNT, S, D, n);
    if ((long long)S * n > SCHED_MAX_PAIRS)
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "%s: %d stages x %d microbatches is %lld (stage, microbatch) pairs of 2 or 3 tasks "
            "each; a schedule may have at most %lld pairs (its tasks and their simulation "
            "would need about %.1f GB)",
            what, S, n, (long long)S * n, SCHED_MAX_PAIRS, (double)S * n * 3 * 16 / 1e9);
    return MPMD_OK;
}

/* Allocate, name and prepare a builder; the rule then emits per rank. */
static mpmd_status start(mpmd_schedule_kind kind, int S, int D, int n, int split, int fuse, sched_builder *b,
                         mpmd_error *err) {
    mpmd_schedule *s = sched_alloc(kind, S, D, n, split);
    if (!s) return mpmd_error_set(err, MPMD_ERR_NOMEM, "%s: out of memory", mpmd_schedule_kind_name(kind));
    s->fuse_steady_state = fuse;
    sched_set_name(s);
    for (int st = 0; st < S; st++) {
        if (kind == MPMD_SCHED_DUALPIPEV) /* a V: rank r runs r and 2D-1-r */
            s->stage_rank[st] = st < D ? st : 2 * D - 1 - st;
        else
            s->stage_rank[st] = st % D;
    }
    mpmd_status st = sb_init(b, s, err);
    if (st) mpmd_schedule_free(s);
    return st;
}

static mpmd_status finish(sched_builder *b, mpmd_schedule **out, mpmd_error *err) {
    mpmd_schedule *s = b->s;
    mpmd_status st = sb_finish(b, err);
    if (st) {
        mpmd_schedule_free(s);
        return st;
    }
    *out = s;
    return MPMD_OK;
}

/* The schedules with S == D, stage s on rank s. */
static mpmd_status check_single(mpmd_schedule_kind kind, int S, int n, mpmd_error *err) {
    char what[64];
    snprintf(what, sizeof what, "%s(S=%d, n=%d)", mpmd_schedule_kind_name(kind), S, n);
    return check_counts(what, S, S, n, err);
}

/* GPipe: rank s runs F for microbatches 0..n-1, then B for 0..n-1. */
mpmd_status mpmd_schedule_gpipe(int S, int n, mpmd_schedule **out, mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_gpipe", err);
    sched_builder b;
    mpmd_status st = check_single(MPMD_SCHED_GPIPE, S, n, err);
    if (!st) st = start(MPMD_SCHED_GPIPE, S, S, n, 0, 0, &b, err);
    if (st) return st;
    for (int s = 0; s < S; s++) {
        for (int m = 0; m < n; m++)
            sb_one(&b, s, F, s);
        for (int m = 0; m < n; m++)
            sb_one(&b, s, B, s);
    }
    return finish(&b, out, err);
}

/* 1F1B: a warm-up of w forwards, then B, F, B, F, ... starting with B,
 * leaving out F once all n forwards were emitted, until n backwards. */
static void one_f_one_b(sched_builder *b, int s, int w, int n) {
    for (int i = 0; i < w; i++)
        sb_one(b, s, F, s);
    int nf = w;
    for (int nb = 0; nb < n; nb++) {
        sb_one(b, s, B, s);
        if (nf < n) {
            sb_one(b, s, F, s);
            nf++;
        }
    }
}

/* Std1F1B: w = min(S - s, n). */
mpmd_status mpmd_schedule_std1f1b(int S, int n, mpmd_schedule **out, mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_std1f1b", err);
    sched_builder b;
    mpmd_status st = check_single(MPMD_SCHED_STD1F1B, S, n, err);
    if (!st) st = start(MPMD_SCHED_STD1F1B, S, S, n, 0, 0, &b, err);
    if (st) return st;
    for (int s = 0; s < S; s++)
        one_f_one_b(&b, s, imin(S - s, n), n);
    return finish(&b, out, err);
}

/* Eager1F1B: w = min(2(S - s) - 1, n). */
mpmd_status mpmd_schedule_eager1f1b(int S, int n, mpmd_schedule **out, mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_eager1f1b", err);
    sched_builder b;
    mpmd_status st = check_single(MPMD_SCHED_EAGER1F1B, S, n, err);
    if (!st) st = start(MPMD_SCHED_EAGER1F1B, S, S, n, 0, 0, &b, err);
    if (st) return st;
    for (int s = 0; s < S; s++)
        one_f_one_b(&b, s, imin(2 * (S - s) - 1, n), n);
    return finish(&b, out, err);
}

/* ZeroBubble (ZB-H1): S - s forwards; s pairs (A, F); then the rotation
 * A -> W -> F -> A ...: at each step the next kind of the rotation that has
 * microbatches left is emitted and the rotation continues after it, until
 * all 3n tasks are out. For S = 1 this gives F0 A0 W0 F1 A1 W1 ... */
mpmd_status mpmd_schedule_zerobubble(int S, int n, mpmd_schedule **out, mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_zerobubble", err);
    sched_builder b;
    mpmd_status st = check_single(MPMD_SCHED_ZEROBUBBLE, S, n, err);
    if (st) return st;
    if (n < S)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "ZeroBubble(S=%d, n=%d): needs at least as many microbatches as stages "
                              "(n >= S), got %d microbatches for %d stages",
                              S, n, n, S);
    if ((st = start(MPMD_SCHED_ZEROBUBBLE, S, S, n, 1, 0, &b, err))) return st;
    static const int rotation[3] = {A, W, F};
    for (int s = 0; s < S; s++) {
        int done[MPMD_TASK_KINDS] = {0};
        for (int i = 0; i < S - s; i++)
            sb_one(&b, s, F, s);
        done[F] = S - s;
        for (int i = 0; i < s; i++) {
            sb_one(&b, s, A, s);
            sb_one(&b, s, F, s);
        }
        done[A] = s;
        done[F] += s;
        int left = 3 * n - done[F] - done[A], at = 0;
        while (left > 0) {
            int k = rotation[at];
            at = (at + 1) % 3;
            if (done[k] < n) {
                sb_one(&b, s, k, s);
                done[k]++;
                left--;
            }
        }
    }
    return finish(&b, out, err);
}

/* S a multiple of D, stage s on rank s % D. */
static mpmd_status check_interleaved(mpmd_schedule_kind kind, int S, int D, int n, mpmd_error *err) {
    char what[96];
    snprintf(what, sizeof what, "%s(S=%d, D=%d, n=%d)", mpmd_schedule_kind_name(kind), S, D, n);
    mpmd_status st = check_counts(what, S, D, n, err);
    if (st) return st;
    if (S % D)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: the number of stages must be a multiple of the number of ranks "
                              "(stage s runs on rank s %% D); %d stages on %d ranks leaves %d over",
                              what, S, D, S % D);
    return MPMD_OK;
}

/* Interleaved1F1B, and KimiK2 with extra_warmup = 1. With v = S / D stages
 * per rank, R = max(1, n / D) rounds of k = n / R microbatches; rank r runs
 * total = v n steps with w = min((v-1) k + 2 (D-1-r) + extra, v n) warm-up
 * forwards. Forward stage of step t: ((t / k) mod v) D + r; backward stage:
 * (v - 1 - ((t - w) / k) mod v) D + r. Steps 0..w-1 emit F; steps
 * w..total-1 emit F and B, fused when fuse_steady_state or the forward is
 * of the last stage; steps total..total+w-1 emit B. */
static mpmd_status interleaved(mpmd_schedule_kind kind, int S, int D, int n, int fuse, int extra_warmup,
                               mpmd_schedule **out, mpmd_error *err) {
    mpmd_status st = check_interleaved(kind, S, D, n, err);
    if (st) return st;
    int R = n / D > 1 ? n / D : 1;
    if (n % R)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s(S=%d, D=%d, n=%d): the microbatches run in max(1, n / D) = %d rounds, so n "
                              "must be a multiple of %d; %d microbatches leave %d over (use e.g. %d or %d)",
                              mpmd_schedule_kind_name(kind), S, D, n, R, R, n, n % R, n - n % R,
                              n - n % R + R);
    sched_builder b;
    if ((st = start(kind, S, D, n, 0, fuse, &b, err))) return st;
    int v = S / D, k = n / R;
    int64_t total = (int64_t)v * n;
    for (int r = 0; r < D; r++) {
        int64_t w = (int64_t)(v - 1) * k + 2 * (int64_t)(D - 1 - r) + extra_warmup;
        if (w > total) w = total;
        /* fs(t) = (f_local) D + r with f_local = (t / k) mod v, and
         * bs(t) = (b_local) D + r with b_local = v - 1 - ((t - w) / k) mod v,
         * kept as counters that step every k steps (no divisions). */
        int f_local = 0, f_in = 0, b_local = v - 1, b_in = 0;
        for (int64_t t = 0; t < total + w; t++) {
            int fs = f_local * D + r, bs = b_local * D + r;
            if (t < w) {
                sb_one(&b, r, F, fs);
            } else if (t < total) {
                mpmd_task pair[2] = {sb_next(&b, F, fs), sb_next(&b, B, bs)};
                if (fuse || fs == S - 1) {
                    sb_entry(&b, r, 2, pair);
                } else {
                    sb_entry(&b, r, 1, &pair[0]);
                    sb_entry(&b, r, 1, &pair[1]);
                }
            } else {
                sb_one(&b, r, B, bs);
            }
            if (++f_in == k) {
                f_in = 0;
                if (++f_local == v) f_local = 0;
            }
            if (t >= w && ++b_in == k) {
                b_in = 0;
                if (--b_local < 0) b_local = v - 1;
            }
        }
    }
    return finish(&b, out, err);
}

mpmd_status mpmd_schedule_interleaved1f1b(int S, int D, int n, int fuse_steady_state, mpmd_schedule **out,
                                          mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_interleaved1f1b", err);
    return interleaved(MPMD_SCHED_INTERLEAVED1F1B, S, D, n, fuse_steady_state != 0, 0, out, err);
}

mpmd_status mpmd_schedule_kimik2(int S, int D, int n, int fuse_steady_state, mpmd_schedule **out,
                                 mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_kimik2", err);
    return interleaved(MPMD_SCHED_KIMIK2, S, D, n, fuse_steady_state != 0, 1, out, err);
}

/* InterleavedGPipe (ours; JaxPP's is broken): every forward, then every
 * backward, in the interleaved order. The microbatches go in rounds of
 * k = min(D, n) (the last round may be shorter); rank r runs, round after
 * round, its stages r, r+D, ..., r+(v-1)D in ascending order, k forwards
 * each; then, round after round, its stages in descending order, k
 * backwards each. When D divides n this is Interleaved1F1B with every step
 * a warm-up step. */
mpmd_status mpmd_schedule_interleaved_gpipe(int S, int D, int n, mpmd_schedule **out, mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_interleaved_gpipe", err);
    mpmd_status st = check_interleaved(MPMD_SCHED_INTERLEAVED_GPIPE, S, D, n, err);
    sched_builder b;
    if (!st) st = start(MPMD_SCHED_INTERLEAVED_GPIPE, S, D, n, 0, 0, &b, err);
    if (st) return st;
    int v = S / D, k = imin(D, n);
    for (int r = 0; r < D; r++) {
        for (int kind = F; kind <= B; kind++) {
            for (int m0 = 0; m0 < n; m0 += k) {
                int len = imin(k, n - m0);
                for (int j = 0; j < v; j++) {
                    int local = kind == F ? j : v - 1 - j;
                    for (int i = 0; i < len; i++)
                        sb_one(&b, r, kind, local * D + r);
                }
            }
        }
    }
    return finish(&b, out, err);
}

/* DualPipeV: rank r runs s0 = r and s1 = 2D-1-r. Bk(s) is
 * FusedTask(A(s), W(s)); FB(x, y) is FusedTask(F(x), A(y), W(y)). */
static void dp_bwd(sched_builder *b, int r, int s) {
    mpmd_task t[2] = {sb_next(b, A, s), sb_next(b, W, s)};
    sb_entry(b, r, 2, t);
}

static void dp_fwd_bwd(sched_builder *b, int r, int x, int y) {
    mpmd_task t[3] = {sb_next(b, F, x), sb_next(b, A, y), sb_next(b, W, y)};
    sb_entry(b, r, 3, t);
}

mpmd_status mpmd_schedule_dualpipev(int S, int D, int n, mpmd_schedule **out, mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_dualpipev", err);
    char what[96];
    snprintf(what, sizeof what, "DualPipeV(S=%d, D=%d, n=%d)", S, D, n);
    mpmd_status st = check_counts(what, S, D, n, err);
    if (st) return st;
    if (S != 2 * D)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: needs exactly two stages per rank (S == 2 D, a V: rank r runs stages r "
                              "and 2D-1-r); %d stages on %d ranks would need %d stages",
                              what, S, D, 2 * D);
    if (n < S)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s: needs at least as many microbatches as stages (n >= S), got %d "
                              "microbatches for %d stages",
                              what, n, S);
    sched_builder b;
    if ((st = start(MPMD_SCHED_DUALPIPEV, S, D, n, 1, 0, &b, err))) return st;
    sched_builder *bp = &b;
    for (int r = 0; r < D; r++) {
        int s0 = r, s1 = 2 * D - 1 - r;
        /* 1. 2(D-r-1) times F(s0). */
        for (int i = 0; i < 2 * (D - r - 1); i++)
            sb_one(bp, r, F, s0);
        /* 2. r+1 times F(s0), F(s1). */
        for (int i = 0; i < r + 1; i++) {
            sb_one(bp, r, F, s0);
            sb_one(bp, r, F, s1);
        }
        /* 3. D-r-1 times A(s1), W(s1), F(s1), separately. */
        for (int i = 0; i < D - r - 1; i++) {
            sb_one(bp, r, A, s1);
            sb_one(bp, r, W, s1);
            sb_one(bp, r, F, s1);
        }
        /* 4. n-2D+r+1 times: FB(s0, s1) (the very first on the last rank as
         * F(s0) then Bk(s1)), then FB(s1, s0). */
        for (int i = 0; i < n - 2 * D + r + 1; i++) {
            if (i == 0 && r == D - 1) {
                sb_one(bp, r, F, s0);
                dp_bwd(bp, r, s1);
            } else {
                dp_fwd_bwd(bp, r, s0, s1);
            }
            dp_fwd_bwd(bp, r, s1, s0);
        }
        /* 5. D-r-1 times Bk(s1), FB(s1, s0). */
        for (int i = 0; i < D - r - 1; i++) {
            dp_bwd(bp, r, s1);
            dp_fwd_bwd(bp, r, s1, s0);
        }
        /* 6. r+1 times, e = (r+1)/2: A(s1) alone from i >= e on odd ranks,
         * else Bk(s1); then A(s0) alone from i >= e on even ranks unless
         * s0 is stage 0, else Bk(s0). */
        int e = (r + 1) / 2;
        for (int i = 0; i < r + 1; i++) {
            if (i >= e && r % 2 == 1)
                sb_one(bp, r, A, s1);
            else
                dp_bwd(bp, r, s1);
            if (s0 != 0 && i >= e && r % 2 == 0)
                sb_one(bp, r, A, s0);
            else
                dp_bwd(bp, r, s0);
        }
        /* 7. D-r-1 times: Bk(s0) if s0 is stage 0, else A(s0) alone. */
        for (int i = 0; i < D - r - 1; i++) {
            if (s0 == 0)
                dp_bwd(bp, r, s0);
            else
                sb_one(bp, r, A, s0);
        }
        /* 8. Every W of s0 and s1 not yet emitted, by (microbatch, stage);
         * s0 < s1. */
        int w0 = b.next_mb[W * S + s0], w1 = b.next_mb[W * S + s1];
        for (int m = imin(w0, w1); m < n; m++) {
            if (m >= w0) sb_one(bp, r, W, s0);
            if (m >= w1) sb_one(bp, r, W, s1);
        }
    }
    return finish(&b, out, err);
}

mpmd_status mpmd_schedule_new(mpmd_schedule_kind kind, int S, int D, int n, int fuse_steady_state,
                              mpmd_schedule **out, mpmd_error *err) {
    if (!out) return no_place("mpmd_schedule_new", err);
    int single = kind == MPMD_SCHED_GPIPE || kind == MPMD_SCHED_STD1F1B || kind == MPMD_SCHED_EAGER1F1B ||
                 kind == MPMD_SCHED_ZEROBUBBLE;
    if (D == 0) D = kind == MPMD_SCHED_DUALPIPEV ? (S > 1 ? S / 2 : 1) : S;
    if (single && D != S)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s(S=%d, n=%d): runs stage s on rank s, so it needs as many ranks as stages; "
                              "got %d stages and %d ranks",
                              mpmd_schedule_kind_name(kind), S, n, S, D);
    switch (kind) {
    case MPMD_SCHED_GPIPE: return mpmd_schedule_gpipe(S, n, out, err);
    case MPMD_SCHED_STD1F1B: return mpmd_schedule_std1f1b(S, n, out, err);
    case MPMD_SCHED_EAGER1F1B: return mpmd_schedule_eager1f1b(S, n, out, err);
    case MPMD_SCHED_ZEROBUBBLE: return mpmd_schedule_zerobubble(S, n, out, err);
    case MPMD_SCHED_INTERLEAVED1F1B:
        return mpmd_schedule_interleaved1f1b(S, D, n, fuse_steady_state, out, err);
    case MPMD_SCHED_KIMIK2: return mpmd_schedule_kimik2(S, D, n, fuse_steady_state, out, err);
    case MPMD_SCHED_INTERLEAVED_GPIPE: return mpmd_schedule_interleaved_gpipe(S, D, n, out, err);
    case MPMD_SCHED_DUALPIPEV: return mpmd_schedule_dualpipev(S, D, n, out, err);
    default: break;
    }
    return mpmd_error_set(err, MPMD_ERR_INVALID,
                          "mpmd_schedule_new: kind %d is not a built-in schedule (user schedules come from "
                          "mpmd_schedule_parse or mpmd_schedule_load)",
                          (int)kind);
}
