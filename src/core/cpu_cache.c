/* The last-level cache from sysfs (cpu_cache.h). */
#include "core/cpu_cache.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

/* Reads the first number in a sysfs file and its unit letter, if any. */
static int read_number(const char *dir, const char *file,
                       unsigned long long *value, char *unit) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  char u = 'B';
  int ok = fscanf(f, "%llu%c", value, &u) >= 1;
  fclose(f);
  if (unit != NULL)
    *unit = u;
  return ok ? 0 : -1;
}

/*
 * The largest data or unified cache of `cpu`: its size and, when sysfs
 * gives one, its id.  False when sysfs lists no such cache.
 */
static int largest_cache(int cpu, size_t *bytes, int *id) {
  size_t best = 0;
  int best_id = -1;
  for (int i = 0; i < 8; i++) {
    char dir[80], type[32] = "", unit = 'B', path[96];
    unsigned long long size = 0, cache_id = 0;
    snprintf(dir, sizeof dir, "/sys/devices/system/cpu/cpu%d/cache/index%d",
             cpu, i);
    snprintf(path, sizeof path, "%s/type", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      break;
    int ok = fscanf(f, "%31s", type) == 1;
    fclose(f);
    if (!ok || strcmp(type, "Instruction") == 0 ||
        read_number(dir, "size", &size, &unit) != 0)
      continue;
    size <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    if (size > best) {
      best = (size_t)size;
      best_id = read_number(dir, "id", &cache_id, NULL) == 0 &&
                        cache_id <= 1u << 30
                    ? (int)cache_id
                    : -1;
    }
  }
  *bytes = best;
  *id = best_id;
  return best > 0;
}

size_t hoop__llc_bytes(void) {
  size_t bytes;
  int id;
  return largest_cache(0, &bytes, &id) ? bytes : 0;
}

int hoop__llc_id(void) {
  int cpu = sched_getcpu();
  size_t bytes;
  int id;
  if (cpu < 0 || !largest_cache(cpu, &bytes, &id))
    return -1;
  return id;
}
