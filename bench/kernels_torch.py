#!/usr/bin/env python3
"""PyTorch peer for bench/kernels_bench: torch.nn.functional.layer_norm, rms_norm
and softmax (plus the unfused residual add + norm) on the same shapes and dtypes
(32768 x 4096, f16 and f32, weights in the input dtype), inputs rotated over 3
buffer sets, 10 warm-ups, CUDA events around each of 100 runs, median. Bytes are
counted as in the rlx benchmark (row-sized tensors read + written by the op),
so GB/s figures compare directly. Prints a table and JSON lines (impl "torch")
for bench/compare.py, plus the copy rate measured now."""
import json

import torch
import torch.nn.functional as F

from torch_timing import median_ms

SETS, WARM, ITERS = 3, 10, 100
COPY_TBPS = 4.22  # bench/bench_util.h


def timed(fn):
    return median_ms(lambda i: fn(i % SETS), warm=WARM, iters=ITERS)


def emit(case, value, unit):
    print(json.dumps({"bench": "kernels", "case": case, "value": value, "unit": unit, "impl": "torch"}))


def copy_rate():
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    ms = timed(lambda _: y.copy_(x))
    rate = 2 * x.numel() / (ms * 1e-3) / 1e12
    print(f"hardware limit (measured now): copy {rate:.2f} TB/s")
    print(json.dumps({"bench": "limit", "case": "device copy", "value": rate * 1e3, "unit": "GB/s", "impl": "torch"}))


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    copy_rate()
    rows, cols, eps = 32768, 4096, 1e-5
    print(f"\n{'case (32768 x 4096)':36s} {'us':>9s} {'GB/s':>9s} {'of copy':>8s}")
    for dt, dn in ((torch.float16, "f16"), (torch.float32, "f32")):
        xs = [torch.rand(rows, cols, device="cuda", dtype=dt) * 4 - 2 for _ in range(SETS)]
        rs = [torch.rand(rows, cols, device="cuda", dtype=dt) * 4 - 2 for _ in range(SETS)]
        g = torch.rand(cols, device="cuda", dtype=dt) + 0.5
        b = torch.rand(cols, device="cuda", dtype=dt) - 0.5
        bytes_per = rows * cols * xs[0].element_size()

        def res_ln(k):
            s = xs[k] + rs[k]
            return F.layer_norm(s, (cols,), g, b, eps), s

        def res_rms(k):
            s = xs[k] + rs[k]
            return F.rms_norm(s, (cols,), g, eps), s

        cases = [
            ("layernorm", 2, lambda k: F.layer_norm(xs[k], (cols,), g, b, eps)),
            ("rmsnorm", 2, lambda k: F.rms_norm(xs[k], (cols,), g, eps)),
            ("softmax", 2, lambda k: F.softmax(xs[k], dim=-1)),
            ("residual+layernorm (+sum)", 4, res_ln),
            ("residual+rmsnorm (+sum)", 4, res_rms),
        ]
        for name, tensors, fn in cases:
            ms = timed(fn)
            gbps = tensors * bytes_per / (ms * 1e-3) / 1e9
            key = f"{name} {dn} {rows}x{cols}"
            print(f"{key:36s} {ms * 1e3:9.1f} {gbps:9.0f} {100 * gbps / (COPY_TBPS * 1e3):7.1f}%")
            emit(key, gbps, "GB/s")
        del xs, rs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
