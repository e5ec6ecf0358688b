// Pinned host<->device copy bandwidth through the CUDA runtime and driver
// APIs, the C peer of `gpucomm bandwidth -t h2d_pinned,d2h_pinned` (which
// uses the driver API from Rust): same method, 1000 copies per size on a
// non-blocking stream between two events, plus the host time to issue
// one copy. BENCHMARKS.md, "GPU copies".
//
//   nvcc -O2 -o /tmp/cuda_copy_bandwidth tools/cuda_copy_bandwidth.cu -lcuda && /tmp/cuda_copy_bandwidth
//
// Each size runs twice (the second pass is the one to read).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>
#define CK(x) do { int e = (int)(x); if (e) { printf("error %d at %s:%d\n", e, __FILE__, __LINE__); return 1; } } while (0)
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main() {
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  CUcontext ctx; CK(cuCtxGetCurrent(&ctx));
  size_t sizes[] = {65536, 262144, 1 << 20, 4 << 20};
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  const char *names[] = {"cudaMemcpyAsync", "cuMemcpyHtoDAsync", "cuCtxSetCurrent+HtoD", "cuMemcpyAsync(unified)", "cudaMemcpyAsync D2H", "cuMemcpyDtoHAsync"};
  for (int r = 0; r < 2; r++)
  for (int si = 0; si < 4; si++) {
    size_t n = sizes[si];
    void *h; CK(cuMemHostAlloc(&h, n, CU_MEMHOSTALLOC_PORTABLE));
    CUdeviceptr d; CK(cuMemAlloc(&d, n));
    for (int m = 0; m < 6; m++) {
      int iters = 1000;
      double issue = 0;
      for (int w = 0; w < 2; w++) {
        CK(cudaStreamSynchronize(st));
        CK(cudaEventRecord(a, st));
        double t0 = now();
        for (int i = 0; i < iters; i++) {
          switch (m) {
            case 0: CK(cudaMemcpyAsync((void *)d, h, n, cudaMemcpyHostToDevice, st)); break;
            case 1: CK(cuMemcpyHtoDAsync(d, h, n, (CUstream)st)); break;
            case 2: CK(cuCtxSetCurrent(ctx)); CK(cuMemcpyHtoDAsync(d, h, n, (CUstream)st)); break;
            case 3: CK(cuMemcpyAsync(d, (CUdeviceptr)h, n, (CUstream)st)); break;
            case 4: CK(cudaMemcpyAsync(h, (void *)d, n, cudaMemcpyDeviceToHost, st)); break;
            case 5: CK(cuMemcpyDtoHAsync(h, d, n, (CUstream)st)); break;
          }
        }
        issue = (now() - t0) / iters * 1e6;
        CK(cudaEventRecord(b, st)); CK(cudaEventSynchronize(b));
      }
      float ms; CK(cudaEventElapsedTime(&ms, a, b));
      printf("%8zu %-24s %8.2f GB/s  %6.2f us/copy  host issue %5.2f us/copy\n", n, names[m], n * (double)iters / (ms * 1e-3) / 1e9, ms * 1e3 / iters, issue);
    }
    CK(cuMemFreeHost(h)); CK(cuMemFree(d));
  }
  return 0;
}
