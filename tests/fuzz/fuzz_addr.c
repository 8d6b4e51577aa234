/*
 * host:port text (HOOP_ROOT_ADDR, MASTER_ADDR) split into host and port,
 * without the name lookup, which would make the fuzzer wait on DNS.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (text == NULL)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char host[256];
  uint16_t port;
  if (hoop__addr_split(text, host, sizeof host, &port) == HOOP_SUCCESS &&
      (host[0] == '\0' || strlen(host) >= sizeof host))
    __builtin_trap();
  free(text);
  return 0;
}
