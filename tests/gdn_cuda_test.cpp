// Gated DeltaNet core on the CUDA backend (skipped where no GPU is visible):
// the three recurrence designs (CudaOptions::gdn_design 1, 2, 3) against the f64
// reference, results bit-identical for every checkpoint interval, the
// forward without the record part, and a repeated backward. The parity
// cases (tests/parity/gdn_cases.cpp) cover the default design (3).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/gdn_config.hpp"
#include "support/parity.hpp"

namespace bitrank {
namespace {

// The CUDA backend running recurrence design `design` (CudaOptions::gdn_design), one made per design.
// (The tests skip before calling it in builds without the backend.)
Backend<float>& design_backend(int design) {
#ifdef BITRANK_HAS_CUDA
  static std::map<int, std::unique_ptr<Backend<float>>> made;
  std::unique_ptr<Backend<float>>& b = made[design];
  if (!b) b = make_cuda_backend(0, CudaOptions{.gdn_design = design});
  return *b;
#else
  fail("design {}: this build has no CUDA backend", design);
#endif
}

// One layer call's host data at the scales of the parity cases.
struct Inputs {
  GdnConfig cfg;
  index_t n = 0;
  std::vector<float> conv, a_log, dt_bias, gain, qkv, z, a, b, d_out;
  Inputs(const GdnConfig& c, index_t windows, std::uint64_t seed) : cfg(c), n(windows * c.window) {
    const index_t C = cfg.channels(), V = cfg.value_width(), hv = cfg.v_heads;
    auto draw = [&](index_t count, float scale, float offset = 0.0f) {
      auto v = rnd(static_cast<std::size_t>(count), seed++, scale);
      for (auto& x : v) x += offset;
      return v;
    };
    conv = draw(C * cfg.conv_kernel, 0.5f);
    for (index_t h = 0; h < hv; ++h) a_log.push_back(-0.5f + 0.3f * static_cast<float>(h));
    dt_bias = draw(hv, 0.5f);
    gain = draw(cfg.head_dim, 0.3f, 1.0f);
    qkv = draw(n * C, 1.0f);
    z = draw(n * V, 1.0f);
    a = draw(n * hv, 1.0f);
    b = draw(n * hv, 1.0f);
    d_out = draw(n * V, 1.0f);
  }
};

template <class T>
struct Results {
  std::vector<T> out, d_qkv, d_z, d_a, d_b;
};

// Forward (recording unless told) and `backwards` backward runs on backend `be`;
// without_forward: the backward on an unwritten tape (for argument checks that must fire first).
template <class T>
Results<T> run(Backend<T>& be, const Inputs& in, bool record = true, int backwards = 1, bool without_forward = false) {
  const GdnConfig& cfg = in.cfg;
  const index_t n = in.n, C = cfg.channels(), V = cfg.value_width(), hv = cfg.v_heads;
  Memory& mem = *be.memory;
  auto up = [&](const std::vector<float>& v) {
    Buffer<T> buf(mem, v.size());
    std::vector<T> t(v.begin(), v.end());
    buf.upload(t);
    return buf;
  };
  auto conv = up(in.conv), a_log = up(in.a_log), dt_bias = up(in.dt_bias), gain = up(in.gain);
  auto qkv = up(in.qkv), z = up(in.z), a = up(in.a), b = up(in.b), d_out = up(in.d_out);
  Buffer<T> out(mem, static_cast<std::size_t>(n * V)), d_qkv(mem, static_cast<std::size_t>(n * C)),
      d_z(mem, static_cast<std::size_t>(n * V)), d_a(mem, static_cast<std::size_t>(n * hv)),
      d_b(mem, static_cast<std::size_t>(n * hv));
  Buffer<T> tape(mem, static_cast<std::size_t>(gdn_tape_size(cfg, n, record)));
  const GdnParams<T> prm{conv.view({C, cfg.conv_kernel}), a_log.view({hv}), dt_bias.view({hv}),
                         gain.view({cfg.head_dim})};
  Results<T> r;
  if (!without_forward) {
    be.gdn().gdn_forward(cfg, prm, qkv.view({n, C}), z.view({n, V}), a.view({n, hv}), b.view({n, hv}),
                         out.view({n, V}), tape.view(), record);
    r.out = out.download();
  }
  for (int i = 0; i < backwards; ++i) {
    be.gdn().gdn_backward(cfg, prm, qkv.view({n, C}), z.view({n, V}), tape.view(), d_out.view({n, V}),
                          d_qkv.view({n, C}), d_z.view({n, V}), d_a.view({n, hv}), d_b.view({n, hv}));
    be.synchronize();
  }
  if (backwards > 0) {
    r.d_qkv = d_qkv.download();
    r.d_z = d_z.download();
    r.d_a = d_a.download();
    r.d_b = d_b.download();
  }
  return r;
}

bool bit_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// With BITRANK_GDN_DUMP=PREFIX, BothDesignsMatchReference writes design 3's
// results for shape i (raw f32) to PREFIX.i and the shapes' names, a line
// each, to PREFIX.shapes, so that two builds of the kernels can be compared
// bit for bit shape by shape (tools/gpu/gpu_gdn_variants.sh: each variant's
// against the tree's).
class ResultDump {
 public:
  ResultDump() {
    const char* path = std::getenv("BITRANK_GDN_DUMP");
    if (path && *path) prefix_ = path;
  }
  void add(const std::string& shape, const Results<float>& r) {
    if (prefix_.empty()) return;
    write(prefix_ + "." + std::to_string(count_++), [&](std::FILE* f) {
      for (const auto* v : {&r.out, &r.d_qkv, &r.d_z, &r.d_a, &r.d_b})
        if (std::fwrite(v->data(), sizeof(float), v->size(), f) != v->size()) return false;
      return true;
    });
    names_ += shape + "\n";
    write(prefix_ + ".shapes", [&](std::FILE* f) { return std::fputs(names_.c_str(), f) >= 0; });
  }

 private:
  template <class F>
  static void write(const std::string& path, F&& body) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
      ADD_FAILURE() << "BITRANK_GDN_DUMP: cannot write " << path;
      return;
    }
    const bool ok = body(f);
    if (std::fclose(f) != 0 || !ok) ADD_FAILURE() << "BITRANK_GDN_DUMP: short write to " << path;
  }
  std::string prefix_, names_;
  int count_ = 0;
};

// Relative L2 errors of every design against the reference (design 3: the
// chunkwise form, forward and backward). Tolerance 2e-4:
// the parity cases' (a T-step f32 recurrence, then norms whose backward
// subtracts nearly equal terms).
TEST(GdnCuda, BothDesignsMatchReference) {
  if (!test::cuda_available()) GTEST_SKIP() << "no GPU visible";
  const std::vector<std::pair<GdnConfig, index_t>> shapes{
      {test::gdn_config(2, 6, 128, 4, 45, 8), 2},  // the seed's shape: clusters of 4 blocks
      {test::gdn_config(2, 4, 20, 4, 13, 1), 2},   // d 20: padded rows and columns, a checkpoint every step
      {test::gdn_config(1, 3, 64, 4, 37, 64), 1},  // one segment longer than a staging chunk
      {test::gdn_config(1, 2, 100, 3, 40, 19), 1}, // d 100: a cluster of 4, the last block partly empty
      {test::gdn_config(1, 2, 8, 4, 2, 8), 3},     // windows shorter than the conv
      {test::gdn_config(2, 6, 128, 4, 150, 8), 2}, // design 3: two full chunks of 64 and a short one
      {test::gdn_config(1, 3, 7, 4, 64, 8), 2},    // design 3: exactly one chunk, d 7 (one partial tile)
      {test::gdn_config(1, 2, 32, 4, 300, 8), 1},  // design 3: five chunks (double buffers alternate past two)
      {test::gdn_config(1, 3, 67, 4, 130, 8), 1},  // d 67: the row kernels' scalar path, 3 slots a lane, the last partial;
                                         // 335 channels (the conv's scalar path), a last conv tile of 2 rows
      {test::gdn_config(1, 2, 16, 4, 127, 8), 1},  // a last conv tile 1 to 3 rows short of full (32- or 64-row tiles)
  };
  ResultDump dump;
  for (const auto& [cfg, windows] : shapes) {
    const Inputs in(cfg, windows, 7);
    const auto want = run(test::ref_backend(), in);
    for (int design : {1, 2, 3}) {
      const auto got = run(design_backend(design), in);
      const std::string shape = "d " + std::to_string(cfg.head_dim) + " T " + std::to_string(cfg.window) +
                                " ckpt " + std::to_string(cfg.ckpt_every);
      if (design == 3) dump.add(shape, got);
      const std::string tag = shape + " design " + std::to_string(design);
      auto check = [&](const char* name, const std::vector<float>& g, const std::vector<double>& w) {
        const double e = test::rel_l2(g, w);
        std::printf("  [gdn cuda] %-34s %-6s rel %.3e\n", tag.c_str(), name, e);
        EXPECT_LE(e, 2e-4) << tag << " " << name;
      };
      check("out", got.out, want.out);
      check("d_qkv", got.d_qkv, want.d_qkv);
      check("d_z", got.d_z, want.d_z);
      check("d_a", got.d_a, want.d_a);
      check("d_b", got.d_b, want.d_b);
    }
  }
}

// The replay rebuilds each state with the forward's roundings and kv, so
// each design's results are bit-identical for every checkpoint interval.
TEST(GdnCuda, BitIdenticalAcrossCkptEvery) {
  if (!test::cuda_available()) GTEST_SKIP() << "no GPU visible";
  for (int design : {1, 2, 3}) {
    Backend<float>& cu = design_backend(design);
    const auto shape = [](index_t cs) { return test::gdn_config(2, 6, 128, 4, 45, cs); };
    const auto base = run(cu, Inputs(shape(8), 2, 31));
    for (index_t cs : {1, 2, 7, 16, 17, 45, 64}) {
      const auto g = run(cu, Inputs(shape(cs), 2, 31));
      EXPECT_TRUE(bit_equal(g.out, base.out)) << "design " << design << " out, ckpt_every " << cs;
      EXPECT_TRUE(bit_equal(g.d_qkv, base.d_qkv)) << "design " << design << " d_qkv, ckpt_every " << cs;
      EXPECT_TRUE(bit_equal(g.d_z, base.d_z)) << "design " << design << " d_z, ckpt_every " << cs;
      EXPECT_TRUE(bit_equal(g.d_a, base.d_a)) << "design " << design << " d_a, ckpt_every " << cs;
      EXPECT_TRUE(bit_equal(g.d_b, base.d_b)) << "design " << design << " d_b, ckpt_every " << cs;
    }
  }
}

// Without the record part the output is the same, from the forward part of the tape alone.
TEST(GdnCuda, ForwardWithoutTapeSameOutput) {
  if (!test::cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Inputs in(test::gdn_config(2, 4, 128, 4, 19, 4), 2, 41);
  for (int design : {1, 2, 3}) {
    Backend<float>& cu = design_backend(design);
    const auto rec = run(cu, in, true, 0), plain = run(cu, in, false, 0);
    EXPECT_TRUE(bit_equal(rec.out, plain.out)) << "design " << design;
  }
}

// The backward writes only the tape's scratch part and sums in a fixed
// order: a second backward on the same tape gives the same bits.
TEST(GdnCuda, BackwardRepeatable) {
  if (!test::cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Inputs in(test::gdn_config(1, 3, 128, 4, 21, 5), 2, 51);
  for (int design : {1, 2, 3}) {
    Backend<float>& cu = design_backend(design);
    const auto once = run(cu, in, true, 1), twice = run(cu, in, true, 2);
    EXPECT_TRUE(bit_equal(once.d_qkv, twice.d_qkv)) << "design " << design;
    EXPECT_TRUE(bit_equal(once.d_z, twice.d_z)) << "design " << design;
    EXPECT_TRUE(bit_equal(once.d_a, twice.d_a)) << "design " << design;
    EXPECT_TRUE(bit_equal(once.d_b, twice.d_b)) << "design " << design;
  }
}

// A design other than 1, 2, 3, a head_dim beyond the kernels' limit and (in the
// backward) a conv kernel beyond its register window are errors.
TEST(GdnCuda, UnsupportedIsAnError) {
  if (!test::cuda_available()) GTEST_SKIP() << "no GPU visible";
  auto& cu = test::backend("cuda");
  EXPECT_THROW(design_backend(4), Error);
  try {
    run(cu, Inputs(test::gdn_config(1, 1, 160, 4, 2, 2), 1, 62));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gdn_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
  // The conv kernels take at most 8 taps, in both directions.
  const Inputs wide_conv(test::gdn_config(1, 1, 8, 9, 12, 2), 1, 63);
  for (const bool backward : {false, true}) {
    try {
      run(cu, wide_conv, true, backward ? 1 : 0, backward);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(backward ? "gdn_backward" : "gdn_forward"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("conv_kernel"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace bitrank
