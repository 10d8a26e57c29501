#!/usr/bin/env python3
"""PyTorch peer for bench/quant_bench: torch f16 GEMV (x [1, K] @ W[N, K]^T) at
4096x4096 and 1024x3072 with cold L2 (f16 weight copies rotated until they
exceed 256 MB, one copy per call), and the m = 512, N = K = 4096 f16 matmul.
Timing as in quant_bench: CUDA events around groups of 20 calls, 5 warm-up
groups, median of 30 groups, per-call time = group / 20. GB/s counts weight +
x + y bytes, as the rlx benchmark does; prints a table and JSON lines
(bench "quant", impl "torch") for bench/compare.py."""
import json

import torch

from torch_timing import median_ms

GROUP, WARM, GROUPS = 20, 5, 30
COLD_BYTES = 256 << 20
COPY_TBPS = 4.22  # bench/bench_util.h


def per_call_ms(fn):
    return median_ms(lambda g: [fn(g * GROUP + i) for i in range(GROUP)], warm=WARM, iters=GROUPS) / GROUP


def emit(case, value, unit):
    print(json.dumps({"bench": "quant", "case": case, "value": value, "unit": unit, "impl": "torch"}))


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"\n{'gemv m=1, f16 weights':30} {'us':>9} {'GB/s':>9} {'of copy':>8}")
    for n, k in ((4096, 4096), (1024, 3072)):
        w_bytes = n * k * 2
        copies = max(2, -(-COLD_BYTES // w_bytes))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
        x = torch.randn(1, k, device="cuda", dtype=torch.float16)
        ms = per_call_ms(lambda i: torch.matmul(x, ws[i % copies].t()))
        gbs = (w_bytes + 2 * k + 2 * n) / (ms * 1e-3) / 1e9
        case = f"gemv {n}x{k} m=1 f16"
        print(f"{case:30} {ms * 1e3:9.2f} {gbs:9.1f} {100 * gbs / (COPY_TBPS * 1e3):7.1f}%")
        emit(case, gbs, "GB/s")
        emit(case + " % of copy", 100 * gbs / (COPY_TBPS * 1e3), "%")
        del ws

    m, n, k = 512, 4096, 4096
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    ms = per_call_ms(lambda i: torch.matmul(x, w.t()))
    tflops = 2 * m * n * k / (ms * 1e-3) / 1e12
    print(f"\n{'prefill m=512 4096x4096 f16':30} {ms * 1e3:9.2f} us {tflops:9.1f} TFLOP/s")
    emit("prefill m=512 4096x4096 torch f16", tflops, "TFLOP/s")


if __name__ == "__main__":
    main()
