/*
 * HOOP_SOCKET_IFNAME's interface lists ("eth", "=eth0,ib", "^docker,lo")
 * matched against an interface name: the input is the list, a NUL, then
 * the name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 2);
  if (text == NULL)
    return 0;
  memcpy(text, data, size);
  text[size] = text[size + 1] = '\0';
  const char *name = text + strlen(text) + 1;
  const char *why = NULL;
  int r = hoop__iface_match(text, name, &why);
  if ((r < 0) != (why != NULL) || r > 1)
    __builtin_trap();
  free(text);
  return 0;
}
