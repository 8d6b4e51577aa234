/*
 * peer-mpi-allreduce: MPI_Allreduce (float32, SUM) measured the way hoop
 * measures itself (shared/bench-method.md), so that bench/compare_allreduce.py
 * can put Open MPI beside hoop.  It prints the same rows as hoop-bench
 * (size count type redop root, then time algbw busbw #wrong for out-of-place
 * and for in-place) so one parser reads both.  Run it under mpirun.
 *
 *   peer-mpi-allreduce -b 4K -e 64M -f 2 -n 20 -w 5 -c 1
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct options {
	size_t min_bytes;
	size_t max_bytes;
	long factor;
	long iters;
	long warmup;
	long check;
};

/* One placement's result at one size: times in microseconds. */
struct result {
	double median_us;
	double min_us;
	double max_us;
	long long wrong; /* -1: not checked */
};

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
		"  sizes in bytes with optional K, M, G suffix (powers of 1024)\n",
		prog);
}

/* Accepts "4096", "4K", "64M", "1G"; rejects signs, junk and overflow. */
static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	default: break;
	}
	if (*end != '\0' || v > (SIZE_MAX >> shift))
		return -1;
	*out = (size_t)v << shift;
	return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_options(int argc, char **argv, struct options *o)
{
	int c, bad = 0;

	*o = (struct options){ .min_bytes = 4096, .max_bytes = 64u << 20,
			       .factor = 2, .iters = 20, .warmup = 5,
			       .check = 1 };
	while ((c = getopt(argc, argv, "b:e:f:n:w:c:")) != -1) {
		switch (c) {
		case 'b': bad |= parse_size(optarg, &o->min_bytes); break;
		case 'e': bad |= parse_size(optarg, &o->max_bytes); break;
		case 'f': bad |= parse_long(optarg, 2, 1024, &o->factor); break;
		case 'n': bad |= parse_long(optarg, 1, 1000000, &o->iters); break;
		case 'w': bad |= parse_long(optarg, 0, 1000000, &o->warmup); break;
		case 'c': bad |= parse_long(optarg, 0, 1, &o->check); break;
		default: bad = -1; break;
		}
	}
	/* Sizes below one float would time an empty call. */
	if (bad || optind != argc || o->min_bytes < sizeof(float) ||
	    o->min_bytes > o->max_bytes)
		return -1;
	return 0;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static void fill(float *buf, size_t count, float value)
{
	for (size_t i = 0; i < count; i++)
		buf[i] = value;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Rank r contributes r+1 everywhere, so every element must be N(N+1)/2
 * (exact in float for any rank count we run).  The output buffer is poisoned
 * first so that a call which writes nothing cannot pass.  Returns the number
 * of wrong elements summed over all ranks.
 */
static long long check_allreduce(float *send, float *recv, size_t count,
				 int in_place, int rank, int nranks)
{
	float expect = (float)nranks * (float)(nranks + 1) / 2.0f;
	long long wrong = 0, total = 0;

	fill(recv, count, -1.0f);
	fill(in_place ? recv : send, count, (float)(rank + 1));
	MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, (int)count,
		      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	for (size_t i = 0; i < count; i++)
		wrong += recv[i] != expect;
	MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	return total;
}

/*
 * Warm-up, then one barrier-separated call per iteration, timed on every
 * rank.  An iteration lasts until its slowest rank is done, so the per-rank
 * times are combined with MAX, after the loop so that the exchange never
 * lands inside a timed region.  `times` has room for o->iters entries.
 */
static void time_allreduce(const void *send, float *recv, size_t count,
			   const struct options *o, double *times,
			   struct result *r)
{
	for (long i = 0; i < o->warmup; i++)
		MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM,
			      MPI_COMM_WORLD);
	for (long i = 0; i < o->iters; i++) {
		double t0;

		MPI_Barrier(MPI_COMM_WORLD);
		t0 = now_us();
		MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM,
			      MPI_COMM_WORLD);
		times[i] = now_us() - t0;
	}
	MPI_Allreduce(MPI_IN_PLACE, times, (int)o->iters, MPI_DOUBLE, MPI_MAX,
		      MPI_COMM_WORLD);
	qsort(times, (size_t)o->iters, sizeof(*times), cmp_double);
	r->min_us = times[0];
	r->max_us = times[o->iters - 1];
	r->median_us = (times[(o->iters - 1) / 2] + times[o->iters / 2]) / 2.0;
}

static void measure(float *send, float *recv, size_t count, int in_place,
		    const struct options *o, int rank, int nranks,
		    double *times, struct result *r)
{
	r->wrong = o->check ? check_allreduce(send, recv, count, in_place,
					      rank, nranks)
			    : -1;
	/* In place, each call feeds the next: zeros keep the sums finite. */
	if (in_place)
		fill(recv, count, 0.0f);
	else
		fill(send, count, (float)(rank + 1));
	time_allreduce(in_place ? MPI_IN_PLACE : send, recv, count, o, times, r);
}

static void print_group(size_t bytes, const struct result *r, int nranks)
{
	double algbw = (double)bytes / (r->median_us * 1e3); /* GB/s */
	double busbw = algbw * 2.0 * (nranks - 1) / nranks;

	printf(" %10.2f %7.2f %7.2f", r->median_us, algbw, busbw);
	if (r->wrong < 0)
		printf(" %6s", "N/A");
	else
		printf(" %6lld", r->wrong);
}

static void print_row(size_t bytes, const struct result *oop,
		      const struct result *ip, int nranks)
{
	printf("%12zu %12zu %8s %6s %6d", bytes, bytes / sizeof(float),
	       "float", "sum", -1);
	print_group(bytes, oop, nranks);
	print_group(bytes, ip, nranks);
	printf("\n");
	/* Raw spread on a comment line: data rows carry nothing extra. */
	printf("# range %zu oop_min_us=%.2f oop_max_us=%.2f ip_min_us=%.2f ip_max_us=%.2f\n",
	       bytes, oop->min_us, oop->max_us, ip->min_us, ip->max_us);
	fflush(stdout);
}

static void print_header(const struct options *o, int nranks)
{
	char version[MPI_MAX_LIBRARY_VERSION_STRING];
	int len;

	MPI_Get_library_version(version, &len);
	version[strcspn(version, "\n,")] = '\0';
	printf("# peer-mpi-allreduce: MPI_Allreduce float32 sum, %d ranks, %s\n",
	       nranks, version);
	printf("# sizes %zu..%zu x%ld, warm-up %ld, iterations %ld, check %s\n",
	       o->min_bytes, o->max_bytes, o->factor, o->warmup, o->iters,
	       o->check ? "on" : "off");
	printf("# time: median over iterations of the max over ranks; "
	       "busbw = algbw * 2(N-1)/N; GB = 1e9 B\n");
	printf("#%81s%34s\n", "out-of-place", "in-place");
	printf("# %10s %12s %8s %6s %6s %10s %7s %7s %6s %10s %7s %7s %6s\n",
	       "size", "count", "type", "redop", "root", "time(us)", "algbw",
	       "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong");
	printf("# %10s %12s %8s %6s %6s %10s %7s %7s %6s %10s %7s %7s %6s\n",
	       "(B)", "(elements)", "", "", "", "", "(GB/s)", "(GB/s)", "",
	       "", "(GB/s)", "(GB/s)", "");
	fflush(stdout);
}

/* Sizes are whole floats; the sweep stops before passing max_bytes. */
static void run_sweep(const struct options *o, int rank, int nranks,
		      float *send, float *recv, double *times)
{
	for (size_t bytes = o->min_bytes;; bytes *= (size_t)o->factor) {
		size_t count = bytes / sizeof(float);
		struct result oop, ip;

		measure(send, recv, count, 0, o, rank, nranks, times, &oop);
		measure(send, recv, count, 1, o, rank, nranks, times, &ip);
		if (rank == 0)
			print_row(count * sizeof(float), &oop, &ip, nranks);
		/* Written this way round so that bytes * factor cannot wrap. */
		if (bytes > o->max_bytes / (size_t)o->factor)
			break;
	}
}

int main(int argc, char **argv)
{
	struct options o;
	int rank, nranks, rc = 1;
	float *send, *recv;
	double *times;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	/* Every rank parses the same argv, so all agree on failing. */
	if (parse_options(argc, argv, &o) != 0) {
		if (rank == 0)
			usage(argv[0]);
		rc = 2;
		goto out_finalize;
	}
	if (o.max_bytes / sizeof(float) > INT32_MAX) {
		if (rank == 0)
			fprintf(stderr, "%s: -e %zu exceeds MPI's int count\n",
				argv[0], o.max_bytes);
		rc = 2;
		goto out_finalize;
	}
	send = malloc(o.max_bytes);
	recv = malloc(o.max_bytes);
	times = malloc((size_t)o.iters * sizeof(*times));
	if (!send || !recv || !times) {
		fprintf(stderr, "%s: rank %d: out of memory for %zu-byte buffers\n",
			argv[0], rank, o.max_bytes);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (rank == 0)
		print_header(&o, nranks);
	run_sweep(&o, rank, nranks, send, recv, times);
	rc = 0;
	free(times);
	free(recv);
	free(send);
out_finalize:
	MPI_Finalize();
	return rc;
}
