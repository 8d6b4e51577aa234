/* transport/params.h's lists made into cached getters (core/param.h). */
#include "transport/params.h"

#include <strings.h>

HOOP_TRANSPORT_PARAMS(HOOP_PARAM_DEFINE)
HOOP_TRANSPORT_STRING_PARAMS(HOOP_STRING_PARAM_DEFINE)

int hoop__parse_shm_stores(const char *text) {
  if (text == NULL || strcasecmp(text, "auto") == 0)
    return HOOP_SHM_STORES_AUTO;
  if (strcasecmp(text, "plain") == 0)
    return HOOP_SHM_STORES_PLAIN;
  if (strcasecmp(text, "nt") == 0)
    return HOOP_SHM_STORES_NT;
  return -1;
}
