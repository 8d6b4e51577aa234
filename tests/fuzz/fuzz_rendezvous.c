/*
 * The rendezvous's messages as rank 0 and the joining ranks read them: a
 * hello, rank 0's reply and the peer table.  The first byte picks the
 * parser (and for the table, the number of ranks); what a parser passes
 * is then used as the library would, so that ASan sees any string that
 * does not end or field that lies.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void use_info(const struct hoop_peer_info *p) {
  char desc[160];
  snprintf(desc, sizeof desc, "rank %d (host %s, pid %d)", p->rank,
           p->hostname, p->pid);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  char why[200];
  const uint8_t *bytes = data + 2;
  size_t len = size - 2;
  switch (data[0] % 3) {
  case 0: {
    struct hoop_hello h;
    if (hoop__hello_parse(bytes, len, &h, why, sizeof why))
      use_info(&h.info);
    break;
  }
  case 1: {
    struct hoop_reply r;
    if (hoop__reply_parse(bytes, len, &r, why, sizeof why))
      snprintf(why, sizeof why, "rendezvous failed: %s", r.message);
    break;
  }
  default: {
    struct hoop_peer_info table[8];
    int32_t nranks = 1 + data[1] % 8;
    if (hoop__peer_table_parse(bytes, len, nranks, table, why, sizeof why))
      for (int32_t r = 0; r < nranks; r++)
        use_info(&table[r]);
    break;
  }
  }
  return 0;
}
