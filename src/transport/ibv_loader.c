/*
 * libibverbs through dlopen (transport/ibv_loader.h).
 *
 * Each function is looked up with dlvsym at the version that a program
 * linked against libibverbs binds to: most names exist twice, the
 * IBVERBS_1.0 one taking the structures of before 2006, and dlvsym says
 * which is meant where plain dlsym would rely on the default version.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "transport/ibv_loader.h"

struct symbol {
  const char *name;
  const char *version;
  size_t offset; /* of its pointer in struct hoop_ibv */
};

#define SYM(field, name, version)                                            \
  { name, version, offsetof(struct hoop_ibv, field) }

static const struct symbol symbols[] = {
    SYM(get_device_list, "ibv_get_device_list", "IBVERBS_1.1"),
    SYM(free_device_list, "ibv_free_device_list", "IBVERBS_1.1"),
    SYM(get_device_name, "ibv_get_device_name", "IBVERBS_1.1"),
    SYM(open_device, "ibv_open_device", "IBVERBS_1.1"),
    SYM(close_device, "ibv_close_device", "IBVERBS_1.1"),
    SYM(query_device, "ibv_query_device", "IBVERBS_1.1"),
    SYM(query_port, "ibv_query_port", "IBVERBS_1.1"),
    SYM(query_gid_ex, "_ibv_query_gid_ex", "IBVERBS_1.11"),
    SYM(fork_init, "ibv_fork_init", "IBVERBS_1.1"),
    SYM(is_fork_initialized, "ibv_is_fork_initialized", "IBVERBS_1.13"),
    SYM(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1"),
    SYM(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1"),
    /* Never changed, so only ever in the first version. */
    SYM(create_comp_channel, "ibv_create_comp_channel", "IBVERBS_1.0"),
    SYM(destroy_comp_channel, "ibv_destroy_comp_channel", "IBVERBS_1.0"),
    SYM(create_cq, "ibv_create_cq", "IBVERBS_1.1"),
    SYM(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1"),
    SYM(create_qp, "ibv_create_qp", "IBVERBS_1.1"),
    SYM(modify_qp, "ibv_modify_qp", "IBVERBS_1.1"),
    SYM(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1"),
    SYM(reg_mr, "ibv_reg_mr", "IBVERBS_1.1"),
    SYM(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1"),
    SYM(get_cq_event, "ibv_get_cq_event", "IBVERBS_1.1"),
    SYM(ack_cq_events, "ibv_ack_cq_events", "IBVERBS_1.1"),
    SYM(get_async_event, "ibv_get_async_event", "IBVERBS_1.1"),
    SYM(ack_async_event, "ibv_ack_async_event", "IBVERBS_1.1"),
    SYM(wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1"),
    SYM(event_type_str, "ibv_event_type_str", "IBVERBS_1.1"),
};

/* Every pointer of the table is filled from the list above. */
_Static_assert(sizeof symbols / sizeof symbols[0] * sizeof(void (*)(void)) ==
                   sizeof(struct hoop_ibv),
               "struct hoop_ibv and symbols[] list different functions");
/* POSIX's promise that dlvsym's object pointer holds a function's. */
_Static_assert(sizeof(void *) == sizeof(void (*)(void)),
               "function pointers differ in size from object pointers");

bool hoop__ibv_load(const char *soname, struct hoop_ibv *out, char *why,
                    size_t why_len) {
  memset(out, 0, sizeof *out);
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    snprintf(why, why_len, "%s could not be loaded: %s", soname, dlerror());
    return false;
  }
  for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
    const struct symbol *s = &symbols[i];
    void *fn = dlvsym(lib, s->name, s->version);
    if (fn == NULL) {
      snprintf(why, why_len, "%s has no %s@%s, which hoop calls (an "
               "rdma-core older than hoop needs?): %s", soname, s->name,
               s->version, dlerror());
      memset(out, 0, sizeof *out);
      dlclose(lib);
      return false;
    }
    memcpy((char *)out + s->offset, &fn, sizeof fn);
  }
  return true;
}

static struct hoop_ibv loaded;
static bool loaded_ok;
static char load_why[512];

static void load_once(void) {
  loaded_ok = hoop__ibv_load(HOOP_IBV_SONAME, &loaded, load_why,
                             sizeof load_why);
}

const struct hoop_ibv *hoop__ibv(char *why, size_t why_len) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load_once);
  if (loaded_ok)
    return &loaded;
  snprintf(why, why_len, "%s", load_why);
  return NULL;
}

int hoop__ibv_query_port(const struct hoop_ibv *ibv, struct ibv_context *ctx,
                         uint8_t port, struct ibv_port_attr *attr) {
  struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx != NULL)
    return vctx->query_port(ctx, port, attr, sizeof *attr);
  /* The old entry point fills only the fields it knew of. */
  memset(attr, 0, sizeof *attr);
  return ibv->query_port(ctx, port, (struct _compat_ibv_port_attr *)attr);
}
