/*
 * hoop-ceilings: the machine's own limits, printed beside every benchmark
 * run (shared/bench-method.md) so that results read as a fraction of what
 * the hardware and kernel allow on that day:
 *
 *   - single-thread memcpy bandwidth on 64 MiB buffers (bytes copied per
 *     second, best of several: a reduction or a shm copy cannot beat it);
 *   - one loopback TCP stream, a sender thread and a receiver thread over
 *     127.0.0.1 with default socket options (what one tcp connection of
 *     hoop, Open MPI or gloo can hope for on this host).
 *
 * Output: '#' comment lines, then one machine-readable line
 *   ceiling memcpy_GBps=10.4 tcp_loopback_GBps=4.1
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
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
	double mem, tcp;

	if (argc != 1) {
		fprintf(stderr, "usage: %s (no arguments)\n", argv[0]);
		return 2;
	}
	mem = memcpy_gbps();
	tcp = best_tcp_gbps();
	if (mem < 0 || tcp < 0)
		return 1;
	printf("# ceiling: single-thread memcpy, %zu MiB buffers, best of %d: "
	       "%.1f GB/s (bytes copied per second, GB = 1e9 B)\n",
	       MEMCPY_BYTES >> 20, MEMCPY_REPS, mem);
	printf("# ceiling: one loopback TCP stream over 127.0.0.1, %zu MiB in "
	       "%zu KiB writes, best of %d: %.1f GB/s\n",
	       TCP_BYTES >> 20, TCP_CHUNK >> 10, TCP_REPS, tcp);
	printf("ceiling memcpy_GBps=%.1f tcp_loopback_GBps=%.1f\n", mem, tcp);
	return 0;
}
