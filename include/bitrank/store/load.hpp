// Any checkpoint bitrank reads, as host weights and the model that runs them
// (model/make.hpp makes the model of a family from host weights). The kind is
// told by content (io/model_file.hpp: a file that is none of these is an
// Error saying so, e.g. "not a GGUF file (bad magic …)" for a text file
// named x.gguf, before any reader sees it):
//   a directory (or a config.json in one)  Hugging Face: config.json's model_type
//                                          picks the family (llama → dense,
//                                          qwen3_5 / qwen3_next → hybrid)
//   a file starting with "GGUF"            GGUF: general.architecture picks it
//                                          (llama → dense, qwen35 → hybrid)
//   a safetensors file                     a bitrank model (store/bitrank_format.hpp):
//                                          its dense tensors and BLR projections
#pragma once

#include <filesystem>
#include <memory>

#include "bitrank/model/decoder.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/model/projection.hpp"

namespace bitrank::store {

struct LoadedWeights {
  model::HostWeights weights;
  model::BlrProjections blr;  // empty unless the file is a compressed (bitrank) model
  // The form a model of these weights keeps them in for inference: what a
  // bitrank file stores (F16 scales, F16 dense tensors → f16 in the model),
  // T for every other checkpoint (GGUF and Hugging Face weights are f32 here).
  model::WeightForm form;
};

LoadedWeights load_any(const std::filesystem::path& path);
// load_any for uncompressed checkpoints only (Error naming a bitrank file).
model::HostWeights load_weights(const std::filesystem::path& path);
// The architecture of the model at `path`, of any kind above, without
// reading its tensors (a GGUF's header, config.json, a bitrank file's
// metadata): e.g. its context length before anything is loaded.
io::ModelConfig read_model_config(const std::filesystem::path& path);

// A model of the checkpoint at `path` for inference (eval, generate,
// serve): load_any, then make_model in the file's form (LoadedWeights::form);
// the host weights are dropped once the model holds its own.
template <class T>
std::unique_ptr<model::DecoderModel<T>> load_model(Backend<T>& be, const std::filesystem::path& path,
                                                   bool stream = false);

}  // namespace bitrank::store
