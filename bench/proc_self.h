/*
 * What a bench rank reads of itself from /proc, one copy for every bench
 * program: its peak resident memory and its open descriptors.
 */
#ifndef HOOP_BENCH_PROC_SELF_H
#define HOOP_BENCH_PROC_SELF_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

/* VmHWM from /proc/self/status, in KiB; -1 when it cannot be read. */
static inline long peak_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

/* Open descriptors, not counting the one that lists them; -1 on error. */
static inline long open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return -1;
  long n = 0;
  int self = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.' && atoi(e->d_name) != self)
      n++;
  closedir(d);
  return n;
}

#endif /* HOOP_BENCH_PROC_SELF_H */
