/* gpt --beta2 0.999 is the library's default AdamW: the GPT example's final
 * line after 3 steps (its model, data and seeds as it draws them) equals
 * that of the same model trained here through the library with
 * MPMD_ADAM_DEFAULTS (b1 0.9, b2 0.999, eps 1e-8, no weight decay), step
 * by step as the program does.
 *   adam_defaults GPT_PROGRAM */
#include "gpt_model.h"
#include "testutil.h"

#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: adam_defaults GPT_PROGRAM\n");
        return 2;
    }
    gpt_config c = gpt_config_default();
    c.layers = 2, c.width = 32, c.heads = 2, c.seq = 16, c.batch = 4, c.microbatches = 2;
    c.adam = MPMD_ADAM_DEFAULTS;
    gpt_model m;
    mpmd_error err;
    gpt_corpus corpus;
    if (gpt_build(&c, 1, &m, &err) || gpt_corpus_generate(&corpus, 1 << 20, 1234, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    mpmd_step_opts o = MPMD_STEP_DEFAULTS;
    mpmd_step *st = mpmd_jit_with_loop(m.g, NULL, &o, &err);
    CHECK(st != NULL, "%s", err.msg);
    const size_t n = (size_t)(c.batch * c.seq);
    int32_t tok[64], tgt[64];
    float loss = 0;
    for (uint64_t step = 1; st && step <= 3; step++) { /* as gpt draws them: seed 0, steps from 1 */
        gpt_sample_batch(&corpus, c.batch, c.seq, 0, step, tok, tgt);
        CHECK(!gpt_set_inputs(st, &m, tok, tgt, n * sizeof *tok, 0, step, 1) && !mpmd_step_run(st) &&
                  !mpmd_step_read(st, m.loss, &loss, sizeof loss),
              "step %d: %s", (int)step, mpmd_step_error(st));
    }
    char hash[65] = "", want[256];
    if (st) mpmd_step_params_sha256(st, hash);
    snprintf(want, sizeof want, "final_loss=%.9g params_sha256=%s", (double)loss, hash);
    char cmd[4400], line[512] = "";
    snprintf(cmd, sizeof cmd,
             "'%s' --layers 2 --width 32 --heads 2 --seq 16 --batch 4 --microbatches 2 --steps 3 --quiet "
             "--beta2 0.999",
             argv[1]);
    FILE *p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p))
        ;
    if (p) pclose(p);
    line[strcspn(line, "\n")] = '\0';
    CHECK(!strcmp(line, want), "gpt --beta2 0.999: \"%s\"; the library's default AdamW: \"%s\"", line, want);
    printf("gpt --beta2 0.999 and MPMD_ADAM_DEFAULTS: %s\n", want);
    mpmd_step_free(st);
    gpt_corpus_free(&corpus);
    gpt_model_free(&m);
    return tu_report("adam_defaults");
}
