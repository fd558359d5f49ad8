// Calibration statistics (contract: include/bitrank/train/calibration.hpp).
#include "bitrank/train/calibration.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bitrank/error.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/projection.hpp"

namespace bitrank::train {
namespace {

// Σ_t x_tj² per projection, accumulated on the backend; read out at the end.
class ColumnSquares {
 public:
  explicit ColumnSquares(Backend<float>& be) : be_(be) {}
  void add(const std::string& name, CView<float> in) {
    auto [it, fresh] = sums_.try_emplace(name);
    const index_t cols = in.dim(1);
    if (fresh) {
      it->second = Buffer<float>(*be_.memory, static_cast<std::size_t>(cols));
      be_.memory->zero(it->second.data(), static_cast<std::size_t>(cols) * sizeof(float));
    }
    be_.reduce().col_sum_prod(in, in, it->second.view({cols}));
  }
  std::map<std::string, std::vector<float>> rms(index_t rows) const {
    std::map<std::string, std::vector<float>> out;
    for (auto& [name, buf] : sums_) {
      std::vector<float> v(buf.size());
      be_.memory->download(v.data(), buf.data(), v.size() * sizeof(float));
      for (float& x : v) x = static_cast<float>(std::sqrt(double(x) / double(rows)));
      out.emplace(name, std::move(v));
    }
    return out;
  }

 private:
  Backend<float>& be_;
  std::map<std::string, Buffer<float>> sums_;
};

// The damped Gram of one input's first rows (read back to the host).
std::shared_ptr<const std::vector<float>> damped_gram(Backend<float>& be, CView<float> in) {
  const index_t rows = std::min(in.dim(0), kGramRows), cols = in.dim(1);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  be.memory->download(x.data(), in.data, x.size() * sizeof(float));
  auto gram = std::make_shared<std::vector<float>>(static_cast<std::size_t>(cols * cols), 0.0f);
  std::vector<float>& c = *gram;
  const auto bc = static_cast<blasint>(cols);
  cblas_ssyrk(CblasRowMajor, CblasLower, CblasTrans, bc, static_cast<blasint>(rows), 1.0f / static_cast<float>(rows), x.data(), bc,
              0.0f, c.data(), bc);
  double trace = 0;
  for (index_t i = 0; i < cols; ++i) {
    trace += c[static_cast<std::size_t>(i * cols + i)];
    for (index_t j = 0; j < i; ++j) c[static_cast<std::size_t>(j * cols + i)] = c[static_cast<std::size_t>(i * cols + j)];
  }
  const auto ridge = static_cast<float>(kGramDamping * trace / static_cast<double>(cols));
  for (index_t i = 0; i < cols; ++i) c[static_cast<std::size_t>(i * cols + i)] += ridge;
  return gram;
}

}  // namespace

ProjectionInputs projection_inputs(const model::DecoderModel<float>& teacher, std::span<const std::int32_t> ids,
                                   index_t window, bool grams) {
  const index_t n = static_cast<index_t>(ids.size());
  if (n == 0 || window < 1 || n % window != 0)
    fail("calibration: {} ids are not whole windows of {}", ids.size(), window);
  Backend<float>& be = teacher.backend();
  const io::ModelConfig& cfg = teacher.config();
  const index_t d = cfg.hidden_size;
  Buffer<float> x(*be.memory, static_cast<std::size_t>(n * d)), y(*be.memory, static_cast<std::size_t>(n * d));
  teacher.embed(ids, x.view({n, d}));
  ColumnSquares sums(be);
  ProjectionInputs out;
  // Projection p of block b reads `in` (its first in_features(p) columns per
  // row); the projections after the first on one input share its Gram.
  const float* last_input = nullptr;
  std::shared_ptr<const std::vector<float>> last_gram;
  const auto add = [&](index_t b, const char* proj, const Buffer<float>& in, index_t cols) {
    const std::string name = fmt::format("blk.{}.{}", b, proj);
    const CView<float> x(in.data(), Shape{n, cols});
    sums.add(name, x);
    if (!grams) return;
    if (in.data() != last_input || !last_gram || std::ssize(*last_gram) != cols * cols) last_gram = damped_gram(be, x);
    last_input = in.data();
    out.gram.emplace(name, last_gram);
  };
  if (const auto* llama = dynamic_cast<const model::LlamaModel<float>*>(&teacher)) {
    model::BlockActivations<float> a;
    using P = model::LlamaProj;
    const model::LlamaBlockDims dims = model::LlamaBlockDims::of(cfg);
    const auto add_p = [&](index_t b, P p, const Buffer<float>& in) {
      add(b, model::llama_proj_name(p), in, dims.in_features(p));
    };
    for (index_t b = 0; b < cfg.num_layers; ++b) {
      llama->block_forward(b, x.view({n, d}), window, a, y.view({n, d}));
      for (P p : {P::q, P::k, P::v}) add_p(b, p, a.xn1);
      add_p(b, P::o, a.att);
      for (P p : {P::gate, P::up}) add_p(b, p, a.xn2);
      add_p(b, P::down, a.act);
      std::swap(x, y);
      last_input = nullptr;  // the next block's activations may reuse the buffers
    }
  } else if (const auto* hybrid = dynamic_cast<const model::HybridModel<float>*>(&teacher)) {
    model::HybridBlockActivations<float> a;
    using P = model::HybridProj;
    const model::HybridBlockDims dims = hybrid->block_dims();
    const auto add_p = [&](index_t b, P p, const Buffer<float>& in) {
      add(b, model::hybrid_proj_name(p), in, dims.in_features(p));
    };
    for (index_t b = 0; b < cfg.num_layers; ++b) {
      hybrid->block_forward(b, x.view({n, d}), window, a, y.view({n, d}), false);
      if (cfg.layer_types.at(static_cast<std::size_t>(b)) == io::LayerType::full_attention) {
        for (P p : {P::q, P::k, P::v}) add_p(b, p, a.xn1);
        add_p(b, P::o, a.gated);
      } else {
        for (P p : {P::qkv, P::z}) add_p(b, p, a.xn1);
        add_p(b, P::out, a.o);
      }
      for (P p : {P::gate, P::up}) add_p(b, p, a.xn2);
      add_p(b, P::down, a.act);
      std::swap(x, y);
      last_input = nullptr;
    }
  } else {
    fail("calibration: the teacher is neither a Llama nor a hybrid model");
  }
  out.rms = sums.rms(n);
  return out;
}

std::vector<float> column_scale_from_rms(std::span<const float> rms) {
  double mean = 0;
  for (float v : rms) mean += v;
  mean /= std::max<double>(1.0, static_cast<double>(rms.size()));
  const float floor = static_cast<float>(std::max(mean * 1e-3, 1e-30));
  std::vector<float> c(rms.begin(), rms.end());
  for (float& v : c) v = std::isfinite(v) ? std::max(v, floor) : floor;
  return c;
}

}  // namespace bitrank::train
