/*
 * hoop-ceilings: the machine's own limits, printed beside every benchmark
 * run (shared/bench-method.md) so that results read as a fraction of what
 * the hardware and kernel allow on that day:
 *
 *   - single-thread memcpy bandwidth on 64 MiB buffers (bytes copied per
 *     second, best of several: a reduction or a shm copy cannot beat it);
 *   - the same copy on every core at once, per core: an all-reduce on one
 *     host has each rank read its input and write its result while the
 *     others do, so with a rank per core no rank moves its bytes faster;
 *   - a cache line's round trip between two cores: what every hand-over
 *     through shared memory pays.  On a VM it follows where the host runs
 *     the virtual CPUs at that moment (this project's VM measured 50-60 ns
 *     and 340 ns a few seconds apart), so it says which machine a shm
 *     result was measured on;
 *   - one loopback TCP stream, a sender thread and a receiver thread over
 *     127.0.0.1 with default socket options (what one tcp connection of
 *     hoop, Open MPI or gloo can hope for on this host).
 *
 * Output: '#' comment lines, then one machine-readable line
 *   ceiling memcpy_GBps=10.4 memcpy_all_GBps=7.1 tcp_loopback_GBps=4.1 core_rtt_ns=62
 * (core_rtt_ns=-1 with fewer than two CPUs to run on).  With --rtt, only
 * the round trip, in a fraction of a second: the comparison scripts take
 * it after every shm run, since a VM's host may move the CPUs between runs.
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MEMCPY_BYTES ((size_t)64 << 20)
#define MEMCPY_REPS 10
#define TCP_BYTES ((size_t)2 << 30)
#define TCP_CHUNK ((size_t)1 << 20)
#define TCP_REPS 3
#define MAX_COPIERS 256
#define RTT_TRIPS 100000
#define RTT_REPS 5

/* One loopback transfer: the listener is bound before either thread starts. */
struct stream {
	int listen_fd;
	struct sockaddr_in addr;
	double start_s; /* set by the sender once connected */
	double end_s;   /* set by the receiver after the last byte */
	int tx_failed;  /* one flag per thread: they may fail together */
	int rx_failed;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Called through a volatile pointer: the destination is never read, and a
 * compiler that sees a plain memcpy into it may drop the copies.
 */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;

static double memcpy_gbps(void)
{
	char *src = malloc(MEMCPY_BYTES), *dst = malloc(MEMCPY_BYTES);
	double best = 0.0;

	if (!src || !dst) {
		fprintf(stderr, "hoop-ceilings: out of memory for 2 x %zu B\n",
			MEMCPY_BYTES);
		free(src);
		free(dst);
		return -1.0;
	}
	/* Fault every page in first: page faults are not copy bandwidth. */
	memset(src, 1, MEMCPY_BYTES);
	memset(dst, 0, MEMCPY_BYTES);
	for (int i = 0; i < MEMCPY_REPS; i++) {
		double t0 = now_s(), gbps;

		copy_fn(dst, src, MEMCPY_BYTES);
		gbps = (double)MEMCPY_BYTES / (now_s() - t0) / 1e9;
		if (gbps > best)
			best = gbps;
	}
	free(src);
	free(dst);
	return best;
}

struct copier {
	pthread_barrier_t *start;
	char *src, *dst;
	double seconds;
};

static void *copy_when_all_ready(void *arg)
{
	struct copier *c = arg;
	double t0;

	pthread_barrier_wait(c->start);
	t0 = now_s();
	copy_fn(c->dst, c->src, MEMCPY_BYTES);
	c->seconds = now_s() - t0;
	return NULL;
}

/* One copy per thread, started together; the slowest decides the round. */
static double copy_round(struct copier *cs, int n, pthread_barrier_t *start)
{
	pthread_t th[MAX_COPIERS];
	double slowest = 0.0;
	int started = 0;

	for (; started < n; started++) {
		cs[started].start = start;
		if (pthread_create(&th[started], NULL, copy_when_all_ready,
				   &cs[started]) != 0)
			break;
	}
	if (started < n) {
		/* The barrier counts n: the threads already waiting need it. */
		fprintf(stderr, "hoop-ceilings: could not start %d copying "
			"threads\n", n);
		exit(1);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		if (cs[i].seconds > slowest)
			slowest = cs[i].seconds;
	}
	return slowest;
}

static double memcpy_all_gbps(int n)
{
	struct copier cs[MAX_COPIERS] = { { 0 } };
	pthread_barrier_t start;
	double best = 0.0;
	int ok = 1;

	for (int i = 0; i < n && ok; i++) {
		cs[i].src = malloc(MEMCPY_BYTES);
		cs[i].dst = malloc(MEMCPY_BYTES);
		ok = cs[i].src && cs[i].dst;
		if (ok) {
			memset(cs[i].src, 1, MEMCPY_BYTES);
			memset(cs[i].dst, 0, MEMCPY_BYTES);
		}
	}
	if (!ok) {
		fprintf(stderr, "hoop-ceilings: out of memory for %d x 2 x %zu B\n",
			n, MEMCPY_BYTES);
		best = -1.0;
	}
	pthread_barrier_init(&start, NULL, (unsigned)n);
	for (int r = 0; r < MEMCPY_REPS && ok; r++) {
		double gbps = (double)MEMCPY_BYTES / copy_round(cs, n, &start) / 1e9;

		if (gbps > best)
			best = gbps;
	}
	pthread_barrier_destroy(&start);
	for (int i = 0; i < n; i++) {
		free(cs[i].src);
		free(cs[i].dst);
	}
	return best;
}

struct bouncer {
	_Atomic long *line;
	int cpu;
};

/* Answers each odd value with the next even one. */
static void *bounce(void *arg)
{
	struct bouncer *b = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(b->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof set, &set);
	for (long i = 1; i <= RTT_TRIPS + 1; i++) {
		while (atomic_load_explicit(b->line, memory_order_acquire) !=
		       2 * i - 1)
			;
		atomic_store(b->line, 2 * i);
	}
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * The median over RTT_REPS of the mean round trip, in ns, between the
 * first two CPUs this process may run on; -1 with fewer than two.
 */
static double core_rtt_ns(int *cpu_a, int *cpu_b)
{
	cpu_set_t allowed, mine;
	double trips[RTT_REPS];
	int cpus[2], found = 0;

	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		return -1.0;
	for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
		if (CPU_ISSET(c, &allowed))
			cpus[found++] = c;
	if (found < 2)
		return -1.0;
	*cpu_a = cpus[0];
	*cpu_b = cpus[1];
	/* A line of its own, and its neighbour (prefetched in pairs) too. */
	_Atomic long *line = aligned_alloc(128, 128);

	if (line == NULL)
		return -1.0;
	CPU_ZERO(&mine);
	CPU_SET(cpus[0], &mine);
	pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
	for (int r = 0; r < RTT_REPS; r++) {
		struct bouncer b = { .line = line, .cpu = cpus[1] };
		pthread_t th;
		double t0;

		atomic_store(line, 0);
		if (pthread_create(&th, NULL, bounce, &b) != 0) {
			free((void *)line);
			pthread_setaffinity_np(pthread_self(), sizeof allowed,
					       &allowed);
			return -1.0;
		}
		/*
		 * The first trip, untimed, waits for the thread to start and
		 * move to its CPU.
		 */
		t0 = 0.0;
		for (long i = 1; i <= RTT_TRIPS + 1; i++) {
			atomic_store(line, 2 * i - 1);
			while (atomic_load_explicit(line,
						    memory_order_acquire) != 2 * i)
				;
			if (i == 1)
				t0 = now_s();
		}
		trips[r] = (now_s() - t0) / RTT_TRIPS * 1e9;
		pthread_join(th, NULL);
	}
	free((void *)line);
	/* The copies and TCP threads after this may run anywhere again. */
	pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed);
	qsort(trips, RTT_REPS, sizeof trips[0], cmp_double);
	return trips[RTT_REPS / 2];
}

static void *receiver(void *arg)
{
	struct stream *s = arg;
	char *buf = malloc(TCP_CHUNK);
	size_t got = 0;
	int fd = accept(s->listen_fd, NULL, NULL);

	if (fd < 0) {
		fprintf(stderr, "hoop-ceilings: accept: %s\n", strerror(errno));
		goto out;
	}
	if (!buf) {
		fprintf(stderr, "hoop-ceilings: out of memory for %zu B\n",
			TCP_CHUNK);
		goto out;
	}
	while (got < TCP_BYTES) {
		ssize_t n = read(fd, buf, TCP_CHUNK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "hoop-ceilings: read after %zu of %zu B: %s\n",
				got, TCP_BYTES, n ? strerror(errno) : "peer closed");
			goto out;
		}
		got += (size_t)n;
	}
	s->end_s = now_s();
out:
	if (got < TCP_BYTES)
		s->rx_failed = 1;
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

static int send_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		/* MSG_NOSIGNAL: a receiver that died is an error, not a SIGPIPE. */
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void *sender(void *arg)
{
	struct stream *s = arg;
	char *buf = calloc(1, TCP_CHUNK);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || !buf ||
	    connect(fd, (struct sockaddr *)&s->addr, sizeof(s->addr)) < 0) {
		fprintf(stderr, "hoop-ceilings: connecting to 127.0.0.1:%d: %s\n",
			ntohs(s->addr.sin_port), strerror(errno));
		goto fail;
	}
	s->start_s = now_s();
	for (size_t sent = 0; sent < TCP_BYTES; sent += TCP_CHUNK) {
		if (send_all(fd, buf, TCP_CHUNK) < 0) {
			fprintf(stderr, "hoop-ceilings: send after %zu B: %s\n",
				sent, strerror(errno));
			goto fail;
		}
	}
	goto out;
fail:
	s->tx_failed = 1;
out:
	/* Closing also unblocks a receiver still waiting after a failure. */
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

static int listen_loopback(struct stream *s)
{
	socklen_t len = sizeof(s->addr);

	memset(&s->addr, 0, sizeof(s->addr));
	s->addr.sin_family = AF_INET;
	s->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	if (s->listen_fd < 0 ||
	    bind(s->listen_fd, (struct sockaddr *)&s->addr, sizeof(s->addr)) < 0 ||
	    listen(s->listen_fd, 1) < 0 ||
	    getsockname(s->listen_fd, (struct sockaddr *)&s->addr, &len) < 0) {
		fprintf(stderr, "hoop-ceilings: listening on 127.0.0.1: %s\n",
			strerror(errno));
		if (s->listen_fd >= 0)
			close(s->listen_fd);
		return -1;
	}
	return 0;
}

static double tcp_stream_gbps(void)
{
	struct stream s = { .listen_fd = -1 };
	pthread_t rx, tx;

	if (listen_loopback(&s) < 0)
		return -1.0;
	if (pthread_create(&rx, NULL, receiver, &s) != 0) {
		close(s.listen_fd);
		return -1.0;
	}
	if (pthread_create(&tx, NULL, sender, &s) != 0)
		s.tx_failed = 1;
	else
		pthread_join(tx, NULL);
	/* A sender that never connected leaves the receiver in accept(). */
	if (s.tx_failed)
		shutdown(s.listen_fd, SHUT_RDWR);
	pthread_join(rx, NULL);
	close(s.listen_fd);
	if (s.tx_failed || s.rx_failed)
		return -1.0;
	return (double)TCP_BYTES / (s.end_s - s.start_s) / 1e9;
}

static double best_tcp_gbps(void)
{
	double best = 0.0;

	for (int i = 0; i < TCP_REPS; i++) {
		double gbps = tcp_stream_gbps();

		if (gbps < 0)
			return -1.0;
		if (gbps > best)
			best = gbps;
	}
	return best;
}

int main(int argc, char **argv)
{
	double mem, mem_all, tcp, rtt;
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int cores = online < 1 ? 1 : online > MAX_COPIERS ? MAX_COPIERS : (int)online;
	int cpu_a = -1, cpu_b = -1;

	if (argc == 2 && strcmp(argv[1], "--rtt") == 0) {
		rtt = core_rtt_ns(&cpu_a, &cpu_b);
		printf("ceiling core_rtt_ns=%.0f\n", rtt);
		return 0;
	}
	if (argc != 1) {
		fprintf(stderr, "usage: %s [--rtt]\n", argv[0]);
		return 2;
	}
	mem = memcpy_gbps();
	mem_all = memcpy_all_gbps(cores);
	rtt = core_rtt_ns(&cpu_a, &cpu_b);
	tcp = best_tcp_gbps();
	if (mem < 0 || mem_all < 0 || tcp < 0)
		return 1;
	printf("# ceiling: single-thread memcpy, %zu MiB buffers, best of %d: "
	       "%.1f GB/s (bytes copied per second, GB = 1e9 B)\n",
	       MEMCPY_BYTES >> 20, MEMCPY_REPS, mem);
	printf("# ceiling: memcpy on all %d cores at once, %zu MiB each, best "
	       "of %d: %.1f GB/s per core\n",
	       cores, MEMCPY_BYTES >> 20, MEMCPY_REPS, mem_all);
	if (rtt < 0)
		printf("# machine: no cache-line round trip, fewer than two "
		       "CPUs to run on\n");
	else
		printf("# machine: cache-line round trip between CPUs %d and %d, "
		       "median of %d x %d: %.0f ns\n",
		       cpu_a, cpu_b, RTT_REPS, RTT_TRIPS, rtt);
	printf("# ceiling: one loopback TCP stream over 127.0.0.1, %zu MiB in "
	       "%zu KiB writes, best of %d: %.1f GB/s\n",
	       TCP_BYTES >> 20, TCP_CHUNK >> 10, TCP_REPS, tcp);
	printf("ceiling memcpy_GBps=%.1f memcpy_all_GBps=%.1f "
	       "tcp_loopback_GBps=%.1f core_rtt_ns=%.0f\n",
	       mem, mem_all, tcp, rtt);
	return 0;
}
