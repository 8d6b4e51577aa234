/* A build without libibverbs: the ib transport has no verbs to call. */
#include <stddef.h>

#include "transport/ib_verbs.h"

const struct hoop_ib_verbs *const hoop__ib_verbs_real = NULL;
