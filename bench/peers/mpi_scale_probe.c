/*
 * peer-mpi-scale-probe: bench/scale_probe.c over Open MPI, so that
 * bench/scale.py can put MPI's set-up cost beside hoop's at each rank
 * count.  Run it under mpirun:
 *   mpirun -n 64 --mca btl self,vader peer-mpi-scale-probe [-l 64]
 * Each rank prints one JSON line: the time of MPI_Init, of the first
 * in-place 4 KiB float MPI_Allreduce (SUM), the median of 50 more, and,
 * before MPI_Finalize, the rank's peak RSS and open descriptors.  -l MIB
 * also times one all-reduce of MIB MiB; -a BYTES one MPI_Alltoall of
 * BYTES per peer (MPI_INTs, checked as scale_probe.h says), then an
 * MPI_Barrier.  Rank r contributes r + 1 to the all-reduces, so each
 * element must be N(N+1)/2; a wrong element ends the rank with status 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include "../scale_probe.h"

#define PROG "peer-mpi-scale-probe"

static double timed_allreduce(float *buf, size_t count, int rank)
{
	double t0 = now_s();
	int err = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT,
				MPI_SUM, MPI_COMM_WORLD);
	double t = now_s() - t0;

	if (err != MPI_SUCCESS) {
		char text[MPI_MAX_ERROR_STRING];
		int len;

		MPI_Error_string(err, text, &len);
		fprintf(stderr, "peer-mpi-scale-probe: rank %d: MPI_Allreduce: %s\n",
			rank, text);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	return t;
}

static void check_mpi(int err, const char *call, int rank)
{
	if (err != MPI_SUCCESS) {
		char text[MPI_MAX_ERROR_STRING];
		int len;

		MPI_Error_string(err, text, &len);
		fprintf(stderr, "peer-mpi-scale-probe: rank %d: %s: %s\n", rank,
			call, text);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

/* One checked all-to-all of `bytes` per peer, then a barrier. */
static size_t alltoall_and_barrier(long bytes, int rank, int nranks,
				   double *alltoall_s, double *barrier_s)
{
	size_t count = alltoall_count(bytes);
	int *send = malloc(count * (size_t)nranks * sizeof(int));
	int *recv = malloc(count * (size_t)nranks * sizeof(int));
	size_t wrong;
	double t0;

	if (send == NULL || recv == NULL) {
		fprintf(stderr,
			"peer-mpi-scale-probe: rank %d: no memory for all-to-all\n",
			rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	fill_alltoall(send, count, rank, nranks);
	t0 = now_s();
	check_mpi(MPI_Alltoall(send, (int)count, MPI_INT, recv, (int)count,
			       MPI_INT, MPI_COMM_WORLD),
		  "MPI_Alltoall", rank);
	*alltoall_s = now_s() - t0;
	wrong = count_wrong_alltoall(PROG, recv, count, rank, nranks);
	free(send);
	free(recv);
	t0 = now_s();
	check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank);
	*barrier_s = now_s() - t0;
	return wrong;
}

int main(int argc, char **argv)
{
	long large_mib = 0, alltoall_bytes = 0;
	int opt, rank, nranks;
	double t0, init_s, first_s, median_us, large_s = -1;
	double alltoall_s = -1, barrier_s = -1;
	double calls[REPEATS];
	float small[SMALL_COUNT];
	size_t wrong = 0;
	long rss_kb, fds;

	t0 = now_s();
	MPI_Init(&argc, &argv);
	init_s = now_s() - t0;
	/* Errors come back to timed_allreduce, which names the call. */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	while ((opt = getopt(argc, argv, "l:a:")) != -1) {
		long *value = opt == 'l' ? &large_mib :
			      opt == 'a' ? &alltoall_bytes : NULL;
		char *end;

		if (value != NULL && (*value = strtol(optarg, &end, 10)) > 0 &&
		    *end == '\0')
			continue;
		fprintf(stderr, "usage: %s [-l MIB] [-a BYTES]\n", argv[0]);
		MPI_Finalize();
		return 2;
	}

	fill(small, SMALL_COUNT, rank);
	first_s = timed_allreduce(small, SMALL_COUNT, rank);
	wrong += count_wrong(PROG, small, SMALL_COUNT, rank, nranks, "first call");
	for (int i = 0; i < REPEATS; i++) {
		fill(small, SMALL_COUNT, rank);
		calls[i] = timed_allreduce(small, SMALL_COUNT, rank);
		wrong += count_wrong(PROG, small, SMALL_COUNT, rank, nranks,
				     "repeated call");
	}
	qsort(calls, REPEATS, sizeof calls[0], cmp_double);
	median_us = (calls[REPEATS / 2 - 1] + calls[REPEATS / 2]) / 2 * 1e6;

	if (large_mib > 0) {
		size_t count = (size_t)large_mib * 1024 * 1024 / sizeof(float);
		float *large = malloc(count * sizeof(float));

		if (large == NULL) {
			fprintf(stderr,
				"peer-mpi-scale-probe: rank %d: no memory for %ld MiB\n",
				rank, large_mib);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		fill(large, count, rank);
		large_s = timed_allreduce(large, count, rank);
		wrong += count_wrong(PROG, large, count, rank, nranks, "large call");
		free(large);
	}

	if (alltoall_bytes > 0)
		wrong += alltoall_and_barrier(alltoall_bytes, rank, nranks,
					      &alltoall_s, &barrier_s);

	rss_kb = peak_rss_kb();
	fds = open_fds();
	printf("{\"impl\":\"mpi\",\"rank\":%d,\"nranks\":%d,\"pid\":%d,"
	       "\"init_s\":%.6f,\"first_s\":%.6f,\"call_us_median\":%.2f,",
	       rank, nranks, (int)getpid(), init_s, first_s, median_us);
	if (large_mib > 0)
		printf("\"large_mib\":%ld,\"large_s\":%.6f,", large_mib,
		       large_s);
	if (alltoall_bytes > 0)
		printf("\"alltoall_bytes\":%ld,\"alltoall_s\":%.6f,"
		       "\"barrier_s\":%.6f,",
		       alltoall_bytes, alltoall_s, barrier_s);
	printf("\"rss_kb\":%ld,\"fds\":%ld,\"wrong\":%zu}\n", rss_kb, fds,
	       wrong);
	fflush(stdout);
	MPI_Finalize();
	return wrong == 0 ? 0 : 1;
}
