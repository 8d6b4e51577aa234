/* The HOOP_PARAMS and HOOP_STRING_PARAMS tables made into cached getters. */
#include "core/param.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

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

int64_t hoop__param_read(const char *env, int64_t def) {
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

/*
 * The text counterpart of hoop__param_read.  A copy, because a later setenv() or
 * putenv() may free or reuse what getenv() returned.  Copies are never
 * freed: callers keep the pointer, and a racing first read loses only a few
 * bytes.  An empty value counts as unset, the way "HOOP_X= program" is used
 * to turn a setting off.  Out of memory, the environment's own string is
 * the best there is.
 */
const char *hoop__param_read_string(const char *env, const char *def) {
  const char *text = getenv(env);
  if (text == NULL || *text == '\0')
    return def;
  char *copy = strdup(text);
  return copy != NULL ? copy : text;
}

HOOP_PARAMS(HOOP_PARAM_DEFINE)
HOOP_STRING_PARAMS(HOOP_STRING_PARAM_DEFINE)
