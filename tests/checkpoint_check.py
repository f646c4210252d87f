#!/usr/bin/env python3
"""Decode an mpmd checkpoint and a bf16 weights export with nothing but the
Python standard library.

Runs `test_checkpoint --write-sample FILE`, then reads FILE the way any
safetensors consumer would: the 8-byte little-endian header length, the JSON
header (json module, duplicate keys rejected), the tensors by their
data_offsets, the two checksums of docs/checkpoints.md. When numpy or the
safetensors package happen to be installed, they must read it too.

Then runs `test_checkpoint --write-weights-sample FILE` (the sample's two
parameters exported as BF16) and checks names, shapes, dtype "BF16", the
metadata and every value: each bf16 is decoded by shifting its 16 bits into
the top of an f32 and must equal the source f32 rounded to nearest, ties to
even (computed here from the source's bits). When the safetensors package
(and torch, for bf16 values) is importable it must read the file the same.

usage: checkpoint_check.py PATH/TO/test_checkpoint
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

ODD = 'quote"back\\slash/\u00e9'
EXPECTED = {  # name: (dtype, shape, struct format, values)
    "count": ("I32", [], "<i", [-7]),
    "enc/b": ("F32", [3], "<3f", [100.0, 101.0, 102.0]),
    ODD: ("F32", [2], "<2f", [1.5, -2.25]),
    "w": ("F32", [2, 3], "<6f", [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]),
}
SIZES = {"I32": 4, "F32": 4}


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key in %r" % keys)
    return dict(pairs)


def check(path):
    problems = []
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if (8 + n) % 8:
        problems.append("data section not 8-aligned: N = %d" % n)
    text = raw[8:8 + n]
    if text[:1] != b"{":
        problems.append("header does not start with '{'")
    if text.rstrip(b" ")[-1:] != b"}":
        problems.append("header padding is not spaces after '}'")
    header = json.loads(text.decode("utf-8"), object_pairs_hook=no_duplicates)
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    if not all(isinstance(v, str) for v in meta.values()):
        problems.append("metadata values must be strings: %r" % meta)
    want_meta = {"format": "mpmd-checkpoint", "version": "1", "step": "12", "seed": "34",
                 "rng_state": "1,2,3,18446744073709551615", "config": 'layers=1 "q"\n'}
    for k, v in want_meta.items():
        if meta.get(k) != v:
            problems.append("metadata %s = %r, expected %r" % (k, meta.get(k), v))
    if set(header) != set(EXPECTED):
        problems.append("tensors %r, expected %r" % (sorted(header), sorted(EXPECTED)))
    at = 0
    for name in sorted(header):  # name order is data order, no gaps
        info = header[name]
        dtype, shape, fmt, values = EXPECTED[name]
        b, e = info["data_offsets"]
        numel = 1
        for d in info["shape"]:
            numel *= d
        if info["dtype"] != dtype or info["shape"] != shape:
            problems.append("%s: %s%r, expected %s%r" % (name, info["dtype"], info["shape"], dtype, shape))
        if b != at or e - b != numel * SIZES[info["dtype"]]:
            problems.append("%s: data_offsets [%d, %d], expected to start at %d" % (name, b, e, at))
        got = list(struct.unpack(fmt, data[b:e]))
        if got != values:
            problems.append("%s: values %r, expected %r" % (name, got, values))
        at = e
    if at != len(data):
        problems.append("data section is %d bytes, tensors cover %d" % (len(data), at))
    if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        problems.append("sha256 of the data section does not match")
    hh = meta.get("header_sha256", "")
    blank = raw[:8 + n].replace(hh.encode(), b"0" * 64, 1)
    if len(hh) != 64 or hashlib.sha256(blank).hexdigest() != hh:
        problems.append("header_sha256 does not match")
    try:
        import numpy as np
        w = header["w"]
        arr = np.frombuffer(data[w["data_offsets"][0]:w["data_offsets"][1]], dtype="<f4").reshape(w["shape"])
        if arr.tolist() != [[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]]:
            problems.append("numpy reads w as %r" % arr.tolist())
    except ImportError:
        print("numpy not installed: skipped the numpy decode")
    try:
        from safetensors.numpy import load_file
        t = load_file(path)
        if t["count"].tolist() != -7 or t[ODD].tolist() != [1.5, -2.25]:
            problems.append("safetensors.numpy reads other values")
    except ImportError:
        print("safetensors not installed: skipped its reader")
    return problems


# The sample's parameters by their f32 bits (tests/test_checkpoint.c,
# set_weights_values): ties to even both ways, a subnormal, a value near the
# f32 maximum, a negative zero.
WEIGHTS_SRC = {
    "enc/b": ([3], [0x80000000, 0x42C83333, 0x477FE000]),
    "w": ([2, 3], [0x3EAAAAAB, 0x3F808000, 0x3F818000, 0xC02DF84D, 0x000116C2, 0x7F61B1E6]),
}


def f32_of_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def bf16_round(bits):
    """f32 bits -> bf16 bits, round to nearest, ties to even (finite inputs)."""
    hi, rest = bits >> 16, bits & 0xFFFF
    if rest > 0x8000 or (rest == 0x8000 and hi & 1):
        hi += 1
    return hi


def bf16_to_f32(h):
    return f32_of_bits(h << 16)


def check_weights(path):
    problems = []
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if (8 + n) % 8:
        problems.append("weights: data section not 8-aligned: N = %d" % n)
    header = json.loads(raw[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    want_meta = {"format": "mpmd-weights", "version": "1", "dtype": "BF16"}
    for k, v in want_meta.items():
        if meta.get(k) != v:
            problems.append("weights: metadata %s = %r, expected %r" % (k, meta.get(k), v))
    extra = set(meta) - set(want_meta) - {"sha256", "header_sha256"}
    if extra:
        problems.append("weights: unexpected metadata %r" % sorted(extra))
    if set(header) != set(WEIGHTS_SRC):
        problems.append("weights: tensors %r, expected the parameters %r" % (sorted(header), sorted(WEIGHTS_SRC)))
        return problems
    at = 0
    expected_values = {}
    for name in sorted(header):
        info = header[name]
        shape, src = WEIGHTS_SRC[name]
        b, e = info["data_offsets"]
        if info["dtype"] != "BF16" or info["shape"] != shape:
            problems.append("weights: %s is %s%r, expected BF16%r" % (name, info["dtype"], info["shape"], shape))
        if b != at or e - b != 2 * len(src):
            problems.append("weights: %s: data_offsets [%d, %d], expected [%d, %d]" % (name, b, e, at, at + 2 * len(src)))
        halves = struct.unpack("<%dH" % ((e - b) // 2), data[b:e])
        want = [bf16_round(x) for x in src]
        if list(halves) != want:
            problems.append("weights: %s: bf16 bits %s, expected %s"
                            % (name, [hex(x) for x in halves], [hex(x) for x in want]))
        got = [bf16_to_f32(h) for h in halves]
        expected_values[name] = [bf16_to_f32(h) for h in want]
        # the rounding error is at most half a bf16 ulp of the source
        for x, g in zip(src, got):
            v = f32_of_bits(x)
            ulp = 2.0 ** (max((x >> 23) & 0xFF, 1) - 127 - 7)
            if abs(g - v) > ulp / 2:
                problems.append("weights: %s: %r decodes to %r, more than half a bf16 ulp away" % (name, v, g))
        at = e
    if at != len(data):
        problems.append("weights: data section is %d bytes, tensors cover %d" % (len(data), at))
    if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        problems.append("weights: sha256 of the data section does not match")
    hh = meta.get("header_sha256", "")
    blank = raw[:8 + n].replace(hh.encode(), b"0" * 64, 1)
    if len(hh) != 64 or hashlib.sha256(blank).hexdigest() != hh:
        problems.append("weights: header_sha256 does not match")

    try:
        from safetensors import safe_open
    except ImportError:
        print("safetensors not installed: skipped reading the bf16 export with it")
        return problems
    try:
        with safe_open(path, framework="pt" if has_module("torch") else "numpy") as f:
            if f.metadata() != meta:
                problems.append("weights: safetensors reads metadata %r" % f.metadata())
            if sorted(f.keys()) != sorted(WEIGHTS_SRC):
                problems.append("weights: safetensors reads tensors %r" % sorted(f.keys()))
            for name in f.keys():
                sl = f.get_slice(name)
                if sl.get_dtype() != "BF16" or list(sl.get_shape()) != WEIGHTS_SRC[name][0]:
                    problems.append("weights: safetensors reads %s as %s%r" % (name, sl.get_dtype(), sl.get_shape()))
    except Exception as e:  # a reader that rejects the file is a failure
        problems.append("weights: safetensors cannot open the export: %r" % e)
        return problems
    if not has_module("torch"):
        print("torch not installed: skipped comparing the bf16 values read by safetensors.torch")
        return problems
    import torch
    from safetensors.torch import load_file
    t = load_file(path)
    for name, want in expected_values.items():
        x = t[name]
        if x.dtype != torch.bfloat16 or list(x.shape) != WEIGHTS_SRC[name][0]:
            problems.append("weights: torch reads %s as %s%r" % (name, x.dtype, list(x.shape)))
        got = x.float().flatten().tolist()
        if [struct.pack("<f", g) for g in got] != [struct.pack("<f", w) for w in want]:
            problems.append("weights: torch reads %s = %r, expected %r" % (name, got, want))
    return problems


def has_module(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sample.safetensors")
        subprocess.run([sys.argv[1], "--write-sample", path], check=True)
        problems = check(path)
        wpath = os.path.join(d, "weights.bf16.safetensors")
        subprocess.run([sys.argv[1], "--write-weights-sample", wpath], check=True)
        problems += check_weights(wpath)
    for p in problems:
        print("checkpoint_check: " + p)
    print("checkpoint_check: %s" % ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
