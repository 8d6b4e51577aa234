/*
 * peer-mpi-bench: Open MPI's collectives (float32, SUM where they reduce)
 * measured the way hoop measures itself (shared/bench-method.md), so that
 * bench/compare_allreduce.py and bench/compare_peers.py can put Open MPI
 * beside hoop.  -C picks the collective as hoop-bench's -C does:
 * allreduce (MPI_Allreduce, the default), reducescatter
 * (MPI_Reduce_scatter_block), allgather, broadcast, reduce (root 0) and
 * alltoall.  Sizes, counts and busbw follow nccl-tests, as in hoop-bench,
 * and the rows are hoop-bench's (size count type redop root, then time
 * algbw busbw #wrong for out-of-place and for in-place) so one parser
 * reads both.  Run it under mpirun.
 *
 *   peer-mpi-bench -C allgather -b 4K -e 64M -f 2 -n 20 -w 5 -c 1
 *
 * MPI_Bcast has one buffer: its out-of-place call is the root's copy into
 * it plus MPI_Bcast, what a user writes to keep the input.  All-to-all's
 * in-place columns read N/A, as hoop-bench's do (hoop has no in-place
 * all-to-all).
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum coll { ALLREDUCE, REDUCESCATTER, ALLGATHER, BROADCAST, REDUCE,
	    ALLTOALL, NCOLLS };

static const char *const coll_names[NCOLLS] = {
	"allreduce", "reducescatter", "allgather", "broadcast", "reduce",
	"alltoall",
};

struct options {
	enum coll coll;
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
		"usage: %s [-C COLL] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
		"  COLL: allreduce reducescatter allgather broadcast reduce alltoall\n"
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

/* "all_gather" and "allgather" both name allgather, as in hoop-bench. */
static int parse_coll(const char *s, enum coll *out)
{
	char plain[32];
	size_t n = 0;

	for (; *s != '\0' && n + 1 < sizeof(plain); s++) {
		if (*s != '_' && *s != '-')
			plain[n++] = *s;
	}
	plain[n] = '\0';
	for (int c = 0; c < NCOLLS; c++) {
		if (strcmp(plain, coll_names[c]) == 0) {
			*out = (enum coll)c;
			return 0;
		}
	}
	return -1;
}

static int parse_options(int argc, char **argv, struct options *o)
{
	int c, bad = 0;

	*o = (struct options){ .min_bytes = 4096, .max_bytes = 64u << 20,
			       .factor = 2, .iters = 20, .warmup = 5,
			       .check = 1 };
	while ((c = getopt(argc, argv, "C:b:e:f:n:w:c:")) != -1) {
		switch (c) {
		case 'C': bad |= parse_coll(optarg, &o->coll); break;
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

static int reduces(enum coll c)
{
	return c == ALLREDUCE || c == REDUCESCATTER || c == REDUCE;
}

/* One call's buffers and counts, as hoop-bench's struct bench_layout. */
struct call {
	enum coll coll;
	int in_place, rank, nranks;
	float *send, *recv;
	size_t count; /* MPI's count argument: per rank for the block ones */
	size_t send_elems, recv_elems, bytes;
};

/* nccl-tests' sizes: the block collectives use whole multiples of N. */
static struct call make_call(enum coll coll, size_t elems, int in_place,
			     int rank, int nranks, float *send, float *recv)
{
	size_t n = (size_t)nranks, per = elems / n;
	struct call c = { .coll = coll, .in_place = in_place, .rank = rank,
			  .nranks = nranks, .send = send, .recv = recv,
			  .count = elems, .send_elems = elems,
			  .recv_elems = elems };

	switch (coll) {
	case REDUCESCATTER:
		c.count = per;
		c.send_elems = per * n;
		c.recv_elems = per;
		break;
	case ALLGATHER:
		c.count = per;
		c.send_elems = per;
		c.recv_elems = per * n;
		break;
	case ALLTOALL:
		c.count = per;
		c.send_elems = c.recv_elems = per * n;
		break;
	default:
		break;
	}
	c.bytes = (c.send_elems > c.recv_elems ? c.send_elems : c.recv_elems) *
		  sizeof(float);
	return c;
}

/*
 * The input of an in-place call lives where MPI_IN_PLACE reads it: all of
 * recv for the reductions (the root's only, for MPI_Reduce), this rank's
 * block of recv for MPI_Allgather.
 */
static float *input_of(const struct call *c)
{
	if (!c->in_place)
		return c->send;
	if (c->coll == ALLGATHER)
		return c->recv + (size_t)c->rank * c->count;
	return c->recv;
}

static void run(const struct call *c)
{
	int ip = c->in_place, root = c->rank == 0, n = (int)c->count;
	const void *in_place = ip ? MPI_IN_PLACE : c->send;

	switch (c->coll) {
	case ALLREDUCE:
		MPI_Allreduce(in_place, c->recv, n, MPI_FLOAT, MPI_SUM,
			      MPI_COMM_WORLD);
		break;
	case REDUCESCATTER:
		MPI_Reduce_scatter_block(in_place, c->recv, n, MPI_FLOAT,
					 MPI_SUM, MPI_COMM_WORLD);
		break;
	case ALLGATHER:
		MPI_Allgather(in_place, n, MPI_FLOAT, c->recv, n, MPI_FLOAT,
			      MPI_COMM_WORLD);
		break;
	case BROADCAST:
		if (!ip && root)
			memcpy(c->recv, c->send, c->count * sizeof(float));
		MPI_Bcast(c->recv, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
		break;
	case REDUCE:
		/* Only the root may pass MPI_IN_PLACE; the others send recv. */
		MPI_Reduce(ip ? (root ? MPI_IN_PLACE : c->recv) : c->send,
			   c->recv, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
		break;
	case ALLTOALL:
		MPI_Alltoall(c->send, n, MPI_FLOAT, c->recv, n, MPI_FLOAT,
			     MPI_COMM_WORLD);
		break;
	default:
		break;
	}
}

/* Rank r's input, in closed form so each result has one too. */
static void fill_input(const struct call *c)
{
	float *in = input_of(c);

	if (c->coll != ALLTOALL) {
		fill(in, c->send_elems, (float)(c->rank + 1));
		return;
	}
	for (int p = 0; p < c->nranks; p++)
		fill(in + (size_t)p * c->count, c->count,
		     (float)(c->rank * c->nranks + p + 1));
}

/* What element i of this rank's result must be; NAN: not checked. */
static float expected(const struct call *c, size_t i)
{
	float n = (float)c->nranks, sum = n * (n + 1) / 2;

	switch (c->coll) {
	case ALLREDUCE:
	case REDUCESCATTER:
		return sum;
	case REDUCE:
		return c->rank == 0 ? sum : NAN;
	case ALLGATHER:
		return (float)(i / c->count + 1);
	case BROADCAST:
		return 1.0f; /* root 0's value */
	default: /* ALLTOALL: block p came from rank p, its block `rank` */
		return (float)((i / c->count) * (size_t)c->nranks +
			       (size_t)c->rank + 1);
	}
}

static size_t result_elems(const struct call *c)
{
	return c->coll == REDUCESCATTER ? c->count : c->recv_elems;
}

/*
 * Runs the call once on known inputs over a poisoned output, so that a
 * call which writes nothing cannot pass.  Returns the number of wrong
 * elements summed over all ranks.
 */
static long long check_call(const struct call *c)
{
	long long wrong = 0, total = 0;

	fill(c->recv, c->recv_elems > c->send_elems ? c->recv_elems
						      : c->send_elems,
	     -1.0f);
	fill_input(c);
	run(c);
	for (size_t i = 0; i < result_elems(c); i++) {
		float want = expected(c, i);

		wrong += !isnan(want) && c->recv[i] != want;
	}
	MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	return total;
}

/*
 * Warm-up, then one barrier-separated call per iteration, timed on every
 * rank.  An iteration lasts until its slowest rank is done, so the per-rank
 * times are combined with MAX, after the loop so that the exchange never
 * lands inside a timed region.  `times` has room for o->iters entries.
 */
static void time_call(const struct call *c, const struct options *o,
		      double *times, struct result *r)
{
	for (long i = 0; i < o->warmup; i++)
		run(c);
	for (long i = 0; i < o->iters; i++) {
		double t0;

		MPI_Barrier(MPI_COMM_WORLD);
		t0 = now_us();
		run(c);
		times[i] = now_us() - t0;
	}
	MPI_Allreduce(MPI_IN_PLACE, times, (int)o->iters, MPI_DOUBLE, MPI_MAX,
		      MPI_COMM_WORLD);
	qsort(times, (size_t)o->iters, sizeof(*times), cmp_double);
	r->min_us = times[0];
	r->max_us = times[o->iters - 1];
	r->median_us = (times[(o->iters - 1) / 2] + times[o->iters / 2]) / 2.0;
}

static void measure(const struct call *c, const struct options *o,
		    double *times, struct result *r)
{
	r->wrong = o->check ? check_call(c) : -1;
	/* In place, each call feeds the next: zeros keep the sums finite. */
	if (c->in_place && reduces(c->coll))
		fill(c->recv, c->send_elems, 0.0f);
	else
		fill_input(c);
	time_call(c, o, times, r);
}

/* nccl-tests' bus-bandwidth factors (its doc/PERFORMANCE.md). */
static double bus_factor(enum coll c, int nranks)
{
	switch (c) {
	case ALLREDUCE:
		return 2.0 * (nranks - 1) / nranks;
	case BROADCAST:
	case REDUCE:
		return 1.0;
	default:
		return (double)(nranks - 1) / nranks;
	}
}

static void print_group(size_t bytes, const struct result *r,
			enum coll coll, int nranks)
{
	double algbw = (double)bytes / (r->median_us * 1e3); /* GB/s */

	if (r->median_us < 0) {
		printf(" %10s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
		return;
	}
	printf(" %10.2f %7.2f %7.2f", r->median_us, algbw,
	       algbw * bus_factor(coll, nranks));
	if (r->wrong < 0)
		printf(" %6s", "N/A");
	else
		printf(" %6lld", r->wrong);
}

static void print_row(const struct call *c, const struct result *oop,
		      const struct result *ip)
{
	int rooted = c->coll == BROADCAST || c->coll == REDUCE;

	printf("%12zu %12zu %8s %6s %6d", c->bytes, c->count, "float",
	       reduces(c->coll) ? "sum" : "none", rooted ? 0 : -1);
	print_group(c->bytes, oop, c->coll, c->nranks);
	print_group(c->bytes, ip, c->coll, c->nranks);
	printf("\n");
	/* Raw spread on a comment line: data rows carry nothing extra. */
	printf("# range %zu oop_min_us=%.2f oop_max_us=%.2f ip_min_us=%.2f ip_max_us=%.2f\n",
	       c->bytes, oop->min_us, oop->max_us, ip->min_us, ip->max_us);
	fflush(stdout);
}

static void print_header(const struct options *o, int nranks)
{
	char version[MPI_MAX_LIBRARY_VERSION_STRING];
	int len;

	MPI_Get_library_version(version, &len);
	version[strcspn(version, "\n,")] = '\0';
	printf("# peer-mpi-bench: %s float32%s, %d ranks, %s\n",
	       coll_names[o->coll], reduces(o->coll) ? " sum" : "", nranks,
	       version);
	printf("# sizes %zu..%zu x%ld, warm-up %ld, iterations %ld, check %s\n",
	       o->min_bytes, o->max_bytes, o->factor, o->warmup, o->iters,
	       o->check ? "on" : "off");
	printf("# time: median over iterations of the max over ranks; "
	       "busbw = algbw * %.4f (nccl-tests); GB = 1e9 B\n",
	       bus_factor(o->coll, nranks));
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
		size_t elems = bytes / sizeof(float);
		struct call oc = make_call(o->coll, elems, 0, rank, nranks,
					   send, recv);
		struct call ic = make_call(o->coll, elems, 1, rank, nranks,
					   send, recv);
		struct result oop, ip = { .median_us = -1, .wrong = -1 };

		measure(&oc, o, times, &oop);
		if (o->coll != ALLTOALL)
			measure(&ic, o, times, &ip);
		if (rank == 0)
			print_row(&oc, &oop, &ip);
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
