/* llama_import.h - LLaMA-family weights in Hugging Face's layout as the
 * initial parameters of a gpt_model with LLaMA blocks (llama --init-from).
 *
 * The source is a model directory as Hugging Face's hub ships a
 * LlamaForCausalLM (Llama 2 and 3.x, TinyLlama, SmolLM; MistralForCausalLM
 * alike): config.json, and the weights in model.safetensors or in shards
 * named by model.safetensors.index.json ({"weight_map": {"<tensor>":
 * "<shard file>", ...}}, shards beside it).
 *
 * config.json gives the model (LlamaConfig's fields; defaults as there):
 *   model_type                  "llama" or "mistral"
 *   hidden_size                 width C
 *   intermediate_size           the SwiGLU width F (mlp_hidden)
 *   num_hidden_layers           layers
 *   num_attention_heads         heads H
 *   num_key_value_heads         key/value heads (default H)
 *   vocab_size                  V
 *   max_position_embeddings     the positions the model knows (default 2048): seq at most
 *   rms_norm_eps                the RMS norms' epsilon (default 1e-6)
 *   rope_theta                  the rotary base (default 10000)
 *   rope_scaling                null, or {"rope_type" (or "type"): "llama3", "factor",
 *                               "low_freq_factor", "high_freq_factor",
 *                               "original_max_position_embeddings"}: Llama 3.1's
 *                               frequencies (mpmd_rope_scaling); another type is an error
 *   tie_word_embeddings         the LM head is embed_tokens (default false)
 * and what the blocks cannot be is refused by name: hidden_act other than
 * "silu", attention_bias or mlp_bias true, a head_dim other than C / H, a
 * Mistral sliding_window shorter than seq.
 *
 *   Hugging Face tensor                              shape      our parameter
 *   model.embed_tokens.weight                        [V, C]     wte/embedding           [V, C]
 *   model.layers.<i>.input_layernorm.weight          [C]        block_<i>/rms_0/scale
 *   model.layers.<i>.self_attn.q_proj.weight         [H D, C]   block_<i>/attn/q/kernel [C, H D]  (T)
 *   model.layers.<i>.self_attn.k_proj.weight         [K D, C]   block_<i>/attn/k/kernel [C, K D]  (T)
 *   model.layers.<i>.self_attn.v_proj.weight         [K D, C]   block_<i>/attn/v/kernel [C, K D]  (T)
 *   model.layers.<i>.self_attn.o_proj.weight         [C, H D]   block_<i>/attn/o/kernel [H D, C]  (T)
 *   model.layers.<i>.post_attention_layernorm.weight [C]        block_<i>/rms_1/scale
 *   model.layers.<i>.mlp.gate_proj.weight            [F, C]     block_<i>/mlp/gate/kernel [C, F]  (T)
 *   model.layers.<i>.mlp.up_proj.weight              [F, C]     block_<i>/mlp/up/kernel   [C, F]  (T)
 *   model.layers.<i>.mlp.down_proj.weight            [C, F]     block_<i>/mlp/down/kernel [F, C]  (T)
 *   model.norm.weight                                [C]        norm_f/scale
 *   lm_head.weight                                   [V, C]     lm_head/kernel          [C, V]    (T)
 *
 * (T): PyTorch's Linear keeps its weight as [out, in] and computes x W^T;
 * mpmd_dense's kernel is [in, out] (x K), so each is transposed on the way
 * in. Nothing else changes: Hugging Face's checkpoints already pair the
 * rotary dimensions the half-split way (rotate_half: dimension i of a head
 * turns with i + D/2), which is mpmd_rope's pairing, and q_proj's outputs
 * are head-major ([H, D]) as mpmd_rope_attention reshapes them; key/value
 * head j serves query heads j H/K .. (j + 1) H/K - 1 in both (repeat_kv).
 * So no q or k row is permuted. (Meta's original consolidated checkpoints
 * pair neighbours instead; they are not read here.)
 *
 * A tied model (tie_word_embeddings) has no lm_head parameter; a file that
 * still holds lm_head.weight must hold embed_tokens' values there. Dtypes:
 * F32 is copied bit for bit, F16 and BF16 are widened to f32 exactly; any
 * other dtype is an error naming the tensor.
 */
#ifndef LLAMA_IMPORT_H
#define LLAMA_IMPORT_H

#include "gpt_import.h"
#include "gpt_model.h"

/* What config.json says. */
typedef struct llama_hf_info {
    int layers, heads, kv_heads;
    int64_t width, hidden, vocab, positions;
    float rope_theta, rms_norm_eps;
    mpmd_rope_scaling rope_scaling; /* factor 0: none */
    int tied;                       /* tie_word_embeddings */
    int64_t sliding_window;         /* Mistral's, 0: none */
    int sharded;                    /* the weights are shards named by model.safetensors.index.json */
} llama_hf_info;

/* Read and check `dir`'s config.json (dir may also name a file in the
 * model directory: config.json, model.safetensors or the index, whose
 * directory is taken) and find its weights. MPMD_ERR_IO when the directory
 * or its files cannot be read; MPMD_ERR_FORMAT for a config.json that is not
 * JSON, lacks a field, holds one of another kind or out of range, or asks
 * for what the blocks are not (each naming the file, the field and the
 * value), or no weights file. */
mpmd_status llama_hf_inspect(const char *dir, llama_hf_info *info, mpmd_error *err);

/* Make `c` the directory's model (LLaMA blocks): layers, width, heads,
 * key/value heads, vocab, MLP width, rotary base and scaling, RMS epsilon
 * and tied embeddings from config.json; an option the user set that
 * disagrees is MPMD_ERR_SHAPE naming config.json's field and both values.
 * seq at most max_position_embeddings (the default cut to it; a larger seq
 * given is an error). */
mpmd_status llama_hf_configure(const char *dir, const llama_hf_info *info, const gpt_hf_given *given,
                               gpt_config *c, mpmd_error *err);

/* Set every parameter of the model's compiled step `st` (each copy this
 * process holds: mpmd_step_write; a parameter split over the model axis from
 * the whole tensor) from the directory's weights. First every parameter's
 * tensor is found (in the file, or the shard the index names) and checked:
 * a missing tensor, another shape (both named, with the [out, in] layout
 * the transposed ones need), a dtype other than F32/F16/BF16, or a tied
 * model's lm_head.weight that is not embed_tokens is an error naming the
 * tensor and its file, and nothing is written. Then the tensors are read
 * one at a time, transposed where the table says, and written. Only a read
 * error after the checks (a file changed underneath) can leave some
 * parameters set and others not. The optimizer state is not touched. */
mpmd_status llama_hf_import(const char *dir, const gpt_model *m, mpmd_step *st, mpmd_error *err);

#endif
