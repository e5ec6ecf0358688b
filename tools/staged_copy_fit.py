#!/usr/bin/env python3
"""Derives the simulator's staged-copy constants (gpucomm-sim model.rs,
STAGED_SYNC_US and STAGED_CHUNK_BYTES) from published p2pBandwidthLatencyTest
runs: docs/sim.md, "Staged copies (P2P disabled)".

For each machine: the hand-over is the staged (P2P disabled) 16-byte copy's
latency less two same-GPU 16-byte copies. The model's host copy start
(model.rs HOST_COPY_START_US) is the median same-GPU copy, the figure the
hand-over takes for each half. The chunk is the one that gives the
published staged bandwidth one way when a chunk costs that copy start, the
chunk on the link (the model's pinned copy rate of the PCIe generation)
and the hand-over. Prints the table and the medians.

    python3 tools/staged_copy_fit.py
"""
import statistics

LINK_GBPS = {3: 13.6, 4: 27.2, 5: 54.5}  # x16, 128 B TLPs (model.rs PCIE_TLP_EFFICIENCY)

# (machine, source, PCIe generation, staged GB/s one way, staged latency us,
#  same-GPU copy latency us): ranges over the GPU pairs not behind one PCIe switch.
MACHINES = [
    ("HGX A100", "LLMServe/DistServe issue 3", 4, (16.55, 20.42), (23.57, 24.77), (2.48, 3.34)),
    ("HGX A100", "B5paper/documents High Performance Computing/cuda_note.md, host a147", 4, (17.70, 20.63), (23.57, 24.65), (2.29, 3.15)),
    ("HGX H100, Xeon 8462Y+", "Korean server-validation sheet (repository not named by the search index)", 5, (36.70, 38.40), (14.13, 19.23), (1.96, 2.22)),
    ("2x H100 PCIe", "HPE-Japan-Presales/e-learning gpu/h100/mgmt_gpu_on_dl380agen11.md", 5, (25.00, 26.10), (16.48, 16.59), (2.31, 2.35)),
    ("4x A100 PCIe", "sushruta/sushruta.github.io content/post/03302024-nvlink-and-gpu/index.md", 4, (21.40, 21.80), (11.68, 21.89), (2.47, 2.72)),
    ("4x A100 PCIe 40 GB, host sm02", "ML-infra notes (repository not named)", 3, (10.71, 11.40), (11.77, 20.15), (2.25, 2.34)),
    ("8x A100 SXM, NVLink inactive", "GPU-Operator install notes (repository not named)", 4, (17.55, 21.05), (12.54, 21.49), (2.25, 2.84)),
    ("DGX-2", "wohlbier/gpu-micro README.md", 3, (10.82, 11.36), (20.19, 28.89), (3.03, 3.45)),
    ("8x TITAN RTX", "wohlbier/gpu-micro README.md", 3, (11.35, 11.46), (9.88, 14.21), (2.88, 3.27)),
    ("4x V100 SXM2, host TH2K", "CUDA-aware MPI notes (repository not named)", 3, (11.02, 11.10), (17.42, 18.49), (1.90, 2.00)),
    ("2x V100 PCIe", "B5paper/documents High Performance Computing/cuda_note.md, host zjxj", 3, (12.19, 12.22), (14.45, 14.45), (1.96, 1.97)),
    ("2x RTX 4090, Threadripper PRO", "dbkinghorn/Notes (Puget Systems)", 4, (22.02, 22.67), (10.28, 11.66), (1.32, 1.41)),
    ("2x RTX 4090, Xeon W", "dbkinghorn/Notes", 4, (22.44, 22.45), (10.28, 10.31), (1.41, 1.44)),
    ("2x RTX 6000 Ada, Threadripper PRO", "dbkinghorn/Notes", 4, (22.09, 22.23), (10.84, 11.07), (2.93, 2.96)),
    ("2x RTX 6000 Ada, Xeon W", "dbkinghorn/Notes", 4, (22.47, 22.48), (10.27, 10.60), (1.32, 1.37)),
    ("2x RTX PRO 6000 Blackwell, TRX40", "LLM-rig wiki page (repository not named)", 4, (23.97, 24.23), (14.42, 14.50), (2.07, 2.07)),
]


def mid(r):
    return (r[0] + r[1]) / 2


def main():
    syncs, chunks = [], []
    # model.rs HOST_COPY_START_US: the median same-GPU 16-byte copy.
    sames = [mid(m[5]) for m in MACHINES]
    copy_us = statistics.median(sames)
    print("| machine | PCIe | staged GB/s | staged us | same-GPU us | hand-over us | chunk MB |")
    for name, source, gen, bw, lat, same in MACHINES:
        sync = mid(lat) - 2 * mid(same)
        chunk = (sync + copy_us) * 1e-6 / (1 / (mid(bw) * 1e9) - 1 / (LINK_GBPS[gen] * 1e9))
        syncs.append(sync)
        chunks.append(chunk)
        print(f"| {name} ({source}) | Gen{gen} | {bw[0]}-{bw[1]} | {lat[0]}-{lat[1]} | "
              f"{same[0]}-{same[1]} | {sync:.1f} | {chunk / 1e6:.2f} |")
    print(f"median same-GPU copy {copy_us:.2f} us (range {min(sames):.2f}-{max(sames):.2f}); "
          f"median hand-over {statistics.median(syncs):.2f} us (range {min(syncs):.1f}-{max(syncs):.1f}); "
          f"median chunk {statistics.median(chunks) / 1e6:.3f} MB (range {min(chunks) / 1e6:.2f}-{max(chunks) / 1e6:.2f})")


if __name__ == "__main__":
    main()
