// Checkpoint → weights → model, by format and family (contract:
// include/bitrank/model/load.hpp).
#include "bitrank/model/load.hpp"

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/model.hpp"

namespace bitrank::model {

HostWeights load_weights(const std::filesystem::path& path) {
  std::error_code ec;
  const bool config_file = path.filename() == "config.json";
  if (config_file || std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path dir = config_file ? path.parent_path() : path;
    return io::read_hf_config(dir).is_hybrid() ? load_hybrid_hf_weights(dir) : load_hf_weights(dir);
  }
  // GGUF: the header tells the family; the loaders dequantize (and check) the data.
  const io::GgufFile g = io::GgufFile::open(path, io::GgufOptions{.verify_data = false});
  const std::string arch = g.has("general.architecture") ? g.get_string("general.architecture") : std::string();
  if (arch == "qwen35" || arch == "qwen3next") return load_hybrid_gguf_weights(g);
  return load_gguf_weights(g);
}

template <class T>
std::unique_ptr<DecoderModel<T>> make_model(Backend<T>& be, const HostWeights& w) {
  if (w.config.is_hybrid()) return std::make_unique<HybridModel<T>>(be, w);
  return std::make_unique<LlamaModel<T>>(be, w);
}

template std::unique_ptr<DecoderModel<float>> make_model(Backend<float>&, const HostWeights&);
template std::unique_ptr<DecoderModel<double>> make_model(Backend<double>&, const HostWeights&);

}  // namespace bitrank::model
