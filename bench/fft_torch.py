#!/usr/bin/env python3
"""PyTorch peer for bench/fft_bench: torch.fft on the same shapes (complex64
c2c forward and inverse without scaling, the inverse scaled 1/n, real r2c/c2r),
random data over 3 rotated input sets of 128 MB, 10 warm-ups, CUDA events
around each of 50 runs, median per transform. Bytes are counted as in the rlx
benchmark (read + write once), so GB/s compare directly. Prints a table and JSON
lines (impl "torch") for bench/compare.py."""
import json

import torch

from torch_timing import median_ms

SETS = 3
COPY_TBPS = 4.22  # bench/bench_util.h


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    cases = [("c2c", 16384, 1024), ("c2c", 4096, 4096), ("c2c", 256, 65536), ("c2c", 16384, 1000),
             ("c2c+scale", 16384, 1024), ("r2c", 8192, 4096)]
    print(f"{'transform':12s} {'rows':>8s} {'n':>7s} {'us':>10s} {'GB/s':>9s} {'of copy':>8s}")
    for kind, rows, n in cases:
        if kind == "r2c":
            xs = [torch.rand(rows, n, device="cuda") * 2 - 1 for _ in range(SETS)]
            bins = [torch.fft.rfft(x) for x in xs]
            fwd = median_ms(lambda i: torch.fft.rfft(xs[i % SETS]), iters=50)
            inv = median_ms(lambda i: torch.fft.irfft(bins[i % SETS], n=n, norm="forward"), iters=50)
            us = (fwd + inv) / 2 * 1e3
            nbytes = 4 * rows * n + 8 * rows * (n // 2 + 1)
        else:
            xs = [torch.complex(torch.rand(rows, n, device="cuda") * 2 - 1, torch.rand(rows, n, device="cuda") * 2 - 1)
                  for _ in range(SETS)]
            fwd = median_ms(lambda i: torch.fft.fft(xs[i % SETS]), iters=50)
            norm = "forward" if kind == "c2c" else "backward"
            inv = median_ms(lambda i: torch.fft.ifft(xs[i % SETS], norm=norm), iters=50)
            us = (fwd + inv) / 2 * 1e3
            nbytes = 2 * 8 * rows * n
        gbps = nbytes / (us * 1e-6) / 1e9
        print(f"{kind:12s} {rows:8d} {n:7d} {us:10.2f} {gbps:9.0f} {100 * gbps / (COPY_TBPS * 1e3):7.1f}%")
        print(json.dumps({"bench": "fft", "case": f"{kind} {rows}x{n}", "value": us, "unit": "us", "impl": "torch"}))


if __name__ == "__main__":
    main()
