#!/usr/bin/env python3
"""PyTorch peer for bench/attention_bench: torch.nn.functional.scaled_dot_product_attention
on the same shapes, layouts and dtypes (Q/K/V stored [B, L, H, D] and viewed as
[B, H, L, D], as rlx reads them), random data in [-1, 1], 5 warm-ups, CUDA events,
median of 30 runs. Prints the same table and JSON lines (impl "torch") for
bench/compare.py, plus the measured hardware limits (bf16 GEMM rate, copy rate)."""
import json
import math

import torch
import torch.nn.functional as F

from torch_timing import median_ms


def timed(fn):
    return median_ms(lambda _: fn(), warm=5, iters=30)


def emit(case, value, unit):
    print(json.dumps({"bench": "attention", "case": case, "value": value, "unit": unit, "impl": "torch"}))


def limits():
    a = torch.rand(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.rand(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = timed(lambda: torch.matmul(a, b))
    gemm = 2 * 8192**3 / (ms * 1e-3) / 1e12
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    ms = timed(lambda: y.copy_(x))
    copy = 2 * x.numel() / (ms * 1e-3) / 1e12
    print(f"hardware limit (measured now): bf16 GEMM {gemm:.0f} TFLOP/s, copy {copy:.2f} TB/s")
    print(json.dumps({"bench": "limit", "case": "bf16 gemm 8192^3", "value": gemm, "unit": "TFLOP/s", "impl": "torch"}))
    print(json.dumps({"bench": "limit", "case": "device copy", "value": copy * 1e3, "unit": "GB/s", "impl": "torch"}))


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    limits()
    tokens = 16384
    print(f"\n{'prefill':44s} {'B':>4s} {'H':>4s} {'ms':>9s} {'TFLOP/s':>9s}")
    for dt, dn in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        for causal in (0, 1):
            for D in (64, 128):
                for L in (512, 4096):
                    B, H = tokens // L, (16 if D == 128 else 32)
                    q, k, v = (torch.rand(B, L, H, D, device="cuda", dtype=dt) * 2 - 1 for _ in range(3))
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                    ms = timed(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal),
                                                                      scale=1 / math.sqrt(D)))
                    flops = 4 * B * H * L * L * D * (0.5 if causal else 1.0)
                    tf = flops / (ms * 1e-3) / 1e12
                    case = f"prefill {dn} {'causal' if causal else 'full'} D{D} B{B} H{H} L{L}"
                    print(f"{case:44s} {B:4d} {H:4d} {ms:9.3f} {tf:9.1f}")
                    emit(case, tf, "TFLOP/s")
                    del q, k, v, qt, kt, vt

    print(f"\n{'decode':44s} {'B':>4s} {'H':>4s} {'ms':>9s} {'GB/s':>9s}")
    H, Hkv, D = 32, 8, 128
    for dt, dn in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        for B, Lk in ((1, 4096), (1, 32768), (16, 4096), (16, 16384), (64, 4096)):
            q = (torch.rand(B, 1, H, D, device="cuda", dtype=dt) * 2 - 1).transpose(1, 2)
            k = (torch.rand(B, Lk, Hkv, D, device="cuda", dtype=dt) * 2 - 1).transpose(1, 2)
            v = (torch.rand(B, Lk, Hkv, D, device="cuda", dtype=dt) * 2 - 1).transpose(1, 2)
            try:
                fn = lambda: F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(D), enable_gqa=True)
                fn()
            except (TypeError, RuntimeError):  # torch < 2.5: no enable_gqa; expand K/V outside the timing
                ke, ve = (x.repeat_interleave(H // Hkv, dim=1) for x in (k, v))
                fn = lambda: F.scaled_dot_product_attention(q, ke, ve, scale=1 / math.sqrt(D))
            ms = timed(fn)
            nbytes = 2 * B * Lk * Hkv * D * 2 + 2 * B * H * D * 2
            gbps = nbytes / (ms * 1e-3) / 1e9
            case = f"decode {dn} D128 B{B} H32/8 Lk{Lk}"
            print(f"{case:44s} {B:4d} {H:4d} {ms:9.4f} {gbps:9.0f}")
            emit(case, gbps, "GB/s")


if __name__ == "__main__":
    main()
