/*
 * This host's RDMA ports: what a rank learns about them and publishes at
 * bootstrap for ib (struct hoop_rdma_port below, inside ib's published
 * bytes, ib_publish.c).  Joining two ranks over those ports is the ib
 * transport's business (transport/ib.h); nothing here connects anything.
 *
 *   rdma_settings.c  HOOP_IB_* read and bounded in one place; the
 *                    HOOP_IB_HCA filter over found ports
 *   rdma_devices.c   the devices' ports and GIDs through libibverbs, into
 *                    the plain structs below (rdma_devices_none.c in a
 *                    build without verbs.h: no devices, saying why)
 *   ibv_loader.c     libibverbs.so.1 loaded at first use, never linked
 *   rdma.c           the GID a port would use, the port a rank publishes,
 *                    and whether it looks at all
 *
 * Apart from rdma_devices.c and ibv_loader.c (and the ib transport's own
 * verbs calls, transport/ib_verbs.c) nothing includes verbs.h: the
 * numbers passed around are the InfiniBand specification's, in the enums
 * below.
 */
#ifndef HOOP_TRANSPORT_RDMA_H
#define HOOP_TRANSPORT_RDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The RDMA port a rank would use, as plain numbers that know nothing of
 * verbs, so that a transport can judge a pair from what both published.
 * Only a HOOP_RDMA_PORT description has its other fields set.
 */
enum hoop_rdma_status {
  HOOP_RDMA_NOT_PROBED = 0, /* it did not look (transport/rdma.h says when) */
  HOOP_RDMA_NO_DEVICE,     /* the kernel lists no RDMA device */
  HOOP_RDMA_NOT_BUILT,     /* this build has no libibverbs */
  HOOP_RDMA_BAD_SETTING,   /* a HOOP_IB_* setting is malformed */
  HOOP_RDMA_NO_MATCH,      /* HOOP_IB_HCA selects none of the ports */
  HOOP_RDMA_VERBS_ERROR,   /* a verbs call failed while looking */
  HOOP_RDMA_PORT,          /* a port is described */
  HOOP_RDMA_STATUS_COUNT
};

/* The InfiniBand specification's port states (ibv_port_state's values). */
enum hoop_port_state {
  HOOP_PORT_NOP = 0,
  HOOP_PORT_DOWN,
  HOOP_PORT_INIT,
  HOOP_PORT_ARMED,
  HOOP_PORT_ACTIVE,
  HOOP_PORT_ACTIVE_DEFER,
  HOOP_PORT_STATE_COUNT
};

enum hoop_link_layer {
  HOOP_LINK_NONE = 0,
  HOOP_LINK_IB,  /* InfiniBand (verbs reports older IB ports unspecified) */
  HOOP_LINK_ETH, /* Ethernet: RoCE */
  HOOP_LINK_COUNT
};

enum hoop_gid_type {
  HOOP_GID_NONE = 0, /* no GID chosen (none usable, or none at the index) */
  HOOP_GID_IB,
  HOOP_GID_ROCE_V1,
  HOOP_GID_ROCE_V2,
  HOOP_GID_TYPE_COUNT
};

/* The MTU as verbs numbers it: 1 is 256 bytes, 5 is 4096. */
#define HOOP_MTU_MIN 1
#define HOOP_MTU_MAX 5

struct hoop_rdma_port {
  uint8_t status;     /* enum hoop_rdma_status */
  uint8_t port;       /* 1..255 */
  uint8_t state;      /* enum hoop_port_state */
  uint8_t link_layer; /* enum hoop_link_layer */
  uint8_t mtu;        /* active MTU, HOOP_MTU_MIN..HOOP_MTU_MAX */
  uint8_t gid_type;   /* enum hoop_gid_type of the chosen GID */
  uint8_t gid_index;  /* the chosen GID's index in the port's table */
  uint8_t gid_forced; /* 1: HOOP_IB_GID_INDEX chose it, 0: chosen alone */
  uint16_t lid;
  uint8_t reserved[6];
  uint8_t gid[16];    /* as the port reports it (network byte order) */
  char device[32];    /* cut to fit; for messages */
};

/* The HOOP_IB_* settings, bounded. */
struct hoop_rdma_settings {
  const char *hca; /* HOOP_IB_HCA, a hoop__port_match list; NULL: all */
  int gid_index;   /* HOOP_IB_GID_INDEX 0..255, or -1: chosen per port */
  int timeout;     /* HOOP_IB_TIMEOUT 1..31: ack timeout 4.096 us * 2^n */
  int retry_cnt;   /* HOOP_IB_RETRY_CNT 0..7 */
  int sl;          /* HOOP_IB_SL 0..15, the service level */
  int tc;          /* HOOP_IB_TC 0..255, the traffic class (RoCE: DSCP) */
};

/* The settings as text, each NULL where its variable is unset. */
struct hoop_rdma_setting_texts {
  const char *hca, *gid_index, *timeout, *retry_cnt, *sl, *tc;
};

/*
 * Bounds every setting; false with the first bad one named in `why`
 * ("HOOP_IB_TIMEOUT=40 is outside 1..31 (...)").
 */
bool hoop__rdma_settings_parse(const struct hoop_rdma_setting_texts *text,
                               struct hoop_rdma_settings *out, char *why,
                               size_t why_len);

/* hoop__rdma_settings_parse over this process's environment. */
bool hoop__rdma_settings_read(struct hoop_rdma_settings *out, char *why,
                              size_t why_len);

/* One entry of a port's GID table. */
struct hoop_rdma_gid {
  uint8_t raw[16]; /* network byte order */
  uint8_t index;
  uint8_t type; /* enum hoop_gid_type */
};

#define HOOP_RDMA_MAX_GIDS 256

/* One port of one device of this host, as discovery found it. */
struct hoop_rdma_local_port {
  char device[64];
  uint8_t port;
  uint8_t state;      /* enum hoop_port_state */
  uint8_t link_layer; /* enum hoop_link_layer */
  uint8_t mtu;        /* active MTU, HOOP_MTU_MIN..HOOP_MTU_MAX */
  uint16_t lid;
  int ngids; /* the populated entries, in index order */
  struct hoop_rdma_gid gids[HOOP_RDMA_MAX_GIDS];
};

/*
 * Every port of every RDMA device, in the order verbs lists them, in
 * *ports (free with free()).  True with *nports == 0 when there is no
 * device, `why` saying how that was learnt (one way: libibverbs.so.1
 * could not be loaded); false when a verbs call failed, `why` naming the
 * call, the device and the port.  It opens
 * every device: hoop__rdma_publish calls it only when ib may be used.
 */
bool hoop__rdma_discover(struct hoop_rdma_local_port **ports, int *nports,
                         char *why, size_t why_len);

/*
 * Makes hoop__rdma_publish find its ports through `discover` instead of
 * hoop__rdma_discover; NULL restores that.  The seam exists so that tests
 * can run the ib transport over a fake verbs table (transport/ib_verbs.h)
 * on hosts without an RDMA device: they must then also publish a port.
 * Call it before any communicator is made; it is not for production use.
 */
typedef bool (*hoop_rdma_discover_fn)(struct hoop_rdma_local_port **ports,
                                      int *nports, char *why, size_t why_len);
void hoop__rdma_set_discover(hoop_rdma_discover_fn discover);

/*
 * Makes libibverbs keep registered memory out of forked children where
 * the kernel does not (before 5.13); once per process, before any other
 * verbs call (discovery and ib's verbs table call it first).
 */
void hoop__rdma_fork_safe(void);

/*
 * Keeps, in order, the ports that HOOP_IB_HCA's list `spec` selects (NULL
 * selects all); returns how many, or -1 when `spec` is malformed.
 */
int hoop__rdma_hca_filter(const char *spec, struct hoop_rdma_local_port *ports,
                          int nports);

/*
 * The GID a queue pair on `port` would use: the one at `gid_index`, or
 * with -1, on InfiniBand index 0 and on Ethernet the best by RoCE v2
 * over v1 and an IPv4 address over IPv6.  False, saying why, when there
 * is none.
 */
bool hoop__rdma_choose_gid(const struct hoop_rdma_local_port *port,
                           int gid_index, struct hoop_rdma_gid *out,
                           char *why, size_t why_len);

/*
 * What a rank publishes for `port`.  A port without a GID to use is
 * still described, with gid_type HOOP_GID_NONE, so that its peers can
 * say so.
 */
void hoop__rdma_describe(const struct hoop_rdma_local_port *port,
                         int gid_index, struct hoop_rdma_port *out);

/*
 * Makes hoop__rdma_publish look for ports in this process even where
 * HOOP_TRANSPORT is not ib: for hoop-info, which shows them.  Call it
 * before the communicator is made.
 */
void hoop__rdma_probe_always(void);

/*
 * The port this rank publishes at bootstrap: the first ACTIVE port that
 * HOOP_IB_HCA selects, else the first it selects.  Without one, a status
 * saying why, with the details in `why` for the log and for messages.
 * Unless HOOP_TRANSPORT=ib or hoop__rdma_probe_always asked for them, it
 * neither reads the HOOP_IB_* settings nor opens a device, and publishes
 * HOOP_RDMA_NOT_PROBED.
 */
void hoop__rdma_publish(struct hoop_rdma_port *out, char *why, size_t why_len);

/* "ACTIVE", "InfiniBand", "RoCE v2": for messages and hoop-info. */
const char *hoop__rdma_state_name(int state);
const char *hoop__rdma_link_layer_name(int link_layer);
const char *hoop__rdma_gid_type_name(int type);

/* A GID as IPv6 text ("fe80::1", "::ffff:10.0.0.2"). */
#define HOOP_RDMA_GID_STRLEN 48
const char *hoop__rdma_gid_str(const uint8_t raw[16],
                               char buf[HOOP_RDMA_GID_STRLEN]);

/* Whether a RoCE GID holds an IPv4 address (::ffff:a.b.c.d). */
bool hoop__rdma_gid_is_ipv4(const uint8_t raw[16]);

#endif /* HOOP_TRANSPORT_RDMA_H */
