/* Internal helpers for the public enums' names. */
#ifndef HOOP_TYPES_H
#define HOOP_TYPES_H

/* Parses HOOP_ALGO's text; returns -1 when it names no algorithm. */
int hoop__parse_algo(const char *text);

#endif /* HOOP_TYPES_H */
