/*
 * What a rank's listeners read before and after a proof: the handshake
 * (for a data listener of 1-8 ranks and 1-4 channels, or a rendezvous,
 * as the first two bytes say) and a failure notice's text; and what a
 * stalled rank reads back from the peers it asks, their whereabouts.
 */
#include <stdint.h>
#include <string.h>

#include "core/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  char why[200];
  const uint8_t *bytes = data + 2;
  size_t len = size - 2;
  if (data[0] & 1) {
    char reason[HOOP_NOTICE_BYTES];
    hoop__notice_parse(bytes, len, reason, sizeof reason);
    if (strlen(reason) >= sizeof reason)
      __builtin_trap();
    return 0;
  }
  int32_t nranks = 1 + data[1] % 8;
  if (data[0] & 4) {
    struct hoop_whereabouts w;
    if (hoop__whereabouts_parse(bytes, len, nranks, &w, why, sizeof why) &&
        (w.wait_for >= nranks || memchr(w.call, '\0', sizeof w.call) == NULL))
      __builtin_trap();
    return 0;
  }
  bool rendezvous = data[0] & 2;
  int32_t lo = rendezvous ? HOOP_RENDEZVOUS_CHANNEL : HOOP_QUERY_CHANNEL;
  int32_t hi = rendezvous ? HOOP_RENDEZVOUS_CHANNEL : data[1] / 8 % 4;
  struct hoop_handshake hs;
  hoop__handshake_parse(bytes, len, nranks, lo, hi, &hs, why, sizeof why);
  return 0;
}
