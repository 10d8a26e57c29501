#!/usr/bin/env python3
"""PyTorch peer for bench/gemm_bench: torch.matmul(A, W.T) on the same shapes
and dtypes, random data, CUDA events, median of 30 runs."""
import json

import torch

from torch_timing import median_ms

SHAPES = [(8192, 8192, 8192, "square"), (4096, 4096, 4096, "square"), (32768, 1152, 384, "minilm qkv"),
          (32768, 1536, 384, "minilm ffn1"), (32768, 384, 1536, "minilm ffn2"), (32768, 2304, 768, "bert-base qkv"),
          (32768, 3072, 768, "bert-base ffn1"), (32768, 768, 3072, "bert-base ffn2")]

for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
    for M, N, K, what in SHAPES:
        rot = 4 if M * K * 2 < (256 << 20) else 1
        a = [torch.rand(M, K, device="cuda", dtype=dt) * 2 - 1 for _ in range(rot)]
        w = torch.rand(N, K, device="cuda", dtype=dt) * 2 - 1
        ms = median_ms(lambda i: torch.matmul(a[i % rot], w.t()), warm=5, iters=30)
        tf = 2 * M * N * K / (ms * 1e-3) / 1e12
        key = f"{name} {M}x{N}x{K} ({what})"
        print(f"{key:42s} {ms:9.3f} ms {tf:8.1f} TFLOP/s")
        print(json.dumps({"bench": "gemm", "case": key, "value": tf, "unit": "TFLOP/s", "impl": "torch"}))
