/*
 * The last-level cache as sysfs describes it, for the choices that depend
 * on what the caches hold (topology.c's cache-bypass size) and on whether
 * two ranks share one (shm.c's stores into the FIFO).
 */
#ifndef HOOP_CPU_CACHE_H
#define HOOP_CPU_CACHE_H

#include <stddef.h>

/*
 * Bytes of cpu0's largest data cache ("32768K" in sysfs), 0 if unknown.
 * Not sysconf(_SC_LEVEL3_CACHE_SIZE): in this project's VM that says 320
 * MiB where sysfs says 32 MiB, shared by both cores.
 */
size_t hoop__llc_bytes(void);

/*
 * sysfs's id of the largest data cache of the CPU the caller runs on now,
 * -1 if unknown.  Ranks with different ids hand each other data through
 * memory or another die's cache, not their own.  A rank not pinned to its
 * CPU may move after asking.
 */
int hoop__llc_id(void);

#endif /* HOOP_CPU_CACHE_H */
