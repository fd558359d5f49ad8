// Any checkpoint bitrank reads, as host weights and the model that runs them.
//
//   a directory (or a config.json in one)  Hugging Face: config.json's model_type
//                                          picks the family (llama → dense,
//                                          qwen3_5 / qwen3_next → hybrid)
//   a file                                 GGUF: general.architecture picks it
//                                          (llama → dense, qwen35 → hybrid)
#pragma once

#include <filesystem>
#include <memory>

#include "bitrank/model/decoder.hpp"

namespace bitrank::model {

HostWeights load_weights(const std::filesystem::path& path);

// The model class of w.config's family (LlamaModel or HybridModel) over `be`.
template <class T>
std::unique_ptr<DecoderModel<T>> make_model(Backend<T>& be, const HostWeights& w);

}  // namespace bitrank::model
