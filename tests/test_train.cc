// hoop-train's pieces: the IDX reader and its errors, the MLP's gradients
// against finite differences, the optimisers against their formulas,
// sharding, data-parallel steps against one process with an N-times batch
// (on the CPU, and on a CUDA device where there is one), checkpoints, and
// the binary end to end on Fashion-MNIST.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

extern "C" {
#include <cblas.h>

#include "checkpoint.h"
#include "dataset.h"
#include "idx.h"
#include "mlp.h"
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

dataset_t random_dataset(size_t n, size_t features, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  dataset_t d = {};
  d.n = n;
  d.features = features;
  d.classes = DATASET_CLASSES;
  d.x = (float *)malloc(n * features * sizeof(float));
  d.y = (uint8_t *)malloc(n);
  for (size_t i = 0; i < n * features; i++)
    d.x[i] = normal(gen);
  for (size_t i = 0; i < n; i++)
    d.y[i] = (uint8_t)(gen() % DATASET_CLASSES);
  return d;
}

TEST(Mlp, GradientMatchesFiniteDifferences) {
  const int sizes[] = {6, 5, 4, 10};
  mlp_t m;
  char err[256];
  ASSERT_EQ(mlp_init(&m, 3, sizes, 8, err, sizeof err), 0) << err;
  rng_t rng;
  rng_seed(&rng, 3);
  mlp_init_params(&m, &rng);
  dataset_t d = random_dataset(5, 6, 9);
  std::vector<size_t> idx = {0, 1, 2, 3, 4};
  auto loss_at = [&]() {
    mlp_gather(&m, &d, idx.data(), 5);
    mlp_forward(&m, 5);
    return mlp_loss(&m, 5, d.y, 1.0f);
  };
  std::vector<float> grads(m.nparams, 0.0f);
  loss_at();
  std::vector<int> layers_done;
  mlp_backward(&m, 5, grads.data(),
               [](void *ctx, int layer) {
                 static_cast<std::vector<int> *>(ctx)->push_back(layer);
               },
               &layers_done);
  EXPECT_EQ(layers_done, (std::vector<int>{2, 1, 0}));
  const float eps = 1e-2f;
  for (size_t i = 0; i < m.nparams; i++) {
    float keep = m.params[i];
    m.params[i] = keep + eps;
    double up = loss_at();
    m.params[i] = keep - eps;
    double down = loss_at();
    m.params[i] = keep;
    double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(grads[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
        << "parameter " << i;
  }
  dataset_free(&d);
  mlp_free(&m);
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

trainer_config_t small_config(optim_kind_t kind, size_t bucket_bytes,
                              int batch) {
  trainer_config_t c = {};
  c.nlayers = 3;
  c.sizes[0] = 12;
  c.sizes[1] = 9;
  c.sizes[2] = 7;
  c.sizes[3] = DATASET_CLASSES;
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
};

void PrintTo(const DdpCase &c, std::ostream *os) {
  *os << c.nranks << " ranks, " << optim_name(c.optim) << ", bucket "
      << c.bucket_bytes << " B, " << c.accum << " accumulation steps"
      << (c.cuda ? ", on CUDA" : "");
}

class DataParallel : public ::testing::TestWithParam<DdpCase> {};

// N ranks with batch B (and A accumulation steps) must follow one process
// that takes N*A*B samples per update, and keep every replica identical.
// On CUDA the ranks compute with cuBLAS and average device gradients
// through hoop; the reference stays the CPU one.
TEST_P(DataParallel, MatchesOneProcessWithAnNTimesBatch) {
  const DdpCase c = GetParam();
  if (c.cuda && !cuda_missing().empty())
    GTEST_SKIP() << cuda_missing();
  const int batch = 3, steps = 6;
  auto fn = [&](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
    dataset_t d = random_dataset(401, 12, 21);
    trainer_config_t cfg = small_config(c.optim, c.bucket_bytes, batch);
    cfg.cuda = c.cuda;
    trainer_t t;
    char err[512];
    if (trainer_init(&t, comm, &cfg, err, sizeof err) != 0)
      return log.fail("trainer_init: %s", err);

    // The reference: rank 0's initial parameters, all shards' samples.
    mlp_t ref;
    optim_t ref_opt;
    mlp_init(&ref, cfg.nlayers, cfg.sizes, batch * nranks * c.accum, err,
             sizeof err);
    rng_t rng;
    rng_seed(&rng, cfg.seed);
    mlp_init_params(&ref, &rng);
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
      for (size_t i : all)
        labels.push_back(d.y[i]);
      int global = (int)all.size();
      std::fill(ref_grads.begin(), ref_grads.end(), 0.0f);
      mlp_gather(&ref, &d, all.data(), global);
      mlp_forward(&ref, global);
      mlp_loss(&ref, global, labels.data(), 1.0f / (float)global);
      mlp_backward(&ref, global, ref_grads.data(), nullptr, nullptr);
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
    mlp_free(&ref);
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
                      DdpCase{3, OPTIM_SGD, 400, 2, true}),
    [](const ::testing::TestParamInfo<DdpCase> &i) {
      return std::to_string(i.param.nranks) + "ranks_" +
             optim_name(i.param.optim) + "_bucket" +
             std::to_string(i.param.bucket_bytes) + "_accum" +
             std::to_string(i.param.accum) + (i.param.cuda ? "_cuda" : "");
    });

TEST(Checkpoint, RoundTripsAndRefusesWhatDoesNotFit) {
  std::string dir = temp_dir(), path = dir + "/ckpt";
  const int sizes[] = {4, 3, 10};
  mlp_t m;
  char err[512];
  ASSERT_EQ(mlp_init(&m, 2, sizes, 1, err, sizeof err), 0);
  rng_t rng;
  rng_seed(&rng, 2);
  mlp_init_params(&m, &rng);
  optim_t o;
  ASSERT_EQ(optim_init(&o, OPTIM_ADAM, m.nparams, 0.1f, 0, 0), 0);
  std::vector<float> g(m.nparams, 0.5f);
  optim_step(&o, m.params, g.data());
  optim_step(&o, m.params, g.data());
  ASSERT_EQ(ckpt_save(path.c_str(), &m, &o, 3, 77, err, sizeof err), 0)
      << err;

  mlp_t back;
  optim_t back_opt;
  mlp_init(&back, 2, sizes, 1, err, sizeof err);
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
  const int other[] = {4, 5, 10};
  mlp_t wrong;
  mlp_init(&wrong, 2, other, 1, err, sizeof err);
  optim_t wrong_opt;
  optim_init(&wrong_opt, OPTIM_ADAM, wrong.nparams, 0.1f, 0, 0);
  EXPECT_NE(ckpt_load(path.c_str(), &wrong, &wrong_opt, &epochs, 77, err,
                      sizeof err), 0);
  EXPECT_NE(std::string(err).find("holds an MLP 4-3-10, this run builds "
                                  "4-5-10"), std::string::npos) << err;
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

  for (optim_t *p : {&o, &back_opt, &wrong_opt, &sgd})
    optim_free(p);
  for (mlp_t *p : {&m, &back, &wrong})
    mlp_free(p);
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

// The test accuracy in the last row of a --metrics CSV (its fourth
// field), or -1 when there is no such row.
double last_test_accuracy(const std::string &csv) {
  std::istringstream in(slurp(csv));
  std::string line, last;
  while (std::getline(in, line))
    last = line;
  double fields[4];
  if (sscanf(last.c_str(), "%lf,%lf,%lf,%lf", &fields[0], &fields[1],
             &fields[2], &fields[3]) != 4)
    return -1;
  return fields[3];
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
                           "--batch 9999999", "stray"}) {
    r = run_shell(kTrain + " " + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.text;
    EXPECT_NE(r.text.find("hoop-train: "), std::string::npos) << r.text;
  }
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
  EXPECT_NE(r.text.find("sent/step 796840 B, model 796840 B"),
            std::string::npos) << r.text;
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

TEST(HoopTrain, PlotsTheMetrics) {
  if (run_shell("/usr/bin/python3 -c 'import matplotlib'").status != 0)
    GTEST_SKIP() << "Debian's python3-matplotlib is not installed";
  std::string dir = temp_dir();
  write_set(dir, "train", 64, 4, 4, true);
  write_set(dir, "t10k", 16, 4, 4, true);
  ShellOutput r = run_shell(kTrain + " --quiet --epochs 2 --hidden 8 --data " + dir +
               " --plot " + dir + "/curves.png");
  ASSERT_EQ(r.status, 0) << r.text;
  EXPECT_EQ(slurp(dir + "/curves.png").substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_NE(slurp(dir + "/curves.png.csv").find("\n2,"), std::string::npos);
}

} // namespace
