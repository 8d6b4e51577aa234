/*
 * The 64-byte header that starts every collective on every link, parsed
 * and then described, as a rank does when the header differs from its
 * own call.
 */
#include <stdint.h>

#include "core/engine.h"
#include "core/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hoop_wire_header h;
  char why[200], desc[240];
  if (hoop__wire_header_parse(data, size, &h, why, sizeof why))
    hoop__describe_call(&h, desc, sizeof desc);
  return 0;
}
