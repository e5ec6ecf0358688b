#!/usr/bin/env python3
"""Copy bandwidth as PyTorch and cudaMemcpyAsync achieve it: the peer that
`gpucomm bandwidth` is compared with (BENCHMARKS.md, "GPU copies").

Same sizes and timing method as `gpucomm bandwidth`: per size, a few untimed
copies, then N back-to-back copies on one stream between two CUDA events
(N gives about 1 GiB per size, 5 to 1000); GB/s = bytes x N / time (1e9).

    python3 tools/torch_copy_bandwidth.py [--min 64K] [--max 256M] [--factor 4]

Rows: torch_h2d_pinned (`t.to('cuda', non_blocking=True)` from a pinned
tensor, into a preallocated tensor via copy_), torch_h2d_pageable,
torch_d2h_pinned, torch_d2h_pageable, torch_d2d (`copy_` between device
tensors; counts the bytes copied once), and, where CuPy is installed,
cuda_h2d_pinned / cuda_d2h_pinned / cuda_d2d: cudaMemcpyAsync itself.
"""
import argparse
import torch

from sizes import sweep


def iters_for(size):
    return max(5, min(1000, (1 << 30) // max(size, 1)))


def timed(copy, size, warmup=3):
    stream = torch.cuda.current_stream()
    for _ in range(warmup):
        copy()
    n = iters_for(size)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record(stream)
    for _ in range(n):
        copy()
    end.record(stream)
    end.synchronize()
    ms = start.elapsed_time(end)
    return size * n / (ms * 1e-3) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min", default="64K")
    ap.add_argument("--max", default="256M")
    ap.add_argument("--factor", type=int, default=4)
    a = ap.parse_args()
    sizes = sweep(a.min, a.max, a.factor)
    try:
        import cupy
        rt = cupy.cuda.runtime
    except Exception:  # CuPy is optional
        rt = None
    print(f"# device: {torch.cuda.get_device_name(0)}  torch {torch.__version__}")
    print(f"{'test':<20}{'bytes':>12}{'GB/s':>10}")
    for size in sizes:
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(7)
        pageable = torch.empty(size, dtype=torch.uint8).fill_(7)
        dev = torch.empty(size, dtype=torch.uint8, device="cuda").fill_(7)
        dev2 = torch.empty(size, dtype=torch.uint8, device="cuda")
        rows = [
            ("torch_h2d_pinned", lambda: dev.copy_(pinned, non_blocking=True)),
            ("torch_h2d_pageable", lambda: dev.copy_(pageable, non_blocking=True)),
            ("torch_d2h_pinned", lambda: pinned.copy_(dev, non_blocking=True)),
            ("torch_d2h_pageable", lambda: pageable.copy_(dev)),
            ("torch_d2d", lambda: dev2.copy_(dev)),
        ]
        if rt is not None:
            st = torch.cuda.current_stream().cuda_stream
            hp, dp, dp2 = pinned.data_ptr(), dev.data_ptr(), dev2.data_ptr()
            rows += [
                ("cuda_h2d_pinned", lambda: rt.memcpyAsync(dp, hp, size, rt.memcpyHostToDevice, st)),
                ("cuda_d2h_pinned", lambda: rt.memcpyAsync(hp, dp, size, rt.memcpyDeviceToHost, st)),
                ("cuda_d2d", lambda: rt.memcpyAsync(dp2, dp, size, rt.memcpyDeviceToDevice, st)),
            ]
        for name, copy in rows:
            print(f"{name:<20}{size:>12}{timed(copy, size):>10.2f}", flush=True)


if __name__ == "__main__":
    main()
