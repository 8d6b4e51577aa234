/*
 * Checkpoints: the model's parameters and the optimiser's state after a
 * whole epoch, written atomically (a temporary file, fsync, rename), so a
 * crash mid-write leaves the previous checkpoint intact.
 */
#ifndef HOOP_TRAIN_CHECKPOINT_H
#define HOOP_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"

int ckpt_save(const char *path, const model_t *m, const optim_t *o,
              int epochs_done, uint64_t seed, char *err, size_t errlen);

/*
 * Reads a checkpoint into m and o, which must already have the model
 * shape and optimiser kind it was written with; a checkpoint of another
 * shape, another seed, a truncated or altered file is refused with the
 * reason in err.  Returns 0, or -1.
 */
int ckpt_load(const char *path, model_t *m, optim_t *o, int *epochs_done,
              uint64_t seed, char *err, size_t errlen);

#endif
