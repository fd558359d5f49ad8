// Checkpoint → weights → model, by format and family (contract:
// include/bitrank/store/load.hpp).
#include "bitrank/store/load.hpp"

#include "bitrank/error.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"

namespace bitrank::model {

LoadedWeights load_any(const std::filesystem::path& path) {
  if (io::identify_model_file(path) == io::ModelFileKind::safetensors) {
    io::CompressedModel cm = io::load_bitrank(path);
    const WeightForm form{.f16_scales = cm.storage.scales == io::StoredFloat::f16,
                          .f16_matrices = cm.storage.dense == io::StoredFloat::f16};
    return LoadedWeights{HostWeights{cm.config, path.string(), std::move(cm.dense)}, std::move(cm.blr), form};
  }
  return LoadedWeights{load_weights(path), {}, {}};
}

HostWeights load_weights(const std::filesystem::path& path) {
  switch (io::identify_model_file(path)) {
    case io::ModelFileKind::hf_directory: {
      const std::filesystem::path dir = path.filename() == "config.json" ? path.parent_path() : path;
      return io::read_hf_config(dir).is_hybrid() ? load_hybrid_hf_weights(dir) : load_hf_weights(dir);
    }
    case io::ModelFileKind::safetensors:
      fail("model {}: a safetensors file (a bitrank model?) where an uncompressed checkpoint is needed: a .gguf file "
           "or a Hugging Face directory",
           path.string());
    case io::ModelFileKind::gguf: break;
  }
  // GGUF: the header tells the family; the loaders dequantize (and check) the data.
  const io::GgufFile g = io::GgufFile::open(path, io::GgufOptions{.verify_data = false});
  const std::string arch = g.has("general.architecture") ? g.get_string("general.architecture") : std::string();
  if (arch == "qwen35" || arch == "qwen3next") return load_hybrid_gguf_weights(g);
  return load_gguf_weights(g);
}

io::ModelConfig read_model_config(const std::filesystem::path& path) {
  switch (io::identify_model_file(path)) {
    case io::ModelFileKind::hf_directory:
      return io::read_hf_config(path.filename() == "config.json" ? path.parent_path() : path);
    case io::ModelFileKind::safetensors: return io::bitrank_config(path);
    case io::ModelFileKind::gguf: break;
  }
  const io::GgufFile g = io::GgufFile::open(path, io::GgufOptions{.verify_data = false});
  const std::string arch = g.has("general.architecture") ? g.get_string("general.architecture") : std::string();
  return arch == "qwen35" || arch == "qwen3next" ? hybrid_config_from_gguf(g) : config_from_gguf(g);
}

template <class T>
std::unique_ptr<DecoderModel<T>> make_model(Backend<T>& be, const HostWeights& w, const BlrProjections& blr,
                                            bool stream, WeightForm form) {
  if (w.config.is_hybrid()) return std::make_unique<HybridModel<T>>(be, w, blr, stream, form);
  return std::make_unique<LlamaModel<T>>(be, w, blr, stream, form);
}

template <class T>
std::unique_ptr<DecoderModel<T>> load_model(Backend<T>& be, const std::filesystem::path& path, bool stream) {
  const LoadedWeights loaded = load_any(path);
  return make_model(be, loaded.weights, loaded.blr, stream, loaded.form);
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
    const bool half = form.f16_matrices && is_weight_matrix(w.config, name);
    bytes += t.values.size() * (half ? sizeof(f16) : sizeof(T));
  }
  for (const auto& [name, m] : blr) {
    bytes += m.paths.size() * static_cast<std::size_t>((m.m + m.n) * (m.r / 32)) * sizeof(std::uint32_t);
    bytes += m.paths.size() * static_cast<std::size_t>(m.m + m.r + m.n) * (form.f16_scales ? sizeof(f16) : sizeof(T));
  }
  return bytes;
}

template std::unique_ptr<DecoderModel<float>> make_model(Backend<float>&, const HostWeights&, const BlrProjections&,
                                                         bool, WeightForm);
template std::unique_ptr<DecoderModel<double>> make_model(Backend<double>&, const HostWeights&, const BlrProjections&,
                                                          bool, WeightForm);
template std::unique_ptr<DecoderModel<float>> load_model(Backend<float>&, const std::filesystem::path&, bool);
template std::unique_ptr<DecoderModel<double>> load_model(Backend<double>&, const std::filesystem::path&, bool);
template std::size_t model_device_bytes<float>(const HostWeights&, const BlrProjections&, WeightForm);
template std::size_t model_device_bytes<double>(const HostWeights&, const BlrProjections&, WeightForm);

}  // namespace bitrank::model
