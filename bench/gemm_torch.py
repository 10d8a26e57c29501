#!/usr/bin/env python3
"""PyTorch peer for bench/gemm_bench: torch.matmul(A, W.T) on the same shapes
and dtypes, random data, CUDA events, median of 30 runs.
--only square: just the square shapes (beside rlx_gemm_bench --only square)."""
import json
import sys

import torch

from torch_timing import median_ms

SHAPES = [(8192, 8192, 8192, "square"), (4096, 4096, 4096, "square"), (32768, 1152, 384, "minilm qkv"),
          (32768, 1536, 384, "minilm ffn1"), (32768, 384, 1536, "minilm ffn2"), (32768, 384, 384, "minilm attn-out"),
          (32768, 2304, 768, "bert-base qkv"), (32768, 768, 768, "bert-base attn-out"),
          (32768, 3072, 768, "bert-base ffn1"), (32768, 768, 3072, "bert-base ffn2")]

SQUARE_ONLY = sys.argv[1:] == ["--only", "square"]
if sys.argv[1:] and not SQUARE_ONLY:
    sys.exit("usage: gemm_torch.py [--only square]")
if SQUARE_ONLY:
    SHAPES = [s for s in SHAPES if s[3] == "square"]

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

# The FFN up projection as the models run it: Linear with bias, then GELU-erf
# (the figure beside rlx_gemm_bench's sm90 rows with GELU fused).
for M, N, K, what in SHAPES:
    if "ffn1" not in what:
        continue
    a = [torch.rand(M, K, device="cuda", dtype=torch.float16) * 2 - 1 for _ in range(4)]
    w = torch.rand(N, K, device="cuda", dtype=torch.float16) * 2 - 1
    b = torch.rand(N, device="cuda", dtype=torch.float16) * 2 - 1
    ms = median_ms(lambda i: torch.nn.functional.gelu(torch.nn.functional.linear(a[i % 4], w, b)), warm=5, iters=30)
    key = f"f16 {M}x{N}x{K} ({what}) + bias + gelu"
    print(f"{key:42s} {ms:9.3f} ms {2 * M * N * K / (ms * 1e-3) / 1e12:8.1f} TFLOP/s")
    print(json.dumps({"bench": "gemm_gelu", "case": key, "value": ms, "unit": "ms", "impl": "torch"}))
