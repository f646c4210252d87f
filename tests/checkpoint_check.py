#!/usr/bin/env python3
"""Decode an mpmd checkpoint with nothing but the Python standard library.

Runs `test_checkpoint --write-sample FILE`, then reads FILE the way any
safetensors consumer would: the 8-byte little-endian header length, the JSON
header (json module, duplicate keys rejected), the tensors by their
data_offsets, the two checksums of docs/checkpoints.md. When numpy or the
safetensors package happen to be installed, they must read it too.

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


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sample.safetensors")
        subprocess.run([sys.argv[1], "--write-sample", path], check=True)
        problems = check(path)
    for p in problems:
        print("checkpoint_check: " + p)
    print("checkpoint_check: %s" % ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
