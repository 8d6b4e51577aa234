/* Log sink and the HOOP_DEBUG level, read once per process. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int hoop__log_level_cached = -1;

int hoop__log_level_init(void) {
  const char *env = getenv("HOOP_DEBUG");
  int level = HOOP_LOG_WARN;
  if (env != NULL) {
    if (strcasecmp(env, "NONE") == 0 || strcasecmp(env, "OFF") == 0)
      level = HOOP_LOG_NONE;
    else if (strcasecmp(env, "INFO") == 0)
      level = HOOP_LOG_INFO;
    else if (strcasecmp(env, "TRACE") == 0)
      level = HOOP_LOG_TRACE;
  }
  __atomic_store_n(&hoop__log_level_cached, level, __ATOMIC_RELAXED);
  return level;
}

void hoop__log(int level, const char *file, int line, const char *fmt, ...) {
  static const char *const names[] = {"", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  /* One fprintf per line so that lines of concurrent threads stay whole. */
  if (level >= HOOP_LOG_TRACE)
    fprintf(stderr, "hoop[%d] %s %s:%d %s\n", (int)getpid(), names[level],
            base ? base + 1 : file, line, msg);
  else
    fprintf(stderr, "hoop[%d] %s %s\n", (int)getpid(), names[level], msg);
}
