/* generate_check - are a greedy generation's tokens its model's own argmax?
 *
 *   generate_check --arch gpt|llama --resume CHECKPOINT --prompt-len P[,P2,...]
 *                  --layers L --width C --heads H [--kv-heads K] --seq T --vocab V [--tie-embeddings]
 *                  < the "sample b: id,id,..." lines of gpt/llama --generate
 *
 * Builds the model's forward pass without a cache (gpt_build_logits: the
 * training graph's blocks over whole sequences), loads the checkpoint's
 * parameters, runs it once on every sequence (padded to T) and checks, for
 * each sequence b and each position p from P - 1 to its second last (P the
 * b % count-th prompt length, as gpt --prompt repeated gives them), that the
 * token generated at p + 1 is the argmax (the first largest) of the
 * forward's logits at p. Prints one "ok:" line, or a "FAIL:" line per
 * difference with both tokens and their logits; exit 0 or 1 (2: bad use).
 */
#include "gpt_model.h"
#include "mpmd_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(const char *why) {
    fprintf(stderr, "generate_check: %s\n(usage: see tests/generate_check.c)\n", why);
    return 2;
}

int main(int argc, char **argv) {
    gpt_config c = gpt_config_default();
    const char *resume = NULL, *plens = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tie-embeddings")) {
            c.tie_embeddings = 1;
            continue;
        }
        if (i + 1 >= argc) return usage("an option without its value");
        const char *v = argv[++i];
        long long n = atoll(v);
        if (!strcmp(a, "--arch"))
            c.arch = !strcmp(v, "llama") ? GPT_ARCH_LLAMA : GPT_ARCH_GPT2;
        else if (!strcmp(a, "--resume"))
            resume = v;
        else if (!strcmp(a, "--prompt-len"))
            plens = v;
        else if (!strcmp(a, "--layers"))
            c.layers = (int)n;
        else if (!strcmp(a, "--width"))
            c.width = n;
        else if (!strcmp(a, "--heads"))
            c.heads = (int)n;
        else if (!strcmp(a, "--kv-heads"))
            c.kv_heads = (int)n;
        else if (!strcmp(a, "--seq"))
            c.seq = n;
        else if (!strcmp(a, "--vocab"))
            c.vocab = n;
        else
            return usage(a);
    }
    long long plen[64];
    int np = 0;
    for (const char *p = plens; p && *p && np < 64;) {
        char *end;
        plen[np] = strtoll(p, &end, 10);
        if (end == p || plen[np] < 1) return usage("--prompt-len: lengths >= 1 separated by commas");
        np++;
        p = *end == ',' ? end + 1 : end;
    }
    if (!resume || np == 0) return usage("--resume and --prompt-len are needed");
    /* the sequences */
    int64_t cap = 64, B = 0, T = c.seq;
    int32_t *seq = calloc((size_t)(cap * T), sizeof *seq);
    int64_t *len = calloc((size_t)cap, sizeof *len);
    char line[1 << 16];
    while (seq && len && fgets(line, sizeof line, stdin)) {
        long long b;
        int at = 0;
        if (sscanf(line, "sample %lld: %n", &b, &at) != 1 || at == 0) continue;
        if (b != B) return usage("the sample lines are not numbered 0, 1, ... in order");
        if (B == cap) return usage("more than 64 sequences");
        for (char *p = line + at; *p && *p != '\n'; p++) {
            if (len[B] == T) return usage("a sequence longer than --seq");
            seq[B * T + len[B]++] = (int32_t)strtol(p, &p, 10);
            if (*p != ',') break;
        }
        B++;
    }
    if (B == 0) return usage("no \"sample b: ...\" lines on stdin");
    c.batch = B, c.microbatches = 1, c.stages = 1;
    gpt_model m;
    mpmd_error err;
    if (gpt_build_logits(&c, &m, &err)) return usage(err.msg);
    mpmd_step *st = mpmd_jit_with_loop(m.g, NULL, NULL, &err);
    if (!st) return usage(err.msg);
    mpmd_param_load_report rep;
    if (mpmd_step_load_params(st, resume, NULL, &rep, &err)) return usage(err.msg);
    if (rep.missing) return usage("the checkpoint lacks parameters of this model");
    const int64_t V = c.vocab;
    float *logits = malloc(sizeof(float) * (size_t)(B * T * V));
    if (!logits || mpmd_step_set_input(st, m.tokens, seq, sizeof(int32_t) * (size_t)(B * T)) ||
        mpmd_step_run(st) || mpmd_step_read(st, m.logits, logits, sizeof(float) * (size_t)(B * T * V)))
        return usage(mpmd_step_error(st));
    int64_t checked = 0, bad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t p = plen[b % np] - 1; p + 1 < len[b]; p++) {
            const float *l = logits + (b * T + p) * V;
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (l[v] > l[best]) best = v;
            int32_t got = seq[b * T + p + 1];
            checked++;
            if (got != best && bad++ < 20)
                printf("FAIL: sequence %lld, position %lld: generated %d (logit %.9g), the forward's argmax "
                       "is %lld "
                       "(logit %.9g)\n",
                       (long long)b, (long long)p + 1, (int)got, (double)l[got], (long long)best,
                       (double)l[best]);
        }
    if (!bad)
        printf("ok: the %lld tokens generated after the prompts of %lld sequences are the forward's argmax\n",
               (long long)checked, (long long)B);
    free(logits), free(seq), free(len);
    mpmd_step_free(st);
    gpt_model_free(&m);
    return bad || !checked ? 1 : 0;
}
