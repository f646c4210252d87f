"""Write a small LLaMA model directory in Hugging Face's layout with numpy.

  /usr/bin/python3 text2text_hf.py DIR VOCAB

config.json as LlamaConfig writes it (with an RMS epsilon and Llama 3.1's
rope_scaling, so that a checkpoint that forgot them would decode otherwise)
and model.safetensors with the hub's tensor names and PyTorch's [out, in]
Linear weights, F32, random from a fixed seed. tests/llama_import.py checks
the import's numbers against an independent PyTorch model; here the
directory is the start of tests/text2text.sh's road.
"""
import json
import os
import struct
import sys

import numpy as np

out, vocab = sys.argv[1], int(sys.argv[2])
C, F, L, H, K = 64, 96, 2, 4, 2
D = C // H
cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": C, "intermediate_size": F,
       "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": K, "vocab_size": vocab,
       "max_position_embeddings": 64, "rms_norm_eps": 1e-2, "rope_theta": 10000.0, "hidden_act": "silu",
       "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "float32",
       "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 16}}
rng = np.random.default_rng(29)


def w(*shape, scale=0.08):
    return (scale * rng.standard_normal(shape)).astype("<f4")


def norm():
    return (1 + 0.2 * rng.standard_normal(C)).astype("<f4")


tensors = [("model.embed_tokens.weight", w(vocab, C, scale=0.5))]
for i in range(L):
    p = f"model.layers.{i}."
    tensors += [(p + "input_layernorm.weight", norm()),
                (p + "self_attn.q_proj.weight", w(H * D, C)),
                (p + "self_attn.k_proj.weight", w(K * D, C)),
                (p + "self_attn.v_proj.weight", w(K * D, C)),
                (p + "self_attn.o_proj.weight", w(C, H * D)),
                (p + "post_attention_layernorm.weight", norm()),
                (p + "mlp.gate_proj.weight", w(F, C)),
                (p + "mlp.up_proj.weight", w(F, C)),
                (p + "mlp.down_proj.weight", w(C, F))]
tensors += [("model.norm.weight", norm()), ("lm_head.weight", w(vocab, C))]

os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2)
header, blobs, off = {}, [], 0
for name, t in tensors:
    b = t.tobytes()
    header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
header["__metadata__"] = {"format": "pt"}
h = json.dumps(header).encode()
h += b" " * (-(8 + len(h)) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
