/*
 * Error recording and the check macros.  An error is described once, where
 * it happens, with everything a user needs (the syscall, strerror, peer rank
 * and address, expected and actual sizes); the callers above only pass the
 * code up, logging file:line at TRACE level.
 */
#ifndef HOOP_ERROR_H
#define HOOP_ERROR_H

#include "hoop.h"
#include "core/log.h"

/* The longest error text kept, the NUL included. */
#define HOOP_ERROR_MAX 512

struct hoop_comm;

/*
 * Formats the message, keeps it as the thread's last error, logs it, and
 * returns `result`.
 */
hoop_result_t hoop__error(hoop_result_t result, const char *file, int line,
                          const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Keeps the thread's last error as comm's too (nothing when comm is NULL)
 * and returns `result`.  Defined by comm.c, whose business a
 * communicator's state is.  Transports never see the communicator and
 * record errors with HOOP_ERROR(NULL, ...); the core code that called
 * them attaches the error when the call fails.
 */
hoop_result_t hoop__error_attach(struct hoop_comm *comm,
                                 hoop_result_t result);

/* Records an error (hoop__error) and attaches it to comm. */
#define HOOP_ERROR(comm, result, ...)                                        \
  hoop__error_attach(                                                        \
      (comm), hoop__error((result), __FILE__, __LINE__, __VA_ARGS__))

#define HOOP_CHECK(call)                                                     \
  do {                                                                       \
    hoop_result_t hoop_check_res_ = (call);                                  \
    if (hoop_check_res_ != HOOP_SUCCESS) {                                   \
      HOOP_TRACE("%s returned %s", #call, hoop_result_name(hoop_check_res_)); \
      return hoop_check_res_;                                                \
    }                                                                        \
  } while (0)

#define HOOP_CHECK_GOTO(call, res, label)                                    \
  do {                                                                       \
    (res) = (call);                                                          \
    if ((res) != HOOP_SUCCESS) {                                             \
      HOOP_TRACE("%s returned %s", #call, hoop_result_name(res));            \
      goto label;                                                            \
    }                                                                        \
  } while (0)

/* Monotonic clock in milliseconds and nanoseconds. */
long long hoop__now_ms(void);
long long hoop__now_ns(void);

#endif /* HOOP_ERROR_H */
