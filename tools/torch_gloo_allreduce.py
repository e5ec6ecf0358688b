#!/usr/bin/env python3
"""all_reduce of CUDA tensors through torch.distributed's Gloo backend, with
every rank a process on the same GPU: the peer beside `gpucomm bench
--memory device` (BENCHMARKS.md, "Collectives on device buffers"). NCCL,
the usual backend for CUDA tensors, refuses two ranks on one GPU; Gloo
stages CUDA tensors through host memory, as gpucomm's staged path does.

    python3 tools/torch_gloo_allreduce.py [--ranks 2] [--min 8] [--max 64M] [--factor 8]

Per size: 5 untimed calls, then N timed ones (N from 1000 for small sizes
down to 5, about 256 MiB of data per size, as gpucomm bench picks), each
rank timing with torch.cuda.synchronize() on the host clock; the time is
the slowest rank's mean. busbw = algbw x 2(n-1)/n (nccl-tests).
"""
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sizes import sweep


def iters_for(size):
    return max(5, min(1000, (256 << 20) // max(size, 1)))


def worker(rank, n, init, sizes):
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    if rank == 0:
        print(f"# torch {torch.__version__} gloo all_reduce, {n} processes on "
              f"{torch.cuda.get_device_name(0)}, float32 sum, CUDA tensors")
        print(f"{'bytes':>12}{'time(us)':>12}{'algbw':>10}{'busbw':>10}{'ok':>5}", flush=True)
    for size in sizes:
        count = max(1, size // 4)
        x = torch.full((count,), float(rank + 1), device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        iters = iters_for(size)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) / iters * 1e6
        t = torch.tensor([us])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        # Check: one more call on fresh data.
        x.fill_(float(rank + 1))
        dist.all_reduce(x)
        ok = bool(torch.all(x == n * (n + 1) / 2).item())
        if rank == 0:
            us = t.item()
            algbw = count * 4 / (us * 1e-6) / 1e9
            print(f"{count * 4:>12}{us:>12.2f}{algbw:>10.2f}{algbw * 2 * (n - 1) / n:>10.2f}{'yes' if ok else 'NO':>5}",
                  flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--factor", type=int, default=8)
    a = ap.parse_args()
    sizes = sweep(a.min, a.max, a.factor)
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(a.ranks, f"file://{os.path.join(d, 'rdv')}", sizes), nprocs=a.ranks)


if __name__ == "__main__":
    main()
