/* Internal helpers for the public enums' names. */
#ifndef HOOP_TYPES_H
#define HOOP_TYPES_H

#include "hoop.h"

/* The collective's name in messages ("allreduce", "send/recv"). */
const char *hoop__coll_name(hoop_coll_t coll);

/* Parses HOOP_ALGO's text; returns -1 when it names no algorithm. */
int hoop__parse_algo(const char *text);

#endif /* HOOP_TYPES_H */
