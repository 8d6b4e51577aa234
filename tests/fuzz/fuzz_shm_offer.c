/*
 * The shared memory segment a lower rank offers: what passes must name a
 * segment hoop could have made and sizes whose segment holds both rings.
 */
#include <stdint.h>
#include <string.h>

#include "transport/shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hoop_shm_offer o;
  char why[200];
  if (!hoop__shm_offer_parse(data, size, &o, why, sizeof why))
    return 0;
  /*
   * What the transport then relies on, computed without wrapping; a
   * violation is a crash to report.
   */
  uint64_t rings, slots;
  if (strnlen(o.name, sizeof o.name) == sizeof o.name ||
      __builtin_mul_overflow(o.ring_bytes, 2, &rings) ||
      __builtin_mul_overflow(o.slot_bytes, 2, &slots) ||
      o.segment_bytes < 4096 || o.segment_bytes - 4096 < rings ||
      o.slot_bytes == 0 || o.ring_bytes < slots)
    __builtin_trap();
  return 0;
}
