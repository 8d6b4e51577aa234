/*
 * The MLP on a CUDA device (gpu.h).  Matrices are row-major as in mlp.c;
 * cuBLAS is column-major, so each product is computed transposed: a
 * row-major [r][c] array is a column-major c x r matrix.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gpu.h"
}

struct gpu_mlp {
  int nlayers;
  int sizes[MLP_MAX_LAYERS + 1];
  size_t offset[MLP_MAX_LAYERS + 1];
  size_t nparams;
  int batch_cap;
  int nstate;
  cudaStream_t stream;
  cublasHandle_t blas;
  float *params, *grads, *state[2];
  float *act[MLP_MAX_LAYERS + 1];
  float *delta[2];
};

namespace {

int cuda_failed(cudaError_t e, const char *what, char *err, size_t errlen) {
  if (e == cudaSuccess)
    return 0;
  snprintf(err, errlen, "%s: CUDA error %s: %s", what, cudaGetErrorName(e),
           cudaGetErrorString(e));
  return -1;
}

int blas_failed(cublasStatus_t s, const char *what, char *err,
                size_t errlen) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return 0;
  snprintf(err, errlen, "%s: cuBLAS status %d", what, (int)s);
  return -1;
}

#define CUDA_TRY(call, what)                                                 \
  do {                                                                       \
    if (cuda_failed((call), (what), err, errlen) != 0)                       \
      return -1;                                                             \
  } while (0)

#define BLAS_TRY(call, what)                                                 \
  do {                                                                       \
    if (blas_failed((call), (what), err, errlen) != 0)                       \
      return -1;                                                             \
  } while (0)

const int kThreads = 256;

unsigned blocks(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return (unsigned)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

/* y[b][o] += bias[o], then the ReLU unless this is the last layer. */
__global__ void bias_relu(float *y, const float *bias, size_t n, int out,
                          int relu) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = y[i] + bias[i % (size_t)out];
    y[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
}

/* gb[o] += dy[b][o] for b in order, as mlp.c adds them. */
__global__ void bias_grad(float *gb, const float *dy, int batch, int out) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out)
    return;
  float g = gb[o];
  for (int b = 0; b < batch; b++)
    g += dy[(size_t)b * out + o];
  gb[o] = g;
}

/* dx masked by the ReLU that produced a. */
__global__ void relu_mask(float *dx, const float *a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dx[i] = a[i] > 0.0f ? dx[i] : 0.0f;
}

/* optim.c's SGD (PyTorch's rule), element by element. */
__global__ void sgd(float *p, const float *g, float *buf, size_t n, float lr,
                    float momentum, float wd) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float d = g[i] + wd * p[i];
    if (momentum != 0.0f) {
      buf[i] = momentum * buf[i] + d;
      d = buf[i];
    }
    p[i] -= lr * d;
  }
}

/* optim.c's Adam; the bias corrections come from the host. */
__global__ void adam(float *p, const float *g, float *m, float *v, size_t n,
                     float step, float c2_sqrt, float b1, float b2, float wd,
                     float eps) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float d = g[i] + wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * d;
    v[i] = b2 * v[i] + (1.0f - b2) * d * d;
    p[i] -= step * m[i] / (sqrtf(v[i]) / c2_sqrt + eps);
  }
}

int alloc_all(gpu_mlp_t *g, char *err, size_t errlen) {
  int widest = 0;
  for (int l = 0; l <= g->nlayers; l++)
    widest = g->sizes[l] > widest ? g->sizes[l] : widest;
  size_t pbytes = g->nparams * sizeof(float);
  CUDA_TRY(cudaMalloc((void **)&g->params, pbytes), "cudaMalloc");
  CUDA_TRY(cudaMalloc((void **)&g->grads, pbytes), "cudaMalloc");
  CUDA_TRY(cudaMemset(g->grads, 0, pbytes), "cudaMemset");
  for (int i = 0; i < g->nstate; i++)
    CUDA_TRY(cudaMalloc((void **)&g->state[i], pbytes), "cudaMalloc");
  for (int l = 0; l <= g->nlayers; l++)
    CUDA_TRY(cudaMalloc((void **)&g->act[l],
                        (size_t)g->batch_cap * g->sizes[l] * sizeof(float)),
             "cudaMalloc");
  for (int i = 0; i < 2; i++)
    CUDA_TRY(cudaMalloc((void **)&g->delta[i],
                        (size_t)g->batch_cap * widest * sizeof(float)),
             "cudaMalloc");
  return 0;
}

} // namespace

extern "C" gpu_mlp_t *gpu_mlp_create(const mlp_t *m, const optim_t *o,
                                     int rank, char *err, size_t errlen) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    snprintf(err, errlen, "--device cuda: no CUDA device (%s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "none listed");
    return NULL;
  }
  gpu_mlp_t *g = (gpu_mlp_t *)calloc(1, sizeof *g);
  if (g == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  g->nlayers = m->nlayers;
  memcpy(g->sizes, m->sizes, sizeof g->sizes);
  memcpy(g->offset, m->offset, sizeof g->offset);
  g->nparams = m->nparams;
  g->batch_cap = m->batch_cap;
  g->nstate = optim_nstate(o->kind);
  if (cuda_failed(cudaSetDevice(rank % count), "cudaSetDevice", err,
                  errlen) != 0 ||
      cuda_failed(cudaStreamCreateWithFlags(&g->stream,
                                            cudaStreamNonBlocking),
                  "cudaStreamCreate", err, errlen) != 0 ||
      blas_failed(cublasCreate(&g->blas), "cublasCreate", err, errlen) !=
          0 ||
      blas_failed(cublasSetStream(g->blas, g->stream), "cublasSetStream",
                  err, errlen) != 0 ||
      alloc_all(g, err, errlen) != 0 ||
      gpu_mlp_push(g, m, o, err, errlen) != 0) {
    gpu_mlp_destroy(g);
    return NULL;
  }
  return g;
}

extern "C" void gpu_mlp_destroy(gpu_mlp_t *g) {
  if (g == NULL)
    return;
  if (g->stream != NULL)
    cudaStreamSynchronize(g->stream);
  cudaFree(g->params);
  cudaFree(g->grads);
  for (int i = 0; i < 2; i++) {
    cudaFree(g->state[i]);
    cudaFree(g->delta[i]);
  }
  for (int l = 0; l <= MLP_MAX_LAYERS; l++)
    cudaFree(g->act[l]);
  if (g->blas != NULL)
    cublasDestroy(g->blas);
  if (g->stream != NULL)
    cudaStreamDestroy(g->stream);
  free(g);
}

extern "C" void *gpu_mlp_stream(gpu_mlp_t *g) { return g->stream; }

extern "C" float *gpu_mlp_grads(gpu_mlp_t *g) { return g->grads; }

extern "C" int gpu_mlp_push(gpu_mlp_t *g, const mlp_t *m, const optim_t *o,
                            char *err, size_t errlen) {
  size_t bytes = g->nparams * sizeof(float);
  CUDA_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize");
  CUDA_TRY(cudaMemcpy(g->params, m->params, bytes, cudaMemcpyHostToDevice),
           "copying the parameters to the device");
  for (int i = 0; i < g->nstate; i++)
    CUDA_TRY(cudaMemcpy(g->state[i], o->state[i], bytes,
                        cudaMemcpyHostToDevice),
             "copying the optimiser state to the device");
  return 0;
}

extern "C" int gpu_mlp_pull(gpu_mlp_t *g, mlp_t *m, optim_t *o, char *err,
                            size_t errlen) {
  size_t bytes = g->nparams * sizeof(float);
  CUDA_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize");
  CUDA_TRY(cudaMemcpy(m->params, g->params, bytes, cudaMemcpyDeviceToHost),
           "copying the parameters to the host");
  for (int i = 0; i < g->nstate; i++)
    CUDA_TRY(cudaMemcpy(o->state[i], g->state[i], bytes,
                        cudaMemcpyDeviceToHost),
             "copying the optimiser state to the host");
  return 0;
}

extern "C" int gpu_mlp_forward(gpu_mlp_t *g, mlp_t *m, int batch, char *err,
                               size_t errlen) {
  const float one = 1.0f, zero = 0.0f;
  CUDA_TRY(cudaMemcpyAsync(g->act[0], m->act[0],
                           (size_t)batch * g->sizes[0] * sizeof(float),
                           cudaMemcpyHostToDevice, g->stream),
           "copying the batch to the device");
  for (int l = 0; l < g->nlayers; l++) {
    int in = g->sizes[l], out = g->sizes[l + 1];
    const float *w = g->params + g->offset[l];
    /* Y^T (out x batch) = W (out x in) X^T (in x batch). */
    BLAS_TRY(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in,
                         &one, w, in, g->act[l], in, &zero, g->act[l + 1],
                         out),
             "forward cublasSgemm");
    size_t n = (size_t)batch * out;
    bias_relu<<<blocks(n), kThreads, 0, g->stream>>>(
        g->act[l + 1], w + (size_t)out * in, n, out, l + 1 < g->nlayers);
    CUDA_TRY(cudaGetLastError(), "forward kernel");
  }
  int classes = g->sizes[g->nlayers];
  CUDA_TRY(cudaMemcpyAsync(m->act[g->nlayers], g->act[g->nlayers],
                           (size_t)batch * classes * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream),
           "copying the logits to the host");
  CUDA_TRY(cudaStreamSynchronize(g->stream), "forward");
  return 0;
}

extern "C" int gpu_mlp_backward(gpu_mlp_t *g, const mlp_t *m, int batch,
                                layer_done_fn done, void *ctx, char *err,
                                size_t errlen) {
  const float one = 1.0f, zero = 0.0f;
  int classes = g->sizes[g->nlayers];
  CUDA_TRY(cudaMemcpyAsync(g->delta[0], m->delta[0],
                           (size_t)batch * classes * sizeof(float),
                           cudaMemcpyHostToDevice, g->stream),
           "copying the loss gradient to the device");
  int cur = 0;
  for (int l = g->nlayers - 1; l >= 0; l--) {
    int in = g->sizes[l], out = g->sizes[l + 1];
    const float *dy = g->delta[cur];
    float *gw = g->grads + g->offset[l];
    /* dW^T (in x out) += X^T (in x batch) dY (batch x out). */
    BLAS_TRY(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch,
                         &one, g->act[l], in, dy, out, &one, gw, in),
             "weight-gradient cublasSgemm");
    bias_grad<<<blocks((size_t)out), kThreads, 0, g->stream>>>(
        gw + (size_t)out * in, dy, batch, out);
    CUDA_TRY(cudaGetLastError(), "bias-gradient kernel");
    if (done != NULL)
      done(ctx, l);
    if (l > 0) {
      float *dx = g->delta[cur ^ 1];
      const float *w = g->params + g->offset[l];
      /* dX^T (in x batch) = W^T (in x out) dY^T (out x batch). */
      BLAS_TRY(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out,
                           &one, w, in, dy, out, &zero, dx, in),
               "input-gradient cublasSgemm");
      size_t n = (size_t)batch * in;
      relu_mask<<<blocks(n), kThreads, 0, g->stream>>>(dx, g->act[l], n);
      CUDA_TRY(cudaGetLastError(), "ReLU-gradient kernel");
      cur ^= 1;
    }
  }
  return 0;
}

extern "C" int gpu_mlp_step(gpu_mlp_t *g, optim_t *o, char *err,
                            size_t errlen) {
  o->steps++;
  size_t n = g->nparams;
  if (o->kind == OPTIM_ADAM) {
    double t = (double)o->steps;
    float c1 = (float)(1.0 - pow(o->beta1, t));
    float c2_sqrt = (float)sqrt(1.0 - pow(o->beta2, t));
    adam<<<blocks(n), kThreads, 0, g->stream>>>(
        g->params, g->grads, g->state[0], g->state[1], n, o->lr / c1,
        c2_sqrt, o->beta1, o->beta2, o->weight_decay, o->eps);
  } else {
    sgd<<<blocks(n), kThreads, 0, g->stream>>>(g->params, g->grads,
                                                g->state[0], n, o->lr,
                                                o->momentum,
                                                o->weight_decay);
  }
  CUDA_TRY(cudaGetLastError(), "optimiser kernel");
  CUDA_TRY(cudaMemsetAsync(g->grads, 0, n * sizeof(float), g->stream),
           "clearing the gradients");
  return 0;
}

extern "C" int gpu_mlp_sync(gpu_mlp_t *g, char *err, size_t errlen) {
  CUDA_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize");
  return 0;
}
