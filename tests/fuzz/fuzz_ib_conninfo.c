/*
 * The connection information an ib peer sends to join queue pairs: the
 * first byte picks this rank's link layer, the rest is the message.
 * What passes is checked against what the transport will rely on: a
 * violation is a crash to report.
 */
#include <stdint.h>
#include <string.h>

#include "transport/ib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  int link_layer = data[0] & 1 ? HOOP_LINK_ETH : HOOP_LINK_IB;
  struct hoop_ib_conninfo c;
  char why[200];
  if (!hoop__ib_conninfo_parse(data + 1, size - 1, link_layer, &c, why,
                               sizeof why))
    return 0;
  uint64_t fifo_bytes, fifo_end;
  if (c.link_layer != link_layer || c.qpn < 2 || c.qpn > 0xffffff ||
      c.psn > 0xffffff || c.mtu < HOOP_MTU_MIN || c.mtu > HOOP_MTU_MAX ||
      c.slots < HOOP_IB_SLOTS_MIN || c.slots > HOOP_IB_SLOTS_MAX ||
      c.slot_bytes < HOOP_IB_SLOT_BYTES_MIN ||
      __builtin_mul_overflow((uint64_t)c.slot_bytes, c.slots, &fifo_bytes) ||
      __builtin_add_overflow(c.fifo_addr, fifo_bytes, &fifo_end) ||
      c.fifo_addr % 64 != 0 ||
      (link_layer == HOOP_LINK_IB && (c.lid == 0 || c.lid > 0xbfff)))
    __builtin_trap();
  return 0;
}
