/* The cluster planner (include/mpmd_plan.h): what links and collectives
 * cost by hand, a block's costs by hand, the step's arithmetic, every
 * stage's own bytes, the search's invariants, and descriptions that are
 * wrong named with file and line. */
#include "plan/plan_internal.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-15; }

/* Rings by hand, on dgx-a100 (node links 300 GB/s and 3 us, network 25 GB/s
 * and 5 us, 8 GPUs a node) at the link efficiency 0.75. */
static void test_links(void) {
    mpmd_cluster c;
    mpmd_error err;
    CHECK(!mpmd_cluster_preset("dgx-a100", &c, &err), "preset: %s", err.msg);
    const double e = MPMD_PLAN_LINK_EFFICIENCY, G = 1e9;
    /* 8 GPUs of one node, 1 GB: 2 (7/8) of it over the node links, 14 latencies */
    double want = 2 * 7.0 / 8 * G / (300e9 * e) + 14 * 3e-6;
    CHECK(near(plan_allreduce_time(&c, 8, 8, G), want), "all-reduce in a node: %g, by hand %g",
          plan_allreduce_time(&c, 8, 8, G), want);
    /* 4 GPUs on 4 nodes: the network, 6 latencies */
    want = 2 * 3.0 / 4 * G / (25e9 * e) + 6 * 5e-6;
    CHECK(near(plan_allreduce_time(&c, 4, 1, G), want), "all-reduce across nodes: %g, by hand %g",
          plan_allreduce_time(&c, 4, 1, G), want);
    /* 16 GPUs, 8 a node: in the node, then across 2 nodes on 1/8 of the bytes */
    want = 2 * 7.0 / 8 * G / (300e9 * e) + 14 * 3e-6 + 2 * 1.0 / 2 * (G / 8) / (25e9 * e) + 2 * 5e-6;
    CHECK(near(plan_allreduce_time(&c, 16, 8, G), want), "hierarchical all-reduce: %g, by hand %g",
          plan_allreduce_time(&c, 16, 8, G), want);
    CHECK(near(plan_allgather_time(&c, 16, 8, G), want / 2), "an all-gather is half an all-reduce");
    CHECK(plan_allreduce_time(&c, 1, 1, G) == 0, "a group of one costs nothing");
    CHECK(near(plan_p2p_time(&c, 1, G), G / (300e9 * e) + 3e-6) &&
              near(plan_p2p_time(&c, 0, G), G / (25e9 * e) + 5e-6),
          "a message: its link's bandwidth and latency");
    /* placement: model ranks innermost */
    CHECK(plan_group_per_node(&c, 8, 1) == 8 && plan_group_per_node(&c, 4, 2) == 4 &&
              plan_group_per_node(&c, 16, 4) == 2 && plan_group_per_node(&c, 16, 8) == 1 &&
              plan_group_per_node(&c, 64, 64) == 1,
          "members a node of strided groups");
    CHECK(plan_same_node(&c, 0, 7) && !plan_same_node(&c, 7, 8), "GPUs 0..7 make node 0");
}

/* A small GPT whose one-block stage costs can be worked out by hand. */
static mpmd_transformer small_gpt(void) {
    mpmd_transformer m = {"small", 4, 1024, 16, 0, 32768, 1024, 64, MPMD_PLAN_BF16, 0};
    return m;
}

static void test_block_by_hand(void) {
    mpmd_cluster c;
    mpmd_cluster_preset("dgx-a100", &c, NULL);
    mpmd_transformer m = small_gpt();
    /* pp 4: stage 1 holds block 1 alone; tp 2 inside node; 1 sequence a microbatch */
    mpmd_run_layout l = {2, 4, 1, MPMD_PLAN_FSDP_OFF, 4, MPMD_SCHED_STD1F1B, 1, MPMD_PLAN_REMAT_NONE};
    mpmd_run_prediction p;
    mpmd_stage_cost st[4];
    double peak[4];
    mpmd_error err;
    CHECK(!mpmd_planner_predict(&c, &m, &l, 0, &p, peak, st, &err) && p.valid && p.simulated,
          "predict: %s %s", err.msg, p.why);
    const double T = 1024, h = 1024, f = 4096, s = 1024, a = 16, t = 2, eb = 2;
    const double P = 312e12 * MPMD_PLAN_GEMM_EFFICIENCY, M = 2039e9 * MPMD_PLAN_MEMORY_EFFICIENCY;
    const double flops_f = (8 * T * h * h + 4 * T * h * f + 4 * T * s * h) / t; /* 1.5032e10 */
    const double bytes_f = 22 * T * h + (4 * T * f + 9 * T * a * s) / t;
    const double ar = 2 * 1.0 / 2 * (eb * T * h) / (300e9 * MPMD_PLAN_LINK_EFFICIENCY) + 2 * 3e-6;
    double want_f = flops_f / P + bytes_f / M + 2 * ar;
    CHECK(near(st[1].time[MPMD_TASK_F], want_f), "stage 1's F: %g, by hand %g", st[1].time[MPMD_TASK_F],
          want_f);
    const double flops_a = (8 * T * h * h + 4 * T * h * f + 8 * T * s * h) / t;
    const double params = (4 * h * h + 2 * h * f + 3 * h + f) / t + 6 * h;
    const double flops_w = (8 * T * h * h + 4 * T * h * f) / t;
    double want_b = flops_a / P + 2 * bytes_f / M + 2 * ar + flops_w / P + 12 * params / M;
    CHECK(near(st[1].time[MPMD_TASK_B], want_b), "stage 1's B: %g, by hand %g", st[1].time[MPMD_TASK_B],
          want_b);
    CHECK(near(st[1].params, params) && near(st[1].static_bytes, 18 * params),
          "stage 1 holds its block: %g parameters, 18 bytes each", st[1].params);
    const double keep = 10 * T * h + (24 * T * h + 5 * T * a * s) / t; /* Korthikanti et al.'s count */
    CHECK(near(st[1].keep_f, keep), "stage 1 keeps %g a microbatch, by hand %g", st[1].keep_f, keep);
    /* every stage its own: the embedding's and the head's stages hold more */
    CHECK(st[0].embedding && st[3].head && st[0].params > st[1].params && st[3].params > st[1].params &&
              st[3].keep_f > st[1].keep_f && st[3].time[MPMD_TASK_F] > st[1].time[MPMD_TASK_F],
          "stage 0 (embedding) and 3 (head) are larger than 1 and 2");
    CHECK(near(st[1].params, st[2].params) && peak[3] != peak[2],
          "the middle stages alike, the head's rank not");
    /* the link between stages 1 and 2: GPUs 2 and 4, one node */
    CHECK(near(st[1].link, eb * T * h / (300e9 * MPMD_PLAN_LINK_EFFICIENCY) + 3e-6),
          "link 1-2 inside a node");
    /* the step's parts add up, MFU is its definition */
    CHECK(near(p.compute + p.tp_comm + p.idle + p.before + p.dp_comm + p.optimizer, p.step),
          "the parts make the step");
    const double flops = mpmd_transformer_step_flops(&m);
    CHECK(near(p.mfu, flops / (p.step * 8 * 312e12)), "MFU = model FLOPs / (step x 8 GPUs x peak)");
    CHECK(near(flops, 3.0 * 64 * (4 * (8 * s * h * h + 4 * s * h * f + 4 * s * s * h) + 2 * s * h * 32768)),
          "model FLOPs: 3 x the forward's products");
}

/* One rank runs the loop: the step is n x (F + B) plus the work after it. */
static void test_loop_by_hand(void) {
    mpmd_cluster c;
    mpmd_cluster_preset("dgx-h100", &c, NULL);
    mpmd_transformer m = small_gpt();
    mpmd_run_layout l = {1, 1, 4, MPMD_PLAN_FSDP_OFF, 1, MPMD_PLAN_LOOP, 2, MPMD_PLAN_REMAT_BLOCK};
    mpmd_run_prediction p;
    mpmd_stage_cost st;
    mpmd_error err;
    CHECK(!mpmd_planner_predict(&c, &m, &l, 0, &p, NULL, &st, &err) && p.simulated, "loop: %s", err.msg);
    const int n = 64 / (4 * 2);
    CHECK(p.microbatches == n, "%d microbatches of 2 on 4 replicas", p.microbatches);
    double want = n * (st.time[MPMD_TASK_F] + st.time[MPMD_TASK_B]) + p.dp_comm + p.optimizer;
    CHECK(near(p.step, want), "loop step %g, by hand %g", p.step, want);
    /* the replicas' all-reduce: 4 GPUs of one node, f32 gradients */
    double grads = 4 * st.params;
    CHECK(near(p.dp_comm, 2 * 3.0 / 4 * grads / (450e9 * MPMD_PLAN_LINK_EFFICIENCY) + 6 * 3e-6),
          "data-parallel all-reduce inside a node: %g", p.dp_comm);
    /* block remat: the backward runs the forward again */
    mpmd_run_layout l2 = l;
    l2.remat = MPMD_PLAN_REMAT_NONE;
    mpmd_stage_cost st2;
    mpmd_run_prediction p2;
    CHECK(!mpmd_planner_predict(&c, &m, &l2, 0, &p2, NULL, &st2, &err), "no remat: %s", err.msg);
    CHECK(st.time[MPMD_TASK_B] > st2.time[MPMD_TASK_B] && st.keep_f < st2.keep_f && p.step > p2.step,
          "remat costs time and saves memory");
    const double block_fwd = 8 * 1024.0 * 1024 * 1024 + 4 * 1024.0 * 1024 * 4096 + 4 * 1024.0 * 1024 * 1024;
    CHECK(near(p.hw_flops_per_gpu * p.step * 4, mpmd_transformer_step_flops(&m) + 64.0 * 4 * block_fwd),
          "hardware FLOPs: the model's, and every block's forward again");
}

/* The search: constraints kept, the choice fits and none that fits is
 * faster, and nothing fitting says why. */
static void test_search(void) {
    mpmd_cluster c;
    mpmd_cluster_preset("dgx-a100", &c, NULL);
    mpmd_transformer m = small_gpt();
    mpmd_planner_opts o = MPMD_PLANNER_OPTS_DEFAULTS;
    o.gpus = 16;
    mpmd_planner_result *r;
    mpmd_error err;
    CHECK(!mpmd_planner_search(&c, &m, &o, &r, &err) && r && r->fit > 0, "search: %s", err.msg);
    if (!r) return;
    int bad = 0, schedules = 0, meshes = 0;
    for (int i = 0; i < r->n; i++) {
        const mpmd_run_prediction *p = &r->layouts[i];
        bad |= p->layout.tp * p->layout.pp * p->layout.dp != 16;
        if (i < r->fit) bad |= !p->simulated || p->peak > c.memory || p->step < r->layouts[0].step;
        if (p->bound) bad |= p->step < r->layouts[0].step; /* a bound never beats the choice */
        schedules |= 1 << (p->layout.schedule + 1);
        meshes += p->layout.pp == 4 && p->layout.tp == 2;
    }
    CHECK(!bad,
          "every layout is 16 GPUs; those that fit are simulated, within memory, no faster than the first");
    CHECK(schedules == 0x1ff && meshes > 0, "every schedule (and the loop) was tried: %x", schedules);
    mpmd_planner_result_free(r);
    o.tp = 4, o.pp = 2, o.remats = 1u << MPMD_PLAN_REMAT_DOTS, o.schedules = 1u << MPMD_SCHED_INTERLEAVED1F1B;
    CHECK(!mpmd_planner_search(&c, &m, &o, &r, &err), "constrained: %s", err.msg);
    for (int i = 0; r && i < r->n; i++) {
        const mpmd_run_layout *l = &r->layouts[i].layout;
        bad |= l->tp != 4 || l->pp != 2 || l->dp != 2 || l->remat != MPMD_PLAN_REMAT_DOTS ||
               l->schedule != MPMD_SCHED_INTERLEAVED1F1B || l->stages % 2 || l->stages < 4;
    }
    CHECK(r && r->n > 0 && !bad, "the constraints hold in every layout");
    mpmd_planner_result_free(r);
    /* 1 GiB a GPU: nothing fits, and the message names the smallest peak */
    o = MPMD_PLANNER_OPTS_DEFAULTS;
    o.gpus = 4, o.memory_limit = GIB / 4;
    mpmd_status st = mpmd_planner_search(&c, &m, &o, &r, &err);
    CHECK(st == MPMD_ERR_INVALID && r && !r->fit && strstr(err.msg, "no layout fits in 0.25 GiB per GPU") &&
              strstr(err.msg, "the smallest peak found is"),
          "nothing fits: %s", err.msg);
    mpmd_planner_result_free(r);
    o.memory_limit = 0, o.gpus = 6, o.tp = 4;
    CHECK(mpmd_planner_search(&c, &m, &o, &r, &err) == MPMD_ERR_INVALID && !r &&
              strstr(err.msg, "tp 4 x pp 0 x dp 0 (0: searched) cannot make 6 GPUs"),
          "impossible counts: %s", err.msg);
}

static void test_descriptions(void) {
    mpmd_cluster c;
    mpmd_error err;
    CHECK(!mpmd_cluster_parse(
              "base = dgx-h100 # start from it\nname = mine\n\nnet_bandwidth = 100Gi\nnode_latency = "
              "2.5us\nmemory = 141GB\n",
              "mine.txt", &c, &err) &&
              !strcmp(c.name, "mine") && c.net_bandwidth == 100.0 * GIB && near(c.node_latency, 2.5e-6) &&
              c.memory == 141e9 && c.peak_flops[MPMD_PLAN_BF16] == 989e12,
          "a cluster from a preset, overridden: %s", err.msg);
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"base = dgx-a100\nmemory = -1G\n", "c.txt:2: memory: expected a positive number"},
        {"base = dgx-a100\nmemory\n", "c.txt:2: expected \"key = value\", got \"memory\""},
        {"name = x\nbase = dgx-a100\n", "c.txt:2: base must be the first key"},
        {"base = dgx-z\n", "c.txt:1: base: no cluster preset named \"dgx-z\""},
        {"base = dgx-a100\ngpus_per_node = 0\n", "c.txt:2: gpus_per_node: expected a whole number"},
        {"base = dgx-a100\nnet_latency = 5 us\n",
         "c.txt:2: net_latency: expected a positive number of seconds"},
        {"gpus_per_node = 4\n", "c.txt: no peak_f32 given"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(mpmd_cluster_parse(bad[i].text, "c.txt", &c, &err) == MPMD_ERR_FORMAT &&
                  strstr(err.msg, bad[i].msg),
              "cluster %zu: %s", i, err.msg);
    CHECK(mpmd_cluster_load("/nonexistent/c.txt", &c, &err) == MPMD_ERR_IO &&
              strstr(err.msg, "/nonexistent/c.txt"),
          "a missing file: %s", err.msg);
    mpmd_transformer m;
    CHECK(!mpmd_transformer_parse("base = gpt3-175b\nbatch = 64\ndtype = f16\n", "m.txt", &m, &err) &&
              m.batch == 64 && m.dtype == MPMD_PLAN_F16 && m.layers == 96,
          "a model from a preset: %s", err.msg);
    CHECK(fabs(mpmd_transformer_params(&m) / 174.6e9 - 1) < 0.001, "GPT-3 175B: %g parameters",
          mpmd_transformer_params(&m));
    static const struct {
        const char *text, *msg;
    } badm[] = {
        {"layers = 2\nhidden = 10\nheads = 3\nvocab = 5\nseq = 4\nbatch = 1\n",
         "m.txt: the model's 3 heads do not divide"},
        {"layers = 2\nhidden = 12\nheads = 3\nseq = 4\nbatch = 1\n",
         "m.txt: the model's vocab must be at least 1"},
        {"base = gpt3-175b\ndtype = fp8\n", "m.txt:2: dtype: expected f32, bf16 or f16"},
        {"base = gpt3-175b\nlayers = 1.5\n", "m.txt:2: layers: expected a whole number"},
        {"base = gpt3-175b\nwidth = 5\n", "m.txt:2: unknown key \"width\""},
        {"base = gpt3-175b\nhidden = 1073741824\nheads = 1\n", "too large to plan"},
    };
    for (size_t i = 0; i < sizeof badm / sizeof *badm; i++)
        CHECK(mpmd_transformer_parse(badm[i].text, "m.txt", &m, &err) && strstr(err.msg, badm[i].msg),
              "model %zu: %s", i, err.msg);
    /* impossible layouts are reported as such, not as errors */
    mpmd_cluster_preset("dgx-a100", &c, NULL);
    mpmd_transformer_preset("gpt3-175b", &m, NULL);
    mpmd_run_layout l = {5, 8, 1, 0, 8, MPMD_SCHED_STD1F1B, 1, 0};
    mpmd_run_prediction p;
    CHECK(!mpmd_planner_predict(&c, &m, &l, 0, &p, NULL, NULL, &err) && !p.valid &&
              strstr(p.why, "tp 5 does not divide"),
          "tp 5: %s", p.why);
    l.tp = 8, l.schedule = MPMD_SCHED_ZEROBUBBLE, m.batch = 4;
    CHECK(!mpmd_planner_predict(&c, &m, &l, 0, &p, NULL, NULL, &err) && !p.valid &&
              strstr(p.why, "ZeroBubble"),
          "ZeroBubble on 4 microbatches and 8 stages: %s", p.why);
    char buf[160];
    l = (mpmd_run_layout){8, 8, 1, 0, 24, MPMD_SCHED_INTERLEAVED1F1B, 1, MPMD_PLAN_REMAT_BLOCK};
    mpmd_run_layout_str(&l, 64, buf, sizeof buf);
    CHECK(!strcmp(buf, "tp 8 x pp 8 x dp 1, interleaved1f1b 24 stages, microbatch 1 (64), remat block"), "%s",
          buf);
}

int main(void) {
    test_links();
    test_block_by_hand();
    test_loop_by_hand();
    test_search();
    test_descriptions();
    return tu_report("test_plan");
}
