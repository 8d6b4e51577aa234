/*
 * Prints every value, size and offset of an nccl.h that a compiled program
 * depends on.  Built once against hoop's header and once against NVIDIA's;
 * nccl_abi.sh compares the two outputs line by line.
 */
#include <stddef.h>
#include <stdio.h>

#include <nccl.h>

#define VALUE(x) printf("%s = %lld\n", #x, (long long)(x))
#define SIZE(t) printf("sizeof(%s) = %zu\n", #t, sizeof(t))
#define OFFSET(t, f) printf("offsetof(%s, %s) = %zu\n", #t, #f, offsetof(t, f))

int main(void) {
  VALUE(NCCL_MAJOR);
  VALUE(NCCL_MINOR);
  VALUE(NCCL_VERSION_CODE);
  VALUE(NCCL_VERSION(2, 28, 9));
  VALUE(NCCL_VERSION(2, 8, 4));
  VALUE(NCCL_UNIQUE_ID_BYTES);
  VALUE(NCCL_SPLIT_NOCOLOR);
  VALUE(NCCL_CONFIG_UNDEF_INT);
  VALUE(NCCL_CONFIG_UNDEF_PTR == NULL);
  VALUE(NCCL_UNDEF_FLOAT * 1000);
  VALUE(NCCL_WIN_DEFAULT);
  VALUE(NCCL_WIN_COLL_SYMMETRIC);
  VALUE(NCCL_WIN_REQUIRED_ALIGNMENT);
  VALUE(NCCL_CTA_POLICY_DEFAULT);
  VALUE(NCCL_CTA_POLICY_EFFICIENCY);
  VALUE(NCCL_CTA_POLICY_ZERO);
  VALUE(NCCL_SHRINK_DEFAULT);
  VALUE(NCCL_SHRINK_ABORT);
  VALUE(NCCL_REVOKE_DEFAULT);

  VALUE(ncclSuccess);
  VALUE(ncclUnhandledCudaError);
  VALUE(ncclSystemError);
  VALUE(ncclInternalError);
  VALUE(ncclInvalidArgument);
  VALUE(ncclInvalidUsage);
  VALUE(ncclRemoteError);
  VALUE(ncclInProgress);
  VALUE(ncclNumResults);
  SIZE(ncclResult_t);

  VALUE(ncclSum);
  VALUE(ncclProd);
  VALUE(ncclMax);
  VALUE(ncclMin);
  VALUE(ncclAvg);
  VALUE(ncclNumOps);
  VALUE(ncclMaxRedOp);
  SIZE(ncclRedOp_t);

  VALUE(ncclInt8);
  VALUE(ncclChar);
  VALUE(ncclUint8);
  VALUE(ncclInt32);
  VALUE(ncclInt);
  VALUE(ncclUint32);
  VALUE(ncclInt64);
  VALUE(ncclUint64);
  VALUE(ncclFloat16);
  VALUE(ncclHalf);
  VALUE(ncclFloat32);
  VALUE(ncclFloat);
  VALUE(ncclFloat64);
  VALUE(ncclDouble);
  VALUE(ncclBfloat16);
  VALUE(ncclFloat8e4m3);
  VALUE(ncclFloat8e5m2);
  VALUE(ncclNumTypes);
  SIZE(ncclDataType_t);

  VALUE(ncclScalarDevice);
  VALUE(ncclScalarHostImmediate);
  SIZE(ncclScalarResidence_t);

  SIZE(ncclUniqueId);
  SIZE(ncclComm_t);
  SIZE(ncclWindow_t);

  SIZE(ncclConfig_t);
  OFFSET(ncclConfig_t, size);
  OFFSET(ncclConfig_t, magic);
  OFFSET(ncclConfig_t, version);
  OFFSET(ncclConfig_t, blocking);
  OFFSET(ncclConfig_t, cgaClusterSize);
  OFFSET(ncclConfig_t, minCTAs);
  OFFSET(ncclConfig_t, maxCTAs);
  OFFSET(ncclConfig_t, netName);
  OFFSET(ncclConfig_t, splitShare);
  OFFSET(ncclConfig_t, trafficClass);
  OFFSET(ncclConfig_t, commName);
  OFFSET(ncclConfig_t, collnetEnable);
  OFFSET(ncclConfig_t, CTAPolicy);
  OFFSET(ncclConfig_t, shrinkShare);
  OFFSET(ncclConfig_t, nvlsCTAs);
  OFFSET(ncclConfig_t, nChannelsPerNetPeer);
  OFFSET(ncclConfig_t, nvlinkCentricSched);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  VALUE(config.size);
  VALUE(config.magic);
  VALUE(config.version);
  VALUE(config.blocking);
  VALUE(config.cgaClusterSize);
  VALUE(config.minCTAs);
  VALUE(config.maxCTAs);
  VALUE(config.netName == NULL);
  VALUE(config.splitShare);
  VALUE(config.trafficClass);
  VALUE(config.commName == NULL);
  VALUE(config.collnetEnable);
  VALUE(config.CTAPolicy);
  VALUE(config.shrinkShare);
  VALUE(config.nvlsCTAs);
  VALUE(config.nChannelsPerNetPeer);
  VALUE(config.nvlinkCentricSched);

  SIZE(ncclSimInfo_t);
  OFFSET(ncclSimInfo_t, size);
  OFFSET(ncclSimInfo_t, magic);
  OFFSET(ncclSimInfo_t, version);
  OFFSET(ncclSimInfo_t, estimatedTime);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  VALUE(sim.size);
  VALUE(sim.magic);
  VALUE(sim.version);
  VALUE(sim.estimatedTime * 1000);
  return 0;
}
