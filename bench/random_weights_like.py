#!/usr/bin/env python3
"""A model folder with random weights in the layout of another, for throughput
benchmarks where the real weights cannot travel (the GPU machine has no model
packages and a call carries 64 MiB):

    python3 bench/random_weights_like.py skeleton SRC_DIR DST_DIR
        copies SRC_DIR's small files (config, tokenizer, modules; under 4 MB
        each) and model.safetensors cut to its header (a few KB);
    python3 bench/random_weights_like.py fill SKELETON_DIR DST_DIR [--seed N]
        copies the skeleton and writes model.safetensors with the header's
        tensors filled with random values: N(0, 0.05) for matrices and
        embeddings, 1 ± 0.05 for norm weights, N(0, 0.02) for biases, and
        0, 1, 2, ... for integer tensors (position ids).

Outputs computed with such weights mean nothing; their speed is the real
model's (same shapes, same dtypes)."""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

WEIGHTS = "model.safetensors"
SMALL = 4 << 20
DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            sys.exit(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 << 20:
            sys.exit(f"{path}: header length {n} is implausible")
        blob = f.read(n)
    if len(blob) != n:
        sys.exit(f"{path}: header cut short ({len(blob)} of {n} bytes)")
    return raw + blob, json.loads(blob)


def copy_small(src, dst):
    for root, _, files in os.walk(src):
        for name in files:
            s = os.path.join(root, name)
            rel = os.path.relpath(s, src)
            if rel == WEIGHTS or os.path.getsize(s) > SMALL:
                continue
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copyfile(s, os.path.join(dst, rel))


def skeleton(src, dst):
    head, _ = read_header(os.path.join(src, WEIGHTS))
    copy_small(src, dst)
    with open(os.path.join(dst, WEIGHTS), "wb") as f:
        f.write(head)
    print(f"skeleton: {dst} ({len(head)} header bytes)")


def fill(src, dst, seed):
    head, meta = read_header(os.path.join(src, WEIGHTS))
    copy_small(src, dst)
    rng = np.random.default_rng(seed)
    tensors = sorted((k, v) for k, v in meta.items() if k != "__metadata__")
    with open(os.path.join(dst, WEIGHTS), "wb") as f:
        f.write(head)
        for name, info in sorted(tensors, key=lambda kv: kv[1]["data_offsets"][0]):
            dtype = DTYPES.get(info["dtype"])
            if dtype is None:
                sys.exit(f"{name}: dtype {info['dtype']} is not handled")
            shape = info["shape"]
            count = int(np.prod(shape)) if shape else 1
            if np.issubdtype(dtype, np.integer):
                values = np.arange(count) % (shape[-1] if shape else 1)
            elif len(shape) == 1 and "norm" in name.lower() and name.endswith("weight"):
                values = 1 + 0.05 * rng.standard_normal(count)
            elif len(shape) == 1:
                values = 0.02 * rng.standard_normal(count)
            else:
                values = 0.05 * rng.standard_normal(count)
            begin, end = info["data_offsets"]
            data = values.astype(dtype).tobytes()
            if len(data) != end - begin:
                sys.exit(f"{name}: {len(data)} bytes for offsets {begin}..{end}")
            f.seek(len(head) + begin)
            f.write(data)
    print(f"random weights: {dst} ({len(tensors)} tensors, seed {seed})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("skeleton", "fill"))
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.dst, exist_ok=True)
    skeleton(a.src, a.dst) if a.mode == "skeleton" else fill(a.src, a.dst, a.seed)


if __name__ == "__main__":
    main()
