// Decoder projections of every family, dense or BLR: the compressible set
// and a dense Llama's bit accounting, the weight check with BLR matrices,
// one projection on a backend
// (contract: include/bitrank/model/projection.hpp).
#include "bitrank/model/projection.hpp"

#include <fmt/format.h>

#include <string>
#include <type_traits>

#include "bitrank/error.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"

namespace bitrank::model {

bool is_llama_projection(const std::string& name) {
  static const char* const suffixes[] = {".attn_q.weight",      ".attn_k.weight",  ".attn_v.weight", ".attn_output.weight",
                                         ".ffn_gate.weight",    ".ffn_up.weight",  ".ffn_down.weight"};
  if (name.rfind("blk.", 0) != 0) return false;
  for (const char* s : suffixes) {
    const std::string_view sv(s);
    if (name.size() > sv.size() && name.compare(name.size() - sv.size(), sv.size(), sv) == 0) return true;
  }
  return false;
}

blr::ModelBits llama_model_bits(const ModelConfig& config, double bpw, int paths, int scale_bits, int dense_bits) {
  std::vector<blr::RankPlan> projections;
  for (const auto& [name, shape] : expected_tensors(config))
    if (shape.size() == 2 && is_llama_projection(name)) projections.push_back({name, shape[0], shape[1], 0});
  const std::vector<blr::RankPlan> plan = blr::plan_ranks(std::move(projections), bpw, paths, scale_bits);
  blr::ModelBits out;
  std::size_t next = 0;
  for (const auto& [name, shape] : expected_tensors(config)) {
    if (next < plan.size() && plan[next].name == name) {
      const blr::RankPlan& p = plan[next++];
      out.add_blr(name, p.m, p.n, p.rank, paths, scale_bits);
    } else {
      index_t numel = 1;
      for (index_t d : shape) numel *= d;
      out.add_dense(name, numel, dense_bits);
    }
  }
  return out;
}

TensorList model_tensors(const ModelConfig& c) {
  return c.is_hybrid() ? hybrid_expected_tensors(c) : expected_tensors(c);
}

std::vector<blr::RankPlan> compressible_projections(const ModelConfig& c) {
  std::vector<blr::RankPlan> out;
  if (!c.is_hybrid()) {
    check_llama_config(c, "compressible projections");
    for (const auto& [name, shape] : expected_tensors(c))
      if (is_llama_projection(name)) out.push_back({name.substr(0, name.size() - 7), shape[0], shape[1], 0});
    return out;
  }
  check_hybrid_config(c, "compressible projections");
  const HybridBlockDims dims = HybridBlockDims::of(c);
  for (index_t b = 0; b < c.num_layers; ++b) {
    const bool full = c.layer_types[static_cast<std::size_t>(b)] == io::LayerType::full_attention;
    for (HybridProj p : hybrid_block_projs(full))
      if (hybrid_proj_is_compressible(p))
        out.push_back({fmt::format("blk.{}.{}", b, hybrid_proj_name(p)), dims.out_features(p), dims.in_features(p), 0});
  }
  return out;
}

void check_weights(const HostWeights& w, const BlrProjections& blr) {
  const ModelConfig& c = w.config;
  if (c.is_hybrid())
    check_hybrid_config(c, w.source);
  else
    check_llama_config(c, w.source);
  if (!blr.empty()) {
    std::map<std::string, const blr::RankPlan*> compressible;
    const std::vector<blr::RankPlan> plan = compressible_projections(c);
    for (const blr::RankPlan& p : plan) compressible.emplace(p.name, &p);
    for (const auto& [name, m] : blr) {
      const auto it = compressible.find(name);
      if (it == compressible.end())
        fail("model '{}': BLR matrix {} replaces no compressible projection of a {} model", w.source, name,
             c.model_type);
      const blr::RankPlan& p = *it->second;
      if (m.m != p.m || m.n != p.n)
        fail("model '{}': BLR matrix {} is {}×{}, the tensor it replaces is {}", w.source, name, m.m, m.n,
             shape_str({p.m, p.n}));
      blr::check_blr(m, fmt::format("model '{}': BLR matrix {}", w.source, name));
    }
  }
  TensorList dense;
  for (auto& [name, shape] : model_tensors(c))
    if (!(name.ends_with(".weight") && blr.contains(name.substr(0, name.size() - 7))))
      dense.emplace_back(std::move(name), std::move(shape));
  check_tensors(w, dense);
}

namespace {

// values written to p in `mem` as T (f16: rounded to nearest even).
template <class T>
void write_values(Memory& mem, T* p, std::span<const float> values) {
  if constexpr (std::is_same_v<T, float>) {
    mem.upload(p, values.data(), values.size_bytes());
  } else {
    std::vector<T> converted(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, f16>)
        converted[i] = to_f16(values[i]);
      else
        converted[i] = static_cast<T>(values[i]);
    }
    mem.upload(p, converted.data(), converted.size() * sizeof(T));
  }
}

}  // namespace

template <class T>
Buffer<T> upload_values(Memory& mem, std::span<const float> values) {
  Buffer<T> b(mem, values.size());
  if (!values.empty()) write_values(mem, b.data(), values);
  return b;
}

template <class T>
CView<T> place_values(Memory& mem, Carver& at, std::span<const float> values) {
  T* p = at.take<T>(static_cast<index_t>(values.size()));
  if (p) write_values(mem, p, values);
  return CView<T>(p, Shape{static_cast<index_t>(values.size())});
}

template <class T>
Projection<T> Projection<T>::dense(Memory& mem, Carver& at, const HostTensor& w, const std::string& name, bool half) {
  if (w.shape.size() != 2 || w.shape[0] < 1 || w.shape[1] < 1 ||
      static_cast<std::size_t>(w.shape[0] * w.shape[1]) != w.values.size())
    fail("projection {}: a dense weight must be a non-empty matrix with its values, got shape {} with {} values", name,
         shape_str(w.shape), w.values.size());
  Projection p;
  p.rows_ = w.shape[0];
  p.cols_ = w.shape[1];
  if (half)
    p.dense16_ = place_values<bitrank::f16>(mem, at, w.values).data;
  else
    p.dense_ = place_values<T>(mem, at, w.values).data;
  return p;
}

template <class T>
Projection<T> Projection<T>::blr(Memory& mem, Carver& at, const blr::HostBlrMatrix& h, const std::string& name,
                                 WeightForm form) {
  blr::check_blr(h, "projection " + name);
  Projection p;
  p.rows_ = h.m;
  p.cols_ = h.n;
  p.rank_ = h.r;
  const index_t P = static_cast<index_t>(h.paths.size()), words = h.r / 32, per_path = h.m + h.r + h.n;
  const bool bitmaps = !form.sign_blocks;  // else the sign blocks alone
  std::uint32_t* bits_u = bitmaps ? at.take<std::uint32_t>(P * h.m * words) : nullptr;
  std::uint32_t* bits_v = bitmaps ? at.take<std::uint32_t>(P * h.n * words) : nullptr;
  std::vector<float> scales;
  for (index_t k = 0; k < P; ++k) {
    const blr::HostBlrPath& path = h.paths[static_cast<std::size_t>(k)];
    if (bitmaps && !at.measuring()) {
      mem.upload(bits_u + k * h.m * words, path.sign_u.data(), path.sign_u.size() * sizeof(std::uint32_t));
      mem.upload(bits_v + k * h.n * words, path.sign_v.data(), path.sign_v.size() * sizeof(std::uint32_t));
    }
    scales.insert(scales.end(), path.h.begin(), path.h.end());
    scales.insert(scales.end(), path.l.begin(), path.l.end());
    scales.insert(scales.end(), path.g.begin(), path.g.end());
  }
  const bool f16_scales = form.f16_scales;
  const T* all_scales = f16_scales ? nullptr : place_values<T>(mem, at, scales).data;
  const bitrank::f16* all_scales16 = f16_scales ? place_values<bitrank::f16>(mem, at, scales).data : nullptr;
  for (index_t k = 0; k < P; ++k) {
    BlrPath<T> path;
    if (bitmaps) {
      path.sign_u = CView<std::uint32_t>(bits_u ? bits_u + k * h.m * words : nullptr, Shape{h.m, words});
      path.sign_v = CView<std::uint32_t>(bits_v ? bits_v + k * h.n * words : nullptr, Shape{h.n, words});
    }
    if (f16_scales) {
      path.scales16 = CView<bitrank::f16>(all_scales16 ? all_scales16 + k * per_path : nullptr, Shape{per_path});
    } else {
      const T* s = all_scales ? all_scales + k * per_path : nullptr;
      const auto off = [&](index_t i) { return s ? s + i : nullptr; };
      path.h = CView<T>(off(0), Shape{h.m});
      path.l = CView<T>(off(h.m), Shape{h.r});
      path.g = CView<T>(off(h.m + h.r), Shape{h.n});
    }
    p.paths_.push_back(path);
  }
  if (!bitmaps) p.place_sign_blocks(mem, at, h);
  return p;
}

template <class T>
void Projection<T>::place_sign_blocks(Memory& mem, Carver& at, const blr::HostBlrMatrix& h) {
  std::vector<std::uint32_t> host(static_cast<std::size_t>(sign_blocks_words(h.m, h.n, h.r)));
  for (std::size_t k = 0; k < paths_.size(); ++k) {
    std::uint32_t* blocks = at.take<std::uint32_t>(std::ssize(host));
    if (!at.measuring()) {
      make_sign_blocks(h.paths[k].sign_u.data(), h.paths[k].sign_v.data(), h.m, h.n, h.r, host.data());
      mem.upload(blocks, host.data(), host.size() * sizeof(std::uint32_t));
    }
    paths_[k].point_sign_blocks(blocks, h.m, h.n, h.r);
  }
}

template <class T>
Projection<T> Projection<T>::rebased(const std::byte* from, std::byte* to) const {
  Projection p = *this;
  p.dense_ = rebase(dense_, from, to);
  p.dense16_ = rebase(dense16_, from, to);
  for (BlrPath<T>& path : p.paths_) {
    path.scales16.data = rebase(path.scales16.data, from, to);
    path.sign_u.data = rebase(path.sign_u.data, from, to);
    path.sign_v.data = rebase(path.sign_v.data, from, to);
    path.sign_u_blocks.data = rebase(path.sign_u_blocks.data, from, to);
    path.sign_vt_blocks.data = rebase(path.sign_vt_blocks.data, from, to);
    path.h.data = rebase(path.h.data, from, to);
    path.l.data = rebase(path.l.data, from, to);
    path.g.data = rebase(path.g.data, from, to);
  }
  return p;
}

template <class T>
void Projection<T>::forward(Backend<T>& be, CView<T> in, View<T> out) const {
  if (empty()) fail("projection forward: the projection holds no weight");
  if (dense16_) {
    be.dense().dense_forward_f16(in, CView<bitrank::f16>(dense16_, Shape{rows_, cols_}), out, false);
    return;
  }
  if (!is_blr()) {
    be.dense().dense_forward(in, CView<T>(dense_, Shape{rows_, cols_}), out, false);
    return;
  }
  be.blr().blr_infer(BlrLayer<T>{rows_, cols_, rank_, paths_}, in, out);
}

template Buffer<float> upload_values(Memory&, std::span<const float>);
template Buffer<double> upload_values(Memory&, std::span<const float>);
template CView<float> place_values(Memory&, Carver&, std::span<const float>);
template CView<double> place_values(Memory&, Carver&, std::span<const float>);
template Buffer<f16> upload_values(Memory&, std::span<const float>);
template CView<f16> place_values(Memory&, Carver&, std::span<const float>);
template class Projection<float>;
template class Projection<double>;

}  // namespace bitrank::model
