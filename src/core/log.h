/*
 * Logging to stderr, filtered by HOOP_DEBUG (WARN, INFO or TRACE; default
 * WARN).  The level test is inline so a disabled TRACE costs one load.
 */
#ifndef HOOP_LOG_H
#define HOOP_LOG_H

enum hoop_log_level {
  HOOP_LOG_NONE = 0,
  HOOP_LOG_WARN = 1,
  HOOP_LOG_INFO = 2,
  HOOP_LOG_TRACE = 3,
};

extern int hoop__log_level_cached;
int hoop__log_level_init(void);

static inline int hoop__log_level(void) {
  int level = __atomic_load_n(&hoop__log_level_cached, __ATOMIC_RELAXED);
  return level >= 0 ? level : hoop__log_level_init();
}

void hoop__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define HOOP_LOG_AT(level, ...)                                              \
  do {                                                                       \
    if (hoop__log_level() >= (level))                                        \
      hoop__log((level), __FILE__, __LINE__, __VA_ARGS__);                   \
  } while (0)

#define HOOP_WARN(...) HOOP_LOG_AT(HOOP_LOG_WARN, __VA_ARGS__)
#define HOOP_INFO(...) HOOP_LOG_AT(HOOP_LOG_INFO, __VA_ARGS__)
#define HOOP_TRACE(...) HOOP_LOG_AT(HOOP_LOG_TRACE, __VA_ARGS__)

#endif /* HOOP_LOG_H */
