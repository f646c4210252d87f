/* gpt - train a GPT-2-style model, on one rank or pipelined; built a second
 * time as llama (-DGPT_PROGRAM_LLAMA): the same program with LLaMA blocks
 * (RMS norms, rotary grouped-query attention, SwiGLU, no position table).
 *
 * The training step (examples/models/gpt_model.h) is one mpmd graph: the
 * microbatch loop over the forward and backward pass, then AdamW. With
 * --schedule loop (the default) it is compiled by mpmd_jit_with_loop without
 * a schedule: the plain microbatch loop on one rank; with a schedule name,
 * into one program per rank. Either runs on in-process ranks (threads) or,
 * with --runtime mpi under mpirun, one process per rank (and replica). Data: a corpus this
 * program generates deterministically, the bytes of a text file (--data),
 * the token ids of an llm.c token file (--tokens), or a text file encoded
 * by a Hugging Face tokenizer (--text, --tokenizer); batches are a
 * pure function of (seed, step). The parameters start random (from --seed)
 * or from Hugging Face's weights (--init-from: GPT-2's model.safetensors,
 * examples/models/gpt_import.h; llama a LLaMA-family model directory,
 * examples/models/llama_import.h). So runs with the same model options print
 * the same final line whatever the schedule, ranks or runtime:
 *
 *     final_loss=<loss of the last step> params_sha256=<hash of the parameters>
 *
 * (With --data-parallel R the replicas' sums run in another order: equal to
 * float tolerance, not bits.)
 *
 * With --generate N the program samples from the model instead of training
 * it: the same blocks in decode mode (gpt_build_decoder), run by the
 * library's mpmd_generate; with --tokenizer the prompts are text it encodes
 * and the samples print as the text of their tokens. --resume (training or
 * generating) takes the model options a checkpoint records
 * (gpt_config_from_record).
 *
 * Exit status: 0 on success, 2 for bad options, 1 for a failure while
 * building or training (including a NaN/Inf loss, unless --no-nan-check),
 * 128 + the signal when SIGTERM, SIGINT or SIGUSR1 stopped the run (143,
 * 130, 138): after the step it was in, with a checkpoint when --save is
 * given; a second signal stops it at once (examples/models/gpt_save.h).
 */
#include "program.h"
#include "gpt_import.h"
#include "llama_import.h"
#include "gpt_model.h"
#include "gpt_plan.h"
#include "gpt_save.h"
#include "mpmd.h"
#include "mpmd_checkpoint.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#ifdef GPT_PROGRAM_LLAMA
#define PROG "llama"
#define ARCH GPT_ARCH_LLAMA
#define INIT_WHAT "a LLaMA model's weights"
#define INIT_LAYOUT "LLaMA"
#else
#define PROG "gpt"
#define ARCH GPT_ARCH_GPT2
#define INIT_WHAT "GPT-2's weights"
#define INIT_LAYOUT "GPT-2"
#endif

/* --init-from's weights into the parameters of a model (or a decoder's):
 * GPT-2's file for gpt, a LLaMA-family model directory for llama. */
static mpmd_status init_from(const char *path, const gpt_model *m, mpmd_step *st, mpmd_error *err) {
#ifdef GPT_PROGRAM_LLAMA
    return llama_hf_import(path, m, st, err);
#else
    return gpt_hf_import(path, m, st, err);
#endif
}

static const char *usage =
#ifdef GPT_PROGRAM_LLAMA
    "usage: llama [options]\n"
    "Train a LLaMA-style model (pre-norm blocks of RMS norms, rotary grouped-query attention and a\n"
    "SwiGLU MLP, no biases, no position table) with AdamW, on one rank or as a pipeline: byte-level\n"
    "on a generated corpus (or --data FILE), or on GPT-2 token ids (--tokens FILE), from random\n"
    "weights or from a LLaMA-family model's (--init-from DIR). It takes gpt's options and three of\n"
    "its own (the first below).\n"
    "\n"
    "Model and data:\n"
    "  --kv-heads N          key/value heads, dividing --heads (grouped-query attention;\n"
    "                        default: --heads)\n"
    "  --mlp-hidden N        the SwiGLU width (default: 8 width / 3, rounded up to a multiple of 8)\n"
    "  --rope-base F         the rotary embeddings' base (default 10000)\n"
#else
    "usage: gpt [options]\n"
    "Train a GPT-2-style model with AdamW, on one rank or as a pipeline: byte-level on a\n"
    "generated corpus (or --data FILE), or on GPT-2 token ids (--tokens FILE), from random\n"
    "weights or from GPT-2's (--init-from FILE).\n"
    "\n"
    "Model and data:\n"
#endif
    "  --layers N            transformer blocks (default 4)\n"
    "  --width N             model width (default 128)\n"
    "  --heads N             attention heads, dividing the width (default 4)\n"
    "  --seq N               sequence length (default 64)\n"
    "  --batch N             sequences per step, all replicas together (default 8)\n"
    "  --microbatches N      microbatches per step and replica (default 4)\n"
    "  --vocab N             token ids are in [0, N) (default 256; 50257, GPT-2's, with --tokens;\n"
    "                        the tokenizer's with --text; the file's with --init-from)\n"
    "  --tie-embeddings      the LM head shares the token embedding\n"
    "  --lr F                AdamW learning rate (default 0.003)\n"
    "  --weight-decay F      AdamW weight decay (default 0)\n"
    "  --decay WHICH         the parameters weight decay applies to: matrices (the default: matrices\n"
    "                        and embeddings, as GPT-2 trains) or all (biases and norm scales too)\n"
    "  --beta1 F, --beta2 F  AdamW's moment decays (default 0.9 and 0.95, GPT-2's; the library's\n"
    "                        MPMD_ADAM_DEFAULTS and PyTorch's have beta2 0.999)\n"
    "  --eps F               AdamW's epsilon (default 1e-8)\n"
    "  --clip NORM           clip the gradients to this global L2 norm before AdamW, as PyTorch's\n"
    "                        clip_grad_norm_ (mpmd_clip_by_global_norm; default: no clipping)\n"
    "  --dropout P           drop the embeddings and each block's residual branches with rate P\n"
    "                        (masks drawn from (seed, step, replica, microbatch), the same on any\n"
    "                        schedule; default 0)\n"
    "  --data FILE           train on the bytes of FILE instead of the generated corpus\n"
    "  --tokens FILE         train on the token ids of FILE, a token file in llm.c's format\n"
    "                        (a header of 256 int32: 20240520, 1, the token count; then uint16\n"
    "                        ids; or 20240801, 7, the count, then uint32 ids), as llm.c's dev/data\n"
    "                        scripts (tinyshakespeare.py, fineweb.py) and `mpmd tokenize` write\n"
    "                        them; every id must be below the vocabulary\n"
    "  --text FILE           train on the UTF-8 text of FILE, encoded once in memory by --tokenizer\n"
    "  --tokenizer FILE      a Hugging Face tokenizer.json (byte-level BPE: GPT-2's, Llama 3's,\n"
    "                        Qwen's); special tokens written in the text become their ids, and the\n"
    "                        vocabulary is the tokenizer's. --data, --tokens and --text: one of them.\n"
    "                        (With --generate: the prompts and samples as text, below)\n"
#ifdef GPT_PROGRAM_LLAMA
    "  --bytes-as-tokens     with --init-from: train the model's weights on bytes (--data, or the\n"
    "                        generated corpus) as token ids all the same; without it that is refused,\n"
    "                        since the model reads ids as its tokenizer's (give --tokens FILE)\n"
    "  --init-from DIR       start from a LLaMA-family model's weights in Hugging Face's layout: a\n"
    "                        directory with config.json and model.safetensors (or the shards of\n"
    "                        model.safetensors.index.json), as the hub ships Llama 2 and 3.x,\n"
    "                        TinyLlama, SmolLM and Mistral-style models (F32, F16 or BF16). Layers,\n"
    "                        width, heads, key/value heads, vocabulary, MLP width, rope_theta and\n"
    "                        rope_scaling (llama3), rms_norm_eps and tied embeddings come from\n"
    "                        config.json (options given must agree); seq is at most\n"
    "                        max_position_embeddings (default min(64, it)); PyTorch's [out, in]\n"
    "                        Linear weights are transposed in; the optimizer starts fresh\n"
#else
    "  --bytes-as-tokens     with --init-from: train GPT-2's weights on bytes (--data, or the generated\n"
    "                        corpus) as token ids all the same; without it that is refused, since GPT-2\n"
    "                        reads ids as its BPE tokens (give --tokens FILE)\n"
    "  --init-from FILE      start from GPT-2's weights: a safetensors file in Hugging Face's\n"
    "                        layout (model.safetensors of the gpt2 model repository; names wte.weight,\n"
    "                        h.0.attn.c_attn.weight, ..., with or without \"transformer.\"). Layers,\n"
    "                        width and vocabulary come from the file (options given must agree);\n"
    "                        heads are width/64 unless given; seq is at most the file's positions\n"
    "                        (default min(64, positions)); embeddings tied; the optimizer starts fresh\n"
#endif
    "  --steps N             train up to step N, counted from the start of training (default 60)\n"
    "  --seed N              seed of the initial parameters and of the batches (default 0)\n"
    "\n"
    "Pipeline:\n"
    "  --schedule NAME       loop (one rank, the default), gpipe, std1f1b, eager1f1b,\n"
    "                        interleaved1f1b, kimik2, zerobubble, dualpipev, interleavedgpipe,\n"
    "                        or file:PATH (a schedule in the text form of `mpmd schedule`)\n"
    "  --stages S            pipeline stages: a stage marker after every layers/S blocks (default 1)\n"
    "  --balance-stages      place the markers by estimated cost instead (the LM head weighs on the\n"
    "                        last stage); the layers need not divide evenly\n"
    "  --ranks D             pipeline ranks (default: S, or S/2 for dualpipev)\n"
    "  --fuse-steady-state   Interleaved1F1B/KimiK2: fuse the steady state's F and B\n"
    "  --runtime local|mpi   ranks as threads of this process (default), or MPI processes\n"
    "                        (start with mpirun -np D*R)\n"
    "  --data-parallel R     replicas of every rank, each on batch/R sequences (default 1)\n"
    "  --tensor-parallel M   split every block over M model ranks, Megatron's way (attention by\n"
    "                        heads, MLP by its hidden width; an all-reduce after each); M ranks\n"
    "                        per rank and replica (under MPI: mpirun -np D*R*M); --eval,\n"
    "                        --generate and --init-from split alike (files hold whole tensors)\n"
    "  --fsdp                shard parameters, gradients and AdamW state over the R replicas\n"
    "                        (ZeRO-3): each holds 1/R, tasks gather what they read (in the\n"
    "                        compute dtype: bf16 and f16 gather half f32's bytes); the same\n"
    "                        numbers as plain --data-parallel R\n"
    "  --fsdp-gather WHEN    task (default): gather before every task that reads the parameters,\n"
    "                        drop after (least memory); step: gather once per step and hold them\n"
    "                        through the loop (least traffic)\n"
    "  --threads N           kernel threads: of the one rank (loop), else of each rank;\n"
    "                        0 for all cores (loop) or the cores divided among ranks (default 0)\n"
    "  --backend NAME        where the ranks compute: cpu (default) or cuda (a build with CUDA;\n"
    "                        rank r on GPU r % devices)\n"
    "  --precision P         compute dtype: f32, bf16 or f16; parameters and AdamW state stay f32\n"
    "                        (default: f32 on the cpu backend, bf16 on cuda)\n"
    "  --auto                choose the schedule, stages, microbatches and remat for --ranks D (and\n"
    "                        with --fsdp when it gathers, its copies timed on this machine): the\n"
    "                        fastest predicted layout (a profiled step of each, the schedules\n"
    "                        simulated with its op times) whose ranks fit --memory-limit; prints\n"
    "                        the top choices, trains the chosen one, and its predicted and\n"
    "                        measured step time at the end\n"
    "  --memory-limit BYTES  bytes per rank for --auto, like 512M or 2G (default: no limit)\n"
    "  --attention A         fused (one op that never stores the [T, T] scores; the default on cpu)\n"
    "                        or composed (products and a softmax, the probabilities kept for the\n"
    "                        backward: more memory; the default on cuda, where it is faster today)\n"
    "  --remat R             recompute activations in the backward instead of keeping them: none\n"
    "                        (default), block (every block's), dots (a block's all but its matrix\n"
    "                        products); the same numbers, fewer bytes alive\n"
    "\n"
    "Watching and resuming:\n"
    "  --log-every K         one progress line every K steps (default 5)\n"
    "  --quiet               no progress lines, only the final line\n"
    "  --json                progress as JSON lines (one object per log interval) and a final object;\n"
    "                        a loss that is NaN or infinite (--no-nan-check) is null\n"
    "  --trace FILE          write the last step as a Chrome trace (open in Perfetto); pipelines only\n"
    "  --timeline FILE       draw the last step as an SVG timeline; pipelines only (its time unit\n"
    "                        follows the step's length: us, ms, s or min)\n"
    "  --timeline-width PX   the timeline's time axis in px (default: about 1100)\n"
    "  --save PATH           write a checkpoint (safetensors) after the last step\n"
    "  --save-every K        also every K steps (needs --save), written by a background thread\n"
    "                        while training goes on; one at a time: a save due while the last one\n"
    "                        is still being written is skipped, with a message. A failed one (a\n"
    "                        full disk) is a warning: the previous checkpoint stays, training goes\n"
    "                        on; a failed save after the last step is an error\n"
    "  --keep-last K         with --save-every: write the periodic checkpoints as a series of files\n"
    "                        named by step (PATH run.safetensors: run.step000120.safetensors, ...;\n"
    "                        other names get .step000120 appended) and keep the K newest, an older\n"
    "                        one deleted only once a newer one is written; PATH is the last step's\n"
    "  --resume PATH         continue from a checkpoint (any pipeline layout); a weights file\n"
    "                        (--export-weights) starts at step 1 from its weights, optimizer fresh.\n"
    "                        A checkpoint records its model (layers, width, heads, vocab, seq,\n"
    "                        tied embeddings; llama's key/value heads, MLP width, rope base, RMS\n"
    "                        epsilon and rope scaling): the options left out are taken from it, and\n"
    "                        one given that differs is refused naming both values (a weights file\n"
    "                        records none: give its options). lr, batch, the layout and precision\n"
    "                        may change\n"
    "  --resume latest       continue from the newest checkpoint of --save PATH (PATH or its\n"
    "                        series) that loads, a damaged one skipped with a warning; none yet:\n"
    "                        start at step 1. So one command line starts and restarts a run\n"
    "  --export-weights PATH write the parameters alone (no optimizer state) after the last step\n"
    "  --dtype D             dtype of --export-weights: f32, bf16 (default) or f16 (values past f16's\n"
    "                        65504 become infinities: a warning names how many, in which tensors)\n"
    "  --eval K              hold out the data's last tenth; every K steps and after the last, the\n"
    "                        mean loss on 4 batches of it (a forward-only step, pipelined as the\n"
    "                        training is), printed as eval_loss=<%.9g> before the final line\n"
    "  --no-nan-check        keep going when the loss is NaN or Inf\n"
    "  --step-timeout S      the watchdog: a rank that waits S seconds for a peer ends the run with\n"
    "                        a message naming the rank and what it awaited; off: wait forever\n"
    "                        (default: the longer of 300 s and 20 times the slowest step)\n"
    "\n"
    "Stopping: on SIGTERM (a scheduler's), SIGINT (Ctrl-C) or SIGUSR1 the step in progress is\n"
    "  finished and saved to --save (with --keep-last as its series' file of that step), and the\n"
    "  program exits with status 128 + the signal: 143, 130, 138. Under mpirun every process stops\n"
    "  after the same step, whichever of them the signal reached. Open MPI's mpirun passes SIGUSR1\n"
    "  on at once; a SIGTERM only --mca odls_base_sigkill_timeout S seconds later (1 by default),\n"
    "  holding their output meanwhile, and it kills them S seconds after that. A second signal\n"
    "  stops at once, removing the checkpoint being written.\n"
    "\n"
    "Generating (instead of training):\n"
    "  --generate N          sample N tokens after --prompt for each of --batch sequences, with a\n"
    "                        key/value cache in every block (mpmd_generate), pipelined like\n"
    "                        training (--schedule, --stages: groups of sequences are the\n"
    "                        microbatches in flight) and split like it (--tensor-parallel); the\n"
    "                        weights from --resume (a checkpoint or weights file) or --init-from.\n"
    "                        Each sequence prints a line \"sample B: \" and its prompt and tokens;\n"
    "                        one sequence prints its tokens as they come, several print their\n"
    "                        lines in order, each once its sequence has ended. Logits that are\n"
    "                        NaN or infinite (weights that hold them) end it with an error\n"
    "  --tokenizer FILE      with --generate: the model's tokenizer.json. --prompt is text, encoded\n"
    "                        by it (special tokens written in it become their ids), and the samples\n"
    "                        print as text: UTF-8 as it is, a newline as \\n, a backslash as \\\\,\n"
    "                        other control bytes and bytes that are not UTF-8 as \\xNN, an id that\n"
    "                        is no token of it as \\<ID>\n"
    "  --prompt TEXT         the prompt. With --tokenizer: text. Without: its bytes when the\n"
    "                        vocabulary is bytes (256), else token ids separated by commas, each\n"
    "                        below the vocabulary (default \"The\" with --tokenizer, else \"The \" or\n"
    "                        \"464\"). Given several times, sequence b starts from prompt b modulo\n"
    "                        their count\n"
    "  --temperature F       sampling temperature; 0 is greedy (default 1)\n"
    "  --top-k K             sample among the K most likely tokens; 0: all (default 0)\n"
    "  --eos TOKEN           a sequence ends once it draws TOKEN (printed as its last): with\n"
    "                        --tokenizer a token's whole text (--eos \"<|endoftext|>\"; a number is\n"
    "                        text too), without it a token id\n"
    "  --print-ids           after each sample's line, its token ids (prompt and drawn) on a line\n"
    "                        \"ids B: 1,2,...\" (without --tokenizer and the byte vocabulary the\n"
    "                        sample line shows them already)\n"
    "  --help                this text\n"
    "\n"
    "Outputs (--save, --export-weights, --trace, --timeline) are written whole or not at all, each to a\n"
    "file of its own: one that names another output or an input (--data, --tokens, --init-from, --resume,\n"
    "a file: schedule) is refused, but --save may name the --resume checkpoint (the run goes on in it).\n"
    "Output that cannot be written (a full disk, a full stdout) ends the run with exit status 1.\n"
    "\n"
    "After the last step it prints: final_loss=<%.9g> params_sha256=<hex>\n";

/* --prompt may be given this many times: sequence b starts from prompt b % n. */
#define MAX_PROMPTS 256

typedef struct options {
    gpt_config cfg;
    long long steps, log_every, threads, ranks, replicas, save_every;
    long long keep_last;  /* --keep-last K: a series of periodic checkpoints, the K newest kept (0: none) */
    int resume_latest;    /* --resume latest: the newest checkpoint of --save's series that loads */
    long long eval_every; /* --eval K: the held-out loss every K steps and after the last (0: none) */
    long long generate;   /* --generate N: sample N tokens after a prompt instead of training (0: train) */
    const char *prompt[MAX_PROMPTS]; /* --prompt (repeated): text (--tokenizer, bytes) or token ids */
    int n_prompts;
    long long eos;       /* --eos: a sequence ends once it draws this id (-1: none) */
    const char *eos_arg; /* --eos as given: an id, or with --tokenizer a token's text */
    int print_ids;       /* --print-ids: each sample's token ids too, on a line of its own */
    float temperature;   /* --temperature (0: greedy) */
    long long top_k;     /* --top-k (0: every token) */
    unsigned long long seed;
    const char *data, *schedule, *trace, *timeline, *save, *resume, *backend, *precision, *remat;
    const char *attention;          /* --attention fused|composed */
    const char *tokens, *init_from; /* --tokens FILE, --init-from FILE */
    const char *text, *tokenizer;   /* --text FILE, --tokenizer FILE */
    mpmd_tokenizer *tok;            /* --tokenizer, loaded while the options are checked */
    const char *export_weights, *export_dtype_name;
    mpmd_dtype export_dtype;
    int nan_check, fuse, mpi, quiet, json, fsdp;
    int bytes_as_tokens; /* --bytes-as-tokens: GPT-2's weights (--init-from) on byte data, on purpose */
    mpmd_fsdp_gather fsdp_gather; /* --fsdp-gather task|step */
    int fsdp_gather_given;
    int auto_layout;          /* --auto: choose schedule, stages, microbatches and remat */
    long long mem_limit;      /* --memory-limit, bytes per rank (0: none) */
    long long timeline_width; /* --timeline-width, px (0: chosen from the step) */
    double step_timeout;      /* --step-timeout: seconds, -1 off, 0 the default */
    int schedule_given, stages_given;
    gpt_hf_given given; /* the model options set on the command line (--init-from checks them) */
} options;

static int bad_option(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(run " PROG " --help for the options)\n");
    va_end(ap);
    return 2;
}

/* An integer option value in [lo, hi]. */
static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return bad_option("%s expects an integer, got \"%s\"", opt, s);
    if (v < lo || v > hi) return bad_option("%s must be between %lld and %lld, got %lld", opt, lo, hi, v);
    *out = v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return bad_option("%s expects a finite number >= 0, got \"%s\"", opt, s);
    *out = (float)v;
    return 0;
}

static const char *const flags[] = {
    "--tie-embeddings", "--no-nan-check", "--fuse-steady-state", "--quiet",    "--json", "--balance-stages",
    "--auto",           "--fsdp",         "--bytes-as-tokens",   "--print-ids"};
static const char *const valued[] = {
    "--layers",       "--width",          "--heads",
    "--seq",          "--batch",          "--microbatches",
    "--stages",       "--steps",          "--log-every",
    "--threads",      "--seed",           "--lr",
    "--weight-decay", "--data",           "--schedule",
    "--ranks",        "--runtime",        "--data-parallel",
    "--trace",        "--timeline",       "--save",
    "--save-every",   "--resume",         "--backend",
    "--precision",    "--export-weights", "--dtype",
    "--remat",        "--memory-limit",   "--timeline-width",
    "--step-timeout", "--tokens",         "--init-from",
    "--vocab",        "--dropout",        "--eval",
    "--generate",     "--prompt",         "--temperature",
    "--top-k",        "--attention",      "--tensor-parallel",
    "--clip",         "--fsdp-gather",    "--decay",
    "--beta1",        "--beta2",          "--eps",
    "--text",         "--tokenizer",      "--keep-last",
#ifdef GPT_PROGRAM_LLAMA
    "--kv-heads",     "--mlp-hidden",     "--rope-base",
#endif
    "--eos",
};

static int is_one_of(const char *name, const char *const *list, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(name, list[k])) return 1;
    return 0;
}

/* Returns 0 to go on, 2 for a bad option, -1 after --help. */

/* Refuse a model this machine cannot hold before allocating any of it: the
 * parameters with their gradients and AdamW moments (16 bytes each), and
 * the activations a step keeps (about 20 values per layer, position and
 * width unit, the attention scores and the logits with their gradients),
 * for the ranks this process runs (in-process: all, times the replicas;
 * under MPI: one rank's share). An estimate: the plan counts exactly, this
 * only keeps a typo (--width 16384) from filling the machine first. */
static int check_memory(const options *o) {
    const gpt_config *c = &o->cfg;
    double params = (double)gpt_param_count(c);
    double tokens = (double)c->batch * (double)c->seq;
    double acts = tokens * (double)c->width * (double)c->layers * 20.0 +
                  (double)c->batch * c->heads * (double)c->seq * (double)c->seq * c->layers * 2.0 +
                  tokens * (double)c->vocab * 2.0;
    double bytes = (params * 16.0 + acts * 4.0) * (o->mpi ? 1.0 / (double)c->stages : (double)o->replicas);
    if (o->generate) { /* no gradients or AdamW moments: the parameters, and each block's key/value cache */
        acts = 2.0 * (double)c->layers * (double)c->batch * (double)c->seq * (double)c->width;
        bytes = (params + acts) * 4.0 * (o->mpi ? 1.0 / (double)c->stages : 1.0);
    }
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (ram > 0 && bytes > ram)
        return bad_option(
            "the model needs about %.1f GB here (%.3g parameters: %.1f GB%s; %s %.1f GB) but this "
            "machine has %.1f GB of memory",
            bytes / 1e9, params, params * (o->generate ? 4.0 : 16.0) / 1e9,
            o->generate ? "" : " with gradients and AdamW state",
            o->generate ? "key/value caches" : "activations", acts * 4.0 / 1e9, ram / 1e9);
    return 0;
}
/* A file as the file system sees it: one that exists by device and inode,
 * so that "x" and "./x", symbolic and hard links to it are one file; a new
 * one by its directory's device and inode and its name. */
typedef struct file_id {
    int exists;
    dev_t dev;
    ino_t ino;
    const char *base; /* a new file's name in its directory */
} file_id;

static file_id file_id_of(const char *path) {
    file_id id = {0, 0, 0, NULL};
    struct stat sb;
    if (!stat(path, &sb)) {
        id.exists = 1, id.dev = sb.st_dev, id.ino = sb.st_ino;
        return id;
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1,
             slash ? path : ".");
    id.base = slash ? slash + 1 : path;
    if (!stat(dir, &sb)) id.dev = sb.st_dev, id.ino = sb.st_ino;
    return id;
}

static int same_file(file_id a, file_id b) {
    if (a.exists != b.exists || a.dev != b.dev || a.ino != b.ino) return 0;
    return a.exists || !strcmp(a.base, b.base);
}

/* Every output must be a file of its own, apart from every input: two
 * outputs would replace each other (a --trace written over the --save
 * checkpoint), and an output over an input destroys it (--save onto the
 * --data text, --export-weights onto the --init-from weights). One pair is
 * fine: --save onto the --resume checkpoint continues a run in its file,
 * which is safe because a save is atomic (a temporary file renamed over the
 * old one once complete; the resume has read it long before). */
static int check_files(const options *o) {
    const char *outs[4][2] = {{"--save", o->save},
                              {"--export-weights", o->export_weights},
                              {"--trace", o->trace},
                              {"--timeline", o->timeline}};
    const char *sched_file = o->schedule && !strncmp(o->schedule, "file:", 5) ? o->schedule + 5 : NULL;
    const char *ins[7][2] = {
        {"--data", o->data},          {"--tokens", o->tokens},          {"--init-from", o->init_from},
        {"--resume", o->resume},      {"--schedule file:", sched_file}, {"--text", o->text},
        {"--tokenizer", o->tokenizer}};
    for (int i = 0; i < 4; i++) {
        if (!outs[i][1]) continue;
        file_id a = file_id_of(outs[i][1]);
        for (int j = i + 1; j < 4; j++)
            if (outs[j][1] && same_file(a, file_id_of(outs[j][1])))
                return bad_option("%s %s and %s %s are the same file: one would replace the other; give them "
                                  "different paths",
                                  outs[i][0], outs[i][1], outs[j][0], outs[j][1]);
        for (int j = 0; j < 7; j++) {
            if (!ins[j][1] || (i == 0 && j == 3)) continue; /* --save over --resume: see above */
            if (same_file(a, file_id_of(ins[j][1])))
                return bad_option("%s %s is the file of %s%s%s: writing it would destroy the input; give %s "
                                  "another path",
                                  outs[i][0], outs[i][1], ins[j][0], j == 4 ? "" : " ", ins[j][1],
                                  outs[i][0]);
        }
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->cfg = gpt_config_default();
    o->cfg.arch = ARCH;
    o->steps = 60;
    o->log_every = 5;
    o->replicas = 1;
    o->nan_check = 1;
    o->schedule = "loop";
    o->temperature = 1.0f;
    o->eos = -1;
    for (int i = 1; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *val = NULL;
        const char *eq = strchr(arg, '=');
        if (strncmp(arg, "--", 2) != 0) return bad_option("unexpected argument \"%s\"", arg);
        size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nl >= sizeof name) return bad_option("unknown option \"%s\"", arg);
        memcpy(name, arg, nl);
        name[nl] = '\0';
        if (!strcmp(name, "--help")) {
            fputs(usage, stdout);
            return -1;
        }
        if (is_one_of(name, flags, sizeof flags / sizeof flags[0])) {
            if (eq) return bad_option("%s takes no value", name);
            if (!strcmp(name, "--tie-embeddings")) o->cfg.tie_embeddings = o->given.tie_embeddings = 1;
            if (!strcmp(name, "--no-nan-check")) o->nan_check = 0;
            if (!strcmp(name, "--fuse-steady-state")) o->fuse = 1;
            if (!strcmp(name, "--quiet")) o->quiet = 1;
            if (!strcmp(name, "--json")) o->json = 1;
            if (!strcmp(name, "--balance-stages")) o->cfg.balance_stages = 1;
            if (!strcmp(name, "--auto")) o->auto_layout = 1;
            if (!strcmp(name, "--fsdp")) o->fsdp = 1;
            if (!strcmp(name, "--bytes-as-tokens")) o->bytes_as_tokens = 1;
            if (!strcmp(name, "--print-ids")) o->print_ids = 1;
            continue;
        }
        if (!is_one_of(name, valued, sizeof valued / sizeof valued[0]))
            return bad_option("unknown option \"%s\"", name);
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return bad_option("%s needs a value", name);
        long long v;
        int rc = 0;
        if (!strcmp(name, "--layers")) {
            if (!(rc = parse_int(name, val, 1, 1000, &v))) o->cfg.layers = (int)v;
            o->given.layers = 1;
        } else if (!strcmp(name, "--width")) {
            if (!(rc = parse_int(name, val, 1, 1 << 16, &v))) o->cfg.width = v;
            o->given.width = 1;
        } else if (!strcmp(name, "--heads")) {
            if (!(rc = parse_int(name, val, 1, 1 << 12, &v))) o->cfg.heads = (int)v;
            o->given.heads = 1;
        } else if (!strcmp(name, "--seq")) {
            if (!(rc = parse_int(name, val, 1, 1 << 16, &v))) o->cfg.seq = v;
            o->given.seq = 1;
        } else if (!strcmp(name, "--vocab")) {
            if (!(rc = parse_int(name, val, 1, 1 << 24, &v))) o->cfg.vocab = v;
            o->given.vocab = 1;
        } else if (!strcmp(name, "--batch")) {
            if (!(rc = parse_int(name, val, 1, 1 << 20, &v))) o->cfg.batch = v;
        } else if (!strcmp(name, "--microbatches")) {
            if (!(rc = parse_int(name, val, 1, 1 << 20, &v))) o->cfg.microbatches = (int)v;
        } else if (!strcmp(name, "--stages")) {
            if (!(rc = parse_int(name, val, 1, 1000, &v))) o->cfg.stages = (int)v;
            o->stages_given = 1;
        } else if (!strcmp(name, "--timeline-width")) {
            rc = parse_int(name, val, 100, 100000, &o->timeline_width);
        } else if (!strcmp(name, "--memory-limit")) {
            int64_t b;
            if (mpmd_parse_bytes(val, &b) || b <= 0)
                return bad_option("--memory-limit expects a byte count like 512M or 2G, got \"%s\"", val);
            o->mem_limit = b;
        } else if (!strcmp(name, "--steps")) {
            rc = parse_int(name, val, 1, 1LL << 31, &o->steps);
        } else if (!strcmp(name, "--log-every")) {
            rc = parse_int(name, val, 1, 1LL << 31, &o->log_every);
        } else if (!strcmp(name, "--generate")) {
            rc = parse_int(name, val, 1, 1 << 20, &o->generate);
        } else if (!strcmp(name, "--top-k")) {
            rc = parse_int(name, val, 0, 1 << 24, &o->top_k);
        } else if (!strcmp(name, "--temperature")) {
            rc = parse_float(name, val, &o->temperature);
        } else if (!strcmp(name, "--prompt")) {
            if (o->n_prompts == MAX_PROMPTS)
                return bad_option("--prompt is given more than %d times", MAX_PROMPTS);
            o->prompt[o->n_prompts++] = val;
        } else if (!strcmp(name, "--eos")) {
            if (!*val) return bad_option("--eos needs a value");
            o->eos_arg = val; /* an id, or a token's text: known once --tokenizer is read */
        } else if (!strcmp(name, "--eval")) {
            rc = parse_int(name, val, 1, 1LL << 31, &o->eval_every);
        } else if (!strcmp(name, "--save-every")) {
            rc = parse_int(name, val, 1, 1LL << 31, &o->save_every);
        } else if (!strcmp(name, "--keep-last")) {
            rc = parse_int(name, val, 1, 1000000, &o->keep_last);
        } else if (!strcmp(name, "--threads")) {
            rc = parse_int(name, val, 0, 1024, &o->threads);
        } else if (!strcmp(name, "--ranks")) {
            rc = parse_int(name, val, 1, 4096, &o->ranks);
        } else if (!strcmp(name, "--data-parallel")) {
            rc = parse_int(name, val, 1, 4096, &o->replicas);
        } else if (!strcmp(name, "--tensor-parallel")) {
            long long tp;
            if (!(rc = parse_int(name, val, 1, 4096, &tp))) o->cfg.tensor_parallel = (int)tp;
        } else if (!strcmp(name, "--seed")) {
            if (!(rc = parse_int(name, val, 0, INT64_MAX, &v))) o->seed = (unsigned long long)v;
        } else if (!strcmp(name, "--lr")) {
            rc = parse_float(name, val, &o->cfg.lr);
        } else if (!strcmp(name, "--clip")) {
            if (!(rc = parse_float(name, val, &o->cfg.clip)) && !(o->cfg.clip > 0))
                rc = bad_option("--clip expects a global norm > 0, got \"%s\"", val);
        } else if (!strcmp(name, "--fsdp-gather")) {
            if (!strcmp(val, "task"))
                o->fsdp_gather = MPMD_GATHER_PER_TASK;
            else if (!strcmp(val, "step"))
                o->fsdp_gather = MPMD_GATHER_PER_STEP;
            else
                rc = bad_option("--fsdp-gather expects task or step, got \"%s\"", val);
            o->fsdp_gather_given = 1;
        } else if (!strcmp(name, "--decay")) {
            if (!strcmp(val, "matrices") || !strcmp(val, "all"))
                o->cfg.decay_all = !strcmp(val, "all");
            else
                rc = bad_option("--decay expects matrices or all, got \"%s\"", val);
        } else if (!strcmp(name, "--beta1") || !strcmp(name, "--beta2")) {
            float *b = name[6] == '1' ? &o->cfg.adam.b1 : &o->cfg.adam.b2;
            if (!(rc = parse_float(name, val, b)) && !(*b < 1.0f))
                rc = bad_option("%s must be in [0, 1), got \"%s\"", name, val);
        } else if (!strcmp(name, "--eps")) {
            rc = parse_float(name, val, &o->cfg.adam.eps);
        } else if (!strcmp(name, "--weight-decay")) {
            rc = parse_float(name, val, &o->cfg.adam.weight_decay);
        } else if (!strcmp(name, "--dropout")) {
            if (!(rc = parse_float(name, val, &o->cfg.dropout)) && o->cfg.dropout >= 1.0f)
                return bad_option("--dropout is a rate in [0, 1), got %s", val);
        } else if (!strcmp(name, "--kv-heads")) {
            if (!(rc = parse_int(name, val, 1, 1 << 12, &v))) o->cfg.kv_heads = (int)v;
            o->given.kv_heads = 1;
        } else if (!strcmp(name, "--mlp-hidden")) {
            if (!(rc = parse_int(name, val, 1, 1 << 20, &v))) o->cfg.mlp_hidden = v;
            o->given.mlp_hidden = 1;
        } else if (!strcmp(name, "--rope-base")) {
            if (!(rc = parse_float(name, val, &o->cfg.rope_base)) && !(o->cfg.rope_base > 1.0f))
                return bad_option("--rope-base must be greater than 1, got %s", val);
            o->given.rope_base = 1;
        } else if (!strcmp(name, "--step-timeout")) {
            char *end;
            double sec = strtod(val, &end);
            if (!strcmp(val, "off"))
                o->step_timeout = -1;
            else if (end == val || *end || !isfinite(sec) || sec <= 0)
                return bad_option("--step-timeout expects seconds > 0 or off, got \"%s\"", val);
            else
                o->step_timeout = sec;
        } else if (!strcmp(name, "--runtime")) {
            if (!strcmp(val, "mpi"))
                o->mpi = 1;
            else if (strcmp(val, "local") != 0)
                return bad_option("--runtime is local or mpi, got \"%s\"", val);
        } else {
            if (!*val) return bad_option("%s needs a value", name);
            if (!strcmp(name, "--data")) o->data = val;
            if (!strcmp(name, "--tokens")) o->tokens = val;
            if (!strcmp(name, "--text")) o->text = val;
            if (!strcmp(name, "--tokenizer")) o->tokenizer = val;
            if (!strcmp(name, "--init-from")) o->init_from = val;
            if (!strcmp(name, "--schedule")) o->schedule = val, o->schedule_given = 1;
            if (!strcmp(name, "--backend")) o->backend = val;
            if (!strcmp(name, "--precision")) o->precision = val;
            if (!strcmp(name, "--remat")) o->remat = val;
            if (!strcmp(name, "--attention")) o->attention = val;
            if (!strcmp(name, "--trace")) o->trace = val;
            if (!strcmp(name, "--timeline")) o->timeline = val;
            if (!strcmp(name, "--save")) o->save = val;
            if (!strcmp(name, "--resume")) o->resume = val;
            if (!strcmp(name, "--export-weights")) o->export_weights = val;
            if (!strcmp(name, "--dtype")) o->export_dtype_name = val;
        }
        if (rc) return rc;
    }
    int loop = !strcmp(o->schedule, "loop");
    if (!loop && strncmp(o->schedule, "file:", 5) != 0 && mpmd_schedule_kind_from_name(o->schedule) < 0)
        return bad_option(
            "unknown schedule \"%s\"; use loop, gpipe, std1f1b, eager1f1b, interleaved1f1b, kimik2, "
            "zerobubble, dualpipev, interleavedgpipe or file:PATH",
            o->schedule);
    if (o->auto_layout && (o->schedule_given || o->stages_given || o->remat || o->fuse))
        return bad_option("--auto chooses the schedule, stages, microbatches and remat; drop --schedule, "
                          "--stages, --remat and --fuse-steady-state");
    if (o->auto_layout && !o->ranks)
        return bad_option("--auto needs --ranks D (the ranks to lay the model on)");
    if (o->auto_layout && o->mpi)
        return bad_option("--auto measures in this process; run it with --runtime local, then run the chosen "
                          "layout under mpirun");
    if (o->mem_limit && !o->auto_layout) return bad_option("--memory-limit is the limit --auto plans under");
    if (o->fuse && strcmp(o->schedule, "interleaved1f1b") && strcmp(o->schedule, "kimik2") &&
        strncmp(o->schedule, "file:", 5))
        return bad_option("--fuse-steady-state applies to interleaved1f1b and kimik2, not to %s",
                          o->schedule);
    /* a long run is not lost to a typo in an output path: check them now */
    const char *outs[4][2] = {{"--save", o->save},
                              {"--trace", o->trace},
                              {"--timeline", o->timeline},
                              {"--export-weights", o->export_weights}};
    for (int k = 0; k < 4; k++) {
        const char *path = outs[k][1];
        if (!path) continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            slash == dir ? (void)(dir[1] = '\0') : (void)(*slash = '\0');
        else
            snprintf(dir, sizeof dir, ".");
        struct stat sb;
        if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
            return bad_option("%s %s: the directory %s does not exist", outs[k][0], path, dir);
        if (access(dir, W_OK))
            return bad_option("%s %s: cannot write in %s: %s", outs[k][0], path, dir, strerror(errno));
        if (!stat(path, &sb) && (S_ISDIR(sb.st_mode) || access(path, W_OK)))
            return bad_option("%s %s: %s", outs[k][0], path,
                              S_ISDIR(sb.st_mode) ? "is a directory" : strerror(errno));
    }
    int frc = check_files(o);
    if (frc) return frc;
    if (loop && !o->auto_layout && (o->ranks || o->fuse))
        return bad_option("--ranks and --fuse-steady-state need a pipeline schedule (--schedule NAME)");
    if (loop && (o->trace || o->timeline))
        return bad_option("--trace and --timeline draw a pipeline's ranks; give a --schedule");
    if (o->mpi && (o->trace || o->timeline))
        return bad_option(
            "--trace and --timeline need --runtime local (each MPI process sees only its rank)");
    if (o->save_every && !o->save) return bad_option("--save-every needs --save PATH");
    if (o->keep_last && !o->save_every)
        return bad_option(
            "--keep-last keeps the newest periodic checkpoints: give --save-every K (and --save PATH)");
    o->resume_latest = o->resume && !strcmp(o->resume, "latest");
    if (o->resume_latest && !o->save)
        return bad_option("--resume latest continues from the newest checkpoint of --save PATH: give --save "
                          "(a file named latest: --resume ./latest)");
    if (o->fsdp && o->replicas < 2)
        return bad_option(
            "--fsdp shards over the data-parallel replicas: give --data-parallel R with R >= 2");
    if (o->fsdp_gather_given && !o->fsdp)
        return bad_option("--fsdp-gather says when FSDP gathers: give --fsdp too");
    if (!!o->data + !!o->tokens + !!o->text > 1)
        return bad_option("--data (the bytes of a text), --tokens (a token file) and --text (a text through "
                          "--tokenizer) are sources of data; give one");
    if (o->text && !o->tokenizer)
        return bad_option(
            "--text FILE is encoded by a tokenizer: give --tokenizer tokenizer.json (or --data FILE "
            "to train on its bytes)");
    if (o->text && o->generate)
        return bad_option("--generate samples from a trained model and reads no data: --text is for training "
                          "(--tokenizer alone makes --prompt text and the samples text)");
    if (o->tokenizer && !o->text && !o->generate)
        return bad_option(
            "--tokenizer encodes the text of --text FILE: give --text (or, with --generate N, the "
            "prompts and samples)");
    if ((o->n_prompts || o->top_k || o->temperature != 1.0f || o->eos_arg || o->print_ids) && !o->generate)
        return bad_option(
            "--prompt, --temperature, --top-k, --eos and --print-ids are options of --generate N");
    if (o->generate) {
        if (!o->resume && !o->init_from)
            return bad_option("--generate samples from trained weights: give --resume FILE (a checkpoint or "
                              "weights file) or --init-from FILE");
        if (o->replicas > 1 || o->auto_layout || o->eval_every || o->save || o->export_weights)
            return bad_option("--generate runs a trained model: --data-parallel, --auto, --eval, --save and "
                              "--export-weights are training options");
    }
    if (o->init_from && o->resume)
        return bad_option("--init-from starts from " INIT_WHAT " and --resume from a checkpoint; give one");
    if (o->export_dtype_name && !o->export_weights) return bad_option("--dtype needs --export-weights PATH");
    const char *xd = o->export_dtype_name ? o->export_dtype_name : "bf16";
    if (!strcmp(xd, "f32"))
        o->export_dtype = MPMD_F32;
    else if (!strcmp(xd, "bf16"))
        o->export_dtype = MPMD_BF16;
    else if (!strcmp(xd, "f16"))
        o->export_dtype = MPMD_F16;
    else
        return bad_option("--dtype is f32, bf16 or f16, got \"%s\"", xd);
    mpmd_backend_defaults best = {MPMD_F32, 1}; /* an unknown backend is refused when the step is made */
    mpmd_backend_defaults_of(o->backend, &best);
    if (!o->precision)
        o->cfg.compute = best.compute;
    else if (!strcmp(o->precision, "f32"))
        o->cfg.compute = MPMD_F32;
    else if (!strcmp(o->precision, "bf16"))
        o->cfg.compute = MPMD_BF16;
    else if (!strcmp(o->precision, "f16"))
        o->cfg.compute = MPMD_F16;
    else
        return bad_option("--precision is f32, bf16 or f16, got \"%s\"", o->precision);
    if (!o->attention)
        o->cfg.fused_attention = best.fused_attention;
    else if (!strcmp(o->attention, "fused") || !strcmp(o->attention, "composed"))
        o->cfg.fused_attention = !strcmp(o->attention, "fused");
    else
        return bad_option("--attention is fused or composed, got \"%s\"", o->attention);
    if (!o->remat || !strcmp(o->remat, "none"))
        o->cfg.remat = 0;
    else if (!strcmp(o->remat, "block"))
        o->cfg.remat = MPMD_REMAT_SAVE_NOTHING;
    else if (!strcmp(o->remat, "dots"))
        o->cfg.remat = MPMD_REMAT_SAVE_DOTS;
    else
        return bad_option("--remat is none, block or dots, got \"%s\"", o->remat);
    if (o->cfg.batch % o->replicas)
        return bad_option("--batch %lld is not divisible by --data-parallel %lld", (long long)o->cfg.batch,
                          o->replicas);
    o->cfg.batch /= o->replicas; /* the graph is one replica's step */
    mpmd_error err;
    if (o->init_from) { /* the file's model: its shapes, the options given checked against them */
#ifdef GPT_PROGRAM_LLAMA
        llama_hf_info info;
        if (llama_hf_inspect(o->init_from, &info, &err)) {
            fprintf(stderr, PROG ": --init-from %s\n", err.msg);
            return 1;
        }
        if (llama_hf_configure(o->init_from, &info, &o->given, &o->cfg, &err))
            return bad_option("--init-from %s", err.msg);
#else
        gpt_hf_info info;
        if (gpt_hf_inspect(o->init_from, &info, &err)) {
            fprintf(stderr, PROG ": --init-from %s\n", err.msg);
            return 1;
        }
        if (gpt_hf_configure(o->init_from, &info, &o->given, &o->cfg, &err))
            return bad_option("--init-from %s", err.msg);
#endif
    } else if (o->tokens && !o->given.vocab) {
        o->cfg.vocab = GPT2_VOCAB;
    }
    if (o->tokenizer) {
        if (mpmd_tokenizer_load(o->tokenizer, &o->tok, &err)) {
            fprintf(stderr, PROG ": --tokenizer: %s\n", err.msg);
            return err.code == MPMD_ERR_IO || err.code == MPMD_ERR_NOMEM ? 1 : 2;
        }
        if (!o->given.vocab && !o->init_from) o->cfg.vocab = mpmd_tokenizer_vocab_size(o->tok);
    }
    /* --resume (and --generate from a checkpoint): the model it records, the options given checked against
     * it. A file whose header does not read is left to the resume itself, which names why; --resume
     * latest takes the record of the newest checkpoint of --save that reads */
    if (o->resume) {
        const char *file = o->resume;
        mpmd_checkpoint_info info;
        int have = 0;
        gpt_candidate *cand = NULL;
        int n_cand = 0;
        if (o->resume_latest) {
            if (!gpt_series_list(o->save, &cand, &n_cand, &err))
                for (int k = 0; k < n_cand && !have; k++)
                    if (!cand[k].bad) info = cand[k].info, file = cand[k].path, have = 1;
        } else {
            have = !mpmd_checkpoint_read_info(o->resume, &info, &err);
        }
        mpmd_status crc =
            have ? gpt_config_from_record(&o->cfg, &o->given, info.config, file, &err) : MPMD_OK;
        gpt_candidates_free(cand, n_cand);
        if (crc) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            return 1;
        }
    }
    /* (after the file is known to be GPT-2's weights) GPT-2 reads ids as its BPE
     * tokens, to which bytes as ids 0..255 are other tokens: almost surely a
     * mistake, refused unless asked for */
#ifdef GPT_PROGRAM_LLAMA
    if (o->init_from && !o->tokens && !o->text && !o->generate && !o->bytes_as_tokens)
        return bad_option(
            "--init-from %s gives a LLaMA model's weights, which read token ids as its tokenizer's, but "
            "%s%s gives bytes as ids 0..255, which are other tokens to it. Give --tokens FILE (its token "
            "ids in llm.c's format) or --text FILE with --tokenizer (its tokenizer.json), or add "
            "--bytes-as-tokens to train on the bytes all the same",
            o->init_from, o->data ? "--data " : "the generated corpus (no --data or --tokens)",
            o->data ? o->data : "");
#else
    if (o->init_from && !o->tokens && !o->text && !o->generate && !o->bytes_as_tokens)
        return bad_option(
            "--init-from %s gives GPT-2's weights, which read token ids as GPT-2's BPE tokens, but "
            "%s%s gives bytes as ids 0..255, which are other tokens to GPT-2. Give --tokens FILE "
            "(GPT-2 token ids in llm.c's format, as its dev/data scripts write them), or add "
            "--bytes-as-tokens to train on the bytes all the same",
            o->init_from, o->data ? "--data " : "the generated corpus (no --data or --tokens)",
            o->data ? o->data : "");
#endif
    if (o->bytes_as_tokens && (!o->init_from || o->tokens || o->text || o->generate))
        return bad_option("--bytes-as-tokens lets --init-from's " INIT_LAYOUT
                          " weights train on byte data (--data or the "
                          "generated corpus); it does nothing here");
    if (!mpmd_mpi_available() && o->mpi)
        return bad_option(
            "--runtime mpi: this build of mpmd has no MPI (install libopenmpi-dev and rebuild)");
    if (o->eos_arg && o->tok) { /* a token's text, as the tokenizer writes it */
        int32_t id = mpmd_tokenizer_id_of(o->tok, o->eos_arg);
        if (id < 0)
            return bad_option(
                "--eos \"%s\" is no token of --tokenizer %s: with a tokenizer, --eos is a token's "
                "whole text (like \"<|endoftext|>\")",
                o->eos_arg, o->tokenizer);
        if (id >= o->cfg.vocab)
            return bad_option(
                "--eos \"%s\" is token %d of --tokenizer %s, outside the model's vocabulary (ids 0 "
                ".. %lld)",
                o->eos_arg, id, o->tokenizer, (long long)o->cfg.vocab - 1);
        o->eos = id;
    } else if (o->eos_arg) {
        char *end;
        errno = 0;
        o->eos = strtoll(o->eos_arg, &end, 10);
        if (errno || end == o->eos_arg || *end || o->eos < 0)
            return bad_option("--eos \"%s\" is not a token id: a token's text (like \"<|endoftext|>\") needs "
                              "--tokenizer tokenizer.json",
                              o->eos_arg);
        if (o->eos >= o->cfg.vocab)
            return bad_option("--eos %lld is not a token of the vocabulary (ids 0 .. %lld)", o->eos,
                              (long long)o->cfg.vocab - 1);
    }
    if (gpt_config_check(&o->cfg, &err)) {
        fprintf(stderr, PROG ": %s\n(run " PROG " --help for the options)\n", err.msg);
        return 2;
    }
    return check_memory(o);
}

/* A number of a JSON line: NaN and the infinities (a loss that diverged,
 * with --no-nan-check) have no JSON form, and printf's "nan" would make the
 * line unreadable to a JSON parser, so they are written as null. */
static const char *json_num(char buf[32], const char *fmt, double v) {
    if (!isfinite(v)) return "null";
    snprintf(buf, 32, fmt, v);
    return buf;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The compiled step (a pipeline, or the one-rank loop without a schedule)
 * and how it runs. */
typedef struct trainer {
    mpmd_step *st;
    mpmd_schedule *sched; /* NULL: the loop */
    int mpi, root;
    gpt_saver *saver; /* the periodic checkpoint being written, or NULL */
    /* what a run made, freed on every way out (trainer_free): the data,
     * the model and the --eval model with its step (NULL: none yet) */
    gpt_corpus *corpus;
    gpt_model *m, *em;
    mpmd_step *ev;
} trainer;

static void trainer_free(trainer *t) {
    mpmd_step_free(t->st), mpmd_step_free(t->ev);
    mpmd_schedule_free(t->sched);
    if (t->m) gpt_model_free(t->m);
    if (t->em) gpt_model_free(t->em);
    if (t->corpus) gpt_corpus_free(t->corpus);
    t->st = t->ev = NULL, t->sched = NULL, t->m = t->em = NULL, t->corpus = NULL;
}

/* --eval: the mean loss of EVAL_BATCHES fixed batches of the held-out data
 * (batch e drawn with step e of a seed of its own), under the training
 * step's parameters of now. tok and tgt hold a global batch. Collective
 * under MPI. */
#define EVAL_BATCHES 4
static mpmd_status evaluate(trainer *t, mpmd_step *ev, const gpt_model *em, const gpt_model *m,
                            const gpt_corpus *held, int64_t gb, unsigned long long seed, int replicas,
                            int32_t *tok, int32_t *tgt, float *out, mpmd_error *err) {
    mpmd_status rc = gpt_copy_params(ev, em, t->st, m, err);
    double sum = 0;
    size_t bytes = (size_t)(gb * em->cfg.seq) * sizeof *tok;
    for (int e = 0; e < EVAL_BATCHES && !rc; e++) {
        float l = NAN;
        gpt_sample_batch(held, gb, em->cfg.seq, seed ^ 0x6576616cull, (uint64_t)e, tok, tgt);
        if ((rc = gpt_set_inputs(ev, em, tok, tgt, bytes, seed, (uint64_t)e, replicas)) ||
            (rc = mpmd_step_run(ev)) || (rc = mpmd_step_gather(ev, em->loss, &l, sizeof l)))
            mpmd_error_set(err, rc, "--eval: %s", mpmd_step_error(ev));
        sum += l;
    }
    *out = (float)(sum / EVAL_BATCHES);
    return rc;
}

/* One message to stderr from every process that fails; under MPI the whole
 * job ends (no process waits for a dead peer). */
static int fail(trainer *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (t && t->mpi)
        fprintf(stderr, PROG " (process %d): ", mpmd_mpi_world_rank());
    else
        fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    /* a checkpoint being written is finished, not cut off at exit (which
     * would leave its temporary file) */
    if (t && t->saver) gpt_saver_join(t->saver);
    if (t && t->mpi) mpmd_mpi_abort(1);
    if (t) trainer_free(t);
    return 1;
}

static mpmd_status make_schedule(const options *o, mpmd_schedule **out, mpmd_error *err) {
    if (!strncmp(o->schedule, "file:", 5)) return mpmd_schedule_load(o->schedule + 5, out, err);
    return mpmd_schedule_new((mpmd_schedule_kind)mpmd_schedule_kind_from_name(o->schedule), o->cfg.stages,
                             (int)o->ranks, o->cfg.microbatches, o->fuse, out, err);
}

/* --export-weights: the parameters in --dtype, with a warning naming what
 * the file could not keep (values past f16's 65504 become infinities, and
 * NaN stays NaN): a model loaded from it computes NaN, and nothing else
 * would say so until then. */
static int export_weights(const options *o, trainer *t) {
    mpmd_error err;
    mpmd_export_report r;
    if (mpmd_step_export_weights_report(t->st, o->export_weights, o->export_dtype, &r, &err))
        return fail(t, "%s", err.msg);
    if (!t->root || (!r.overflowed && !r.nonfinite)) return 0;
    const char *dn = mpmd_dtype_name(o->export_dtype);
    fprintf(stderr, PROG ": warning: --export-weights %s (%s): ", o->export_weights, dn);
    if (r.overflowed)
        fprintf(stderr, "%lld values too large for %s were written as infinities", (long long)r.overflowed,
                dn);
    if (r.nonfinite)
        fprintf(stderr, "%s%lld values were NaN or infinite already", r.overflowed ? ", " : "",
                (long long)r.nonfinite);
    fprintf(stderr, ", in %d tensor%s: ", r.tensors, r.tensors == 1 ? "" : "s");
    for (int i = 0; i < r.tensors && i < MPMD_EXPORT_REPORT_TENSORS; i++)
        fprintf(stderr, "%s%s (%lld)", i ? ", " : "", r.tensor[i].name,
                (long long)(r.tensor[i].overflowed + r.tensor[i].nonfinite));
    if (r.tensors > MPMD_EXPORT_REPORT_TENSORS) fprintf(stderr, ", ...");
    fprintf(stderr, "; a model loaded from it computes NaN%s\n",
            r.overflowed ? (o->export_dtype == MPMD_F16 ? ": export as bf16 or f32" : ": export as f32")
                         : "");
    return 0;
}

/* A --prompt as token ids: with --tokenizer its text encoded (special
 * tokens written in it become their ids, as --text's do), else its bytes
 * with the byte vocabulary (256), else comma-separated ids; each below the
 * vocabulary. The prompt and the
 * --generate N tokens after it must fit in the model's T positions (--seq):
 * ids are stored up to T, but all are counted, so that a message says how
 * many the prompt has. k names the prompt when there are several. Returns
 * the count, or -1 after a message. */
static int64_t parse_prompt(const options *o, int k, int32_t *out) {
    const int64_t V = o->cfg.vocab, T = o->cfg.seq, N = o->generate;
    if (N >= T) {
        bad_option("--generate %lld: the model has %lld positions (--seq %lld) for the prompt (at least 1 "
                   "token) and the tokens generated after it; at most %lld can be generated",
                   (long long)N, (long long)T, (long long)T, (long long)(T - 1));
        return -1;
    }
    const char *text = o->n_prompts ? o->prompt[k] : o->tok ? "The" : V == 256 ? "The " : "464", *p = text;
    char which[32] = "";
    if (o->n_prompts > 1)
        snprintf(which, sizeof which, " (the %d%s)", k + 1,
                 k == 0   ? "st"
                 : k == 1 ? "nd"
                 : k == 2 ? "rd"
                          : "th");
    int64_t n = 0;
    if (o->tok) {
        int32_t *ids;
        size_t len;
        mpmd_error err;
        if (mpmd_tokenizer_encode(o->tok, text, strlen(text), MPMD_TOKENIZE_SPECIAL, &ids, &len, &err)) {
            bad_option("--prompt%s: %s", which, err.msg);
            return -1;
        }
        for (size_t i = 0; i < len; i++) {
            if (ids[i] >= V) {
                bad_option(
                    "--prompt%s: \"%s\" encodes to token %d (at %zu), outside the model's vocabulary (ids "
                    "0 .. %lld): is --tokenizer %s the model's?",
                    which, text, ids[i], i, (long long)V - 1, o->tokenizer);
                free(ids);
                return -1;
            }
            if ((int64_t)i < T) out[i] = ids[i];
        }
        free(ids);
        n = (int64_t)len;
    } else if (V == 256) {
        for (; *p; p++, n++)
            if (n < T) out[n] = (unsigned char)*p;
    } else {
        while (*p) {
            char *end;
            errno = 0;
            long long id = strtoll(p, &end, 10);
            if (end == p || errno || id < 0 || id >= V) {
                bad_option(
                    "--prompt%s: \"%s\" is not a list of token ids below %lld separated by commas "
                    "(the vocabulary is not bytes; give --tokenizer tokenizer.json for a prompt in text)",
                    which, text, (long long)V);
                return -1;
            }
            if (n < T) out[n] = (int32_t)id;
            n++;
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') {
                bad_option("--prompt%s: unexpected \"%s\" among the token ids", which, end);
                return -1;
            }
        }
    }
    if (n < 1 || n > T - N) {
        bad_option("--prompt%s has %lld tokens, but with --generate %lld the model's %lld positions (--seq) "
                   "leave room for between 1 and %lld",
                   which, (long long)n, (long long)N, (long long)T, (long long)(T - N));
        return -1;
    }
    return n;
}

/* Token id as the samples print it: a byte (escaped when not printable)
 * with the byte vocabulary, else ",id" (the id alone first in a line). */
static void print_token(int64_t V, int32_t id, int first) {
    if (V != 256)
        printf("%s%d", first ? "" : ",", id);
    else if (id == '\n')
        fputs("\\n", stdout);
    else if (id == '\\')
        fputs("\\\\", stdout);
    else if (id >= 32 && id < 127)
        putchar(id);
    else
        printf("\\x%02x", id);
}

/* With --tokenizer the samples are text: the tokens' bytes, a character
 * printed once all of its bytes have come (a token may end inside one).
 * What a line shows: UTF-8 characters as they are, a newline as \n, a
 * backslash as \\, other control bytes and bytes that are not UTF-8 as
 * \xNN, and an id that is no token of the tokenizer (a model's vocabulary
 * may be larger) as \<ID>. The bytes of a character still incomplete. */
typedef struct text_out {
    unsigned char pend[4];
    int n;
} text_out;

/* The length of the UTF-8 character at p (n bytes there): 1..4; 0 when its
 * bytes so far are a valid start but n is too short; -1 when p[0] starts
 * no valid character. */
static int utf8_char(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    int len = c < 0x80                 ? 1
              : c >= 0xc2 && c <= 0xdf ? 2
              : c >= 0xe0 && c <= 0xef ? 3
              : c >= 0xf0 && c <= 0xf4 ? 4
                                       : -1;
    if (len <= 1) return len;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0;
        unsigned lo = 0x80, hi = 0xbf;
        if (i == 1 && c == 0xe0) lo = 0xa0; /* no overlong forms, surrogates or code points past U+10FFFF */
        if (i == 1 && c == 0xed) hi = 0x9f;
        if (i == 1 && c == 0xf0) lo = 0x90;
        if (i == 1 && c == 0xf4) hi = 0x8f;
        if (p[i] < lo || p[i] > hi) return -1;
    }
    return len;
}

static void put_byte_escaped(unsigned c) {
    if (c == '\n')
        fputs("\\n", stdout);
    else if (c == '\\')
        fputs("\\\\", stdout);
    else if (c < 32 || c == 127 || c >= 128)
        printf("\\x%02x", c);
    else
        putchar((int)c);
}

/* Print the whole characters of the pending bytes; with `flush` the rest too (escaped). */
static void text_drain(text_out *t, int flush) {
    int i = 0;
    while (i < t->n) {
        int len = utf8_char(t->pend + i, (size_t)(t->n - i));
        if (len == 0 && !flush) break;
        if (len <= 1) {
            put_byte_escaped(t->pend[i++]);
        } else {
            fwrite(t->pend + i, 1, (size_t)len, stdout);
            i += len;
        }
    }
    memmove(t->pend, t->pend + i, (size_t)(t->n - i));
    t->n -= i;
}

static void text_token(text_out *t, const mpmd_tokenizer *tok, int32_t id) {
    size_t len;
    const char *b = mpmd_tokenizer_token_of(tok, id, &len);
    if (!b) {
        text_drain(t, 1);
        printf("\\<%d>", id);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (t->n == (int)sizeof t->pend) text_drain(t, 0);
        if (t->n == (int)sizeof t->pend) text_drain(t, 1); /* (never: 4 bytes hold a character) */
        t->pend[t->n++] = (unsigned char)b[i];
        text_drain(t, 0);
    }
}

/* What --generate prints, as the tokens come (mpmd_generate's on_token):
 * one sequence streams its tokens on its line; several print each line
 * once its sequence and those before it have ended. */
typedef struct printer {
    int root, stream;
    const mpmd_tokenizer *tok; /* --tokenizer: the samples as text */
    int print_ids;             /* --print-ids: each sample's ids on a line "ids B: ..." after it */
    text_out text;             /* the streamed line's incomplete character */
    int64_t B, T, V, N, eos;
    const int64_t *plen; /* the prompts' lengths */
    const int32_t *out;  /* mpmd_generate's sequences and lengths, updated before each call */
    const int64_t *len;
    unsigned char *done;
    int64_t next;   /* the first sequence whose line is not printed */
    int64_t drawn;  /* tokens drawn so far */
    double t_first; /* when the first token was drawn */
} printer;

/* One token of sample b's line. */
static void print_sample_token(printer *pr, text_out *t, int32_t id, int first) {
    if (pr->tok)
        text_token(t, pr->tok, id);
    else
        print_token(pr->V, id, first);
}

/* The end of sample b's line, and with --print-ids its ids' line. */
static void end_line(printer *pr, text_out *t, int64_t b) {
    if (pr->tok) text_drain(t, 1);
    putchar('\n');
    if (!pr->print_ids) return;
    printf("ids %lld: ", (long long)b);
    for (int64_t i = 0; i < pr->len[b]; i++)
        printf("%s%d", i ? "," : "", pr->out[b * pr->T + i]);
    putchar('\n');
}

static void print_line(printer *pr, int64_t b) {
    text_out t = {{0}, 0};
    printf("sample %lld: ", (long long)b);
    for (int64_t i = 0; i < pr->len[b]; i++)
        print_sample_token(pr, &t, pr->out[b * pr->T + i], i == 0);
    end_line(pr, &t, b);
}

static int on_token(void *user, int64_t b, int64_t pos, int32_t tok) {
    printer *pr = user;
    if (pr->drawn++ == 0) pr->t_first = now_s();
    if (pr->root && pr->stream) {
        if (pos == pr->plen[b]) { /* the first token: the line and its prompt first */
            printf("sample %lld: ", (long long)b);
            for (int64_t i = 0; i < pos; i++)
                print_sample_token(pr, &pr->text, pr->out[b * pr->T + i], i == 0);
        }
        print_sample_token(pr, &pr->text, tok, 0);
        fflush(stdout);
    }
    if (tok == pr->eos || pos + 1 - pr->plen[b] >= pr->N || pos + 1 == pr->T) pr->done[b] = 1;
    for (; pr->next < pr->B && pr->done[pr->next]; pr->next++)
        if (pr->root) pr->stream ? end_line(pr, &pr->text, pr->next) : print_line(pr, pr->next);
    if (pr->root && !pr->stream) fflush(stdout);
    return 0;
}

/* The buffers of --generate: the prompts (np of T ids each) and their
 * lengths, each sequence's prompt and length, mpmd_generate's output and
 * the printer's flags. */
typedef struct gen_buffers {
    int32_t *pbuf, *out;
    int64_t *plen, *blen, *len;
    const int32_t **prompts;
    unsigned char *done;
} gen_buffers;

static int generate_with(options *o, trainer *t, gen_buffers *gb, gpt_decoder *d) {
    gpt_config c = o->cfg;
    mpmd_error err;
    const int64_t B = c.batch, T = c.seq, V = c.vocab;
    const int np = o->n_prompts ? o->n_prompts : 1;
    for (int k = 0; k < np; k++)
        if ((gb->plen[k] = parse_prompt(o, k, gb->pbuf + k * T)) < 0) return 2;
    for (int64_t b = 0; b < B; b++)
        gb->prompts[b] = gb->pbuf + (b % np) * T, gb->blen[b] = gb->plen[b % np];
    if (gpt_build_decoder(&c, d, &err)) return fail(t, "%s", err.msg);
    if (strcmp(o->schedule, "loop") != 0 && make_schedule(o, &t->sched, &err)) return fail(t, "%s", err.msg);
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = (int)o->threads;
    so.seed = o->seed;
    so.runtime = o->mpi ? MPMD_RUNTIME_MPI : MPMD_RUNTIME_LOCAL;
    so.backend = o->backend;
    so.step_timeout = o->step_timeout;
    if (!(t->st = mpmd_jit_with_loop(d->g, t->sched, &so, &err))) return fail(t, "%s", err.msg);
    if (o->resume) {
        /* the parameters load by name and shape alone: --heads or
         * --tie-embeddings of another model would load and decode wrong */
        mpmd_checkpoint_info info;
        if (mpmd_checkpoint_read_info(o->resume, &info, &err) ||
            gpt_config_check_recorded(&o->cfg, info.config, o->resume, &err))
            return fail(t, "%s", err.msg);
        mpmd_param_load_report rep;
        if (mpmd_step_load_params(t->st, o->resume, NULL, &rep, &err)) return fail(t, "%s", err.msg);
        if (rep.missing)
            return fail(
                t, "%s lacks %d of the model's %d parameters: give the model options it was trained with",
                o->resume, rep.missing, d->n_params);
        /* a weights export holds parameters only: one this model does not
         * read (an untied LM head under --tie-embeddings) is of another model */
        if (info.weights_only && rep.unexpected)
            return fail(t,
                        "%s holds %d parameter%s this model does not have (an LM head of its own: trained "
                        "without --tie-embeddings?): give the model options it was trained with",
                        o->resume, rep.unexpected, rep.unexpected == 1 ? "" : "s");
    } else {
        gpt_model view = gpt_decoder_model(d);
        if (init_from(o->init_from, &view, t->st, &err)) return fail(t, "--init-from %s", err.msg);
    }
    printer pr = {t->root, B == 1,   o->tok,  o->print_ids, {{0}, 0}, B, T, V, o->generate,
                  o->eos,  gb->blen, gb->out, gb->len,      gb->done, 0, 0, 0};
    mpmd_generate_opts go = MPMD_GENERATE_DEFAULTS;
    go.sampling = (mpmd_sampling){o->temperature, (int)o->top_k, o->seed};
    go.max_new = o->generate, go.eos = (int32_t)o->eos;
    go.on_token = on_token, go.user = &pr;
    double t0 = now_s();
    mpmd_status rc = mpmd_generate(t->st, &d->io, gb->prompts, gb->blen, &go, gb->out, gb->len);
    double t1 = now_s();
    if (rc) {
        const char *msg = mpmd_step_error(t->st);
        if (!strncmp(msg, "mpmd_generate: ", 15)) msg += 15;
        if (t->root && pr.stream && pr.drawn) { /* end a line cut short */
            if (pr.tok) text_drain(&pr.text, 1);
            putchar('\n');
        }
        if (rc == MPMD_ERR_RUNTIME && strstr(msg, "NaN or infinite"))
            return fail(t,
                        "--generate: %s: the weights of %s hold NaN or infinite values, or overflow (an f16 "
                        "export of values past 65504 holds infinities)",
                        msg, o->resume ? o->resume : o->init_from);
        return fail(t, "--generate: %s", msg);
    }
    for (; pr.next < B; pr.next++) /* (every sequence has ended; nothing is left but by an early stop) */
        if (t->root) pr.stream ? end_line(&pr, &pr.text, pr.next) : print_line(&pr, pr.next);
    if (t->root && !o->quiet) {
        char split[48] = "";
        if (c.tensor_parallel > 1) snprintf(split, sizeof split, ", over %d model ranks", c.tensor_parallel);
        int64_t after = pr.drawn > B ? pr.drawn - B : 0, most = 0;
        for (int64_t b = 0; b < B; b++)
            most = gb->len[b] - gb->blen[b] > most ? gb->len[b] - gb->blen[b] : most;
        printf("generated %lld tokens (at most %lld for each of %lld sequences, %d in flight per microbatch, "
               "%s%s): the first after %.1f ms, then %.0f tokens/s (%.2f ms per position)\n",
               (long long)pr.drawn, o->generate, (long long)B, (int)(B / c.microbatches),
               t->sched ? t->sched->name : "the one-rank loop", split, 1e3 * (pr.t_first - t0),
               t1 > pr.t_first ? (double)after / (t1 - pr.t_first) : 0.0,
               most > 1 ? 1e3 * (t1 - pr.t_first) / (double)(most - 1) : 0.0);
    }
    return 0;
}

/* The outcome of the periodic checkpoint written in the background (on
 * process 0): a failure (a full disk) is a warning; the previous checkpoint
 * is still there, and training goes on. */
static void report_save(gpt_saver *sv) {
    if (gpt_saver_join(sv))
        fprintf(stderr, PROG ": warning: the checkpoint of step %lld was not saved: %s; training goes on\n",
                sv->step, sv->err.msg);
}

/* The file a checkpoint of `step` goes to: with --keep-last its series'
 * file, else --save itself. */
static int save_path(const options *o, long long step, char *out, size_t cap) {
    if (o->keep_last) return gpt_series_name(o->save, step, out, cap);
    int n = snprintf(out, cap, "%s", o->save);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static mpmd_checkpoint_info checkpoint_info(const options *o, long long step) {
    mpmd_checkpoint_info info = MPMD_CHECKPOINT_INFO_INIT;
    info.step = step;
    info.seed = o->seed;
    gpt_config_record(&o->cfg, info.config, sizeof info.config); /* what --resume and --generate check */
    return info;
}

/* A periodic checkpoint: the state copied to host memory here (collective
 * under MPI), written by a thread of its own while training goes on. */
static int periodic_save(trainer *t, const options *o, long long step) {
    mpmd_checkpoint_info info = checkpoint_info(o, step);
    mpmd_checkpoint_snapshot *snap;
    mpmd_error err;
    char path[4200];
    if (save_path(o, step, path, sizeof path)) return fail(t, "--save %s: the name is too long", o->save);
    mpmd_status rc = mpmd_step_snapshot(t->st, &info, &snap, &err);
    if (rc == MPMD_ERR_NOMEM) { /* no room for the copy: as a failed save */
        if (t->root)
            fprintf(stderr,
                    PROG ": warning: the checkpoint of step %lld was not saved: %s; training goes on\n", step,
                    err.msg);
        return 0;
    }
    if (rc) return fail(t, "step %lld: %s", step, err.msg);
    if (t->mpi && !t->root) { /* process 0 writes; here the snapshot holds nothing */
        mpmd_checkpoint_snapshot_free(snap);
        return 0;
    }
    gpt_saver_start(t->saver, snap, path, step, o->keep_last ? o->save : NULL, (int)o->keep_last, PROG);
    return 0;
}

/* --resume: load the checkpoint at `path`, after checking the model it
 * records and its seed against this run's; *first becomes the step to train
 * next. On failure err says why and *fatal whether --resume latest may try
 * an older file instead (a file that cannot be read or verifies wrong) or
 * must stop (a checkpoint of another model or seed). */
static mpmd_status resume_from(trainer *t, const options *o, const char *path, long long *first, int *fatal,
                               mpmd_error *err) {
    mpmd_checkpoint_info info;
    *fatal = 0;
    mpmd_status rc = mpmd_checkpoint_read_info(path, &info, err);
    if (rc) return rc;
    *fatal = 1;
    if ((rc = gpt_config_check_recorded(&o->cfg, info.config, path, err))) return rc;
    /* a weights export (info.weights_only) gives the parameters alone:
     * fresh optimizer state, step 0, no seed to keep */
    if (!info.weights_only && info.seed != o->seed)
        return mpmd_error_set(
            err, MPMD_ERR_INVALID,
            "%s was trained with --seed %llu (its batches follow that seed); resume with it", path,
            (unsigned long long)info.seed);
    if (info.step + 1 > o->steps)
        return mpmd_error_set(err, MPMD_ERR_INVALID,
                              "%s holds %lld steps already; --steps %lld counts from the start of training",
                              path, (long long)info.step, o->steps);
    rc = mpmd_step_load(t->st, path, &info, err);
    *fatal = rc && rc != MPMD_ERR_FORMAT && rc != MPMD_ERR_IO;
    if (!rc) *first = info.step + 1;
    return rc;
}

/* --resume latest: the checkpoints of --save, newest first, until one
 * loads; each that does not is named with why. Under MPI the processes
 * agree on every try, so that all continue from the same file. Returns 0
 * (from[0] = 0 when there is none yet: start at step 1) or fail()'s 1. */
static int resume_latest(trainer *t, const options *o, long long *first, char *from, size_t cap) {
    gpt_candidate *c;
    int n, skipped = 0;
    mpmd_error err;
    from[0] = '\0';
    if (gpt_series_list(o->save, &c, &n, &err)) return fail(t, "--resume latest: %s", err.msg);
    for (int i = 0; i < n; i++) {
        int fatal = 0;
        mpmd_status rc = MPMD_ERR_FORMAT;
        if (c[i].bad)
            snprintf(err.msg, sizeof err.msg, "%s", c[i].why);
        else
            rc = resume_from(t, o, c[i].path, first, &fatal, &err);
        if (rc && fatal) {
            gpt_candidates_free(c, n);
            return fail(t, "%s", err.msg);
        }
        int failed[1] = {rc != MPMD_OK};
        mpmd_error e2;
        if (t->mpi && mpmd_mpi_any(failed, 1, &e2)) {
            gpt_candidates_free(c, n);
            return fail(t, "%s", e2.msg);
        }
        if (!failed[0]) {
            snprintf(from, cap, "%s", c[i].path);
            gpt_candidates_free(c, n);
            return 0;
        }
        if (t->root)
            fprintf(stderr, PROG ": warning: --resume latest: skipping %s: %s\n", c[i].path,
                    rc ? err.msg : "another process could not load it");
        skipped++;
    }
    gpt_candidates_free(c, n);
    if (skipped)
        return fail(
            t,
            "--resume latest: none of the %d checkpoints of %s loads (each is named above); move them "
            "away to start afresh",
            skipped, o->save);
    *first = 1;
    return 0;
}

/* --generate N: every sequence (--batch of them, --microbatches in flight)
 * starts from its prompt (--prompt, repeated: sequence b takes prompt b %
 * count); mpmd_generate runs them position by position through the decode
 * step, the known tokens first, then the tokens drawn. Everything made is
 * freed on every way out. */
static int generate(options *o, trainer *t) {
    const int64_t B = o->cfg.batch, T = o->cfg.seq;
    const int np = o->n_prompts ? o->n_prompts : 1;
    gen_buffers gb = {malloc((size_t)(np * T) * sizeof(int32_t)),
                      malloc((size_t)(B * T) * sizeof(int32_t)),
                      malloc((size_t)np * sizeof(int64_t)),
                      malloc((size_t)B * sizeof(int64_t)),
                      malloc((size_t)B * sizeof(int64_t)),
                      malloc((size_t)B * sizeof(int32_t *)),
                      calloc((size_t)B, 1)};
    gpt_decoder d;
    memset(&d, 0, sizeof d);
    int rc = gb.pbuf && gb.out && gb.plen && gb.blen && gb.len && gb.prompts && gb.done
                 ? generate_with(o, t, &gb, &d)
                 : fail(t, "out of memory");
    free(gb.pbuf), free(gb.out), free(gb.plen), free(gb.blen), free(gb.len), free(gb.prompts), free(gb.done);
    mpmd_step_free(t->st);
    t->st = NULL;
    mpmd_schedule_free(t->sched);
    t->sched = NULL;
    gpt_decoder_free(&d);
    mpmd_tokenizer_free(o->tok);
    o->tok = NULL;
    if (t->mpi && rc == 0) mpmd_mpi_finalize();
    return rc;
}

static int run(int argc, char **argv) {
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) mpmd_tokenizer_free(o.tok);
    if (rc < 0) return 0;
    if (rc) return rc;
    const gpt_config *c = &o.cfg;
    mpmd_error err;
    trainer t = {0};
    t.mpi = o.mpi;
    t.root = 1;
    if (o.mpi) {
        if (mpmd_mpi_init(&argc, &argv, &err)) return fail(NULL, "%s", err.msg);
        t.root = mpmd_mpi_world_rank() == 0;
    }
    if (o.generate) return generate(&o, &t);
    gpt_stop_install(PROG, t.root);

    gpt_corpus corpus = {0};
    t.corpus = &corpus;
    char corpus_name[4200];
    snprintf(corpus_name, sizeof corpus_name, "%s%s", o.data ? "data file " : "",
             o.data ? o.data : "the generated corpus");
    if (o.tokens ? gpt_corpus_load_tokens(&corpus, o.tokens, c->vocab, c->seq + 1, &err)
        : o.text ? gpt_corpus_from_text(&corpus, o.text, o.tok, c->vocab, c->seq + 1, &err)
        : o.data ? gpt_corpus_load(&corpus, o.data, c->seq + 1, &err)
                 : gpt_corpus_generate(&corpus, 1 << 20, 1234, &err))
        rc = 1;
    mpmd_tokenizer_free(o.tok); /* the text is encoded once: the tokenizer's work is done */
    o.tok = NULL;
    if (rc) return fail(&t, "%s", err.msg);
    /* bytes are ids below 256: a smaller vocabulary (--vocab, --init-from) must hold them all */
    if (!o.tokens && !o.text && gpt_corpus_check_vocab(&corpus, c->vocab, corpus_name, &err))
        return fail(&t, "%s; bytes need --vocab 256 or more", err.msg);
    /* --eval: the last tenth of the data is held out, the training sees the rest */
    gpt_corpus train = corpus, held = {0};
    if (o.eval_every) {
        int64_t n = corpus.len / 10 > c->seq + 1 ? corpus.len / 10 : c->seq + 1;
        if (corpus.len - n < c->seq + 1)
            return fail(&t, "--eval: %lld ids are too few to hold out %lld and train on sequences of %lld",
                        (long long)corpus.len, (long long)n, (long long)c->seq + 1);
        train.len = corpus.len - n;
        held = gpt_corpus_tail(&corpus, train.len);
    }
    /* --auto: lay the model out by prediction, then train that layout */
    gpt_layout chosen;
    memset(&chosen, 0, sizeof chosen);
    static char chosen_schedule[32];
    if (o.auto_layout) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long per = cores / (o.ranks * o.replicas);
        int threads = o.threads ? (int)o.threads : (int)(per > 0 ? per : 1);
        gpt_layout *all = NULL;
        int n_all = 0;
        /* with --fsdp: when to gather weighed too, unless --fsdp-gather says */
        const gpt_plan_fsdp pf = {(int)o.replicas, o.fsdp, o.fsdp_gather_given ? (int)o.fsdp_gather : -1};
        mpmd_status prc = gpt_plan(&o.cfg, (int)o.ranks, threads, o.mem_limit, &pf,
                                   o.quiet ? NULL : (o.json ? stderr : stdout), &chosen, &all, &n_all, &err);
        free(all);
        if (prc) return fail(&t, "%s", err.msg);
        o.cfg = gpt_layout_config(&o.cfg, &chosen);
        snprintf(chosen_schedule, sizeof chosen_schedule, "%s", chosen.schedule);
        o.schedule = chosen_schedule;
        if (chosen.gather[0])
            o.fsdp_gather = strcmp(chosen.gather, "step") ? MPMD_GATHER_PER_TASK : MPMD_GATHER_PER_STEP;
        if (!o.quiet)
            fprintf(o.json ? stderr : stdout, "auto: training %s, %d stages, %d microbatches, remat %s%s%s\n",
                    chosen.schedule, chosen.stages, chosen.microbatches, chosen.remat,
                    chosen.gather[0] ? ", fsdp gathered per " : "", chosen.gather);
    }
    gpt_model m;
    if (gpt_build(c, 1, &m, &err)) return fail(&t, "%s", err.msg);
    t.m = &m;

    /* --schedule loop: no schedule, the unpipelined loop on one rank */
    if (strcmp(o.schedule, "loop") != 0 && make_schedule(&o, &t.sched, &err)) return fail(&t, "%s", err.msg);
    mpmd_step_opts so = MPMD_STEP_DEFAULTS;
    so.threads_per_rank = (int)o.threads;
    so.seed = o.seed;
    so.runtime = o.mpi ? MPMD_RUNTIME_MPI : MPMD_RUNTIME_LOCAL;
    so.data_parallel = (int)o.replicas;
    so.fsdp = o.fsdp;
    so.fsdp_gather = o.fsdp_gather;
    so.backend = o.backend;
    so.step_timeout = o.step_timeout;
    if (!(t.st = mpmd_jit_with_loop(m.g, t.sched, &so, &err)))
        return fail(&t, "%s%s", err.msg,
                    strstr(err.msg, "threads_per_rank") ? " (" PROG ": --threads N)" : "");
    /* for the bubble and the pictures: two clock reads per instruction */
    if (t.sched || o.fsdp) mpmd_step_set_recording(t.st, 1);
    /* --eval: the loss alone, compiled like the training step (forward only) */
    gpt_model em;
    memset(&em, 0, sizeof em);
    mpmd_step *ev = NULL;
    if (o.eval_every) {
        if (gpt_build_eval(c, &em, &err)) return fail(&t, "%s", err.msg);
        t.em = &em;
        if (!(t.ev = ev = mpmd_jit_with_loop(em.g, t.sched, &so, &err)))
            return fail(&t, "--eval: %s", err.msg);
    }
    long long first = 1;
    char from[4200] = ""; /* the checkpoint this run continues */
    if (o.resume_latest) {
        if (resume_latest(&t, &o, &first, from, sizeof from)) return 1;
    } else if (o.resume) {
        int fatal;
        if (resume_from(&t, &o, o.resume, &first, &fatal, &err)) return fail(&t, "%s", err.msg);
        snprintf(from, sizeof from, "%s", o.resume);
    }
    if (o.init_from && init_from(o.init_from, &m, t.st, &err)) return fail(&t, "--init-from %s", err.msg);

    if (t.root && !o.quiet && !o.json) {
        printf(PROG ": %d layers, width %lld, %d heads, seq %lld, batch %lld in %d microbatches, %lld "
                    "parameters%s\n",
               c->layers, (long long)c->width, c->heads, (long long)c->seq,
               (long long)(c->batch * o.replicas), c->microbatches, (long long)gpt_param_count(c),
               c->tie_embeddings ? " (tied embeddings)" : "");
        if (t.sched)
            printf("pipeline: %s on %s%s\n", t.sched->name, o.mpi ? "MPI processes" : "in-process ranks",
                   o.fsdp           ? ", FSDP replicas"
                   : o.replicas > 1 ? ", data-parallel replicas"
                                    : "");
        else
            printf("pipeline: none (the one-rank microbatch loop%s)\n", o.fsdp ? ", FSDP replicas"
                                                                        : o.replicas > 1
                                                                            ? ", data-parallel replicas"
                                                                            : "");
        if (o.tokens)
            printf("data: %s, %lld tokens", o.tokens, (long long)corpus.len);
        else if (o.text)
            printf("data: %s, %lld tokens (%s)", o.text, (long long)corpus.len, o.tokenizer);
        else
            printf("data: %s, %lld bytes", o.data ? o.data : "generated corpus", (long long)corpus.len);
        if (o.init_from)
            printf("; weights from %s (" INIT_LAYOUT " in Hugging Face's layout), fresh optimizer state\n",
                   o.init_from);
        else
            printf("; the loss starts near ln(%lld) = %.3f\n", (long long)c->vocab, log((double)c->vocab));
        if (first > 1)
            printf("resumed from %s after step %lld\n", from, first - 1);
        else if (from[0])
            printf("started from the weights in %s (fresh optimizer state)\n", from);
        else if (o.resume_latest)
            printf("--resume latest: no checkpoint of %s yet, starting at step 1\n", o.save);
        fflush(stdout);
    }

    /* the global batch: every replica takes its share */
    int64_t gb = c->batch * o.replicas;
    size_t nb = (size_t)(gb * c->seq);
    int32_t *tok = malloc(nb * sizeof *tok), *tgt = malloc(nb * sizeof *tgt);
    if (!tok || !tgt) return fail(&t, "out of memory for the batch");
    float loss = NAN;
    char jn[5][32]; /* json_num's numbers of one line */
    /* --auto: every step's run time, for the measured side of the prediction */
    double *run_ms = o.auto_layout ? malloc((size_t)(o.steps - first + 1) * sizeof *run_ms) : NULL;
    int n_run = 0;
    if (o.auto_layout && !run_ms) return fail(&t, "out of memory");
    double t_log = now_s(), t_start = t_log, busy_bubble = 0;
    long long since = 0, bubble_n = 0;
    float eval_loss = NAN;
    gpt_saver saver;
    memset(&saver, 0, sizeof saver);
    t.saver = &saver;
    int stop_sig = 0; /* the signal that stopped the run before its last step */
    long long last = o.steps;
    for (long long step = first; step <= o.steps; step++) {
        gpt_sample_batch(&train, gb, c->seq, o.seed, (uint64_t)step, tok, tgt);
        if (gpt_set_inputs(t.st, &m, tok, tgt, nb * sizeof *tok, o.seed, (uint64_t)step, (int)o.replicas))
            return fail(&t, "step %lld: %s", step, mpmd_step_error(t.st));
        double t_run = now_s();
        if (mpmd_step_run(t.st)) return fail(&t, "step %lld: %s", step, mpmd_step_error(t.st));
        if (run_ms) run_ms[n_run++] = 1e3 * (now_s() - t_run);
        if (mpmd_step_gather(t.st, m.loss, &loss, sizeof loss))
            return fail(&t, "step %lld: %s", step, mpmd_step_error(t.st));
        if (o.nan_check && !isfinite(loss)) {
            if (t.root)
                fprintf(stderr, "step %lld: loss is %s (use --no-nan-check to go on)\n", step,
                        isnan(loss) ? "nan" : "inf");
            gpt_saver_join(&saver);
            if (t.mpi) mpmd_mpi_abort(1);
            return 1;
        }
        if (t.sched) {
            mpmd_step_stats s;
            if (mpmd_step_summary(t.st, &s, &err) == MPMD_OK) {
                /* under MPI a process sees its own rank: its idle share */
                busy_bubble += t.mpi ? s.ranks[mpmd_mpi_world_rank() % s.num_ranks].bubble : s.bubble;
                bubble_n++;
                mpmd_step_stats_free(&s);
            }
        }
        if (saver.running && !gpt_saver_busy(&saver)) report_save(&saver);
        /* a stop request (a signal may reach some processes of a job, or
         * reach them in different steps) and whether a checkpoint is still
         * being written (only process 0 writes), agreed: every process
         * stops after the same step and takes the same snapshots */
        int sig = gpt_stop_requested();
        int agreed[4] = {sig == SIGTERM, sig == SIGINT, sig == SIGUSR1, gpt_saver_busy(&saver)};
        if (t.mpi && mpmd_mpi_any(agreed, 4, &err)) return fail(&t, "step %lld: %s", step, err.msg);
        if ((agreed[0] || agreed[1] || agreed[2]) && step < o.steps) {
            stop_sig = agreed[0] ? SIGTERM : agreed[1] ? SIGINT : SIGUSR1;
            last = step;
            break;
        }
        if (o.save && o.save_every && step % o.save_every == 0 && step < o.steps) {
            /* one checkpoint in flight at most (a bound on the memory its
             * copy takes): one due while the last is being written is
             * skipped rather than stalling training */
            if (agreed[3]) {
                if (t.root)
                    fprintf(stderr,
                            PROG ": step %lld: the checkpoint of step %lld is still being written; this "
                                 "one is skipped\n",
                            step, saver.step);
            } else if (periodic_save(&t, &o, step)) {
                return 1;
            }
        }
        if (ev && (step % o.eval_every == 0 || step == o.steps)) {
            if (evaluate(&t, ev, &em, &m, &held, gb, o.seed, (int)o.replicas, tok, tgt, &eval_loss, &err))
                return fail(&t, "step %lld: %s", step, err.msg);
            if (t.root && !o.quiet && !o.json)
                printf("eval after step %lld: loss %.4f (%d held-out batches)\n", step, eval_loss,
                       EVAL_BATCHES);
            if (t.root && o.json)
                printf("{\"step\": %lld, \"eval_loss\": %s}\n", step, json_num(jn[0], "%.6f", eval_loss));
        }
        since++;
        if ((step % o.log_every == 0 || step == o.steps) && t.root && !o.quiet) {
            double tn = now_s(), dt = tn - t_log;
            double ms = 1e3 * dt / (double)since, tps = (double)since * (double)nb / dt;
            double eta = (tn - t_start) / (double)(step - first + 1) * (double)(o.steps - step);
            double bubble = bubble_n ? 100 * busy_bubble / (double)bubble_n : 0;
            if (o.json)
                printf("{\"step\": %lld, \"steps\": %lld, \"loss\": %s, \"tokens_per_s\": %s, "
                       "\"ms_per_step\": %s, "
                       "\"bubble_pct\": %s, \"eta_s\": %s}\n",
                       step, o.steps, json_num(jn[0], "%.6f", loss), json_num(jn[1], "%.0f", tps),
                       json_num(jn[2], "%.2f", ms), json_num(jn[3], "%.1f", bubble),
                       json_num(jn[4], "%.1f", eta));
            else
                printf(
                    "step %lld/%lld  loss %.4f  tokens/s %.0f  ms/step %.1f  bubble %.1f%%  eta %dm%02ds\n",
                    step, o.steps, loss, tps, ms, bubble, (int)(eta / 60), (int)fmod(eta, 60));
            fflush(stdout);
            t_log = tn;
            since = 0;
            busy_bubble = 0;
            bubble_n = 0;
        }
    }
    if (saver.running) report_save(&saver); /* the last periodic checkpoint, finished */
    if (stop_sig) {
        const char *name = stop_sig == SIGTERM ? "SIGTERM" : stop_sig == SIGINT ? "SIGINT" : "SIGUSR1";
        char path[4200] = "";
        if (o.save) {
            mpmd_checkpoint_info info = checkpoint_info(&o, last);
            if (save_path(&o, last, path, sizeof path))
                return fail(&t, "--save %s: the name is too long", o.save);
            if (gpt_save_now(t.st, path, &info, o.keep_last ? o.save : NULL, (int)o.keep_last, PROG, &err))
                return fail(&t, "%s: the checkpoint of step %lld: %s", name, last, err.msg);
            /* no process ends before process 0 has written the file */
            int none[1] = {0};
            if (t.mpi && mpmd_mpi_any(none, 1, &err)) return fail(&t, "%s", err.msg);
        }
        if (t.root) {
            if (o.save)
                fprintf(stderr,
                        PROG ": %s: stopped after step %lld of %lld; saved %s (go on with --resume %s)\n",
                        name, last, o.steps, path, o.keep_last ? "latest" : path);
            else
                fprintf(stderr, PROG ": %s: stopped after step %lld of %lld (no --save: nothing saved)\n",
                        name, last, o.steps);
        }
        free(tok);
        free(tgt);
        free(run_ms);
        trainer_free(&t);
        if (t.mpi) mpmd_mpi_finalize();
        return 128 + stop_sig;
    }
    if (o.save) {
        mpmd_checkpoint_info info = checkpoint_info(&o, o.steps);
        if (gpt_save_now(t.st, o.save, &info, NULL, 0, PROG, &err)) return fail(&t, "%s", err.msg);
    }
    if (o.export_weights && (rc = export_weights(&o, &t))) return rc;
    if (t.sched && !t.mpi && (o.trace || o.timeline)) {
        /* written whole or not at all, as checkpoints are (mpmd_file_*) */
        mpmd_file *out;
        if (o.trace) {
            if (mpmd_file_create(o.trace, &out, &err)) return fail(&t, "--trace: %s", err.msg);
            /* a write error (a full disk) is left for the commit, which names its cause */
            mpmd_status ws = mpmd_step_write_trace(t.st, mpmd_file_stream(out), &err);
            if (ws && ws != MPMD_ERR_IO) {
                mpmd_file_discard(out);
                return fail(&t, "--trace %s: %s", o.trace, err.msg);
            }
            if (mpmd_file_commit(out, &err) || ws) return fail(&t, "--trace: %s", err.msg);
        }
        if (o.timeline) {
            mpmd_timeline *tl;
            if (mpmd_step_timeline(t.st, &tl, &err)) return fail(&t, "%s", err.msg);
            tl->width = (double)o.timeline_width;
            if (mpmd_file_create(o.timeline, &out, &err)) {
                mpmd_timeline_free(tl);
                return fail(&t, "--timeline: %s", err.msg);
            }
            mpmd_status ws =
                mpmd_timeline_write_svg(tl, mpmd_file_stream(out)); /* fails on write errors only */
            mpmd_timeline_free(tl);
            if (mpmd_file_commit(out, &err)) return fail(&t, "--timeline: %s", err.msg);
            if (ws) return fail(&t, "--timeline: cannot write %s", o.timeline);
        }
    }
    if ((t.sched || o.fsdp) && !t.mpi && !o.quiet && !o.json) mpmd_step_print_summary(t.st, stdout, &err);
    char hex[65];
    mpmd_step_params_sha256(t.st, hex); /* collective under MPI */
    double measured_ms = NAN;
    if (run_ms && n_run) { /* the median, the first step (first touches of memory) left out */
        int k0 = n_run > 1 ? 1 : 0, k = n_run - k0;
        for (int i = k0; i < n_run; i++)
            for (int j = i + 1; j < n_run; j++)
                if (run_ms[j] < run_ms[i]) {
                    double x = run_ms[i];
                    run_ms[i] = run_ms[j], run_ms[j] = x;
                }
        measured_ms = k % 2 ? run_ms[k0 + k / 2] : 0.5 * (run_ms[k0 + k / 2 - 1] + run_ms[k0 + k / 2]);
        if (t.root && !o.quiet && !o.json)
            printf("auto: predicted %.2f ms per step, measured %.2f (median of %d), ratio %.2f\n",
                   chosen.predicted, measured_ms, k, measured_ms / chosen.predicted);
    }
    free(run_ms);
    if (t.root) {
        if (o.json) {
            /* each rank of this process: the bytes it allocates, planned and counted by its backend */
            printf("{\"final_loss\": %s, \"params_sha256\": \"%s\", \"ranks\": [",
                   json_num(jn[0], "%.9g", loss), hex);
            for (int r = 0, k = 0; r < mpmd_step_num_ranks(t.st); r++) {
                mpmd_memory_stats ms;
                if (mpmd_step_memory(t.st, r, &ms) || ms.measured < 0) continue;
                printf("%s{\"rank\": %d, \"peak_bytes_planned\": %lld, \"peak_bytes_measured\": %lld}",
                       k++ ? ", " : "", r, (long long)ms.planned, (long long)ms.measured);
            }
            printf("]");
            if (ev) printf(", \"eval_loss\": %s", json_num(jn[0], "%.9g", eval_loss));
            if (o.auto_layout)
                printf(", \"auto\": {\"schedule\": \"%s\", \"stages\": %d, \"microbatches\": %d, \"remat\": "
                       "\"%s\", \"predicted_ms\": %s, \"measured_ms\": %s}",
                       chosen.schedule, chosen.stages, chosen.microbatches, chosen.remat,
                       json_num(jn[0], "%.3f", chosen.predicted), json_num(jn[1], "%.3f", measured_ms));
            printf("}\n");
        } else {
            if (ev) printf("eval_loss=%.9g\n", eval_loss);
            printf("final_loss=%.9g params_sha256=%s\n", loss, hex);
        }
    }
    free(tok);
    free(tgt);
    trainer_free(&t);
    if (t.mpi) mpmd_mpi_finalize();
    return 0;
}

int main(int argc, char **argv) {
    program_start(PROG, argv);
    return program_end(PROG, run(argc, argv));
}
