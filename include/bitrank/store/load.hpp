// Any checkpoint bitrank reads, as host weights and the model that runs them.
//
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

namespace bitrank::model {

struct LoadedWeights {
  HostWeights weights;
  BlrProjections blr;  // empty unless the file is a compressed (bitrank) model
  // The form a model of these weights keeps them in for inference: what a
  // bitrank file stores (F16 scales, F16 dense tensors → f16 in the model),
  // T for every other checkpoint (GGUF and Hugging Face weights are f32 here).
  WeightForm form;
};

LoadedWeights load_any(const std::filesystem::path& path);
// load_any for uncompressed checkpoints only (Error naming a bitrank file).
HostWeights load_weights(const std::filesystem::path& path);
// The architecture of the model at `path`, of any kind above, without
// reading its tensors (a GGUF's header, config.json, a bitrank file's
// metadata): e.g. its context length before anything is loaded.
io::ModelConfig read_model_config(const std::filesystem::path& path);

// The model class of w.config's family (LlamaModel or HybridModel) over
// `be`, with the projections named in `blr` as BLR layers (a compressed
// model); `stream`: its blocks streamed from host memory (streamed_weights.hpp);
// `form`: how it keeps its weights (decoder.hpp; LoadedWeights::form for a
// model that only runs inference). The host weights may be dropped once it
// is made: the model holds its own copy.
template <class T>
std::unique_ptr<DecoderModel<T>> make_model(Backend<T>& be, const HostWeights& w, const BlrProjections& blr = {},
                                            bool stream = false, WeightForm form = {});

// A model of the checkpoint at `path` for inference (eval, generate,
// serve): load_any, then make_model in the file's form (LoadedWeights::form);
// the host weights are dropped once the model holds its own.
template <class T>
std::unique_ptr<DecoderModel<T>> load_model(Backend<T>& be, const std::filesystem::path& path, bool stream = false);

// The bytes a resident model of w (with `blr`, in `form`) takes on a backend
// of T: every tensor it uploads (blocks, final norm, head; the untied
// embedding table stays on the host), before activations and the 256-byte
// alignment of each tensor in its block.
template <class T>
std::size_t model_device_bytes(const HostWeights& w, const BlrProjections& blr = {}, WeightForm form = {});

}  // namespace bitrank::model
