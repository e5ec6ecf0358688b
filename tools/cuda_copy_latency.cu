// Per-copy time of small copies queued back to back on one stream, the way
// NVIDIA's p2pBandwidthLatencyTest fills its latency matrices (a spin kernel
// holds the stream while 100 copies of 16 bytes are queued; two events time
// them on the GPU), for each kind of copy one GPU can make; then two ways of
// staging a device-to-device copy through pinned host memory. The figures
// behind the copy-engine start cost of `gpucomm sim` (docs/sim.md).
//
//   nvcc -O2 -o /tmp/cuda_copy_latency tools/cuda_copy_latency.cu && /tmp/cuda_copy_latency
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { printf("error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); exit(1); } } while (0)
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

__global__ void spin(volatile int *flag) {
  while (*flag == 0) {}
}

enum Kind { D2D, PEER_SAME, H2D, D2H, H2D_PAGEABLE, D2H_PAGEABLE, HANDOFF, NKINDS };
static const char *kind_name[] = {"d2d", "peer (same GPU)", "h2d pinned", "d2h pinned", "h2d pageable", "d2h pageable", "d2h+h2d, two streams, event handoff"};

// GPU time per queued copy (per pair for HANDOFF), us.
static double queued(Kind k, int reps, void *d0, void *d1, void *hp, void *hq, cudaStream_t s, cudaStream_t s2, volatile int *flag) {
  const size_t n = 16;
  cudaEvent_t a, b, ev;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b)); CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  double best = 1e30;
  for (int pass = 0; pass < 5; pass++) {
    *flag = 0;
    spin<<<1, 1, 0, s>>>(flag);
    CK(cudaEventRecord(a, s));
    for (int r = 0; r < reps; r++) {
      switch (k) {
        case D2D: CK(cudaMemcpyAsync(d1, d0, n, cudaMemcpyDeviceToDevice, s)); break;
        case PEER_SAME: CK(cudaMemcpyPeerAsync(d1, 0, d0, 0, n, s)); break;
        case H2D: CK(cudaMemcpyAsync(d0, hp, n, cudaMemcpyHostToDevice, s)); break;
        case D2H: CK(cudaMemcpyAsync(hp, d0, n, cudaMemcpyDeviceToHost, s)); break;
        case H2D_PAGEABLE: CK(cudaMemcpyAsync(d0, hq, n, cudaMemcpyHostToDevice, s)); break;
        case D2H_PAGEABLE: CK(cudaMemcpyAsync(hq, d0, n, cudaMemcpyDeviceToHost, s)); break;
        case HANDOFF:
          // The shape of a staged copy: device to host on one stream, the
          // other stream waits for it and copies host to device, and the
          // first waits for that before the next pair.
          CK(cudaMemcpyAsync(hp, d0, n, cudaMemcpyDeviceToHost, s));
          CK(cudaEventRecord(ev, s)); CK(cudaStreamWaitEvent(s2, ev, 0));
          CK(cudaMemcpyAsync(d1, hp, n, cudaMemcpyHostToDevice, s2));
          CK(cudaEventRecord(ev, s2)); CK(cudaStreamWaitEvent(s, ev, 0));
          break;
        default: break;
      }
    }
    CK(cudaEventRecord(b, s));
    *flag = 1;
    CK(cudaStreamSynchronize(s));
    float ms; CK(cudaEventElapsedTime(&ms, a, b));
    double us = ms * 1e3 / reps;
    if (us < best) best = us;
  }
  CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b)); CK(cudaEventDestroy(ev));
  return best;
}

int main() {
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
  int drv, rt; CK(cudaDriverGetVersion(&drv)); CK(cudaRuntimeGetVersion(&rt));
  printf("# %s, driver API %d, runtime %d\n", p.name, drv, rt);
  const size_t big = 256u << 20;
  void *d0, *d1, *hp, *hq; int *flag;
  CK(cudaMalloc(&d0, big)); CK(cudaMalloc(&d1, big));
  CK(cudaMallocHost(&hp, big)); hq = malloc(big); memset(hq, 1, big);
  CK(cudaHostAlloc((void **)&flag, sizeof(int), cudaHostAllocMapped));
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  printf("# queued 16-byte copies, GPU time per copy (best of 5 passes of 100 copies)\n");
  for (int k = 0; k < NKINDS; k++) {
    // Pageable copies synchronise with the host; the spin kernel would never
    // be released while they are queued, so they go without it.
    if (k == H2D_PAGEABLE || k == D2H_PAGEABLE) {
      double best = 1e30;
      for (int pass = 0; pass < 5; pass++) {
        CK(cudaStreamSynchronize(s));
        double t0 = now();
        for (int r = 0; r < 100; r++)
          CK(cudaMemcpyAsync(k == H2D_PAGEABLE ? d0 : hq, k == H2D_PAGEABLE ? hq : d0, 16, k == H2D_PAGEABLE ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        double us = (now() - t0) * 1e6 / 100;
        if (us < best) best = us;
      }
      printf("%-40s %7.2f us (host clock; a pageable copy waits for the host)\n", kind_name[k], best);
      continue;
    }
    printf("%-40s %7.2f us\n", kind_name[k], queued((Kind)k, 100, d0, d1, hp, hq, s, s2, flag));
  }
  // A copy of 16 bytes issued and waited for by the host, then the same
  // staged with the host waiting between the halves.
  {
    double best = 1e30, best2 = 1e30;
    for (int pass = 0; pass < 5; pass++) {
      double t0 = now();
      for (int r = 0; r < 100; r++) { CK(cudaMemcpyAsync(d1, d0, 16, cudaMemcpyDeviceToDevice, s)); CK(cudaStreamSynchronize(s)); }
      double us = (now() - t0) * 1e6 / 100; if (us < best) best = us;
      t0 = now();
      for (int r = 0; r < 100; r++) {
        CK(cudaMemcpyAsync(hp, d0, 16, cudaMemcpyDeviceToHost, s)); CK(cudaStreamSynchronize(s));
        CK(cudaMemcpyAsync(d1, hp, 16, cudaMemcpyHostToDevice, s)); CK(cudaStreamSynchronize(s));
      }
      us = (now() - t0) * 1e6 / 100; if (us < best2) best2 = us;
    }
    printf("%-40s %7.2f us (host clock)\n", "d2d issued and waited for", best);
    printf("%-40s %7.2f us (host clock)\n", "d2h, wait, h2d, wait", best2);
  }
  // Staging a 256 MiB device-to-device copy through pinned host memory:
  // serially (all of it down, then all of it up) and in chunks with the
  // two halves overlapped (down on one stream, up on the other, each chunk
  // waiting for its own down half), as a driver could do it.
  printf("# staged 256 MiB device -> host -> device, GB/s (bytes / time); host time to issue one chunk\n");
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  // One event per chunk, made before the timing (creating them inside it
  // would put the host's event creation in the way of small chunks).
  const int max_chunks = (int)(big / (256u << 10));
  cudaEvent_t *evs = (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * (max_chunks + 1));
  for (int i = 0; i <= max_chunks; i++) CK(cudaEventCreateWithFlags(&evs[i], cudaEventDisableTiming));
  for (int c = 0; c < 6; c++) {
    size_t chunk = c == 0 ? big : (size_t)(256u << 10) << (2 * (c - 1));  // whole, 256 KiB, 1, 4, 16, 64 MiB
    if (chunk > big) break;
    double best = 1e30, issue = 0;
    for (int pass = 0; pass < 3; pass++) {
      CK(cudaDeviceSynchronize());
      CK(cudaEventRecord(a, s));
      double t0 = now();
      int i = 0;
      for (size_t off = 0; off < big; off += chunk, i++) {
        CK(cudaMemcpyAsync((char *)hp + off, (char *)d0 + off, chunk, cudaMemcpyDeviceToHost, s));
        CK(cudaEventRecord(evs[i], s)); CK(cudaStreamWaitEvent(s2, evs[i], 0));
        CK(cudaMemcpyAsync((char *)d1 + off, (char *)hp + off, chunk, cudaMemcpyHostToDevice, s2));
      }
      issue = (now() - t0) * 1e6 / i;
      CK(cudaEventRecord(evs[max_chunks], s2)); CK(cudaStreamWaitEvent(s, evs[max_chunks], 0));
      CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
      float ms; CK(cudaEventElapsedTime(&ms, a, b));
      if (ms < best) best = ms;
    }
    printf("chunk %9zu KiB %8.2f GB/s  host issue %6.2f us/chunk, GPU %8.2f us/chunk\n", chunk >> 10,
           big / (best * 1e-3) / 1e9, issue, best * 1e3 / (big / chunk));
  }
  return 0;
}
