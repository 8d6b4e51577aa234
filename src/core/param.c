/* The HOOP_PARAMS table made into cached getters. */
#include "core/param.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "core/log.h"

int hoop__parse_size(const char *text, int64_t *value) {
  if (text == NULL || *text == '\0')
    return -1;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || end == text)
    return -1;
  int shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K': shift = 10; end++; break;
  case 'M': shift = 20; end++; break;
  case 'G': shift = 30; end++; break;
  default: break;
  }
  if ((*end == 'B' || *end == 'b') && shift != 0)
    end++;
  if (*end != '\0' || v < 0 || v > (INT64_MAX >> shift))
    return -1;
  *value = (int64_t)v << shift;
  return 0;
}

static int64_t param_read(const char *env, int64_t def) {
  const char *text = getenv(env);
  if (text == NULL)
    return def;
  int64_t v;
  if (hoop__parse_size(text, &v) != 0) {
    HOOP_WARN("ignoring %s=\"%s\": not a non-negative number; using %lld",
              env, text, (long long)def);
    return def;
  }
  HOOP_INFO("%s=%lld from the environment", env, (long long)v);
  return v;
}

/* INT64_MIN marks "not read yet"; a racing second read gives the same. */
#define HOOP_PARAM_DEFINE_(name, env, def)                                   \
  int64_t hoop__param_##name(void) {                                         \
    static int64_t cached = INT64_MIN;                                       \
    int64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);                  \
    if (v == INT64_MIN) {                                                    \
      v = param_read(env, def);                                              \
      __atomic_store_n(&cached, v, __ATOMIC_RELAXED);                        \
    }                                                                        \
    return v;                                                                \
  }
HOOP_PARAMS(HOOP_PARAM_DEFINE_)
#undef HOOP_PARAM_DEFINE_
