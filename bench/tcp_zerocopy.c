/*
 * tcp-zerocopy: one loopback TCP stream with and without MSG_ZEROCOPY,
 * which the performance issue asked to weigh for large sends.  A child
 * process receives; the parent sends TOTAL bytes in CHUNK-byte send()
 * calls, with SO_ZEROCOPY and MSG_ZEROCOPY when asked, reaping the
 * completions from the error queue as it goes, and prints GB/s and how
 * many completions say the kernel copied the data after all (it does for
 * a socket delivered on the same host).
 *
 *   tcp-zerocopy 0|1 CHUNK TOTAL      (1: zerocopy)
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long completions, copied;

/* Takes the zerocopy notifications waiting (the first wait blocks when
 * `block`); each covers a range of send calls. */
static void reap(int fd, int block) {
  for (;;) {
    char ctrl[128];
    struct msghdr m = {.msg_control = ctrl, .msg_controllen = sizeof ctrl};
    if (recvmsg(fd, &m, MSG_ERRQUEUE | (block ? 0 : MSG_DONTWAIT)) < 0)
      return;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL;
         c = CMSG_NXTHDR(&m, c)) {
      struct sock_extended_err e;
      memcpy(&e, CMSG_DATA(c), sizeof e);
      if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
        continue;
      long n = (long)(e.ee_data - e.ee_info) + 1;
      completions += n;
      if (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
        copied += n;
    }
    block = 0;
  }
}

static int fail(const char *what) {
  fprintf(stderr, "tcp-zerocopy: %s: %s\n", what, strerror(errno));
  return 1;
}

static void receive_all(int ls, size_t total) {
  int fd = accept(ls, NULL, NULL);
  char *buf = malloc(1 << 20);
  size_t got = 0;
  if (fd < 0 || buf == NULL)
    _exit(1);
  while (got < total) {
    ssize_t n = recv(fd, buf, 1 << 20, 0);
    if (n <= 0)
      _exit(1);
    got += (size_t)n;
  }
  _exit(send(fd, "k", 1, 0) == 1 ? 0 : 1);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: tcp-zerocopy 0|1 CHUNK TOTAL\n");
    return 2;
  }
  int zc = atoi(argv[1]);
  size_t chunk = strtoul(argv[2], NULL, 0), total = strtoul(argv[3], NULL, 0);
  if (chunk == 0 || total < chunk) {
    fprintf(stderr, "tcp-zerocopy: want 0 < CHUNK <= TOTAL\n");
    return 2;
  }
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(ls, 1) != 0 || getsockname(ls, (struct sockaddr *)&a, &alen))
    return fail("listening on 127.0.0.1");
  pid_t pid = fork();
  if (pid < 0)
    return fail("fork");
  if (pid == 0)
    receive_all(ls, total);
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
    return fail("connecting");
  if (zc && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0)
    return fail("SO_ZEROCOPY");
  char *buf = malloc(chunk);
  if (buf == NULL)
    return fail("malloc");
  memset(buf, 7, chunk);
  double t = now_s();
  size_t sent = 0;
  long calls = 0;
  while (sent < total) {
    ssize_t n = send(fd, buf, chunk, zc ? MSG_ZEROCOPY : 0);
    if (n < 0 && errno == ENOBUFS) { /* too many pinned: take some back */
      reap(fd, 1);
      continue;
    }
    if (n < 0)
      return fail("send");
    sent += (size_t)n;
    calls++;
    if (zc)
      reap(fd, 0);
  }
  char k;
  if (recv(fd, &k, 1, 0) != 1)
    return fail("waiting for the receiver");
  t = now_s() - t;
  while (zc && completions < calls)
    reap(fd, 1);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("%s chunk %zu: %.2f GB/s (%zu MiB in %.1f ms)",
         zc ? "zerocopy" : "plain   ", chunk, (double)total / t / 1e9,
         total >> 20, t * 1e3);
  if (zc)
    printf(", %ld of %ld completions say the kernel copied", copied,
           completions);
  printf("\n");
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
