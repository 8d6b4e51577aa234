/* Result names and texts, the per-thread last error, and the clock. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Thread_local char thread_last_error[HOOP_ERROR_MAX];

const char *hoop_strerror(hoop_result_t result) {
  switch (result) {
#define HOOP_RESULT_TEXT_(name, value, text)                                 \
  case name:                                                                 \
    return text;
    HOOP_RESULT_LIST(HOOP_RESULT_TEXT_)
#undef HOOP_RESULT_TEXT_
  }
  return "unknown result code";
}

const char *hoop_result_name(hoop_result_t result) {
  switch (result) {
#define HOOP_RESULT_NAME_(name, value, text)                                 \
  case name:                                                                 \
    return #name;
    HOOP_RESULT_LIST(HOOP_RESULT_NAME_)
#undef HOOP_RESULT_NAME_
  }
  return "HOOP_RESULT_UNKNOWN";
}

const char *hoop_last_error(void) { return thread_last_error; }

hoop_result_t hoop__error(hoop_result_t result, const char *file, int line,
                          const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(thread_last_error, sizeof thread_last_error, fmt, ap);
  va_end(ap);
  /*
   * Argument errors are the caller's to report; failures that involve the
   * system or a peer are logged so that a job never dies silently.
   */
  int level = (result == HOOP_ERR_INVALID_ARGUMENT ||
               result == HOOP_ERR_INVALID_USAGE)
                  ? HOOP_LOG_INFO
                  : HOOP_LOG_WARN;
  if (hoop__log_level() >= level)
    hoop__log(level, file, line, "%s: %s", hoop_result_name(result),
              thread_last_error);
  return result;
}

long long hoop__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long long hoop__now_ms(void) { return hoop__now_ns() / 1000000LL; }
