/*
 * NCCL's environment variables, read as hoop's: a program tuned for NCCL
 * keeps its settings.  A HOOP_* variable that is set wins.  The mapping
 * runs when the library loads, before the program's threads exist (setenv
 * is not safe beside other threads' getenv), and again on
 * ncclResetDebugInit.
 */
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "nccl/nccl_comm.h"

static void map_same(const char *nccl, const char *hoop) {
  const char *v = getenv(nccl);
  if (v != NULL && getenv(hoop) == NULL)
    setenv(hoop, v, 0);
}

/* NCCL_DEBUG: VERSION, WARN, INFO, TRACE (ABORT adds a core dump). */
static void map_debug(void) {
  const char *v = getenv("NCCL_DEBUG");
  if (v == NULL || getenv("HOOP_DEBUG") != NULL)
    return;
  const char *level = "WARN";
  if (strcasecmp(v, "INFO") == 0)
    level = "INFO";
  else if (strcasecmp(v, "TRACE") == 0)
    level = "TRACE";
  setenv("HOOP_DEBUG", level, 0);
}

/*
 * NCCL_ALGO lists algorithms, or excludes them after '^'.  hoop has a ring
 * and a tree of its own; a list naming exactly one of them chooses it, and
 * anything else leaves hoop's cost model to choose.
 */
static void map_algo(void) {
  const char *v = getenv("NCCL_ALGO");
  if (v == NULL || getenv("HOOP_ALGO") != NULL || v[0] == '^')
    return;
  char list[128];
  strncpy(list, v, sizeof list - 1);
  list[sizeof list - 1] = '\0';
  const char *pick = NULL;
  int named = 0;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(tok, ':'); /* "allreduce:tree" per-collective form */
    if (colon != NULL)
      tok = colon + 1;
    if (strcasecmp(tok, "ring") == 0)
      pick = "ring", named++;
    else if (strcasecmp(tok, "tree") == 0)
      pick = "tree", named++;
  }
  if (named == 1)
    setenv("HOOP_ALGO", pick, 0);
}

/*
 * Without a setting NCCL finds a network interface by itself, so NCCL
 * programs across hosts set none; hoop alone would put rank 0's id on
 * loopback.  Like NCCL, take the first interface that is up and neither
 * loopback nor a container bridge; with none, hoop's default stands.
 */
static void default_interface(void) {
  if (getenv("HOOP_SOCKET_IFNAME") != NULL)
    return;
  struct ifaddrs *all;
  if (getifaddrs(&all) != 0)
    return;
  for (struct ifaddrs *i = all; i != NULL; i = i->ifa_next) {
    unsigned need = IFF_UP | IFF_RUNNING;
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
        (i->ifa_flags & need) != need || (i->ifa_flags & IFF_LOOPBACK) ||
        strncmp(i->ifa_name, "docker", 6) == 0)
      continue;
    char spec[IF_NAMESIZE + 2];
    snprintf(spec, sizeof spec, "=%s", i->ifa_name);
    setenv("HOOP_SOCKET_IFNAME", spec, 0);
    break;
  }
  freeifaddrs(all);
}

static void map_environment(void) {
  map_debug();
  map_algo();
  map_same("NCCL_SOCKET_IFNAME", "HOOP_SOCKET_IFNAME");
  default_interface();
}

__attribute__((constructor)) static void nccl_env_at_load(void) {
  map_environment();
}

void nccl__reread_environment(void) {
  map_environment();
  __atomic_store_n(&hoop__log_level_cached, -1, __ATOMIC_RELAXED);
}
