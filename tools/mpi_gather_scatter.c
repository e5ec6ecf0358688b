/* Peer benchmark for `gpucomm bench gather|scatter`: Open MPI's MPI_Gather / MPI_Scatter
   (f32, root 0) timed as nccl-tests times gather_perf / scatter_perf: a size is n blocks
   of size/n/4 floats; the mean time of the timed calls, its maximum over ranks; results checked.
   Build: mpicc -O2 tools/mpi_gather_scatter.c -o /tmp/mpi_gather_scatter
   Run:   mpirun -np 2 --bind-to core /tmp/mpi_gather_scatter gather|scatter [min_bytes] [max_bytes] [factor] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &n);
    int scatter = argc > 1 && strcmp(argv[1], "scatter") == 0;
    long lo = argc > 2 ? atol(argv[2]) : 8, hi = argc > 3 ? atol(argv[3]) : 64L << 20;
    float *whole = malloc(hi), *block = malloc(hi);
    if (rank == 0) printf("# %s %10s %12s %10s %10s %10s %7s\n", scatter ? "scatter" : "gather", "bytes", "count", "time_us", "algbw", "busbw", "wrong");
    long f = argc > 4 ? atol(argv[4]) : 2;
    for (long bytes = lo; bytes <= hi; bytes *= f) {
        long c = bytes / 4 / n; if (c == 0) continue;
        long size = c * n * 4;
        for (long i = 0; i < c; i++) block[i] = rank * 1000 + i;
        for (long i = 0; i < c * n; i++) whole[i] = i;
        int iters = bytes <= (1 << 16) ? 1000 : bytes <= (1 << 20) ? 100 : bytes <= (16 << 20) ? 20 : 5;
        for (int w = 0; w < 3; w++) scatter ? MPI_Scatter(whole, c, MPI_FLOAT, block, c, MPI_FLOAT, 0, MPI_COMM_WORLD)
                                            : MPI_Gather(block, c, MPI_FLOAT, whole, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int it = 0; it < iters; it++) scatter ? MPI_Scatter(whole, c, MPI_FLOAT, block, c, MPI_FLOAT, 0, MPI_COMM_WORLD)
                                                   : MPI_Gather(block, c, MPI_FLOAT, whole, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / iters, tmax;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long wrong = 0;
        if (scatter) { for (long i = 0; i < c; i++) wrong += block[i] != (float)(rank * c + i); }
        else if (rank == 0) { for (long i = 0; i < c * n; i++) wrong += whole[i] != (float)((i / c) * 1000 + i % c); }
        long wsum; MPI_Reduce(&wrong, &wsum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) { double algbw = size / tmax / 1e9; printf("  %10ld %12ld %10.2f %10.3f %10.3f %7ld\n", size, c, tmax * 1e6, algbw, algbw * (n - 1) / n, wsum); fflush(stdout); }
    }
    MPI_Finalize(); return 0;
}
