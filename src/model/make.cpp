// Host weights → the model of their family, and its device bytes
// (contract: include/bitrank/model/make.hpp).
#include "bitrank/model/make.hpp"

#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"

namespace bitrank::model {

template <class T>
std::unique_ptr<DecoderModel<T>> make_model(Backend<T>& be, const HostWeights& w, const BlrProjections& blr,
                                            bool stream, WeightForm form) {
  form.sign_blocks = be.blr_ops && be.blr().reads_sign_blocks();
  if (w.config.is_hybrid()) return std::make_unique<HybridModel<T>>(be, w, blr, stream, form);
  return std::make_unique<LlamaModel<T>>(be, w, blr, stream, form);
}

namespace {

// Whether tensor `name` of a model of `c` is a weight matrix that WeightForm::f16_matrices keeps in f16:
// the head (token_embd when tied) or a block projection (Projection::dense).
bool is_weight_matrix(const ModelConfig& c, const std::string& name) {
  if (name == "output.weight" || name == "token_embd.weight") return true;
  if (!c.is_hybrid()) return is_llama_projection(name);
  for (bool full : {true, false})
    for (HybridProj p : hybrid_block_projs(full))
      if (name.starts_with("blk.") && name.ends_with(std::string(".") + hybrid_proj_name(p) + ".weight")) return true;
  return false;
}

}  // namespace

template <class T>
std::size_t model_device_bytes(const HostWeights& w, const BlrProjections& blr, WeightForm form) {
  std::size_t bytes = 0;
  for (const auto& [name, t] : w.tensors) {
    if (name == "token_embd.weight" && !w.config.tie_word_embeddings) continue;  // gathered on the host
    if (name.ends_with(".weight") && blr.contains(name.substr(0, name.size() - 7))) continue;
    const bool head = name == "output.weight" || name == "token_embd.weight";  // the decoder's head
    if (head && form.q8_0_matrices && w.q8_0_of(name)) {
      bytes += t.values.size() / kQ8Block * sizeof(q8_0);
      continue;
    }
    const bool half = form.f16_matrices && is_weight_matrix(w.config, name);
    bytes += t.values.size() * (half ? sizeof(f16) : sizeof(T));
  }
  for (const auto& [name, m] : blr) {
    const index_t sign_words = form.sign_blocks ? sign_blocks_words(m.m, m.n, m.r) : (m.m + m.n) * (m.r / 32);
    bytes += m.paths.size() * static_cast<std::size_t>(sign_words) * sizeof(std::uint32_t);
    bytes += m.paths.size() * static_cast<std::size_t>(m.m + m.r + m.n) * (form.f16_scales ? sizeof(f16) : sizeof(T));
  }
  return bytes;
}

template std::unique_ptr<DecoderModel<float>> make_model(Backend<float>&, const HostWeights&, const BlrProjections&,
                                                         bool, WeightForm);
template std::unique_ptr<DecoderModel<double>> make_model(Backend<double>&, const HostWeights&, const BlrProjections&,
                                                          bool, WeightForm);
template std::size_t model_device_bytes<float>(const HostWeights&, const BlrProjections&, WeightForm);
template std::size_t model_device_bytes<double>(const HostWeights&, const BlrProjections&, WeightForm);

}  // namespace bitrank::model
