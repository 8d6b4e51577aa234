/*
 * The host half of NCCL's device API (nccl_device.h, NCCL 2.28): kernels
 * that call NCCL from the GPU through a device communicator.  hoop runs
 * collectives from the host and has no such kernels, so making a device
 * communicator, or sizing what one would need, fails with a message that
 * says so.  The functions exist because programs built against NCCL 2.28
 * (PyTorch 2.11's libtorch_cuda.so among them) reference them, and a
 * missing symbol stops such a program before main, whether or not it ever
 * uses the device API.
 *
 * The team queries answer for what hoop gives: every rank is in the world
 * team, and no rank can load or store another's memory from a kernel, so a
 * rank's load/store-accessible (LSA) team is itself alone and its rail team
 * (one rank of each LSA team) is the world.
 */
#include <stdbool.h>

#include "nccl/nccl_comm.h"

/* nccl_device.h's types, as far as the host functions take them. */
typedef struct ncclTeam {
  int nRanks, rank, stride;
} ncclTeam_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

#define NO_DEVICE_API                                                        \
  "hoop's libnccl.so.2 has no NCCL device API (kernels that call NCCL); "  \
  "the host collectives run on device buffers"

static ncclResult_t no_device_api(const char *what) {
  return nccl__error(ncclInvalidUsage, "%s: " NO_DEVICE_API, what);
}

NCCL_EXPORT ncclResult_t pncclDevCommCreate(ncclComm_t comm,
                                            const ncclDevCommRequirements_t *req,
                                            ncclDevComm_t *out) {
  (void)comm, (void)req, (void)out;
  return no_device_api("ncclDevCommCreate");
}
NCCL_ALIAS(ncclDevCommCreate);

NCCL_EXPORT ncclResult_t pncclDevCommDestroy(ncclComm_t comm,
                                             const ncclDevComm_t *devComm) {
  (void)comm, (void)devComm;
  return nccl__error(ncclInvalidArgument,
                     "ncclDevCommDestroy: ncclDevCommCreate made no device "
                     "communicator to destroy (" NO_DEVICE_API ")");
}
NCCL_ALIAS(ncclDevCommDestroy);

NCCL_EXPORT ncclResult_t pncclLsaBarrierCreateRequirement(
    ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle,
    ncclDevResourceRequirements_t *outReq) {
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return no_device_api("ncclLsaBarrierCreateRequirement");
}
NCCL_ALIAS(ncclLsaBarrierCreateRequirement);

NCCL_EXPORT ncclResult_t pncclGinBarrierCreateRequirement(
    ncclComm_t comm, ncclTeam_t team, int nBarriers,
    ncclGinBarrierHandle_t *outHandle, ncclDevResourceRequirements_t *outReq) {
  (void)comm, (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return no_device_api("ncclGinBarrierCreateRequirement");
}
NCCL_ALIAS(ncclGinBarrierCreateRequirement);

NCCL_EXPORT ncclResult_t pncclLLA2ACreateRequirement(
    int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
    ncclDevResourceRequirements_t *outReq) {
  (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
  return no_device_api("ncclLLA2ACreateRequirement");
}
NCCL_ALIAS(ncclLLA2ACreateRequirement);

/* No device all-to-all runs here, so it needs no slots. */
NCCL_EXPORT int pncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  return 0;
}
NCCL_ALIAS(ncclLLA2ACalcSlots);

/*
 * The teams: a handle that is no live communicator gets the empty team
 * (and this thread's last error says why), since these return no code.
 */
static bool team_of(ncclComm_t comm, const char *what, ncclTeam_t *t) {
  if (nccl__comm_valid(comm))
    return true;
  nccl__error(ncclInvalidArgument, "%s: %p is not a live communicator", what,
              (void *)comm);
  *t = (ncclTeam_t){0, -1, 0};
  return false;
}

/* Every rank (world, rail), or this rank alone (LSA). */
static ncclTeam_t answer_team(ncclComm_t comm, const char *what, bool alone) {
  ncclTeam_t t;
  if (team_of(comm, what, &t))
    t = alone ? (ncclTeam_t){1, 0, 1}
              : (ncclTeam_t){comm->nranks, comm->rank, 1};
  return t;
}

NCCL_EXPORT ncclTeam_t pncclTeamWorld(ncclComm_t comm) {
  return answer_team(comm, "ncclTeamWorld", false);
}
NCCL_ALIAS(ncclTeamWorld);

NCCL_EXPORT ncclTeam_t pncclTeamLsa(ncclComm_t comm) {
  return answer_team(comm, "ncclTeamLsa", true);
}
NCCL_ALIAS(ncclTeamLsa);

NCCL_EXPORT ncclTeam_t pncclTeamRail(ncclComm_t comm) {
  return answer_team(comm, "ncclTeamRail", false);
}
NCCL_ALIAS(ncclTeamRail);

/* A team's ranks are evenly strided through the world around this rank. */
NCCL_EXPORT int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team,
                                     int rank) {
  ncclTeam_t t;
  if (!team_of(comm, "ncclTeamRankToWorld", &t))
    return -1;
  return comm->rank + (rank - team.rank) * team.stride;
}
NCCL_ALIAS(ncclTeamRankToWorld);

/* This rank's LSA team is itself, at LSA rank 0. */
NCCL_EXPORT int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team,
                                   int rank) {
  ncclTeam_t t;
  if (!team_of(comm, "ncclTeamRankToLsa", &t))
    return -1;
  return (rank - team.rank) * team.stride;
}
NCCL_ALIAS(ncclTeamRankToLsa);
