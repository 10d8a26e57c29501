#!/usr/bin/env python3
"""PyTorch peer for bench/gemm_bench: torch.matmul(A, W.T) on the same shapes
and dtypes, and torch._scaled_mm (e4m3, bf16 result; per-tensor and row-wise
scales) beside rlx's fp8 rows; random data, CUDA events, median of 30 runs.
--only square: just the square shapes (beside rlx_gemm_bench --only square);
--only fp8: just the fp8 rows (beside rlx_gemm_bench --only fp8)."""
import json
import sys

import torch

from torch_timing import median_ms

SHAPES = [(8192, 8192, 8192, "square"), (4096, 4096, 4096, "square"), (32768, 1152, 384, "minilm qkv"),
          (32768, 1536, 384, "minilm ffn1"), (32768, 384, 1536, "minilm ffn2"), (32768, 384, 384, "minilm attn-out"),
          (32768, 2304, 768, "bert-base qkv"), (32768, 768, 768, "bert-base attn-out"),
          (32768, 3072, 768, "bert-base ffn1"), (32768, 768, 3072, "bert-base ffn2")]

SQUARE_ONLY = sys.argv[1:] == ["--only", "square"]
FP8_ONLY = sys.argv[1:] == ["--only", "fp8"]
if sys.argv[1:] and not SQUARE_ONLY and not FP8_ONLY:
    sys.exit("usage: gemm_torch.py [--only square|fp8]")
if SQUARE_ONLY:
    SHAPES = [s for s in SHAPES if s[3] == "square"]


def fp8_rows():
    """torch._scaled_mm on the same shapes: e4m3 operands (A rotated), f32
    scales (one each, or A's per row and W's per output column), bf16 out."""
    for M, N, K, what in SHAPES:
        for rows in (False, True):
            rot = 4 if M * K < (256 << 20) else 1
            a = [(torch.rand(M, K, device="cuda") * 2 - 1).to(torch.float8_e4m3fn) for _ in range(rot)]
            w = (torch.rand(N, K, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
            sa = torch.rand(M, 1, device="cuda") if rows else torch.rand((), device="cuda")
            sb = torch.rand(1, N, device="cuda") if rows else torch.rand((), device="cuda")
            key = f"fp8 {M}x{N}x{K} ({what}{', row scales' if rows else ''})"
            try:
                ms = median_ms(lambda i: torch._scaled_mm(a[i % rot], w.t(), scale_a=sa, scale_b=sb,
                                                          out_dtype=torch.bfloat16), warm=5, iters=30)
            except RuntimeError as e:
                print(f"{key:52s} torch._scaled_mm failed: {str(e).splitlines()[0]}")
                continue
            tf = 2 * M * N * K / (ms * 1e-3) / 1e12
            print(f"{key:52s} {ms:9.3f} ms {tf:8.1f} TFLOP/s")
            print(json.dumps({"bench": "gemm_fp8", "case": key, "value": tf, "unit": "TFLOP/s", "impl": "torch"}))
            if not rows:
                continue
            # The fp8 linear layer in eager PyTorch: bf16 x quantized per row, then _scaled_mm.
            x = [torch.rand(M, K, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(rot)]
            wb = torch.rand(N, K, device="cuda", dtype=torch.bfloat16) * 2 - 1

            def linear(i):
                s = x[i % rot].abs().amax(dim=1, keepdim=True).float().clamp(min=1e-30) / 448.0
                q = (x[i % rot].float() / s).to(torch.float8_e4m3fn)
                return torch._scaled_mm(q, w.t(), scale_a=s, scale_b=sb, out_dtype=torch.bfloat16)

            lin = median_ms(linear, warm=5, iters=30)
            bf = median_ms(lambda i: torch.matmul(x[i % rot], wb.t()), warm=5, iters=30)
            lkey = f"fp8 linear {M}x{N}x{K} ({what}, bf16 x quantized per row)"
            print(f"{lkey:52s} {lin:9.3f} ms; bf16 matmul {bf:.3f} ms: {bf / lin:.2f}x")
            print(json.dumps({"bench": "gemm_fp8", "case": lkey, "value": lin, "unit": "ms", "impl": "torch"}))


if FP8_ONLY:
    fp8_rows()
    sys.exit(0)

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

if not SQUARE_ONLY:
    fp8_rows()
