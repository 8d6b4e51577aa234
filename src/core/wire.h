/*
 * The messages that reach a rank from outside its process while a
 * communicator forms and breaks, and one parser for each.  A parser is the
 * only place where that message's fields are bounded: sizes, ranks,
 * counts, enum values, and strings (which must end within their field).
 * Nothing reads a field of these messages before its parser has passed
 * it, so a peer that is buggy, of another version or hostile can neither
 * overrun a buffer nor feed nonsense further in.  Parsers read bytes and
 * touch no socket, which lets the fuzz targets (tests/fuzz) call them
 * directly.  Each returns true, or false with the reason in `why`.
 */
#ifndef HOOP_WIRE_H
#define HOOP_WIRE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hoop.h"
#include "core/peer.h"

#define HOOP_WIRE_MAGIC 0x686f6f70u /* "hoop" */

/* The most ranks one hoop_comm_shrink can leave out (shrink.c). */
#define HOOP_SHRINK_MAX_LOST 32
#define HOOP_WIRE_VERSION 9u

#define HOOP_AUTH_NONCE_BYTES 16
#define HOOP_AUTH_MAC_BYTES 32

/* A rank introducing itself to rank 0 at the rendezvous. */
struct hoop_hello {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t rank;
  int32_t nranks;
  struct hoop_peer_info info;
};

/*
 * Rank 0's answer to a hello: HOOP_SUCCESS and the communicator's session
 * (auth.h), then the table; or why not.
 */
struct hoop_reply {
  int32_t status; /* hoop_result_t */
  /* The job as it formed, and this rank's place in it: fewer ranks when an
     elastic job (HOOP_ELASTIC) formed without some. */
  int32_t nranks;
  int32_t rank;
  char message[256];
  uint8_t session[HOOP_AUTH_NONCE_BYTES];
};

/*
 * The first bytes of every connection between ranks (auth.h tells the
 * exchange it opens): who dials whom, for what, and the dialler's nonce.
 */
struct hoop_handshake {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t from;
  int32_t to;
  int32_t channel; /* a data channel, or one of the three below */
  int32_t kind;    /* a notice's: HOOP_NOTICE_FAILED or _EXCLUDED; else 0 */
  uint8_t nonce[HOOP_AUTH_NONCE_BYTES];
};

/* A failure notice: its seal (auth.h) and reason text follow. */
#define HOOP_NOTICE_CHANNEL (-1)
#define HOOP_NOTICE_BYTES 512
/* What a notice says: its sender failed, or it left the receiver out of
   the communicator that the survivors of a failure formed (shrink.c). */
#define HOOP_NOTICE_FAILED 0
#define HOOP_NOTICE_EXCLUDED 1
/* A stalled rank asking where this one is: a whereabouts answers. */
#define HOOP_QUERY_CHANNEL (-2)
/* A rank joining through rank 0: its hello follows the proof.  Also a
   process joining a running job (join.c), which sends nothing more. */
#define HOOP_RENDEZVOUS_CHANNEL (-3)

/*
 * The members' answer to a process that joins a running job (join.c):
 * HOOP_SUCCESS and the id of the communicator it joins as `rank` of
 * `nranks`; or why not.
 */
struct hoop_join_reply {
  int32_t status; /* hoop_result_t */
  int32_t nranks;
  int32_t rank;
  int32_t reserved;
  char message[256];
  unsigned char id[HOOP_UNIQUE_ID_BYTES];
};

/* The acceptor's answer to a handshake. */
struct hoop_auth_challenge {
  uint8_t nonce[HOOP_AUTH_NONCE_BYTES];
  uint8_t mac[HOOP_AUTH_MAC_BYTES];
};

/* The dialler's answer to the challenge. */
struct hoop_auth_proof {
  uint8_t mac[HOOP_AUTH_MAC_BYTES];
};

/*
 * The first bytes of every collective on every link.  The receiver checks
 * it against its own call, so ranks that disagree fail loudly instead of
 * mixing up data.
 */
struct hoop_wire_header {
  uint32_t magic;
  uint8_t version;
  uint8_t coll;
  uint8_t dtype;
  uint8_t op;
  uint64_t seq;
  uint64_t count;
  uint32_t slice_bytes;
  int32_t root;
  int32_t sender;
  uint32_t depth;
  uint16_t nchannels;
  uint8_t algo;
  uint8_t reserved[5];
  /*
   * What the sender puts on this link and expects on the way back, in
   * bytes (send/recv: a hash of the message sizes).  Every connection a
   * call uses carries a header each way, so a rank that only sends still
   * hears from its peer, and both ends check both directions.
   */
  uint64_t link_bytes;
  uint64_t back_bytes;
};
static_assert(sizeof(struct hoop_wire_header) == 64,
               "the wire header keeps data 64-byte aligned in staging");

/* What a rank was doing when asked (a query's answer). */
enum hoop_whereabouts_state {
  HOOP_AT_JOINING = 0, /* in hoop_comm_init_* */
  HOOP_AT_CALL = 1,    /* in a call */
  HOOP_AT_BROKEN = 2,  /* its communicator broke */
  HOOP_AT_SHRINKING = 3, /* in hoop_comm_shrink */
  HOOP_AT_COUNT
};

#define HOOP_WHEREABOUTS_CALL_BYTES 32

/* The answer to a query: where the asked rank is. */
struct hoop_whereabouts {
  uint32_t magic;
  uint32_t state;   /* enum hoop_whereabouts_state */
  uint64_t seq;     /* collectives started, this one included */
  int32_t wait_for; /* the peer its call waits on, or -1 */
  int32_t wait_send; /* 1: to send to it, 0: for its data */
  int64_t wait_ms;   /* how long it has waited on that peer */
  char call[HOOP_WHEREABOUTS_CALL_BYTES]; /* the call's name */
  /*
   * 1 while it runs a plan, whose header follows (link_bytes and
   * back_bytes 0): a rank waiting to connect with it compares the calls.
   */
  uint32_t in_plan;
  uint32_t reserved;
  struct hoop_wire_header plan;
  /*
   * For hoop_comm_shrink (shrink.c): the ranks this one holds lost, and,
   * from the survivors' coordinator once it has decided, the id their
   * communicator meets on (it holds the job's key: a whereabouts goes
   * only to a rank that proved it has that key).
   */
  int32_t nlost;
  int32_t lost[HOOP_SHRINK_MAX_LOST];
  uint32_t decided;
  uint32_t reserved2;
  unsigned char next_id[HOOP_UNIQUE_ID_BYTES];
};


/*
 * One published peer info, claimed by `rank`: an IPv4 or IPv6 address
 * with a port, a positive pid, a GPU count of at least 0, a host name
 * that ends within its field, and each transport's bytes as that
 * transport's parser bounds them (hoop__transports_parse).
 */
bool hoop__peer_info_parse(const void *bytes, int32_t rank,
                           struct hoop_peer_info *out, char *why,
                           size_t why_len);

/*
 * A hello of `len` bytes: its own magic and version, 1 <= nranks <=
 * HOOP_MAX_RANKS, 0 <= rank < nranks and a sane info for that rank.
 * Whether it belongs to this communicator is the caller's question.
 */
bool hoop__hello_parse(const void *bytes, size_t len, struct hoop_hello *out,
                       char *why, size_t why_len);

/*
 * A reply: a status that is a hoop_result_t and, with HOOP_SUCCESS, a
 * place 1 <= rank < nranks <= HOOP_MAX_RANKS; the message is cut to its
 * field, NUL-terminated and stripped of control characters.
 */
bool hoop__reply_parse(const void *bytes, size_t len, struct hoop_reply *out,
                       char *why, size_t why_len);

/* The table of `nranks` peer infos, entry i a sane info of rank i. */
bool hoop__peer_table_parse(const void *bytes, size_t len, int32_t nranks,
                            struct hoop_peer_info *out, char *why,
                            size_t why_len);

/*
 * A handshake for a communicator of `nranks` ranks: magic and version,
 * 0 <= from, to < nranks, from != to, channel_lo <= channel <=
 * channel_hi (what the listener that read it takes), and a kind that is
 * 0 but on a notice, which may also say HOOP_NOTICE_EXCLUDED.
 */
bool hoop__handshake_parse(const void *bytes, size_t len, int32_t nranks,
                           int32_t channel_lo, int32_t channel_hi,
                           struct hoop_handshake *out, char *why,
                           size_t why_len);

/*
 * A notice's reason, as text safe to log: at most `len` bytes up to the
 * first NUL, cut to `cap` - 1, control characters replaced by '?'.
 */
void hoop__notice_parse(const void *bytes, size_t len, char *reason,
                        size_t cap);

/*
 * A join reply: a status that is a result code, and with success
 * 2 <= nranks <= max_ranks and 1 <= rank < nranks; a message that ends
 * within its field (control characters made '?').
 */
bool hoop__join_reply_parse(const void *bytes, size_t len, int32_t max_ranks,
                            struct hoop_join_reply *out, char *why,
                            size_t why_len);

/*
 * A whereabouts from one of `nranks` ranks: a state that exists, a
 * waited-on rank in -1..nranks-1 with a 0/1 direction and a wait of at
 * least 0 ms, a call name that ends within its field (control
 * characters made '?'), in_plan 0 or 1, with a header that
 * hoop__wire_header_parse passes when 1, 0 to HOOP_SHRINK_MAX_LOST lost
 * ranks each below `nranks`, and decided 0 or 1.
 */
bool hoop__whereabouts_parse(const void *bytes, size_t len, int32_t nranks,
                             struct hoop_whereabouts *out, char *why,
                             size_t why_len);

/*
 * A collective's header (engine.h): magic and version, and a collective,
 * dtype, op and algorithm that exist, 1 to HOOP_MAX_NSOCKS channels.
 * Whether it matches this rank's call is the engine's question.
 */
bool hoop__wire_header_parse(const void *bytes, size_t len,
                             struct hoop_wire_header *out, char *why,
                             size_t why_len);

/*
 * Whether two headers describe the same call: everything but the bytes
 * each link carries (link_bytes, back_bytes) and the sender.
 */
bool hoop__wire_same_call(const struct hoop_wire_header *a,
                          const struct hoop_wire_header *b);

#endif /* HOOP_WIRE_H */
