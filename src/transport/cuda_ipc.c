/* The CUDA IPC transport (cuda_ipc.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/cuda_sync.h"
#include "transport/cuda_ipc.h"

/* One counter per cache line, so ranks' writes do not share a line. */
#define COUNTER_STRIDE 64

/* After the counters: per rank, HOOP_IPC_RECORDS slots of a number (written
 * last, released) and the record. */
struct mailbox_slot {
  uint64_t number;
  unsigned char rec[HOOP_IPC_RECORD_BYTES];
  unsigned char pad[64 - 8 - HOOP_IPC_RECORD_BYTES];
};

static struct mailbox_slot *slot_of(const struct hoop_ipc *ipc, int q,
                                    uint64_t number) {
  struct mailbox_slot *box =
      (struct mailbox_slot *)((char *)ipc->segment +
                              (size_t)ipc->nranks * COUNTER_STRIDE);
  return &box[(size_t)q * HOOP_IPC_RECORDS + number % HOOP_IPC_RECORDS];
}

static void fail(struct hoop_ipc *ipc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail(struct hoop_ipc *ipc, const char *fmt, ...) {
  if (ipc->why[0] != '\0')
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ipc->why, sizeof ipc->why, fmt, ap);
  va_end(ap);
}

static int cuda_ok(struct hoop_ipc *ipc, cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return 1;
  cudaGetLastError();
  fail(ipc, "%s: %s", what, cudaGetErrorString(e));
  return 0;
}

static int map_segment(struct hoop_ipc *ipc, int fd) {
  void *p = mmap(NULL, ipc->segment_bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    fail(ipc, "mmap of %s: %s", ipc->segment_name, strerror(errno));
    return 0;
  }
  ipc->segment = p;
  return 1;
}

static int create_segment(struct hoop_ipc *ipc, uint64_t comm_id) {
  snprintf(ipc->segment_name, sizeof ipc->segment_name,
           "/hoop-%d-ipc-%016llx", (int)getpid(),
           (unsigned long long)comm_id);
  int fd = shm_open(ipc->segment_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                    0600);
  if (fd < 0) {
    fail(ipc, "shm_open(%s): %s", ipc->segment_name, strerror(errno));
    return 0;
  }
  ipc->linked = 1;
  int err = posix_fallocate(fd, 0, (off_t)ipc->segment_bytes);
  int ok = err == 0;
  if (!ok)
    fail(ipc, "reserving %zu bytes for %s: %s", ipc->segment_bytes,
         ipc->segment_name, strerror(err));
  ok = ok && map_segment(ipc, fd);
  close(fd);
  if (ok)
    memset(ipc->segment, 0, ipc->segment_bytes);
  return ok;
}

static int open_segment(struct hoop_ipc *ipc, const char *name) {
  snprintf(ipc->segment_name, sizeof ipc->segment_name, "%s", name);
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    fail(ipc, "shm_open(%s) made by rank 0: %s", name, strerror(errno));
    return 0;
  }
  int ok = map_segment(ipc, fd);
  close(fd);
  return ok;
}

void hoop__ipc_create(uint64_t comm_id, int rank, int nranks, int device,
                      size_t chunk_bytes, struct hoop_ipc **out_ipc,
                      struct hoop_ipc_export *out) {
  memset(out, 0, sizeof *out);
  out->device = device;
  struct hoop_ipc *ipc = calloc(1, sizeof *ipc);
  *out_ipc = ipc;
  if (ipc == NULL)
    return;
  ipc->rank = rank;
  ipc->nranks = nranks;
  ipc->device = device;
  ipc->chunk_bytes = chunk_bytes;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t used = (size_t)nranks *
                (COUNTER_STRIDE + HOOP_IPC_RECORDS * sizeof(struct mailbox_slot));
  ipc->segment_bytes = (used + page - 1) / page * page;
  if (nranks > HOOP_IPC_MAX_RANKS) {
    fail(ipc, "%d ranks on one host; CUDA IPC serves at most %d",
         nranks, HOOP_IPC_MAX_RANKS);
    return;
  }
  if (!hoop__cuda_memops_available()) {
    fail(ipc, "this driver offers no stream memory operations");
    return;
  }
  void *scratch = NULL;
  if (!cuda_ok(ipc, cudaSetDevice(device), "cudaSetDevice") ||
      !cuda_ok(ipc, cudaMalloc(&scratch, 2 * chunk_bytes),
               "cudaMalloc of the IPC window"))
    return;
  ipc->scratch[ipc->rank] = scratch;
  if (!cuda_ok(ipc, cudaIpcGetMemHandle(&out->scratch, scratch),
               "cudaIpcGetMemHandle"))
    return;
  if (ipc->rank == 0) {
    if (!create_segment(ipc, comm_id))
      return;
    snprintf(out->segment, sizeof out->segment, "%s", ipc->segment_name);
  }
  out->ok = 1;
}

int hoop__ipc_attach(struct hoop_ipc *ipc,
                     const struct hoop_ipc_export *all) {
  for (int q = 0; q < ipc->nranks; q++) {
    if (q == ipc->rank)
      continue;
    void *p = NULL;
    char what[64];
    snprintf(what, sizeof what, "cudaIpcOpenMemHandle of rank %d's window",
             q);
    cudaIpcMemHandle_t h = all[q].scratch;
    if (!cuda_ok(ipc, cudaIpcOpenMemHandle(&p, h,
                                           cudaIpcMemLazyEnablePeerAccess),
                 what))
      return -1;
    ipc->scratch[q] = p;
  }
  if (ipc->rank != 0 && !open_segment(ipc, all[0].segment))
    return -1;
  if (!cuda_ok(ipc,
               cudaHostRegister(ipc->segment, ipc->segment_bytes,
                                cudaHostRegisterMapped |
                                    cudaHostRegisterPortable),
               "cudaHostRegister of the counter segment"))
    return -1;
  ipc->registered = 1;
  void *dev = NULL;
  if (!cuda_ok(ipc, cudaHostGetDevicePointer(&dev, ipc->segment, 0),
               "cudaHostGetDevicePointer of the counter segment"))
    return -1;
  for (int q = 0; q < ipc->nranks; q++) {
    size_t at = (size_t)q * COUNTER_STRIDE;
    ipc->phase[q] = (uint32_t *)((char *)ipc->segment + at);
    ipc->phase_dev[q] = (CUdeviceptr)(uintptr_t)dev + at;
  }
  return 0;
}

void hoop__ipc_unlink(struct hoop_ipc *ipc) {
  if (ipc->linked)
    shm_unlink(ipc->segment_name);
  ipc->linked = 0;
}

void hoop__ipc_destroy(struct hoop_ipc *ipc) {
  if (ipc == NULL)
    return;
  hoop__ipc_unlink(ipc);
  for (int q = 0; q < ipc->nranks && q < HOOP_IPC_MAX_RANKS; q++) {
    if (ipc->scratch[q] == NULL)
      continue;
    if (q == ipc->rank)
      cudaFree(ipc->scratch[q]);
    else
      cudaIpcCloseMemHandle(ipc->scratch[q]);
  }
  if (ipc->registered)
    cudaHostUnregister(ipc->segment);
  if (ipc->segment != NULL)
    munmap(ipc->segment, ipc->segment_bytes);
  cudaGetLastError();
  free(ipc);
}

cudaError_t hoop__ipc_signal(struct hoop_ipc *ipc, cudaStream_t s,
                             uint32_t phase) {
  return hoop__cuda_stream_write(s, ipc->phase_dev[ipc->rank], phase);
}

cudaError_t hoop__ipc_wait(struct hoop_ipc *ipc, cudaStream_t s, int peer,
                           uint32_t phase) {
  for (int q = 0; q < ipc->nranks; q++) {
    if (q == ipc->rank || (peer >= 0 && q != peer))
      continue;
    cudaError_t e = hoop__cuda_stream_wait(s, ipc->phase_dev[q], phase);
    if (e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

uint32_t hoop__ipc_phase(const struct hoop_ipc *ipc, int q) {
  return __atomic_load_n(ipc->phase[q], __ATOMIC_ACQUIRE);
}

void hoop__ipc_release(struct hoop_ipc *ipc, uint32_t phase) {
  for (int q = 0; q < ipc->nranks; q++)
    __atomic_store_n(ipc->phase[q], phase, __ATOMIC_RELEASE);
}

/*
 * A seqlock of one writer per slot: the number is WRITING while the record
 * changes, and a reader that sees the number change under it retries.  A
 * slot never written holds 0.
 */
#define WRITING UINT64_MAX

void hoop__ipc_post(struct hoop_ipc *ipc, uint64_t number, const void *rec) {
  struct mailbox_slot *slot = slot_of(ipc, ipc->rank, number);
  __atomic_store_n(&slot->number, WRITING, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  memcpy(slot->rec, rec, HOOP_IPC_RECORD_BYTES);
  __atomic_store_n(&slot->number, number, __ATOMIC_RELEASE);
}

int hoop__ipc_read(const struct hoop_ipc *ipc, int q, uint64_t number,
                   void *rec) {
  const struct mailbox_slot *slot = slot_of(ipc, q, number);
  for (;;) {
    uint64_t before = __atomic_load_n(&slot->number, __ATOMIC_ACQUIRE);
    if (before == WRITING)
      continue;
    memcpy(rec, slot->rec, HOOP_IPC_RECORD_BYTES);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&slot->number, __ATOMIC_RELAXED) != before)
      continue;
    return before == number ? 0 : before < number ? -1 : 1;
  }
}
