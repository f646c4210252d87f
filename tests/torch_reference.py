"""mpmd against an independent reference: PyTorch, in float64.

  /usr/bin/python3 torch_reference.py DIR

DIR holds what tests/reference_dump.c wrote. For the GPT example's model
and the tutorial's Block, the model is written again here in PyTorch from
its description (docs/guide.md, src/layers/layers.c), loaded with mpmd's
initial parameters, run on the same batch; then

  loss       |mpmd - ref| <= 1e-5 |ref|          (an f32 sum of float64-exact terms)
  gradients  every element: |mpmd - ref| <= 1e-6 max|ref| + 1e-3 |ref|,
             and over each tensor ||mpmd - ref|| <= 1e-4 ||ref||
  clipped   (gpt_clip) the gradients' global norm against
             torch.nn.utils.clip_grad_norm_ to 1e-5 (1e-6 against the norm
             of mpmd's own gradients); the update below from mpmd's
             gradients clipped by clip_grad_norm_
  after one AdamW step (torch.optim.AdamW in float64, given mpmd's own
             gradients, so that this checks the update alone): every element
             |mpmd - ref| <= 1e-6 max|ref| + 1e-5 |ref| (f32 rounding where
             the step nearly cancels a small weight), the tensor to 1e-5

and for every op file, y and the gradients of sum(y * r) against
torch.autograd with the same element and norm tolerances. These are
f32 against float64: the bounds are a few times the errors measured (the
worst gradient error over all ops is printed). A failure prints the tensor,
the element and both values.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
failures = []
worst = {"grad": 0.0, "op": 0.0}


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=dt).reshape(t["shape"]).copy())
    return out, meta


def close(label, got, ref, elem_rel=1e-3, elem_abs_share=1e-6, norm_rel=1e-4, kind="grad"):
    got = got.to(torch.float64)
    ref = ref.to(torch.float64)
    if got.shape != ref.shape:
        failures.append(f"{label}: shape {tuple(got.shape)} vs the reference's {tuple(ref.shape)}")
        return
    scale = ref.abs().max().item() if ref.numel() else 0.0
    diff = (got - ref).abs()
    bound = elem_abs_share * scale + elem_rel * ref.abs() + 1e-12
    bad = diff > bound
    nrm = ref.norm().item()
    rel = (got - ref).norm().item() / nrm if nrm > 0 else diff.max().item() if diff.numel() else 0.0
    if kind in worst:
        worst[kind] = max(worst[kind], rel)
    if bad.any():
        i = int(torch.nonzero(bad.flatten())[0])
        failures.append(f"{label}: element {i}: mpmd {got.flatten()[i].item():.9g}, reference "
                        f"{ref.flatten()[i].item():.9g} (|diff| {diff.flatten()[i].item():.3g} > "
                        f"{bound.flatten()[i].item():.3g}); {int(bad.sum())} of {bad.numel()} elements")
    elif rel > norm_rel:
        failures.append(f"{label}: relative error of the tensor {rel:.3g} > {norm_rel:g}")


def layer_norm(x, scale, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), scale, bias, eps)


def gelu(x):
    return F.gelu(x, approximate="tanh")


def attention(x, P, name, heads, causal):
    b, t, c = x.shape
    qkv = x @ P[name + "/qkv/kernel"] + P[name + "/qkv/bias"]
    q, k, v = (z.reshape(b, t, heads, c // heads).transpose(1, 2) for z in qkv.split(c, dim=2))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(c // heads)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
    return a @ P[name + "/out/kernel"] + P[name + "/out/bias"]


def mlp(x, P, name):
    h = gelu(x @ P[name + "/dense_0/kernel"] + P[name + "/dense_0/bias"])
    return h @ P[name + "/dense_1/kernel"] + P[name + "/dense_1/bias"]


def gpt_loss(P, cfg, tok, tgt):
    """The GPT example (examples/models/gpt_model.c): pre-LN GPT-2 blocks,
    tied embeddings, cross-entropy; each microbatch adds its mean / n."""
    n, total = cfg["microbatches"], 0.0
    for m in range(n):
        rows = slice(m * cfg["batch"] // n, (m + 1) * cfg["batch"] // n)
        x = P["wte/embedding"][tok[rows].long()] + P["wpe/embedding"]
        for i in range(cfg["layers"]):
            blk = f"block_{i}"
            x = x + attention(layer_norm(x, P[blk + "/ln_0/scale"], P[blk + "/ln_0/bias"], 1e-5), P,
                              blk + "/attn", cfg["heads"], True)
            x = x + mlp(layer_norm(x, P[blk + "/ln_1/scale"], P[blk + "/ln_1/bias"], 1e-5), P, blk + "/mlp")
        x = layer_norm(x, P["ln_f/scale"], P["ln_f/bias"], 1e-5)
        logits = x @ P["wte/embedding"].t()
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[rows].reshape(-1).long())
        total = total + (ce / n if n > 1 else ce)
    return total


def block_loss(P, cfg, x_all, y_all):
    """The tutorial's model: post-LN Blocks (not causal), MSE summed over
    the microbatches."""
    n, total = cfg["microbatches"], 0.0
    for m in range(n):
        rows = slice(m * x_all.shape[0] // n, (m + 1) * x_all.shape[0] // n)
        x = x_all[rows]
        for blk in ("block_0", "block_1"):
            x = layer_norm(x + attention(x, P, blk + "/attn", cfg["heads"], False), P[blk + "/ln_0/scale"],
                           P[blk + "/ln_0/bias"], cfg["eps"])
            x = layer_norm(x + mlp(x, P, blk + "/mlp"), P[blk + "/ln_1/scale"], P[blk + "/ln_1/bias"], cfg["eps"])
        total = total + ((x - y_all[rows]) ** 2).mean()
    return total


def check_model(path, loss_fn, inputs, adam):
    T, meta = load(path)
    cfg = json.loads(meta["config"])
    name = os.path.basename(path).split(".")[0]
    params = {k[5:]: v.to(torch.float64).clone().requires_grad_(True) for k, v in T.items() if k.startswith("init/")}
    ins = [T["input/" + i] for i in inputs]
    ins = [t.to(torch.float64) if t.is_floating_point() else t for t in ins]
    loss = loss_fn(params, cfg, *ins)
    loss.backward()
    ref_loss = loss.item()
    got_loss = float(meta["loss"])
    if abs(got_loss - ref_loss) > 1e-5 * abs(ref_loss):
        failures.append(f"{name}: loss mpmd {got_loss:.9g}, reference {ref_loss:.9g}")
    for p, v in params.items():
        close(f"{name}: gradient of {p}", T["grad/" + p], v.grad)
    # with a clip: the global norm of mpmd's gradients against
    # torch.nn.utils.clip_grad_norm_ of the reference's, and the update from
    # mpmd's gradients clipped by PyTorch
    factor = 1.0
    if cfg.get("clip", 0) > 0:
        ref_norm = torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["clip"]).item()
        got_norm = float(meta["grad_norm"])
        if abs(got_norm - ref_norm) > 1e-5 * ref_norm:
            failures.append(f"{name}: gradient norm mpmd {got_norm:.9g}, clip_grad_norm_ {ref_norm:.12g}")
        if not ref_norm > cfg["clip"]:
            failures.append(f"{name}: the norm {ref_norm:.6g} is within the clip {cfg['clip']:g}: nothing clipped")
        mine = [T["grad/" + p].to(torch.float64).clone() for p in params]
        for t in mine:
            t.requires_grad_(False)
        holders = [torch.zeros_like(t, requires_grad=True) for t in mine]
        for h, t in zip(holders, mine):
            h.grad = t
        own_norm = torch.nn.utils.clip_grad_norm_(holders, cfg["clip"]).item()
        if abs(got_norm - own_norm) > 1e-6 * own_norm:
            failures.append(f"{name}: gradient norm mpmd {got_norm:.9g}, clip_grad_norm_ of mpmd's gradients "
                            f"{own_norm:.12g}")
        clipped = {p: h.grad for p, h in zip(params, holders)}
        print(f"{name}: gradient norm {got_norm:.9g} (clip_grad_norm_: {ref_norm:.12g}), clipped to {cfg['clip']:g}")
    # one AdamW step from mpmd's gradients: the update alone
    for p in params:
        w = T["init/" + p].to(torch.float64).clone().requires_grad_(True)
        # weight decay on the matrices and embeddings only (the GPT's default), or on all
        decayed = cfg.get("decay", "all") == "all" or w.dim() >= 2
        opt = torch.optim.AdamW([w], lr=cfg["lr"], betas=(cfg["b1"], cfg["b2"]), eps=cfg[adam],
                                weight_decay=cfg["wd"] if decayed else 0.0)
        w.grad = clipped[p] if cfg.get("clip", 0) > 0 else T["grad/" + p].to(torch.float64)
        opt.step()
        close(f"{name}: {p} after one AdamW step", T["after/" + p], w.detach(), elem_rel=1e-5,
              elem_abs_share=1e-6, norm_rel=1e-5, kind="after")
    print(f"{name}: loss {got_loss:.9g} (reference {ref_loss:.12g}), {len(params)} gradients and updates checked")


OPS = {
    "matmul": lambda x: x[0] @ x[1],
    "matmul_ta": lambda x: x[0].transpose(-1, -2) @ x[1],
    "matmul_tb": lambda x: x[0] @ x[1].transpose(-1, -2),
    "matmul_batched": lambda x: x[0] @ x[1],
    "matmul_scaled": lambda x: 0.35 * (x[0] @ x[1].transpose(-1, -2)),
    "add_bcast": lambda x: x[0] + x[1],
    "sub": lambda x: x[0] - x[1],
    "mul_bcast": lambda x: x[0] * x[1],
    "div": lambda x: x[0] / (torch.exp(x[1]) + 0.5),
    "exp": lambda x: torch.exp(x[0]),
    "log": lambda x: torch.log(torch.exp(x[0]) + 1.0),
    "tanh": lambda x: torch.tanh(x[0]),
    "gelu": lambda x: gelu(x[0]),
    "relu": lambda x: torch.relu(x[0]),
    "sqrt": lambda x: torch.sqrt(torch.exp(x[0])),
    "rsqrt": lambda x: torch.rsqrt(torch.exp(x[0]) + 0.1),
    "square": lambda x: x[0] ** 2,
    "neg_scalar": lambda x: -x[0] * 1.5,
    "softmax": lambda x: x[0].softmax(-1),
    "log_softmax": lambda x: x[0].log_softmax(-1),
    "softmax_causal": lambda x: x[0].masked_fill(torch.ones(x[0].shape[-1], x[0].shape[-1], dtype=torch.bool).triu(1),
                                                 float("-inf")).softmax(-1),
    "layer_norm": lambda x: layer_norm(x[0], x[1], x[2], 1e-5),
    "cross_entropy": lambda x: F.cross_entropy(x[0], torch.tensor([0, 6, 2, 2, 5, 1]), reduction="none"),
    "attention": lambda x: attn_op(x, False),
    "attention_causal": lambda x: attn_op(x, True),
    "attention_long": lambda x: attn_op(x, False),
    "attn_causal_long": lambda x: attn_op(x, True),
    "sum": lambda x: x[0].sum(1),
    "mean": lambda x: x[0].mean(0, keepdim=True),
    "max": lambda x: x[0].max(1).values,
    "permute": lambda x: x[0].permute(2, 0, 1),
    "reshape": lambda x: x[0].reshape(4, 6),
    "slice": lambda x: x[0][:, 1:3],
    "concat": lambda x: torch.cat([x[0], x[1]], 1),
    "embedding": lambda x: x[0][torch.tensor([3, 0, 9, 3, 7, 1])],
    "broadcast_to": lambda x: x[0].expand(3, 2, 4),
    "sum_to": lambda x: x[0].sum((0, 1), keepdim=True).reshape(1, 4),
    "sigmoid": lambda x: torch.sigmoid(x[0]),
    "silu": lambda x: F.silu(x[0]),
    "maximum_bcast": lambda x: torch.maximum(x[0], x[1]),
    "minimum": lambda x: torch.minimum(x[0], x[1]),
    "where_gt": lambda x: torch.where(x[0] > x[1], x[0], 0.5 * x[1]),
    "rms_norm": lambda x: x[0] * torch.rsqrt((x[0] ** 2).mean(-1, keepdim=True) + 1e-6) * x[1],
    "rope": lambda x: rope(x[0], 10000.0, 3),
    "take_axis1": lambda x: x[0][:, torch.tensor([3, 0, 9, 3, 7, 1])],
}


def rope(x, base, offset):
    """Hugging Face LLaMA's rotary embedding (rotate_half) on [B, T, H, D]."""
    t, d = x.shape[1], x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = (torch.arange(t, dtype=torch.float64) + offset)[:, None] * inv[None, :]  # [T, D/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attn_op(x, causal):
    q, k, v = (z.transpose(1, 2) for z in x)  # [B, T, H, D] -> [B, H, T, D]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2)


def check_op(path):
    T, meta = load(path)
    op = meta["op"]
    if op not in OPS:
        failures.append(f"op {op}: no reference here")
        return
    n = sum(1 for k in T if k.startswith("x"))
    xs = [T[f"x{i}"].to(torch.float64).requires_grad_(True) for i in range(n)]
    y = OPS[op](xs)
    close(f"op {op}: y", T["out/y"], y.detach(), kind="op")
    (y * T["r"].to(torch.float64)).sum().backward()
    for i, x in enumerate(xs):
        close(f"op {op}: gradient of operand {i}", T[f"grad/x{i}"], x.grad, kind="op")


def main():
    d = sys.argv[1]
    check_model(os.path.join(d, "gpt.safetensors"), gpt_loss, ["tokens", "targets"], "eps")
    check_model(os.path.join(d, "gpt_clip.safetensors"), gpt_loss, ["tokens", "targets"], "eps")
    check_model(os.path.join(d, "block.safetensors"), block_loss, ["x", "targets"], "eps_adam")
    ops = sorted(f for f in os.listdir(d) if f.startswith("op_"))
    for f in ops:
        check_op(os.path.join(d, f))
    print(f"{len(ops)} ops checked; the largest relative error of a gradient tensor: models {worst['grad']:.2e}, "
          f"ops {worst['op']:.2e}")
    for f in failures:
        print("FAIL: " + f)
    print(f"torch_reference: {'FAILED, ' + str(len(failures)) + ' problems' if failures else 'passed'}")
    sys.exit(1 if failures else 0)


main()
