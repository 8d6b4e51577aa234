/*
 * hoop_comm_shrink: after a failure, the ranks still alive agree on who is
 * left and meet in a new communicator, without the help of the ranks that
 * died or stopped.
 *
 * The lowest rank not held lost coordinates.  It asks the others where
 * they are, over the broken communicator's listeners (inquiry.c), round
 * after round; every other rank asks only the coordinator, and all answer
 * the questions they are asked while they wait.  Asking everyone from
 * everywhere cost N(N-1) connections a round, and at 64 ranks on two cores
 * the rounds never finished (bench/results/2026-11-29-shrink-cost.md);
 * this way a round costs 2(N-1).
 *
 * A rank whose listener refuses has gone.  The answers carry the ranks each
 * holds lost (its own refusals, and the ranks its stall report found
 * silent), and every rank adds those to its own, so the lists only grow:
 * the coordinator gathers them from everyone, and the others take the
 * coordinator's.  Once a rank has answered that it is shrinking, its
 * answer stands: what it held lost is in the coordinator's list, and what
 * it learns later it learns from the coordinator.  So a rank that missed a
 * round (a loaded machine) is asked again, and one that answered is not.
 * A rank that has not come to hoop_comm_shrink within the communicator's
 * timeout is held lost too, and so is a coordinator that does not answer
 * by then: the next rank coordinates.
 *
 * Once every rank the coordinator does not hold lost has answered that it
 * is shrinking, it decides, makes the id the survivors meet on, and hands
 * it out in its answers, from which every rank takes the ranks lost.  It
 * then sends every rank it left out a sealed notice that it was excluded:
 * a rank stopped by a signal or a debugger reads it when it runs again,
 * and so gets an error and no place, never a communicator of its own.
 *
 * The public hoop_comm_shrink (collectives.c) then checks that the new
 * communicator formed on every survivor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"

/*
 * How long one round waits for answers, and how often rounds start, each
 * growing with the ranks: the coordinator's answers come from N-1
 * processes that may share its cores, and N-1 ranks ask it every round.
 */
#define ANSWER_MS 100
#define PACE_MS 20
#define MS_PER_RANK 2
#define ROUND_MS_MAX 1000
/* How long a rank entering the shrink reads what its listener holds. */
#define SETTLE_MS 50
/*
 * Past the patience, how many rounds in a row a rank may be asked without
 * answering that it is shrinking before it is held lost: a coordinator
 * that takes over has not been asked before.
 */
#define ABSENT_ROUNDS 3

static int round_ms(int base, int nranks) {
  int ms = base + MS_PER_RANK * nranks;
  return ms < ROUND_MS_MAX ? ms : ROUND_MS_MAX;
}

struct shrink {
  struct hoop_comm *comm;
  struct hoop_whereabouts *where; /* [nranks] each rank's latest answer */
  enum hoop_answer *got;          /* [nranks] what `where` holds */
  struct hoop_whereabouts *heard; /* [nranks] this round's answers */
  enum hoop_answer *heard_got;    /* [nranks] */
  int *missed;   /* [nranks] rounds in a row asked and not shrinking */
  uint8_t *skip; /* [nranks] whom not to ask */
  int answer_ms;
  int pace_ms;
  long long patience; /* from then, the absent are lost */
  long long give_up;
};

static int count_lost(const struct hoop_comm *comm) {
  int lost = 0;
  for (int p = 0; p < comm->nranks; p++)
    lost += comm->lost[p];
  return lost;
}

static int lowest_kept(const struct hoop_comm *comm) {
  for (int p = 0; p < comm->nranks; p++) {
    if (!comm->lost[p])
      return p;
  }
  return -1;
}

static hoop_result_t left_out(struct hoop_comm *comm, int by) {
  char desc[128];
  comm->excluded = true;
  return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                    "hoop_comm_shrink: %s holds this rank lost (it did not "
                    "answer in time, or its stall report found it silent); "
                    "the survivors go on without it",
                    hoop__peer_desc(comm, by, desc, sizeof desc));
}

/*
 * Takes in one round's answers.  *decider is a rank that has decided (-1:
 * none); a rank that holds this one lost makes it an error.
 */
static hoop_result_t learn(struct shrink *s, int *decider) {
  struct hoop_comm *comm = s->comm;
  *decider = -1;
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank || comm->lost[p])
      continue;
    if (s->got[p] == HOOP_ANSWER_GONE) {
      HOOP_INFO("rank %d: hoop_comm_shrink: rank %d has gone", comm->rank,
                p);
      comm->lost[p] = 1;
    }
  }
  for (int p = 0; p < comm->nranks; p++) {
    const struct hoop_whereabouts *w = &s->where[p];
    if (p == comm->rank || s->got[p] != HOOP_ANSWER_GIVEN)
      continue;
    if (w->decided && *decider < 0)
      *decider = p;
    for (int i = 0; i < w->nlost; i++) {
      if (w->lost[i] == comm->rank)
        return left_out(comm, p);
      comm->lost[w->lost[i]] = 1;
    }
  }
  return HOOP_SUCCESS;
}

/* Past the patience: ranks asked that are not shrinking by now are lost. */
static void lose_the_absent(struct shrink *s) {
  struct hoop_comm *comm = s->comm;
  for (int p = 0; p < comm->nranks; p++) {
    if (s->skip[p] || comm->lost[p] || s->missed[p] < ABSENT_ROUNDS)
      continue;
    HOOP_WARN("rank %d: hoop_comm_shrink: rank %d did not come within "
              "%d ms; the others go on without it",
              comm->rank, p, comm->timeout_ms);
    comm->lost[p] = 1;
  }
}

/*
 * Whether p has answered that it is shrinking; learn() has added the
 * ranks it held lost to this rank's.
 */
static bool stands(const struct shrink *s, int p) {
  return s->got[p] == HOOP_ANSWER_GIVEN &&
         s->where[p].state == HOOP_AT_SHRINKING;
}

/*
 * Whom to ask this round: the coordinator asks the ranks whose answers do
 * not stand; any other rank asks the coordinator, and the ranks that asked
 * it since the last round.  A rank asks another only when it takes that
 * one for the coordinator, or coordinates itself: so a rank that holds
 * more ranks lost than this one tells it so without being asked by all.
 */
static void choose_asked(struct shrink *s) {
  struct hoop_comm *comm = s->comm;
  int coordinator = lowest_kept(comm);
  for (int p = 0; p < comm->nranks; p++) {
    s->skip[p] = p == comm->rank || comm->lost[p] ||
                 (coordinator == comm->rank
                      ? stands(s, p)
                      : p != coordinator && !comm->asked_me[p]);
    comm->asked_me[p] = 0;
  }
}

/* Asks the chosen ranks, and keeps what they say. */
static void ask_round(struct shrink *s) {
  struct hoop_comm *comm = s->comm;
  hoop__comm_ask(comm, s->skip, s->answer_ms, s->heard, s->heard_got);
  for (int p = 0; p < comm->nranks; p++) {
    if (s->skip[p])
      continue;
    if (s->heard_got[p] == HOOP_ANSWER_GIVEN) {
      s->where[p] = s->heard[p];
      s->got[p] = HOOP_ANSWER_GIVEN;
    } else if (s->heard_got[p] == HOOP_ANSWER_GONE) {
      s->got[p] = HOOP_ANSWER_GONE;
    }
    bool shrinking = s->heard_got[p] == HOOP_ANSWER_GIVEN &&
                     s->heard[p].state == HOOP_AT_SHRINKING;
    s->missed[p] = shrinking ? 0 : s->missed[p] + 1;
  }
}

/* Whether every rank not held lost has answered that it is shrinking. */
static bool all_agree(const struct shrink *s) {
  const struct hoop_comm *comm = s->comm;
  for (int p = 0; p < comm->nranks; p++) {
    if (p != comm->rank && !comm->lost[p] && !stands(s, p))
      return false;
  }
  return true;
}

/* The ranks that have neither agreed nor been lost, for the timeout. */
static void list_undecided(const struct shrink *s, char *buf, size_t len) {
  const struct hoop_comm *comm = s->comm;
  size_t used = 0;
  buf[0] = '\0';
  for (int p = 0; p < comm->nranks && used + 16 < len; p++) {
    if (p == comm->rank || comm->lost[p])
      continue;
    used += (size_t)snprintf(buf + used, len - used, "%s%d",
                             used > 0 ? ", " : "", p);
  }
}

/* Answers the others' questions until `until`. */
static hoop_result_t serve_until(struct hoop_comm *comm, long long until) {
  for (;;) {
    long long left = until - hoop__now_ms();
    HOOP_CHECK(hoop__comm_serve(comm, left > 0 ? (int)left : 0));
    if (left <= 0)
      return HOOP_SUCCESS;
  }
}

/*
 * The coordinator's last step in the old communicator: every survivor
 * fetches the decision from its answers before it stops answering.
 */
static hoop_result_t hand_out(struct shrink *s) {
  struct hoop_comm *comm = s->comm;
  for (;;) {
    int waiting = 0;
    for (int p = 0; p < comm->nranks; p++) {
      s->skip[p] = p == comm->rank || comm->lost[p] || comm->fetched[p];
      waiting += !s->skip[p];
    }
    if (waiting == 0)
      return HOOP_SUCCESS;
    if (hoop__now_ms() > s->give_up)
      return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                        "hoop_comm_shrink: %d survivor(s) did not fetch the "
                        "decision within %d ms",
                        waiting, 2 * comm->timeout_ms);
    /*
     * One that has gone since would hold up the survivors' rendezvous for
     * its whole timeout: fail now, and the next shrink leaves it out.
     */
    long long round_end = hoop__now_ms() + s->pace_ms;
    hoop__comm_ask(comm, s->skip, s->answer_ms, s->heard, s->heard_got);
    for (int p = 0; p < comm->nranks; p++) {
      char desc[128];
      if (!s->skip[p] && s->heard_got[p] == HOOP_ANSWER_GONE)
        return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                          "hoop_comm_shrink: %s was lost before it learnt "
                          "who goes on (call it again to go on without it)",
                          hoop__peer_desc(comm, p, desc, sizeof desc));
    }
    HOOP_CHECK(serve_until(comm, round_end));
  }
}

/* Tells every rank left out, alive or stopped, that it has no place. */
static void notify_left_out(struct hoop_comm *comm, int kept) {
  char text[HOOP_NOTICE_BYTES];
  snprintf(text, sizeof text,
           "%d of %d ranks went on in a new communicator after a failure, "
           "and this rank was held lost (gone, or not answering in time)",
           kept, comm->nranks);
  hoop__comm_send_notices(comm, comm->lost, HOOP_NOTICE_EXCLUDED, text);
}

/* Agrees with the others; the survivors' id in comm->next_id. */
static hoop_result_t agree(struct shrink *s) {
  struct hoop_comm *comm = s->comm;
  for (;;) {
    if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
      return HOOP_ERROR(comm, HOOP_ERR_ABORTED,
                        "hoop_comm_abort() was called during "
                        "hoop_comm_shrink");
    long long round_end = hoop__now_ms() + s->pace_ms;
    choose_asked(s);
    ask_round(s);
    if (comm->excluded)
      return HOOP_ERR_REMOTE;
    int decider;
    HOOP_CHECK(learn(s, &decider));
    if (decider >= 0) {
      const struct hoop_whereabouts *w = &s->where[decider];
      memset(comm->lost, 0, (size_t)comm->nranks);
      for (int i = 0; i < w->nlost; i++) {
        if (w->lost[i] == comm->rank)
          return left_out(comm, decider);
        comm->lost[w->lost[i]] = 1;
      }
      memcpy(comm->next_id.internal, w->next_id, sizeof w->next_id);
      return HOOP_SUCCESS;
    }
    if (count_lost(comm) > HOOP_SHRINK_MAX_LOST)
      return HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                        "hoop_comm_shrink: %d ranks were lost at once; it "
                        "leaves out at most %d",
                        count_lost(comm), HOOP_SHRINK_MAX_LOST);
    long long now = hoop__now_ms();
    if (now > s->patience)
      lose_the_absent(s);
    if (lowest_kept(comm) == comm->rank && all_agree(s)) {
      HOOP_CHECK(hoop__comm_successor_id(comm, &comm->next_id));
      comm->decided = true;
      return HOOP_SUCCESS;
    }
    if (now > s->give_up) {
      char who[160];
      list_undecided(s, who, sizeof who);
      return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                        "hoop_comm_shrink: no agreement within %d ms with "
                        "rank(s) %s",
                        2 * comm->timeout_ms, who);
    }
    HOOP_CHECK(serve_until(comm, round_end));
  }
}

static hoop_result_t shrink(struct shrink *s, const hoop_config_t *config,
                            hoop_comm_t *newcomm, int *old_ranks) {
  struct hoop_comm *comm = s->comm;
  if (comm->excluded)
    return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                      "hoop_comm_shrink: the other ranks left this rank out "
                      "already: it has no place among the survivors");
  /* Called on a live communicator, it is a choice all ranks make. */
  if (hoop__comm_broken(comm) == HOOP_SUCCESS) {
    HOOP_ERROR(comm, HOOP_ERR_ABORTED, "hoop_comm_shrink was called");
    hoop__comm_break(comm, HOOP_ERR_ABORTED);
  }
  comm->shrinking = true;
  /* A shrink after one that failed (a survivor died meanwhile) starts over. */
  comm->decided = false;
  memset(comm->fetched, 0, (size_t)comm->nranks);
  memset(comm->asked_me, 0, (size_t)comm->nranks);
  HOOP_CHECK(hoop__comm_serve(comm, SETTLE_MS));
  long long start = hoop__now_ms();
  s->patience = start + comm->timeout_ms;
  s->give_up = start + 2LL * comm->timeout_ms;
  s->answer_ms = round_ms(ANSWER_MS, comm->nranks);
  s->pace_ms = round_ms(PACE_MS, comm->nranks);
  for (int p = 0; p < comm->nranks; p++)
    s->got[p] = HOOP_ANSWER_NONE;
  HOOP_CHECK(agree(s));
  int kept = comm->nranks - count_lost(comm), newrank = 0;
  for (int p = 0, i = 0; p < comm->nranks; p++) {
    if (comm->lost[p])
      continue;
    if (p == comm->rank)
      newrank = i;
    if (old_ranks != NULL)
      old_ranks[i] = p;
    i++;
  }
  if (comm->decided) {
    HOOP_CHECK(hand_out(s));
    notify_left_out(comm, kept);
  }
  HOOP_INFO("rank %d: hoop_comm_shrink: %d of %d ranks go on; this is rank "
            "%d of them",
            comm->rank, kept, comm->nranks, newrank);
  hoop_result_t res =
      hoop__comm_create(newcomm, kept, newrank, &comm->next_id, config);
  if (res == HOOP_SUCCESS)
    hoop__comm_pass_joins(comm, *newcomm);
  if (res != HOOP_SUCCESS) {
    char why[HOOP_ERROR_MAX];
    snprintf(why, sizeof why, "%s", hoop_last_error());
    return HOOP_ERROR(comm, res,
                      "hoop_comm_shrink: the survivors' communicator did not "
                      "form (call it again to leave out a rank lost "
                      "meanwhile): %s",
                      why);
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__comm_shrink(struct hoop_comm *comm,
                                const hoop_config_t *config,
                                struct hoop_comm **newcomm, int *old_ranks) {
  *newcomm = NULL;
  HOOP_CHECK(hoop__comm_claim(comm, "hoop_comm_shrink"));
  int n = comm->nranks;
  struct shrink s = {
      .comm = comm,
      .where = calloc((size_t)n, sizeof *s.where),
      .got = calloc((size_t)n, sizeof *s.got),
      .heard = calloc((size_t)n, sizeof *s.heard),
      .heard_got = calloc((size_t)n, sizeof *s.heard_got),
      .missed = calloc((size_t)n, sizeof *s.missed),
      .skip = calloc((size_t)n, sizeof *s.skip),
  };
  hoop_result_t res =
      s.where == NULL || s.got == NULL || s.heard == NULL ||
              s.heard_got == NULL || s.missed == NULL || s.skip == NULL
          ? HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY,
                       "hoop_comm_shrink: tables for %d ranks", n)
          : shrink(&s, config, newcomm, old_ranks);
  free(s.where);
  free(s.got);
  free(s.heard);
  free(s.heard_got);
  free(s.missed);
  free(s.skip);
  hoop__comm_leave(comm);
  return res;
}
