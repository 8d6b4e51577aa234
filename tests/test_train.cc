// hoop-train's pieces: the IDX reader and its errors, the MLP's and the
// CNN's gradients against finite differences, the layers against direct
// formulas, the optimisers against their formulas,
// sharding, data-parallel steps against one process with an N-times batch
// (on the CPU, and on a CUDA device where there is one), checkpoints, and
// the binary end to end on Fashion-MNIST.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

extern "C" {
#include <cblas.h>

#include "checkpoint.h"
#include "dataset.h"
#include "ddp.h"
#include "elastic.h"
#include "idx.h"
#include "layers.h"
#include "mlp.h"
#include "model.h"
#include "gpu.h"
#include "optim.h"
#include "trainer.h"
}

namespace {

using hooptest::RankLog;
using hooptest::run_ranks;

// Ranks are forked from this process: one BLAS thread, as hoop-train runs,
// and no BLAS thread pool for fork to cut in half.
const int kOneBlasThread = (openblas_set_num_threads(1), 0);

// Empty when --device cuda can run here, else why not.  Probed in a child
// process: a parent that initialised CUDA could not fork ranks that use it.
const std::string &cuda_missing() {
  static std::string why = hooptest::ask_in_child([] {
    char err[512] = "";
    int sizes[2] = {4, DATASET_CLASSES};
    mlp_t m;
    optim_t o;
    if (mlp_init(&m, 1, sizes, 1, err, sizeof err) != 0 ||
        optim_init(&o, OPTIM_SGD, m.nparams, 0.1f, 0.0f, 0.0f) != 0 ||
        gpu_mlp_create(&m, &o, 0, err, sizeof err) == NULL)
      return std::string(err[0] != '\0' ? err : "set-up failed");
    return std::string();
  });
  return why;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/hoop-train-test-XXXXXX";
  return std::string(mkdtemp(tmpl));
}

void put_be32(std::vector<uint8_t> &v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8)
    v.push_back((uint8_t)(x >> s));
}

std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims,
                               const std::vector<uint8_t> &data) {
  std::vector<uint8_t> v = {0, 0, 0x08, (uint8_t)dims.size()};
  for (uint32_t d : dims)
    put_be32(v, d);
  v.insert(v.end(), data.begin(), data.end());
  return v;
}

void write_file(const std::string &path, const std::vector<uint8_t> &bytes,
                bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), (unsigned)bytes.size());
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary)
        .write((const char *)bytes.data(), (std::streamsize)bytes.size());
  }
}

// A labelled set of n images of rows x cols in dir, as the trainer wants it.
void write_set(const std::string &dir, const std::string &prefix, uint32_t n,
               uint32_t rows, uint32_t cols, bool gz, unsigned seed = 1) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> pixels(n * rows * cols), labels(n);
  for (auto &p : pixels)
    p = (uint8_t)gen();
  for (auto &l : labels)
    l = (uint8_t)(gen() % 10);
  std::string ext = gz ? ".gz" : "";
  write_file(dir + "/" + prefix + "-images-idx3-ubyte" + ext,
             idx_bytes({n, rows, cols}, pixels), gz);
  write_file(dir + "/" + prefix + "-labels-idx1-ubyte" + ext,
             idx_bytes({n}, labels), gz);
}

std::string read_error(const std::string &path, int dims) {
  idx_array_t a;
  char err[512] = "";
  int rc = idx_read_u8(path.c_str(), dims, &a, err, sizeof err);
  if (rc == 0) {
    idx_free(&a);
    return "";
  }
  return err;
}

TEST(Idx, ReadsPlainAndGzipAlike) {
  std::string dir = temp_dir();
  std::vector<uint8_t> data(2 * 3 * 5);
  for (size_t i = 0; i < data.size(); i++)
    data[i] = (uint8_t)(i * 7);
  for (bool gz : {false, true}) {
    std::string path = dir + (gz ? "/a.gz" : "/a");
    write_file(path, idx_bytes({2, 3, 5}, data), gz);
    idx_array_t a;
    char err[256];
    ASSERT_EQ(idx_read_u8(path.c_str(), 3, &a, err, sizeof err), 0) << err;
    EXPECT_EQ(a.dims[0], 2u);
    EXPECT_EQ(a.dims[1], 3u);
    EXPECT_EQ(a.dims[2], 5u);
    ASSERT_EQ(a.count, data.size());
    EXPECT_EQ(0, memcmp(a.data, data.data(), data.size()));
    idx_free(&a);
  }
}

TEST(Idx, RejectsBrokenFilesWithTheReason) {
  std::string dir = temp_dir(), p = dir + "/f";
  std::vector<uint8_t> good = idx_bytes({4, 2, 2}, std::vector<uint8_t>(16));

  EXPECT_NE(read_error(dir + "/missing", 3).find("cannot open"),
            std::string::npos);
  write_file(p, {}, false);
  EXPECT_NE(read_error(p, 3).find("too short"), std::string::npos);
  std::vector<uint8_t> bad = good;
  bad[0] = 1;
  write_file(p, bad, false);
  EXPECT_NE(read_error(p, 3).find("not an IDX file"), std::string::npos);
  bad = good;
  bad[2] = 0x0D; // floats
  write_file(p, bad, false);
  EXPECT_NE(read_error(p, 3).find("unsigned bytes"), std::string::npos);
  write_file(p, good, false);
  EXPECT_NE(read_error(p, 1).find("has 3 dimensions, expected 1"),
            std::string::npos);
  write_file(p, std::vector<uint8_t>(good.begin(), good.begin() + 10), false);
  EXPECT_NE(read_error(p, 3).find("inside the IDX header"),
            std::string::npos);
  write_file(p, std::vector<uint8_t>(good.begin(), good.end() - 3), false);
  EXPECT_NE(read_error(p, 3).find("promises 16 bytes of data, the file "
                                  "holds 13"), std::string::npos);
  bad = good;
  bad.push_back(9);
  write_file(p, bad, false);
  EXPECT_NE(read_error(p, 3).find("past what its header"), std::string::npos);
  bad = idx_bytes({0, 2, 2}, {});
  write_file(p, bad, false);
  EXPECT_NE(read_error(p, 3).find("empty or implausibly large"),
            std::string::npos);

  // A gzip stream cut short, and one with damaged compressed bytes.
  write_file(p + ".gz", good, true);
  std::ifstream in(p + ".gz", std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), {});
  write_file(p, std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2),
             false);
  EXPECT_NE(read_error(p, 3), "");
  for (size_t i = 12; i < gz.size() - 8; i++)
    gz[i] ^= 0x5a;
  write_file(p, gz, false);
  EXPECT_NE(read_error(p, 3), "");
}

TEST(Dataset, LoadsNormalisesAndChecksLabels) {
  std::string dir = temp_dir();
  write_set(dir, "train", 7, 3, 2, true);
  dataset_t d;
  char err[512];
  ASSERT_EQ(dataset_load(dir.c_str(), "train", 0, &d, err, sizeof err), 0)
      << err;
  EXPECT_EQ(d.n, 7u);
  EXPECT_EQ(d.features, 6u);
  idx_array_t px;
  ASSERT_EQ(idx_read_u8((dir + "/train-images-idx3-ubyte.gz").c_str(), 3,
                        &px, err, sizeof err), 0);
  for (size_t i = 0; i < 42; i++)
    EXPECT_FLOAT_EQ(d.x[i], (px.data[i] / 255.0f - DATASET_MEAN) /
                                DATASET_STD);
  idx_free(&px);
  dataset_free(&d);
  ASSERT_EQ(dataset_load(dir.c_str(), "train", 5, &d, err, sizeof err), 0);
  EXPECT_EQ(d.n, 5u);
  dataset_free(&d);

  write_file(dir + "/t10k-images-idx3-ubyte",
             idx_bytes({3, 1, 1}, {1, 2, 3}), false);
  write_file(dir + "/t10k-labels-idx1-ubyte", idx_bytes({2}, {1, 2}), false);
  ASSERT_NE(dataset_load(dir.c_str(), "t10k", 0, &d, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("3 images but"), std::string::npos) << err;
  write_file(dir + "/t10k-labels-idx1-ubyte", idx_bytes({3}, {1, 12, 3}),
             false);
  ASSERT_NE(dataset_load(dir.c_str(), "t10k", 0, &d, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("label 1 is 12"), std::string::npos) << err;
}

TEST(Dataset, ShardsCoverEveryIndexLikeDistributedSampler) {
  for (size_t n : {1u, 7u, 12u, 100u}) {
    for (int nranks : {1, 2, 3, 8}) {
      std::multiset<size_t> seen;
      size_t per_rank = (n + nranks - 1) / nranks;
      std::vector<std::vector<size_t>> shards;
      for (int r = 0; r < nranks; r++) {
        size_t count;
        size_t *s = dataset_shard(n, 5, 2, r, nranks, &count);
        ASSERT_EQ(count, per_rank);
        shards.emplace_back(s, s + count);
        seen.insert(s, s + count);
        free(s);
      }
      for (size_t i = 0; i < n; i++)
        EXPECT_GE(seen.count(i), 1u) << "n " << n << " index " << i;
      EXPECT_EQ(seen.size(), per_rank * nranks);
      size_t count;
      size_t *again = dataset_shard(n, 5, 2, 0, nranks, &count);
      EXPECT_EQ(std::vector<size_t>(again, again + count), shards[0]);
      free(again);
    }
  }
  size_t c1, c2;
  size_t *e1 = dataset_shard(1000, 5, 1, 0, 1, &c1);
  size_t *e2 = dataset_shard(1000, 5, 2, 0, 1, &c2);
  EXPECT_NE(std::vector<size_t>(e1, e1 + c1), std::vector<size_t>(e2, e2 + c2))
      << "every epoch must shuffle anew";
  free(e1);
  free(e2);
}

// hoop-train --elastic walks an epoch in steps of the launched ranks'
// samples, split among the ranks there are, which change when ranks are
// lost: however they change, the steps are the same and every place is
// trained once.
TEST(Elastic, StepsCoverEachSampleOnceHoweverManyRanksAreLeft) {
  for (size_t n : {1u, 5u, 100u, 1001u}) {
    for (size_t most : {1u, 7u, 8u * 64u}) {
      std::vector<int> seen(n, 0);
      int nranks = 8, step_no = 0;
      for (size_t at = 0; at < n; step_no++) {
        size_t step = 0;
        for (int r = 0; r < nranks; r++) {
          size_t lo, hi;
          step = elastic_split(at, n, nranks, most, r, &lo, &hi);
          ASSERT_EQ(step, std::min(most, n - at));
          ASSERT_LE(lo, hi);
          ASSERT_LE(hi - lo, (step + (size_t)nranks - 1) / (size_t)nranks);
          for (size_t i = lo; i < hi; i++)
            seen[i]++;
        }
        ASSERT_GT(step, 0u);
        at += step;
        // Ranks lost along the way: 8, 8, 5, 5, 3, 3, 1, ...
        if (step_no % 2 == 1 && nranks > 1)
          nranks = nranks > 5 ? 5 : nranks > 3 ? 3 : 1;
      }
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(seen[i], 1) << "n " << n << " step " << most << " place "
                              << i;
    }
  }
  size_t lo, hi;
  // Fewer samples left than ranks: some ranks get none, none gets two.
  EXPECT_EQ(elastic_split(98, 100, 4, 256, 0, &lo, &hi), 2u);
  EXPECT_EQ(hi - lo, 0u);
  EXPECT_EQ(elastic_split(98, 100, 4, 256, 3, &lo, &hi), 2u);
  EXPECT_EQ(hi - lo, 1u);
}

// n images of rows x cols (an MLP sees rows * cols features).
dataset_t random_dataset(size_t n, int rows, int cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  dataset_t d = {};
  size_t features = (size_t)rows * cols;
  d.n = n;
  d.features = features;
  d.rows = rows;
  d.cols = cols;
  d.classes = DATASET_CLASSES;
  d.x = (float *)malloc(n * features * sizeof(float));
  d.y = (uint8_t *)malloc(n);
  for (size_t i = 0; i < n * features; i++)
    d.x[i] = normal(gen);
  for (size_t i = 0; i < n; i++)
    d.y[i] = (uint8_t)(gen() % DATASET_CLASSES);
  return d;
}

model_spec_t mlp_spec(int height, std::vector<int> hidden) {
  model_spec_t spec = {};
  spec.kind = MODEL_MLP;
  spec.height = height;
  spec.width = 1;
  spec.classes = DATASET_CLASSES;
  spec.nhidden = (int)hidden.size();
  for (size_t i = 0; i < hidden.size(); i++)
    spec.hidden[i] = hidden[i];
  return spec;
}

model_spec_t cnn_spec(int height, int width) {
  model_spec_t spec = {};
  spec.kind = MODEL_CNN;
  spec.height = height;
  spec.width = width;
  spec.classes = DATASET_CLASSES;
  return spec;
}

// Runs backward on samples idx of d and checks every `stride`-th parameter
// (every one of the first layer) against central differences of step eps;
// returns the layers in the order backward finished them.
std::vector<int> check_gradient(model_t &m, const dataset_t &d,
                                const std::vector<size_t> &idx,
                                const uint64_t *dropout_keys, float eps,
                                double tolerance, size_t stride,
                                const std::string &what) {
  int batch = (int)idx.size();
  auto loss_at = [&]() {
    model_gather(&m, &d, idx.data(), batch);
    model_forward(&m, batch, dropout_keys);
    return model_loss(&m, batch, d.y, 1.0f);
  };
  std::vector<float> grads(m.nparams, 0.0f);
  loss_at();
  std::vector<int> layers_done;
  model_backward(&m, batch, grads.data(),
                 [](void *ctx, int layer) {
                   static_cast<std::vector<int> *>(ctx)->push_back(layer);
                 },
                 &layers_done);
  size_t checked = 0;
  for (size_t i = 0; i < m.nparams; i += (i < m.offset[1] ? 1 : stride)) {
    float keep = m.params[i];
    m.params[i] = keep + eps;
    double up = loss_at();
    m.params[i] = keep - eps;
    double down = loss_at();
    m.params[i] = keep;
    double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(grads[i], numeric, tolerance + 2e-2 * std::fabs(numeric))
        << what << ", parameter " << i;
    checked++;
  }
  EXPECT_GE(checked, m.offset[1] + (m.nparams - m.offset[1]) / stride);
  return layers_done;
}

TEST(Mlp, GradientMatchesFiniteDifferences) {
  model_spec_t spec = mlp_spec(6, {5, 4});
  model_t m;
  char err[256];
  ASSERT_EQ(model_init(&m, &spec, 8, err, sizeof err), 0) << err;
  rng_t rng;
  rng_seed(&rng, 3);
  model_init_params(&m, &rng);
  dataset_t d = random_dataset(5, 6, 1, 9);
  EXPECT_EQ(check_gradient(m, d, {0, 1, 2, 3, 4}, nullptr, 1e-2f, 2e-3, 1,
                           "mlp"),
            (std::vector<int>{2, 1, 0}));
  dataset_free(&d);
  model_free(&m);
}

// Each piece of the CNN against a direct loop: a convolution as the sum
// over its window, pooling as the window's maximum.
TEST(Layers, ConvolutionAndPoolingFollowTheirDefinitions) {
  const int h = 7, w = 6, c = 3, k = 3, out = 4, batch = 2;
  conv_shape_t s = conv_shape_of(h, w, c, k, out);
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  std::vector<float> x((size_t)batch * h * w * c), wb(out * (k * k * c + 1));
  for (float &v : x)
    v = normal(gen);
  for (float &v : wb)
    v = normal(gen);
  std::vector<float> col((size_t)batch * s.oh * s.ow * conv_fan_in(&s));
  std::vector<float> y((size_t)batch * s.oh * s.ow * out);
  conv_im2col(&s, x.data(), batch, col.data());
  conv_forward(&s, col.data(), batch, wb.data(), y.data());
  auto at = [&](int b, int r, int q, int ch) {
    return x[(((size_t)b * h + r) * w + q) * c + ch];
  };
  for (int b = 0; b < batch; b++)
    for (int oy = 0; oy < s.oh; oy++)
      for (int ox = 0; ox < s.ow; ox++)
        for (int o = 0; o < out; o++) {
          double want = wb[(size_t)out * k * k * c + o];
          for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++)
              for (int ch = 0; ch < c; ch++)
                want += (double)wb[(size_t)o * k * k * c + (ky * k + kx) * c +
                                   ch] *
                        at(b, oy + ky, ox + kx, ch);
          float got = y[(((size_t)b * s.oh + oy) * s.ow + ox) * out + o];
          ASSERT_NEAR(got, want, 1e-4 * (1 + std::fabs(want)))
              << b << "," << oy << "," << ox << "," << o;
        }
  // Pooling of the odd-sized input drops its last row, as PyTorch does.
  std::vector<float> p((size_t)batch * (h / 2) * (w / 2) * c);
  std::vector<int32_t> arg(p.size());
  maxpool2_forward(h, w, c, x.data(), batch, p.data(), arg.data());
  for (int b = 0; b < batch; b++)
    for (int py = 0; py < h / 2; py++)
      for (int px = 0; px < w / 2; px++)
        for (int ch = 0; ch < c; ch++) {
          float want = std::max(
              std::max(at(b, 2 * py, 2 * px, ch), at(b, 2 * py, 2 * px + 1, ch)),
              std::max(at(b, 2 * py + 1, 2 * px, ch),
                       at(b, 2 * py + 1, 2 * px + 1, ch)));
          EXPECT_EQ(p[(((size_t)b * (h / 2) + py) * (w / 2) + px) * c + ch],
                    want);
        }
}

// Dropout keeps about 1 - p of the units, scales them by 1 / (1 - p), and
// draws a sample's mask from its key alone.
TEST(Layers, DropoutMasksDependOnTheSampleOnly) {
  const int units = 2000;
  std::vector<uint64_t> keys = {dropout_key(1, 0, 7), dropout_key(1, 0, 8),
                                dropout_key(1, 1, 7)};
  std::vector<float> scale(keys.size() * units);
  dropout_masks(keys.data(), 3, 2, units, 0.5f, scale.data());
  for (int b = 0; b < 3; b++) {
    int kept = 0;
    for (int u = 0; u < units; u++) {
      float v = scale[(size_t)b * units + u];
      ASSERT_TRUE(v == 0.0f || v == 2.0f) << v;
      kept += v != 0.0f;
    }
    EXPECT_NEAR(kept, units / 2, 150) << "sample " << b;
  }
  EXPECT_NE(0, memcmp(&scale[0], &scale[units], units * sizeof(float)))
      << "another sample, another mask";
  EXPECT_NE(0, memcmp(&scale[0], &scale[2 * units], units * sizeof(float)))
      << "another step, another mask";
  // Sample 8 alone gets the mask it got beside sample 7.
  std::vector<float> alone(units);
  dropout_masks(&keys[1], 1, 2, units, 0.5f, alone.data());
  EXPECT_EQ(0, memcmp(alone.data(), &scale[units], units * sizeof(float)));
}

// The CNN's hand-written backward pass against central differences, with
// its dropout masks (fixed by the keys) and without them.
TEST(Cnn, GradientMatchesFiniteDifferences) {
  model_spec_t spec = cnn_spec(16, 17);
  model_t m;
  char err[256];
  ASSERT_EQ(model_init(&m, &spec, 4, err, sizeof err), 0) << err;
  EXPECT_EQ(m.nlayers, CNN_LAYERS);
  rng_t rng;
  rng_seed(&rng, 4);
  model_init_params(&m, &rng);
  dataset_t d = random_dataset(3, 16, 17, 12);
  std::vector<size_t> idx = {0, 1, 2};
  std::vector<uint64_t> keys;
  for (size_t i : idx)
    keys.push_back(dropout_key(9, 3, i));
  // Small steps: max-pooling and ReLU have kinks a step could cross.
  for (bool train : {true, false})
    EXPECT_EQ(check_gradient(m, d, idx, train ? keys.data() : nullptr,
                             2.5e-4f, 3e-3, 7,
                             train ? "training" : "evaluating"),
              (std::vector<int>{3, 2, 1, 0}));
  dataset_free(&d);
  model_free(&m);
}

TEST(Optim, SgdAndAdamFollowPyTorchsFormulas) {
  const size_t n = 37;
  std::mt19937 gen(4);
  std::normal_distribution<float> normal;
  for (optim_kind_t kind : {OPTIM_SGD, OPTIM_ADAM}) {
    for (float wd : {0.0f, 0.01f}) {
      optim_t o;
      float lr = 0.05f, mom = 0.9f;
      ASSERT_EQ(optim_init(&o, kind, n, lr, mom, wd), 0);
      std::vector<float> p(n), g(n);
      for (auto &x : p)
        x = normal(gen);
      std::vector<double> rp(p.begin(), p.end()), b1(n, 0), b2(n, 0);
      for (int t = 1; t <= 5; t++) {
        for (auto &x : g)
          x = normal(gen);
        optim_step(&o, p.data(), g.data());
        for (size_t i = 0; i < n; i++) {
          double d = g[i] + wd * rp[i];
          if (kind == OPTIM_SGD) {
            b1[i] = t == 1 ? d : mom * b1[i] + d;
            rp[i] -= lr * b1[i];
          } else {
            b1[i] = 0.9 * b1[i] + 0.1 * d;
            b2[i] = 0.999 * b2[i] + 0.001 * d * d;
            double mhat = b1[i] / (1 - std::pow(0.9, t));
            double vhat = b2[i] / (1 - std::pow(0.999, t));
            rp[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
          }
        }
        for (size_t i = 0; i < n; i++)
          ASSERT_NEAR(p[i], rp[i], 1e-5 * (1 + std::fabs(rp[i])))
              << optim_name(kind) << " wd " << wd << " step " << t;
      }
      EXPECT_EQ(o.steps, 5);
      optim_free(&o);
    }
  }
}

// The MLP 12-9-7-10, or the CNN on 16x16 images.
trainer_config_t small_config(model_kind_t model, optim_kind_t kind,
                              size_t bucket_bytes, int batch) {
  trainer_config_t c = {};
  c.model = model == MODEL_CNN ? cnn_spec(16, 16) : mlp_spec(12, {9, 7});
  c.batch = batch;
  c.optim = kind;
  c.lr = kind == OPTIM_ADAM ? 0.01f : 0.1f;
  c.momentum = 0.9f;
  c.weight_decay = 0.001f;
  c.bucket_bytes = bucket_bytes;
  c.seed = 11;
  return c;
}

struct DdpCase {
  int nranks;
  optim_kind_t optim;
  size_t bucket_bytes;
  int accum;
  bool cuda = false;
  model_kind_t model = MODEL_MLP;
};

void PrintTo(const DdpCase &c, std::ostream *os) {
  *os << c.nranks << " ranks, " << optim_name(c.optim) << ", bucket "
      << c.bucket_bytes << " B, " << c.accum << " accumulation steps"
      << (c.cuda ? ", on CUDA" : "") << ", " << model_kind_name(c.model);
}

class DataParallel : public ::testing::TestWithParam<DdpCase> {};

// N ranks with batch B (and A accumulation steps) must follow one process
// that takes N*A*B samples per update, and keep every replica identical.
// The CNN's dropout masks follow the samples, so they agree too.
// On CUDA the ranks compute with cuBLAS and average device gradients
// through hoop; the reference stays the CPU one.
TEST_P(DataParallel, MatchesOneProcessWithAnNTimesBatch) {
  const DdpCase c = GetParam();
  if (c.cuda && !cuda_missing().empty())
    GTEST_SKIP() << cuda_missing();
  const int batch = 3, steps = 6;
  auto fn = [&](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
    trainer_config_t cfg =
        small_config(c.model, c.optim, c.bucket_bytes, batch);
    dataset_t d =
        random_dataset(401, cfg.model.height, cfg.model.width, 21);
    cfg.cuda = c.cuda;
    trainer_t t;
    char err[512];
    if (trainer_init(&t, comm, &cfg, err, sizeof err) != 0)
      return log.fail("trainer_init: %s", err);

    // The reference: rank 0's initial parameters, all shards' samples.
    model_t ref;
    optim_t ref_opt;
    if (model_init(&ref, &cfg.model, batch * nranks * c.accum, err,
                   sizeof err) != 0)
      return log.fail("model_init: %s", err);
    rng_t rng;
    rng_seed(&rng, cfg.seed);
    model_init_params(&ref, &rng);
    optim_init(&ref_opt, cfg.optim, ref.nparams, cfg.lr, cfg.momentum,
               cfg.weight_decay);
    std::vector<float> ref_grads(ref.nparams);
    std::vector<std::vector<size_t>> shards;
    for (int r = 0; r < nranks; r++) {
      size_t count;
      size_t *s = dataset_shard(d.n, cfg.seed, 0, r, nranks, &count);
      shards.emplace_back(s, s + count);
      free(s);
    }
    for (int update = 0; update < steps; update++) {
      double loss = 0;
      long right = 0;
      std::vector<size_t> all;
      std::vector<uint8_t> labels;
      for (int a = 0; a < c.accum; a++) {
        size_t first = (size_t)(update * c.accum + a) * batch;
        float scale = 1.0f / (float)(batch * c.accum);
        if (trainer_step(&t, &d, shards[rank].data() + first, batch, scale,
                         a + 1 == c.accum, &loss, &right, err,
                         sizeof err) != 0)
          return log.fail("trainer_step: %s", err);
        for (int r = 0; r < nranks; r++)
          all.insert(all.end(), shards[r].begin() + first,
                     shards[r].begin() + first + batch);
      }
      std::vector<uint64_t> keys;
      for (size_t i : all) {
        labels.push_back(d.y[i]);
        keys.push_back(dropout_key(cfg.seed, ref_opt.steps, i));
      }
      int global = (int)all.size();
      std::fill(ref_grads.begin(), ref_grads.end(), 0.0f);
      model_gather(&ref, &d, all.data(), global);
      model_forward(&ref, global, keys.data());
      model_loss(&ref, global, labels.data(), 1.0f / (float)global);
      model_backward(&ref, global, ref_grads.data(), nullptr, nullptr);
      optim_step(&ref_opt, ref.params, ref_grads.data());

      if (trainer_pull_state(&t, err, sizeof err) != 0)
        return log.fail("trainer_pull_state: %s", err);
      for (size_t i = 0; i < ref.nparams; i++) {
        float got = t.model.params[i], want = ref.params[i];
        if (std::fabs(got - want) > 1e-4f * (1 + std::fabs(want)))
          return log.fail("update %d parameter %zu: %g, one process %g",
                          update, i, got, want);
      }
      // Replicas must agree bit for bit: min and max over ranks coincide.
      std::vector<float> lo(t.model.params, t.model.params + ref.nparams);
      std::vector<float> hi = lo;
      hoop_allreduce(comm, lo.data(), lo.data(), lo.size(), HOOP_F32,
                     HOOP_MIN, nullptr);
      hoop_allreduce(comm, hi.data(), hi.data(), hi.size(), HOOP_F32,
                     HOOP_MAX, nullptr);
      if (memcmp(lo.data(), hi.data(), lo.size() * sizeof(float)) != 0)
        return log.fail("update %d: replicas differ", update);
    }
    optim_free(&ref_opt);
    model_free(&ref);
    trainer_free(&t);
    dataset_free(&d);
  };
  auto result = run_ranks(c.nranks, fn);
  EXPECT_TRUE(result.all_ok()) << hooptest::describe(result);
}

INSTANTIATE_TEST_SUITE_P(
    Train, DataParallel,
    ::testing::Values(DdpCase{1, OPTIM_SGD, 1 << 20, 1},
                      DdpCase{2, OPTIM_SGD, 1 << 20, 1},
                      DdpCase{2, OPTIM_ADAM, 1, 1},
                      DdpCase{3, OPTIM_SGD, 400, 2},
                      DdpCase{4, OPTIM_ADAM, 400, 1},
                      DdpCase{4, OPTIM_SGD, 1, 3},
                      DdpCase{8, OPTIM_ADAM, 400, 2},
                      DdpCase{1, OPTIM_SGD, 1 << 20, 1, true},
                      DdpCase{2, OPTIM_ADAM, 1, 1, true},
                      DdpCase{3, OPTIM_SGD, 400, 2, true},
                      DdpCase{1, OPTIM_SGD, 1 << 20, 1, false, MODEL_CNN},
                      DdpCase{2, OPTIM_SGD, 4096, 2, false, MODEL_CNN},
                      DdpCase{3, OPTIM_ADAM, 1, 1, false, MODEL_CNN}),
    [](const ::testing::TestParamInfo<DdpCase> &i) {
      return std::to_string(i.param.nranks) + "ranks_" +
             optim_name(i.param.optim) + "_bucket" +
             std::to_string(i.param.bucket_bytes) + "_accum" +
             std::to_string(i.param.accum) + (i.param.cuda ? "_cuda" : "") +
             (i.param.model == MODEL_CNN ? "_cnn" : "");
    });

// Per-step medians of the all-reduce time, with and without the wait for
// late ranks: rank 1 finishes its "backward" 30 ms late every step, so
// rank 0's steps take at least that long in all, and far less without the
// wait; each call to ddp_step_medians covers the steps since the last.
// The last rank in's median is one figure for all ranks, no more than any
// rank's own median without the wait (a median of per-step minima).
TEST(Ddp, StepMediansSetTheWaitForLateRanksApart) {
  auto result = run_ranks(2, [](RankLog &log, hoop_comm_t comm, int rank,
                                int) {
    const size_t offset[] = {0, 1000, 3000};
    std::vector<float> grads(3000, 1.0f);
    char err[256];
    ddp_t *d = ddp_create(comm, grads.data(), nullptr, 2, offset, 4096, err,
                          sizeof err);
    RANK_EXPECT(log, d != nullptr, "%s", err);
    if (d == nullptr)
      return;
    const int steps = 5;
    double wait_s = 0;
    for (int s = 0; s < steps; s++) {
      ddp_begin_sync(d);
      if (rank == 1)
        usleep(30000);
      ddp_layer_done(d, 1);
      ddp_layer_done(d, 0);
      RANK_EXPECT(log, ddp_wait(d, &wait_s, err, sizeof err) == 0, "%s", err);
    }
    ddp_step_times_t m;
    RANK_EXPECT(log, ddp_step_medians(d, &m, err, sizeof err) == 0, "%s",
                err);
    RANK_EXPECT(log, m.steps == (size_t)steps, "%zu steps recorded",
                m.steps);
    RANK_EXPECT(log, m.moving_s >= 0 && m.moving_s <= m.comm_s,
                "median step %g s, %g s without the wait", m.comm_s,
                m.moving_s);
    if (rank == 0)
      RANK_EXPECT(log, m.comm_s >= 0.025 && m.moving_s < 0.010,
                  "rank 0's median step %.1f ms, %.1f ms without the wait "
                  "for rank 1, 30 ms late", m.comm_s * 1e3,
                  m.moving_s * 1e3);
    double least_moving = m.moving_s, lo = m.last_in_s, hi = m.last_in_s;
    RANK_EXPECT(log,
                hoop_allreduce(comm, &least_moving, &least_moving, 1,
                               HOOP_F64, HOOP_MIN, nullptr) == HOOP_SUCCESS &&
                    hoop_allreduce(comm, &lo, &lo, 1, HOOP_F64, HOOP_MIN,
                                   nullptr) == HOOP_SUCCESS &&
                    hoop_allreduce(comm, &hi, &hi, 1, HOOP_F64, HOOP_MAX,
                                   nullptr) == HOOP_SUCCESS,
                "%s", hoop_comm_last_error(comm));
    RANK_EXPECT(log, lo == hi, "ranks' last-in medians differ: %g, %g s",
                lo, hi);
    RANK_EXPECT(log, m.last_in_s > 0 && m.last_in_s <= least_moving,
                "last rank in %g s; least median without the wait %g s",
                m.last_in_s, least_moving);
    RANK_EXPECT(log, ddp_step_medians(d, &m, err, sizeof err) == 0, "%s",
                err);
    RANK_EXPECT(log, m.steps == 0 && m.comm_s == 0 && m.moving_s == 0 &&
                         m.last_in_s == 0,
                "a second call saw %zu steps", m.steps);
    ddp_destroy(d);
  });
  EXPECT_TRUE(result.all_ok()) << hooptest::describe(result);
}

// Each step all-reduces each bucket exactly once, whichever thread reduces
// the last one.  A step whose last bucket ran in ddp_wait used to leave the
// communication thread a stale queue entry, which it ran again (with
// whatever the buffer held, in lockstep on both ranks, so no error) if it
// first ran or woke before the next step.  Each rank is pinned to one core
// so that a new ddp's thread first runs when the rank sleeps; the sleep
// after every step is where a training step would run its optimizer.  One
// bucket is always held; of two, odd steps pause before layer 0 so that
// the thread is idle and the last bucket is held, and even steps do not.
TEST(Ddp, EachStepReducesEachBucketOnce) {
  for (size_t bucket_bytes : {size_t{1} << 20, size_t{4096}}) {
    auto result = run_ranks(2, [bucket_bytes](RankLog &log, hoop_comm_t comm,
                                              int rank, int) {
      const size_t offset[] = {0, 1000, 3000};
      std::vector<float> grads(offset[2]);
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(rank % sysconf(_SC_NPROCESSORS_ONLN), &one);
      RANK_EXPECT(log, sched_setaffinity(0, sizeof one, &one) == 0,
                  "sched_setaffinity: %s", std::strerror(errno));
      const int lives = 200, steps = 4;
      int nbuckets = 0;
      for (int life = 0; life < lives && log.ok(); life++) {
        char err[512];
        ddp_t *d = ddp_create(comm, grads.data(), nullptr, 2, offset,
                              bucket_bytes, err, sizeof err);
        RANK_EXPECT(log, d != nullptr, "%s", err);
        if (d == nullptr)
          return;
        nbuckets = ddp_nbuckets(d);
        double wait_s = 0;
        for (int s = 0; s < steps && log.ok(); s++) {
          float v = static_cast<float>(life * steps + s + rank);
          std::fill(grads.begin(), grads.end(), v);
          ddp_begin_sync(d);
          ddp_layer_done(d, 1);
          if (s % 2)
            usleep(50);
          ddp_layer_done(d, 0);
          RANK_EXPECT(log, ddp_wait(d, &wait_s, err, sizeof err) == 0,
                      "life %d step %d: %s", life, s, err);
          usleep(100);
          RANK_EXPECT(log, grads[0] == v - rank + 0.5f &&
                      grads[offset[2] - 1] == v - rank + 0.5f,
                      "life %d step %d averaged to %g and %g", life, s,
                      grads[0], grads[offset[2] - 1]);
        }
        ddp_destroy(d);
      }
      ddp_counts_t n = ddp_allreduce_counts(comm, HOOP_ALGO_AUTO);
      RANK_EXPECT(log, n.calls == (uint64_t)lives * steps * nbuckets,
                  "%llu all-reduce calls in %d steps of %d bucket(s)",
                  (unsigned long long)n.calls, lives * steps, nbuckets);
    });
    EXPECT_TRUE(result.all_ok()) << bucket_bytes << " B buckets: "
                                 << hooptest::describe(result);
  }
}

// The last bucket, reduced by the thread that waits in ddp_wait once the
// communication thread is idle, reports a failure like any other bucket:
// the ranks agree on the first bucket (layer 1) and not on the last
// (layer 0 has 1000 floats on rank 0, 500 on rank 1).  The pause before
// layer 0 lets the thread finish the first bucket, so the last one is
// held; the averaged first bucket shows the step got that far.
TEST(Ddp, AFailedLastBucketIsReportedByDdpWait) {
  auto result = run_ranks(2, [](RankLog &log, hoop_comm_t comm, int rank,
                                int) {
    const size_t offset0[] = {0, 1000, 3000}, offset1[] = {0, 500, 2500};
    const size_t *offset = rank == 0 ? offset0 : offset1;
    std::vector<float> grads(offset[2], static_cast<float>(rank));
    char err[512];
    ddp_t *d = ddp_create(comm, grads.data(), nullptr, 2, offset, 4096, err,
                          sizeof err);
    RANK_EXPECT(log, d != nullptr, "%s", err);
    if (d == nullptr)
      return;
    RANK_EXPECT(log, ddp_nbuckets(d) == 2, "%d buckets", ddp_nbuckets(d));
    ddp_begin_sync(d);
    ddp_layer_done(d, 1);
    usleep(200000);
    ddp_layer_done(d, 0);
    double wait_s = 0;
    err[0] = '\0';
    int rc = ddp_wait(d, &wait_s, err, sizeof err);
    RANK_EXPECT(log, rc == -1, "ddp_wait returned %d", rc);
    RANK_EXPECT(log, std::strstr(err, "gradient bucket (layers 0-0") != nullptr,
                "error: %s", err);
    RANK_EXPECT(log, grads[offset[1]] == 0.5f,
                "first bucket averaged to %g", grads[offset[1]]);
    ddp_destroy(d);
  });
  EXPECT_TRUE(result.all_ok()) << hooptest::describe(result);
}

// Images of another size would be read past their ends: refused instead.
TEST(Trainer, RefusesImagesOfAnotherSize) {
  auto result = run_ranks(1, [](RankLog &log, hoop_comm_t comm, int, int) {
    trainer_config_t cfg = small_config(MODEL_CNN, OPTIM_SGD, 1 << 20, 2);
    trainer_t t;
    char err[512];
    if (trainer_init(&t, comm, &cfg, err, sizeof err) != 0)
      return log.fail("trainer_init: %s", err);
    dataset_t d = random_dataset(4, 16, 15, 3);
    size_t idx[2] = {0, 1};
    double loss = 0;
    long right = 0, total = 0;
    if (trainer_step(&t, &d, idx, 2, 0.5f, 1, &loss, &right, err,
                     sizeof err) == 0)
      log.fail("a step on 16x15 images of a 16x16 model succeeded");
    else if (std::string(err).find("the data has 16x15 images, the model "
                                   "takes 16x16") == std::string::npos)
      log.fail("step: %s", err);
    if (trainer_evaluate(&t, &d, &right, &total, err, sizeof err) == 0)
      log.fail("evaluating 16x15 images with a 16x16 model succeeded");
    dataset_free(&d);
    trainer_free(&t);
  });
  EXPECT_TRUE(result.all_ok()) << hooptest::describe(result);
}

TEST(Checkpoint, RoundTripsAndRefusesWhatDoesNotFit) {
  std::string dir = temp_dir(), path = dir + "/ckpt";
  model_spec_t spec = mlp_spec(4, {3});
  model_t m;
  char err[512];
  ASSERT_EQ(model_init(&m, &spec, 1, err, sizeof err), 0);
  rng_t rng;
  rng_seed(&rng, 2);
  model_init_params(&m, &rng);
  optim_t o;
  ASSERT_EQ(optim_init(&o, OPTIM_ADAM, m.nparams, 0.1f, 0, 0), 0);
  std::vector<float> g(m.nparams, 0.5f);
  optim_step(&o, m.params, g.data());
  optim_step(&o, m.params, g.data());
  ASSERT_EQ(ckpt_save(path.c_str(), &m, &o, 3, 77, err, sizeof err), 0)
      << err;

  model_t back;
  optim_t back_opt;
  model_init(&back, &spec, 1, err, sizeof err);
  optim_init(&back_opt, OPTIM_ADAM, back.nparams, 0.1f, 0, 0);
  int epochs = 0;
  ASSERT_EQ(ckpt_load(path.c_str(), &back, &back_opt, &epochs, 77, err,
                      sizeof err), 0) << err;
  EXPECT_EQ(epochs, 3);
  EXPECT_EQ(back_opt.steps, 2);
  EXPECT_EQ(0, memcmp(back.params, m.params, m.nparams * sizeof(float)));
  for (int i = 0; i < 2; i++)
    EXPECT_EQ(0, memcmp(back_opt.state[i], o.state[i],
                        m.nparams * sizeof(float)));

  EXPECT_NE(ckpt_load(path.c_str(), &back, &back_opt, &epochs, 78, err,
                      sizeof err), 0);
  EXPECT_NE(std::string(err).find("--seed 77"), std::string::npos) << err;
  // A checkpoint of another model is refused, naming both.
  auto refused_into = [&](const model_spec_t &other, const char *message) {
    model_t wrong;
    ASSERT_EQ(model_init(&wrong, &other, 1, err, sizeof err), 0) << err;
    optim_t wrong_opt;
    optim_init(&wrong_opt, OPTIM_ADAM, wrong.nparams, 0.1f, 0, 0);
    EXPECT_NE(ckpt_load(path.c_str(), &wrong, &wrong_opt, &epochs, 77, err,
                        sizeof err), 0);
    EXPECT_NE(std::string(err).find(message), std::string::npos) << err;
    optim_free(&wrong_opt);
    model_free(&wrong);
  };
  refused_into(mlp_spec(4, {5}),
               "holds a model mlp 4-3-10, this run builds mlp 4-5-10");
  refused_into(cnn_spec(16, 16),
               "this run builds cnn 16x16 conv10-conv20-50-10");
  optim_t sgd;
  optim_init(&sgd, OPTIM_SGD, back.nparams, 0.1f, 0, 0);
  EXPECT_NE(ckpt_load(path.c_str(), &back, &sgd, &epochs, 77, err,
                      sizeof err), 0);
  EXPECT_NE(std::string(err).find("optimiser adam"), std::string::npos);

  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() / 2] ^= 1;
  write_file(path, flipped, false);
  EXPECT_NE(ckpt_load(path.c_str(), &back, &back_opt, &epochs, 77, err,
                      sizeof err), 0);
  EXPECT_NE(std::string(err).find("corrupt"), std::string::npos) << err;
  write_file(path, std::vector<uint8_t>(bytes.begin(), bytes.end() - 9),
             false);
  EXPECT_NE(ckpt_load(path.c_str(), &back, &back_opt, &epochs, 77, err,
                      sizeof err), 0);
  EXPECT_NE(std::string(err).find("truncated"), std::string::npos) << err;
  EXPECT_NE(ckpt_save((dir + "/no/such/dir/ckpt").c_str(), &m, &o, 1, 77, err,
                      sizeof err), 0);
  EXPECT_NE(std::string(err).find("No such file"), std::string::npos) << err;

  for (optim_t *p : {&o, &back_opt, &sgd})
    optim_free(p);
  for (model_t *p : {&m, &back})
    model_free(p);
}

using hooptest::run_shell;
using hooptest::ShellOutput;

const std::string kTrain = HOOP_TRAIN_PATH;
const std::string kRun = HOOP_RUN_PATH;
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The last row of a --metrics CSV by column name; empty when the file has
// no row under its header.
std::map<std::string, std::string> last_metrics(const std::string &csv) {
  std::istringstream in(slurp(csv));
  std::string header, line, last;
  std::getline(in, header);
  while (std::getline(in, line))
    last = line;
  std::map<std::string, std::string> row;
  std::istringstream names(header), values(last);
  for (std::string name, value;
       !last.empty() && std::getline(names, name, ',') &&
       std::getline(values, value, ',');)
    row[name] = value;
  return row;
}

// The test accuracy in the last row of a --metrics CSV, or -1 when there
// is no such row.
double last_test_accuracy(const std::string &csv) {
  std::map<std::string, std::string> row = last_metrics(csv);
  return row.count("test_acc") ? std::stod(row["test_acc"]) : -1;
}

// The lines of text that report an epoch, each checked for the fields a
// reader looks for and for fitting a terminal.
std::vector<std::string> epoch_lines(const std::string &text, int nranks) {
  static const std::regex line(
      R"((\[0\] )?epoch \d+/\d+: loss \d+\.\d{4}, accuracy train )"
      R"([01]\.\d{4} test [01]\.\d{4}, \d+ samples/s, \d+\.\d s)"
      R"(( \(\d+\.\d\d s waiting on all-reduce\))?)");
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l.find("epoch ") == std::string::npos || l.find(": loss ") ==
                                                     std::string::npos)
      continue;
    std::smatch m;
    EXPECT_TRUE(std::regex_match(l, m, line)) << l;
    EXPECT_EQ(m[2].matched, nranks > 1) << l;
    EXPECT_LT(l.size(), 120u) << l;
    lines.push_back(l);
  }
  return lines;
}

TEST(HoopTrain, BadInputGivesAClearError) {
  std::string dir = temp_dir();
  ShellOutput r = run_shell(kTrain + " --data " + dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.text.find(dir + "/train-images-idx3-ubyte: cannot open"),
            std::string::npos) << r.text;
  write_set(dir, "train", 20, 4, 4, false);
  write_set(dir, "t10k", 10, 4, 4, true);
  std::string labels = dir + "/t10k-labels-idx1-ubyte.gz";
  std::string bytes = slurp(labels);
  write_file(labels, std::vector<uint8_t>(bytes.begin(), bytes.end() - 6),
             false);
  r = run_shell(kTrain + " --quiet --epochs 1 --data " + dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.text.find(labels), std::string::npos) << r.text;
  for (const char *args : {"--epochs 0", "--optim rmsprop", "--algo star",
                           "--hidden 10,x", "--lr -1", "--resume",
                           "--model rnn", "--model cnn --hidden 10",
                           "--batch 9999999", "--elastic --accum-steps 2",
                           "stray"}) {
    r = run_shell(kTrain + " " + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.text;
    EXPECT_NE(r.text.find("hoop-train: "), std::string::npos) << r.text;
  }
  // Test images of another size than the training images.
  std::string mixed = temp_dir();
  write_set(mixed, "train", 20, 6, 6, false);
  write_set(mixed, "t10k", 10, 5, 5, false);
  r = run_shell(kTrain + " --quiet --epochs 1 --data " + mixed);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.text.find("the test images in " + mixed + " are 5x5, the "
                        "training images 6x6"),
            std::string::npos) << r.text;
  // 4x4 images leave nothing after the CNN's convolutions and pools.
  std::string tiny = temp_dir();
  write_set(tiny, "train", 20, 4, 4, false);
  write_set(tiny, "t10k", 10, 4, 4, false);
  r = run_shell(kTrain + " --quiet --epochs 1 --model cnn --data " + tiny);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.text.find("the CNN takes images of 16x16 to 4096x4096 pixels "
                        "and at least one class, not 4x4"),
            std::string::npos) << r.text;
}

TEST(HoopTrain, ResumeContinuesExactlyAsAnUninterruptedRun) {
  std::string dir = temp_dir();
  write_set(dir, "train", 300, 6, 6, true, 3);
  write_set(dir, "t10k", 50, 6, 6, true, 4);
  for (int nranks : {1, 2}) {
    std::string base = kRun + " -n " + std::to_string(nranks) + " " + kTrain +
                       " --quiet --hidden 16 --batch 8 --optim adam --data " +
                       dir + " --checkpoint ";
    std::string whole = dir + "/whole", cut = dir + "/cut";
    ShellOutput r = run_shell(base + whole + " --epochs 3 --metrics " + whole + ".csv");
    ASSERT_EQ(r.status, 0) << r.text;
    r = run_shell(base + cut + " --epochs 1 --metrics " + cut + ".csv");
    ASSERT_EQ(r.status, 0) << r.text;
    r = run_shell(base + cut + " --epochs 3 --resume --metrics " + cut + ".csv");
    ASSERT_EQ(r.status, 0) << r.text;
    EXPECT_NE(r.text.find("resumed from " + cut + " after epoch 1"),
              std::string::npos) << r.text;
    std::string a = slurp(whole), b = slurp(cut);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << nranks << " ranks: checkpoints differ";
    // Same losses and accuracies epoch by epoch (times differ).
    auto firsts = [](const std::string &csv) {
      std::string keep;
      std::istringstream in(csv);
      for (std::string line; std::getline(in, line);) {
        size_t cut_at = 0;
        for (int commas = 0; commas < 4; commas++)
          cut_at = line.find(',', cut_at) + 1;
        keep += line.substr(0, cut_at) + "\n";
      }
      return keep;
    };
    EXPECT_EQ(firsts(slurp(whole + ".csv")), firsts(slurp(cut + ".csv")));
    r = run_shell(base + dir + "/absent --epochs 2 --resume");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.text.find("absent: No such file"), std::string::npos) << r.text;
  }
}

TEST(HoopTrain, LearnsFashionMnistOnTwoRanks) {
  if (access((kFashion + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install "
                    "dataset-fashion-mnist)";
  std::string dir = temp_dir();
  ShellOutput r = run_shell(kRun + " -n 2 " + kTrain + " --quiet --epochs 2 --algo ring "
             "--train-limit "
             "6000 --test-limit 2000 --metrics " + dir + "/m.csv");
  ASSERT_EQ(r.status, 0) << r.text;
  EXPECT_GT(last_test_accuracy(dir + "/m.csv"), 0.7)
      << "test accuracy after 2 epochs on 6000 samples; chance is 0.1";
  EXPECT_EQ(epoch_lines(r.text, 2).size(), 2u) << r.text;
  // The details stay in the CSV: the ring's 2(N-1)K/N of the MLP's
  // 796840 gradient bytes, counted and modelled.
  std::map<std::string, std::string> row = last_metrics(dir + "/m.csv");
  EXPECT_EQ(row["bytes_sent_per_step"], "796840") << slurp(dir + "/m.csv");
  EXPECT_EQ(row["model_bytes_per_step"], "796840") << slurp(dir + "/m.csv");
  EXPECT_EQ(row["algo"], "ring");
  EXPECT_EQ(row.size(), 19u) << slurp(dir + "/m.csv");
  EXPECT_EQ(row["ranks"], "2");
  EXPECT_EQ(row["ranks_left"], "0");
  EXPECT_EQ(row["ranks_joined"], "0");
}

// The sum over a --metrics CSV's rows of one column.
int column_sum(const std::string &csv, const std::string &name) {
  std::istringstream in(csv);
  std::string header, line;
  std::getline(in, header);
  std::vector<std::string> names;
  std::istringstream hs(header);
  for (std::string n; std::getline(hs, n, ',');)
    names.push_back(n);
  int sum = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string v;
    for (size_t i = 0; std::getline(ls, v, ','); i++)
      if (i < names.size() && names[i] == name)
        sum += std::stoi(v);
  }
  return sum;
}

// Four ranks under hoop-run --elastic (with `respawn` replacements); rank
// 2 is killed as the first epoch ends.  Returns the run's output; the
// metrics are in dir/m.csv.
std::string elastic_run(const std::string &dir, int respawn) {
  std::string script =
      kRun + " --elastic --respawn " + std::to_string(respawn) + " -n 4 " +
      kTrain +
      " --elastic --quiet --epochs 3 --train-limit 30000 --test-limit 5000"
      " --metrics " + dir + "/m.csv > " + dir + "/out 2>&1 & run=$!; "
      "for i in $(seq 600); do grep -q 'epoch 1/3' " + dir + "/out && break;"
      " sleep 0.05; done; kill -9 $(pgrep -P $run | sed -n 3p); wait $run; "
      "echo status $?; cat " + dir + "/out";
  write_file(dir + "/run.sh", std::vector<uint8_t>(script.begin(), script.end()),
             false);
  return run_shell("bash " + dir + "/run.sh").text;
}

// Killed as its first epoch ends, a rank of four is left out; the others
// split the samples among themselves, go on to the last epoch and learn,
// and hoop-run --elastic lets them.
TEST(HoopTrain, ElasticGoesOnWithoutAKilledRank) {
  if (access((kFashion + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install "
                    "dataset-fashion-mnist)";
  std::string dir = temp_dir();
  std::string text = elastic_run(dir, 0);
  EXPECT_NE(text.find("status 0"), std::string::npos) << text;
  EXPECT_NE(text.find("the other ranks go on (--elastic)"), std::string::npos)
      << text;
  EXPECT_TRUE(std::regex_search(
      text, std::regex(R"(rank\(s\) 2 left; 3 of 4 ranks go on )"
                       R"(\(recovered in \d+\.\d\d s\))")))
      << text;
  std::string csv = slurp(dir + "/m.csv");
  std::map<std::string, std::string> row = last_metrics(dir + "/m.csv");
  EXPECT_EQ(row["epoch"], "3") << csv;
  EXPECT_EQ(row["ranks"], "3") << csv;
  EXPECT_GT(last_test_accuracy(dir + "/m.csv"), 0.75) << csv;
  EXPECT_EQ(column_sum(csv, "ranks_left"), 1) << csv;
  EXPECT_EQ(column_sum(csv, "ranks_joined"), 0) << csv;
}

// With hoop-run --respawn the killed rank's replacement joins the running
// job at a step boundary, takes the members' state and place, and the job
// ends on four ranks again.
TEST(HoopTrain, ElasticReplacementJoinsTheRunningJob) {
  if (access((kFashion + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install "
                    "dataset-fashion-mnist)";
  std::string dir = temp_dir();
  std::string text = elastic_run(dir, 1);
  EXPECT_NE(text.find("status 0"), std::string::npos) << text;
  EXPECT_NE(text.find("started a replacement for rank 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("1 rank(s) joined; 4 ranks go on"), std::string::npos)
      << text;
  std::string csv = slurp(dir + "/m.csv");
  std::map<std::string, std::string> row = last_metrics(dir + "/m.csv");
  EXPECT_EQ(row["epoch"], "3") << csv;
  EXPECT_EQ(row["ranks"], "4") << csv;
  EXPECT_GT(last_test_accuracy(dir + "/m.csv"), 0.75) << csv;
  EXPECT_EQ(column_sum(csv, "ranks_left"), 1) << csv;
  EXPECT_EQ(column_sum(csv, "ranks_joined"), 1) << csv;
}

// A replacement loads its data before it joins, so one that cannot fails
// alone, saying so, and the members, never kept waiting for it, finish on
// three ranks without a second loss (had it joined first, its failure
// would have been one more for them to shrink past).
TEST(HoopTrain, AReplacementWithoutItsDataFailsBeforeJoining) {
  if (access((kFashion + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install "
                    "dataset-fashion-mnist)";
  std::string dir = temp_dir();
  std::string script =
      kRun + " --elastic --respawn 1 -n 4 sh -c '"
      "if [ -n \"$HOOP_JOIN\" ]; then set -- \"$@\" --data " + dir +
      "/none; fi; exec " + kTrain + " \"$@\"' sh"
      " --elastic --quiet --epochs 3 --train-limit 30000 --test-limit 5000"
      " --metrics " + dir + "/m.csv > " + dir + "/out 2>&1 & run=$!; "
      "for i in $(seq 600); do grep -q 'epoch 1/3' " + dir + "/out && break;"
      " sleep 0.05; done; kill -9 $(pgrep -P $run | sed -n 3p); wait $run; "
      "echo status $?; cat " + dir + "/out";
  write_file(dir + "/run.sh",
             std::vector<uint8_t>(script.begin(), script.end()), false);
  std::string text = run_shell("bash " + dir + "/run.sh").text;
  EXPECT_NE(text.find("status 0"), std::string::npos) << text;
  EXPECT_NE(text.find("started a replacement for rank 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("hoop-train: the replacement: "), std::string::npos)
      << text;
  EXPECT_EQ(text.find("rank(s) joined"), std::string::npos) << text;
  std::string csv = slurp(dir + "/m.csv");
  std::map<std::string, std::string> row = last_metrics(dir + "/m.csv");
  EXPECT_EQ(row["epoch"], "3") << csv;
  EXPECT_EQ(row["ranks"], "3") << csv;
  EXPECT_EQ(column_sum(csv, "ranks_left"), 1) << csv;
  EXPECT_EQ(column_sum(csv, "ranks_joined"), 0) << csv;
}

// A rank lost before the ranks met (here it never starts hoop-train): the
// others form without it at half the timeout (HOOP_ELASTIC, which
// --elastic sets), train, and its replacement joins them once they run.
TEST(HoopTrain, ElasticFormsWithoutARankLostBeforeTheyMet) {
  if (access((kFashion + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install "
                    "dataset-fashion-mnist)";
  std::string dir = temp_dir();
  ShellOutput r = run_shell(
      "HOOP_TIMEOUT_MS=3000 " + kRun + " --elastic --respawn 1 -n 4 sh -c '"
      "if [ $HOOP_RANK = 2 ] && [ -z \"$HOOP_JOIN\" ]; then exit 3; fi; "
      // The replacement waits through the others' forming and first steps.
      "if [ -n \"$HOOP_JOIN\" ]; then export HOOP_TIMEOUT_MS=30000; fi; "
      "exec " + kTrain + " \"$@\"' sh --elastic --quiet --epochs 2 "
      "--train-limit 20000 --test-limit 2000 --metrics " + dir + "/m.csv");
  EXPECT_EQ(r.status, 0) << r.text;
  EXPECT_NE(r.text.find("rank(s) 2 of 4 did not come"), std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("1 rank(s) joined; 4 ranks go on"), std::string::npos)
      << r.text;
  std::string csv = slurp(dir + "/m.csv");
  std::map<std::string, std::string> row = last_metrics(dir + "/m.csv");
  EXPECT_EQ(row["epoch"], "2") << csv;
  EXPECT_EQ(row["ranks"], "4") << csv;
  EXPECT_GT(last_test_accuracy(dir + "/m.csv"), 0.7) << csv;
  EXPECT_EQ(column_sum(csv, "ranks_joined"), 1) << csv;
}

TEST(HoopTrain, CnnLearnsFashionMnistOnTwoRanks) {
  if (access((kFashion + "/train-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install "
                    "dataset-fashion-mnist)";
  std::string dir = temp_dir();
  ShellOutput r = run_shell(kRun + " -n 2 " + kTrain +
                            " --quiet --model cnn --epochs 2 --optim sgd "
                            "--lr 0.05 --train-limit 6000 --test-limit 2000 "
                            "--algo ring --metrics " + dir + "/m.csv");
  ASSERT_EQ(r.status, 0) << r.text;
  EXPECT_NE(r.text.find("cnn 28x28 conv10-conv20-50-10 (21840 parameters"),
            std::string::npos) << r.text;
  EXPECT_GT(last_test_accuracy(dir + "/m.csv"), 0.6)
      << "test accuracy after 2 epochs on 6000 samples; chance is 0.1";
  // The CNN runs on the CPU only; --device cuda says so on every rank.
  r = run_shell(kRun + " -n 2 " + kTrain + " --quiet --model cnn --device "
                "cuda --epochs 1 --train-limit 100 --test-limit 100");
  EXPECT_NE(r.status, 0) << r.text;
  EXPECT_NE(r.text.find("--device cuda"), std::string::npos) << r.text;
}

// With a GPU, two ranks sharing it learn; without one (or without CUDA in
// the build), --device cuda is refused on every rank, saying why.
TEST(HoopTrain, DeviceCudaLearnsOrIsRefusedWithTheReason) {
  std::string dir = temp_dir();
  write_set(dir, "train", 600, 6, 6, true, 5);
  write_set(dir, "t10k", 200, 6, 6, true, 6);
  ShellOutput r = run_shell(kRun + " -n 2 " + kTrain +
                            " --quiet --device cuda --epochs 3 --hidden 32 "
                            "--batch 16 --data " + dir + " --metrics " +
                            dir + "/m.csv");
  if (!cuda_missing().empty()) {
    EXPECT_NE(r.status, 0) << r.text;
    EXPECT_NE(r.text.find("--device cuda: "), std::string::npos) << r.text;
    GTEST_SKIP() << "refused as it should be; no GPU to learn on: "
                 << cuda_missing();
  }
  ASSERT_EQ(r.status, 0) << r.text;
  EXPECT_NE(r.text.find(" on cuda, "), std::string::npos) << r.text;
  EXPECT_GT(last_test_accuracy(dir + "/m.csv"), 0.3)
      << "test accuracy after 3 epochs; chance is 0.1";
}

// In a log (here through hoop-run to a pipe) rank 0's progress has no
// carriage returns, and a line only every --progress-every seconds.
TEST(HoopTrain, ProgressInALogIsAFewWholeLines) {
  std::string dir = temp_dir();
  write_set(dir, "train", 300, 6, 6, true, 3);
  write_set(dir, "t10k", 50, 6, 6, true, 4);
  // 150 samples per rank in batches of 8: 19 steps an epoch.
  std::string train = kRun + " -n 2 " + kTrain +
                      " --epochs 2 --hidden 16 --batch 8 --data " + dir;
  ShellOutput log = run_shell(train);
  ASSERT_EQ(log.status, 0) << log.text;
  EXPECT_EQ(log.text.find('\r'), std::string::npos) << log.text;
  EXPECT_EQ(log.text.find(": step "), std::string::npos)
      << "a progress line in a run far shorter than 10 s\n" << log.text;
  EXPECT_EQ(epoch_lines(log.text, 2).size(), 2u) << log.text;

  // A step takes more than a microsecond: every one reports, on rank 0.
  log = run_shell(train + " --progress-every 0.000001");
  ASSERT_EQ(log.status, 0) << log.text;
  std::string want;
  for (int epoch = 1; epoch <= 2; epoch++)
    for (int step = 1; step <= 19; step++)
      want += "[0] epoch " + std::to_string(epoch) + "/2: step " +
              std::to_string(step) + "/19 (" + std::to_string(100 * step / 19) +
              "%)\n";
  std::string got;
  static const std::regex progress(R"((.*\)), loss \d+\.\d{4})");
  std::istringstream lines(log.text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.find(": step ") == std::string::npos)
      continue;
    EXPECT_TRUE(std::regex_match(line, m, progress)) << line;
    got += m[1].str() + "\n";
  }
  EXPECT_EQ(got, want) << log.text;
  log = run_shell(train + " --progress-every 0");
  EXPECT_EQ(log.status, 2) << log.text;
  EXPECT_NE(log.text.find("--progress-every wants a positive number"),
            std::string::npos) << log.text;
}

// Told that its stderr pipe ends on a terminal (hoop-run's
// HOOP_STDERR_TTY=1), rank 0 draws a bar: each update ended by a carriage
// return, so that hoop-run shows it once complete, and blanked before the
// epoch's line.
TEST(HoopTrain, ProgressBarRedrawsInPlaceAndBlanksItself) {
  std::string dir = temp_dir();
  write_set(dir, "train", 300, 6, 6, true, 3);
  write_set(dir, "t10k", 50, 6, 6, true, 4);
  std::string train = kTrain + " --epochs 2 --hidden 16 --batch 8 --data " +
                      dir;
  // stderr alone: the bar is all that goes there.
  ShellOutput r =
      run_shell("(HOOP_STDERR_TTY=1 " + train + " 2>&1 >/dev/null)");
  ASSERT_EQ(r.status, 0) << r.text;
  static const std::regex bar(R"(epoch (\d)/2 \[[=> ]{30}\] +\d+% )"
                              R"(loss \d+\.\d{4}\r( +)\r)");
  std::set<std::string> epochs;
  for (auto it = std::sregex_iterator(r.text.begin(), r.text.end(), bar);
       it != std::sregex_iterator(); ++it) {
    epochs.insert((*it)[1]);
    EXPECT_EQ((*it)[2].length(), (*it)[0].length() - (*it)[2].length() - 2)
        << "the blanking covers the bar exactly: " << (*it)[0];
  }
  EXPECT_EQ(epochs, (std::set<std::string>{"1", "2"})) << r.text;
  EXPECT_EQ(r.text.find('\n'), std::string::npos) << r.text;
  r = run_shell("HOOP_STDERR_TTY=1 " + train + " --quiet");
  ASSERT_EQ(r.status, 0) << r.text;
  EXPECT_EQ(r.text.find('\r'), std::string::npos) << r.text;
}

// The README's `hoop-run -n 2 hoop-train` at a terminal (script(1) gives
// it one): the bar shows, rank 0's only, and none is left on the screen:
// an erasing of the line follows its last drawing.  An epoch of 500 steps
// outlasts the first drawing by far, so hoop-run sees the bar alone.
TEST(HoopTrain, ProgressBarShowsUnderHoopRunOnATerminal) {
  if (run_shell("command -v script").status != 0)
    GTEST_SKIP() << "no script(1) (bsdutils) to give hoop-run a terminal";
  std::string dir = temp_dir();
  write_set(dir, "train", 8000, 28, 28, false, 3);
  write_set(dir, "t10k", 50, 28, 28, false, 4);
  ShellOutput r = run_shell("timeout -k 5 100 script -qec '" + kRun +
                            " -n 2 " + kTrain + " --epochs 1 --batch 8 "
                            "--data " + dir + "' /dev/null");
  ASSERT_EQ(r.status, 0) << r.text;
  size_t last_bar = r.text.rfind("\r[0] epoch 1/1 [");
  ASSERT_NE(last_bar, std::string::npos) << r.text;
  EXPECT_NE(r.text.find("\r\033[K", last_bar + 1), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("[1] epoch"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("[0] epoch 1/1: loss "), std::string::npos) << r.text;
  run_shell("rm -rf " + dir);  // 6 MB of images
}

// torchrun as Debian's python3-torch 1.13 runs a native program; see
// tests/test_programs.cc for why each flag.
TEST(HoopTrain, TrainsUnderTorchrun) {
  if (run_shell("/usr/bin/python3 -c 'import torch.distributed.run'")
          .status != 0)
    GTEST_SKIP() << "PyTorch is not importable by /usr/bin/python3 "
                    "(apt-get install python3-torch)";
  std::string dir = temp_dir();
  write_set(dir, "train", 300, 6, 6, true, 3);
  write_set(dir, "t10k", 50, 6, 6, true, 4);
  ShellOutput r = run_shell(
      std::string("HOOP_AUTH_TOKEN=") + hooptest::kTestToken +
      " timeout -k 5 100 /usr/bin/python3 -m torch.distributed.run "
      "--standalone --no_python --redirects 2 --tee 2 --nproc_per_node 2 " +
      kTrain + " --epochs 1 --hidden 16 --batch 8 --data " + dir +
      " --metrics " + dir + "/m.csv");
  ASSERT_EQ(r.status, 0) << r.text;
  EXPECT_NE(r.text.find("hoop-train: 2 ranks, mlp 36-16-10"),
            std::string::npos) << r.text;
  EXPECT_EQ(epoch_lines(r.text, 2).size(), 1u) << r.text;
  EXPECT_EQ(last_metrics(dir + "/m.csv")["epoch"], "1")
      << slurp(dir + "/m.csv");
}

TEST(HoopTrain, PlotsTheMetrics) {
  if (run_shell("/usr/bin/python3 -c 'import matplotlib'").status != 0)
    GTEST_SKIP() << "Debian's python3-matplotlib is not installed";
  std::string dir = temp_dir();
  write_set(dir, "train", 64, 4, 4, true);
  write_set(dir, "t10k", 16, 4, 4, true);
  ShellOutput r = run_shell(kTrain + " --quiet --epochs 2 --hidden 8 --data " + dir +
               " --plot " + dir + "/curves.png");
  ASSERT_EQ(r.status, 0) << r.text;
  EXPECT_EQ(epoch_lines(r.text, 1).size(), 2u) << r.text;
  EXPECT_EQ(slurp(dir + "/curves.png").substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_NE(slurp(dir + "/curves.png.csv").find("\n2,"), std::string::npos);
}

} // namespace
