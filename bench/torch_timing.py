"""Shared timing for the PyTorch peer scripts: CUDA events around each call,
after warm-up; the median in milliseconds. fn(i) gets the iteration number,
so callers can rotate through input sets larger than L2."""
import statistics

import torch


def median_ms(fn, warm=10, iters=30):
    for i in range(warm):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(i)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)
