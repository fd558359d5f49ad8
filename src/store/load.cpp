// Checkpoint → weights → model, by format and family (contract:
// include/bitrank/store/load.hpp).
#include "bitrank/store/load.hpp"

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/make.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/store/bitrank_format.hpp"

namespace bitrank::store {

LoadedWeights load_any(const std::filesystem::path& path) {
  if (io::identify_model_file(path) == io::ModelFileKind::safetensors) {
    CompressedModel cm = load_bitrank(path);
    const model::WeightForm form{.f16_scales = cm.storage.scales == StoredFloat::f16,
                                 .f16_matrices = cm.storage.dense == StoredFloat::f16,
                                 .q8_0_matrices = cm.storage.q8_0};
    return LoadedWeights{
        model::HostWeights{cm.config, path.string(), std::move(cm.dense), std::move(cm.q8_0_blocks)},
        std::move(cm.blr), form};
  }
  return LoadedWeights{load_weights(path), {}, {}};
}

model::HostWeights load_weights(const std::filesystem::path& path) {
  switch (io::identify_model_file(path)) {
    case io::ModelFileKind::hf_directory: {
      const std::filesystem::path dir = path.filename() == "config.json" ? path.parent_path() : path;
      return io::read_hf_config(dir).is_hybrid() ? model::load_hybrid_hf_weights(dir) : model::load_hf_weights(dir);
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
  if (arch == "qwen35" || arch == "qwen3next") return model::load_hybrid_gguf_weights(g);
  return model::load_gguf_weights(g);
}

io::ModelConfig read_model_config(const std::filesystem::path& path) {
  switch (io::identify_model_file(path)) {
    case io::ModelFileKind::hf_directory:
      return io::read_hf_config(path.filename() == "config.json" ? path.parent_path() : path);
    case io::ModelFileKind::safetensors: return bitrank_config(path);
    case io::ModelFileKind::gguf: break;
  }
  const io::GgufFile g = io::GgufFile::open(path, io::GgufOptions{.verify_data = false});
  const std::string arch = g.has("general.architecture") ? g.get_string("general.architecture") : std::string();
  return arch == "qwen35" || arch == "qwen3next" ? model::hybrid_config_from_gguf(g) : model::config_from_gguf(g);
}

template <class T>
std::unique_ptr<model::DecoderModel<T>> load_model(Backend<T>& be, const std::filesystem::path& path, bool stream) {
  const LoadedWeights loaded = load_any(path);
  return model::make_model(be, loaded.weights, loaded.blr, stream, loaded.form);
}

template std::unique_ptr<model::DecoderModel<float>> load_model(Backend<float>&, const std::filesystem::path&, bool);
template std::unique_ptr<model::DecoderModel<double>> load_model(Backend<double>&, const std::filesystem::path&, bool);

}  // namespace bitrank::store
