/*
 * The alpha-beta cost model: a message costs alpha seconds plus beta
 * seconds per byte on the busiest link of the schedule.  It predicts each
 * algorithm's time for a call and picks the cheapest; all ranks must pick
 * the same, so its inputs are the communicator's size and settings (the
 * header carries the choice, and ranks that differ fail loudly).
 */
#ifndef HOOP_MODEL_H
#define HOOP_MODEL_H

#include <stddef.h>

#include "hoop.h"

struct hoop_comm;

double hoop__predict(const struct hoop_comm *comm, hoop_coll_t coll,
                     hoop_algo_t algo, size_t bytes);

/*
 * What `setting` (the communicator's, when the call was made) runs for
 * the call: the setting itself where the collective has that schedule,
 * else the model's cheapest (AUTO, and PS for broadcast and reduce;
 * every setting but ring for reduce-scatter and all-gather, whose
 * schedules are the ring and the hierarchical one).  Never PS for a rooted
 * collective, so that the header and the counters name what ran.
 */
hoop_algo_t hoop__choose_algo(const struct hoop_comm *comm,
                              hoop_algo_t setting, hoop_coll_t coll,
                              size_t bytes);

#endif /* HOOP_MODEL_H */
