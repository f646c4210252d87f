"""llama --init-from against an independent PyTorch LLaMA, in float64.

  /usr/bin/python3 llama_import.py LLAMA_PROGRAM TMPDIR

The model is written here from Hugging Face's LlamaForCausalLM as its
documentation and config describe it, in its module layout (so that
state_dict() gives the hub's tensor names): an embedding, decoder layers of
RMSNorm -> grouped-query attention with rotary embeddings (rope_theta, and
Llama 3.1's "llama3" frequency scaling) -> residual, RMSNorm -> SwiGLU MLP
-> residual, a final RMSNorm and an LM head, tied to the embedding or not.
Random weights are saved as Hugging Face saves them (safetensors with the
hub's names, PyTorch's [out, in] Linear weights, a tied head left out) with
a config.json, as one model.safetensors or as shards named by
model.safetensors.index.json, in F32, BF16 and F16. The reference runs on
the saved values (rounded to the file's dtype) in float64. Then:

  loss     llama --init-from DIR --tokens FILE --steps 1 --lr 0 prints the
           loss of the file's one window (every row of the batch), which
           must be the reference's mean cross-entropy to 1e-5 relative, on
           the one-rank loop, std1f1b on 2 stages and --tensor-parallel 2;
  greedy   llama --init-from DIR --generate N --temperature 0 after two
           prompts prints the reference's greedy tokens (the argmax of the
           full forward pass, recomputed for every new token), on the same
           three layouts;
  errors   a missing tensor, a wrong shape, another dtype, an unsupported
           rope_scaling type, a config.json that is not JSON or lacks a
           field, options that disagree with it, a tied head that differs,
           an index naming a shard without the tensor: each ends the program
           with its exit status and a message naming what is wrong.
"""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)
prog, tmp = sys.argv[1], sys.argv[2]
passed, failures = 0, []


def ok(msg):
    global passed
    passed += 1
    print("ok:", msg)


def bad(msg):
    failures.append(msg)
    print("FAIL:", msg)


# ---- the reference model -------------------------------------------------


def inv_freq(cfg):
    """base^(-2i/D) for i < D/2, with Llama 3.1's adjustment when asked."""
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    w = cfg.get("rope_theta", 10000.0) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rs = cfg.get("rope_scaling")
    if not rs:
        return w
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for wi in w.tolist():
        wavelen = 2 * math.pi / wi
        if wavelen < old / high:
            out.append(wi)
        elif wavelen > old / low:
            out.append(wi / factor)
        else:
            s = (old / wavelen - low) / (high - low)
            out.append((1 - s) * wi / factor + s * wi)
    return torch.tensor(out)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaRMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, h = cfg["hidden_size"], cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads", h)
        self.h, self.kv, self.d = h, kv, c // h
        self.q_proj = nn.Linear(c, h * self.d, bias=False)
        self.k_proj = nn.Linear(c, kv * self.d, bias=False)
        self.v_proj = nn.Linear(c, kv * self.d, bias=False)
        self.o_proj = nn.Linear(h * self.d, c, bias=False)

    def forward(self, x, cos, sin):
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.h, self.d).transpose(0, 1)  # [H, T, D]
        k = self.k_proj(x).view(t, self.kv, self.d).transpose(0, 1)
        v = self.v_proj(x).view(t, self.kv, self.d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.h // self.kv  # key/value head j serves query heads j rep .. j rep + rep - 1
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        s = q @ k.transpose(1, 2) / math.sqrt(self.d)
        s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        a = torch.softmax(s, dim=-1) @ v  # [H, T, D]
        return self.o_proj(a.transpose(0, 1).reshape(t, self.h * self.d))


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(c, f, bias=False)
        self.up_proj = nn.Linear(c, f, bias=False)
        self.down_proj = nn.Linear(f, c, bias=False)

    def forward(self, x):
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids):
        t = len(ids)
        ang = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq(self.cfg)[None, :]  # [T, D/2]
        cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
        x = self.model.embed_tokens(torch.tensor(ids))
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))  # [T, V]


def reference_loss(model, seq):
    logits = model(seq[:-1])
    return torch.nn.functional.cross_entropy(logits, torch.tensor(seq[1:])).item()


def reference_greedy(model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(torch.argmax(model(ids)[-1])))
    return ids


# ---- files as Hugging Face writes them -------------------------------------

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def tensor_bytes(t, dtype):
    t = t.detach().to(DTYPES[dtype]).contiguous()
    if dtype == "BF16":
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, dtype):
    """tensors: (name, tensor[, dtype]) in file order; little-endian data."""
    header, blobs, off = {}, [], 0
    for item in tensors:
        name, t = item[0], item[1]
        dt = item[2] if len(item) > 2 else dtype
        b = tensor_bytes(t, dt) if dt in DTYPES else t.numpy().astype("<i4").tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def hf_state(model):
    """The hub's tensors: a tied head is not saved (it is embed_tokens)."""
    sd = model.state_dict()
    if model.cfg["tie_word_embeddings"]:
        sd.pop("lm_head.weight")
    return list(sd.items())


def save(model, d, dtype, shards=1, drop=(), extra=(), replace=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(model.cfg, f, indent=2)
    items = [(n, t) for n, t in hf_state(model) if n not in drop] + list(extra)
    if replace:
        items = [(n, replace.get(n, t)) for n, t in items]
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), items, dtype)
        return
    per = (len(items) + shards - 1) // shards
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = items[s * per:(s + 1) * per]
        write_safetensors(os.path.join(d, name), part, dtype)
        weight_map.update({n: name for n, _ in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


def round_to(model, dtype):
    """The reference computes with the values the file holds."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(DTYPES[dtype]).to(torch.float64))


def make_model(cfg, seed):
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1, so that each is seen
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
        # a small embedding: the blocks, not the input token, decide what
        # follows (a tied head would otherwise repeat the last token)
        m.model.embed_tokens.weight.mul_(0.05)
    return m


def write_tokens(path, ids):
    """llm.c's token file: 256 int32 (magic, version, count), then uint16 ids."""
    head = np.zeros(256, dtype="<i4")
    head[:3] = [20240520, 1, len(ids)]
    with open(path, "wb") as f:
        f.write(head.tobytes())
        f.write(np.array(ids, dtype="<u2").tobytes())


# ---- running the program ---------------------------------------------------


def run(args):
    p = subprocess.run([prog] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


SEQ, N = 32, 20
LAYOUTS = {"loop": [], "std1f1b on 2 stages": ["--schedule", "std1f1b", "--stages", "2"],
           "tensor parallel 2": ["--tensor-parallel", "2"]}
BASE = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "attention_bias": False, "rope_scaling": None, "torch_dtype": "float32"}
# Llama 3.1's frequencies at head size 16: wavelengths 6.3 (kept: < 64/4),
# 20 and 63 (blended), 199 and up (divided by the factor)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
VARIANTS = [
    ("f32, untied, one file", dict(BASE), "F32", 1),
    ("bf16, tied, llama3 rope scaling, 2 shards", dict(BASE, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                                       rope_scaling=LLAMA3, torch_dtype="bfloat16"), "BF16", 2),
    ("f16, mistral, rope_theta 1e5, 3 shards", dict(BASE, model_type="mistral", rope_theta=100000.0,
                                                    sliding_window=4096, torch_dtype="float16"), "F16", 3),
]

gen = torch.Generator().manual_seed(7)
seq = torch.randint(0, 97, (SEQ + 1,), generator=gen).tolist()
write_tokens(os.path.join(tmp, "tokens.bin"), seq)
prompts = [seq[:5], seq[10:13]]

for k, (label, cfg, dtype, shards) in enumerate(VARIANTS):
    model = make_model(cfg, 100 + k)
    d = os.path.join(tmp, f"model{k}")
    save(model, d, dtype, shards)
    round_to(model, dtype)
    with torch.no_grad():
        want = reference_loss(model, seq)
        greedy = [reference_greedy(model, p, N) for p in prompts]
    for name, extra in LAYOUTS.items():
        rc, out = run(["--init-from", d, "--tokens", os.path.join(tmp, "tokens.bin"), "--seq", str(SEQ),
                       "--batch", "4", "--microbatches", "2", "--steps", "1", "--lr", "0", "--quiet"] + extra)
        m = re.search(r"final_loss=(\S+)", out)
        got = float(m.group(1)) if rc == 0 and m else float("nan")
        if abs(got - want) <= 1e-5 * abs(want):
            ok(f"{label}, {name}: loss {got:.9g}, the reference's {want:.9g}")
        else:
            bad(f"{label}, {name}: loss {got} (exit {rc}: {out.strip()[-300:]}), the reference's {want:.9g}")
        rc, out = run(["--init-from", d, "--seq", str(SEQ), "--generate", str(N), "--temperature", "0", "--batch", "2",
                       "--microbatches", "2", "--quiet"] + sum([["--prompt", ",".join(map(str, p))] for p in prompts],
                                                               []) + extra)
        lines = [list(map(int, ln.split(": ")[1].split(","))) for ln in out.splitlines() if ln.startswith("sample ")]
        if rc == 0 and lines == greedy:
            ok(f"{label}, {name}: greedy {lines[1]}, the reference's")
        else:
            bad(f"{label}, {name}: greedy (exit {rc}) {lines or out.strip()[-300:]}, the reference's {greedy}")

# ---- errors ------------------------------------------------------------------

model = make_model(BASE, 100)
tied = make_model(dict(BASE, tie_word_embeddings=True), 101)
gen_args = ["--seq", str(SEQ), "--generate", "4", "--prompt", "1,2,3"]
cases = [
    ("a missing tensor", lambda d: save(model, d, "F32", drop=["model.layers.1.mlp.up_proj.weight"]), [], 1,
     "tensor model.layers.1.mlp.up_proj.weight (for the model's block_1/mlp/up/kernel) is missing"),
    ("a wrong shape", lambda d: save(model, d, "F32", replace={
        "model.layers.0.self_attn.k_proj.weight": model.state_dict()["model.layers.0.self_attn.k_proj.weight"].t()}),
     [], 1, "tensor model.layers.0.self_attn.k_proj.weight is [64, 32]; the model's block_0/attn/k/kernel [64, 32] "
            "needs [32, 64] (PyTorch's Linear weights are [out, in])"),
    ("another dtype", lambda d: save(model, d, "F32", drop=["model.norm.weight"],
                                     extra=[("model.norm.weight", torch.ones(64, dtype=torch.int32), "I32")]),
     [], 1, "tensor model.norm.weight has dtype I32; F32, F16 or BF16 is expected"),
    ("rope_scaling yarn", lambda d: save(LlamaForCausalLM(dict(BASE, rope_scaling={"rope_type": "yarn", "factor": 4.0})),
                                         d, "F32"),
     [], 1, "rope_scaling type \"yarn\" is not supported"),
    ("a config.json that is not JSON", lambda d: (save(model, d, "F32"),
                                                  open(os.path.join(d, "config.json"), "w").write("{\"hidden_size\": 64,")),
     [], 1, "config.json is not JSON"),
    ("a config.json without hidden_size",
     lambda d: (save(model, d, "F32"), json.dump({k: v for k, v in BASE.items() if k != "hidden_size"},
                                                 open(os.path.join(d, "config.json"), "w"))),
     [], 1, "config.json: field \"hidden_size\" is missing"),
    ("an attention with biases", lambda d: (save(model, d, "F32"), json.dump(dict(BASE, attention_bias=True),
                                                                             open(os.path.join(d, "config.json"), "w"))),
     [], 1, "\"attention_bias\" is true: the attention has no biases"),
    ("--layers against num_hidden_layers", lambda d: save(model, d, "F32"), ["--layers", "3"], 2,
     "num_hidden_layers is 2, but --layers 3 was given"),
    ("--seq past max_position_embeddings", lambda d: save(model, d, "F32"), ["--seq", "65"], 2,
     "max_position_embeddings is 64; --seq 65 is past the positions the model knows"),
    ("a tied head that differs", lambda d: save(tied, d, "F32", extra=[("lm_head.weight", torch.zeros(97, 64))]),
     [], 1, "tensor lm_head.weight differs from model.embed_tokens.weight"),
    ("an index naming a shard without the tensor",
     lambda d: (save(model, d, "F32", shards=2), rewrite_index(d)), [], 1,
     "puts tensor model.norm.weight in model-00001-of-00002.safetensors, which does not hold it"),
    ("no weights", lambda d: (os.makedirs(d), json.dump(BASE, open(os.path.join(d, "config.json"), "w"))), [], 1,
     "no model.safetensors nor model.safetensors.index.json"),
]


def rewrite_index(d):
    p = os.path.join(d, "model.safetensors.index.json")
    ix = json.load(open(p))
    ix["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"
    json.dump(ix, open(p, "w"))


for k, (label, make, args, want_rc, want) in enumerate(cases):
    d = os.path.join(tmp, f"bad{k}")
    make(d)
    rc, out = run(["--init-from", d] + gen_args + args)
    if rc == want_rc and want in out and not out.startswith("sample"):
        ok(f"{label}: exit {rc}, \"{want}\"")
    else:
        bad(f"{label}: exit {rc} (want {want_rc}): {out.strip()[-400:]} (want \"{want}\")")

print(f"llama_import: {passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
