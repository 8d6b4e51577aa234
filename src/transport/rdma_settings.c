/*
 * The HOOP_IB_* settings, read and bounded in one place, and the
 * HOOP_IB_HCA filter over described ports.  A bad setting is refused by
 * name rather than replaced by its default: a job that asked for service
 * level 16 should learn that there is none, not run on level 0.
 */
#include <stdio.h>
#include <string.h>

#include "core/param.h"
#include "transport/params.h"
#include "core/socket.h"
#include "transport/rdma.h"

struct int_setting {
  const char *env;
  size_t text;  /* offset of its text in struct hoop_rdma_setting_texts */
  size_t value; /* offset of its value in struct hoop_rdma_settings */
  int lo, hi, def;
  const char *meaning; /* what the number is, for the error */
};

#define TEXT_AT(field) offsetof(struct hoop_rdma_setting_texts, field)
#define VALUE_AT(field) offsetof(struct hoop_rdma_settings, field)

/* The defaults are NCCL's, whose users know them. */
static const struct int_setting int_settings[] = {
    {"HOOP_IB_GID_INDEX", TEXT_AT(gid_index), VALUE_AT(gid_index), -1, 255,
     -1, "an index in the port's GID table, or -1 to choose one per port"},
    {"HOOP_IB_TIMEOUT", TEXT_AT(timeout), VALUE_AT(timeout), 1, 31, 20,
     "the exponent n of the verbs ack timeout, 4.096 us * 2^n"},
    {"HOOP_IB_RETRY_CNT", TEXT_AT(retry_cnt), VALUE_AT(retry_cnt), 0, 7, 7,
     "how often a queue pair resends before it fails"},
    {"HOOP_IB_SL", TEXT_AT(sl), VALUE_AT(sl), 0, 15, 0,
     "an InfiniBand service level"},
    {"HOOP_IB_TC", TEXT_AT(tc), VALUE_AT(tc), 0, 255, 0,
     "a traffic class (on RoCE, the DSCP and ECN bits)"},
};

#define NINT_SETTINGS (sizeof int_settings / sizeof *int_settings)

static bool parse_int(const struct int_setting *s, const char *text,
                      int *value, char *why, size_t why_len) {
  if (text == NULL) {
    *value = s->def;
    return true;
  }
  int64_t v;
  if (s->lo < 0 && strcmp(text, "-1") == 0) {
    v = -1;
  } else if (hoop__parse_size(text, &v) != 0) {
    snprintf(why, why_len, "%s=%s is not a whole number (it is %s)", s->env,
             text, s->meaning);
    return false;
  }
  if (v < s->lo || v > s->hi) {
    snprintf(why, why_len, "%s=%s is outside %d..%d (it is %s)", s->env, text,
             s->lo, s->hi, s->meaning);
    return false;
  }
  *value = (int)v;
  return true;
}

bool hoop__rdma_settings_parse(const struct hoop_rdma_setting_texts *text,
                               struct hoop_rdma_settings *out, char *why,
                               size_t why_len) {
  struct hoop_rdma_settings s = {.hca = text->hca};
  const char *bad;
  if (s.hca != NULL && hoop__port_match(s.hca, "", 0, &bad) < 0) {
    snprintf(why, why_len,
             "HOOP_IB_HCA=%s %s (the forms: mlx5 selects devices whose "
             "names start with mlx5, mlx5_0:1 port 1 of those, =mlx5_0 that "
             "device only, mlx5_0,mlx5_1 either, ^mlx5_1 all but those, "
             "^=mlx5_1 all but that device)",
             s.hca, bad);
    return false;
  }
  for (size_t i = 0; i < NINT_SETTINGS; i++) {
    const struct int_setting *is = &int_settings[i];
    const char *t = *(const char *const *)((const char *)text + is->text);
    if (!parse_int(is, t, (int *)((char *)&s + is->value), why, why_len))
      return false;
  }
  *out = s;
  return true;
}

bool hoop__rdma_settings_read(struct hoop_rdma_settings *out, char *why,
                              size_t why_len) {
  struct hoop_rdma_setting_texts text = {
      .hca = hoop__param_ib_hca(),
      .gid_index = hoop__param_ib_gid_index(),
      .timeout = hoop__param_ib_timeout(),
      .retry_cnt = hoop__param_ib_retry_cnt(),
      .sl = hoop__param_ib_sl(),
      .tc = hoop__param_ib_tc(),
  };
  return hoop__rdma_settings_parse(&text, out, why, why_len);
}

int hoop__rdma_hca_filter(const char *spec, struct hoop_rdma_local_port *ports,
                          int nports) {
  if (spec == NULL)
    return nports;
  if (hoop__port_match(spec, "", 0, NULL) < 0)
    return -1;
  int kept = 0;
  for (int i = 0; i < nports; i++) {
    if (hoop__port_match(spec, ports[i].device, ports[i].port, NULL) != 1)
      continue;
    if (kept != i)
      ports[kept] = ports[i];
    kept++;
  }
  return kept;
}
