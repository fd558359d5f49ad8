// `bitrank export`: a compressed model (store/bitrank_format.hpp) as a dense
// Hugging Face directory that transformers (and bitrank's own HF loader)
// read: every BLR projection expanded to its matrix Ŵ, every other tensor
// as stored.
//
//   DIR/model.safetensors       one file, metadata {"format": "pt"} (transformers
//                               refuses a safetensors file without it), tensors
//                               under transformers' names in f32, bf16 or f16
//   DIR/config.json             the family's config: llama (LlamaForCausalLM),
//                               qwen3_5_text (Qwen3_5ForCausalLM) or qwen3_next
//                               (Qwen3NextForCausalLM), with rope_parameters,
//                               bos/eos ids and dtype
//   DIR/tokenizer.json          io::tokenizer_spec_to_hf_json
//   DIR/tokenizer_config.json   io::hf_tokenizer_config_json
//
// Layout. The bitrank file already holds every projection in transformers'
// row order (bitrank_format.hpp: the GGUF loaders undo llama.cpp's q/k RoPE
// permutation and the qwen35 v-head tiling before compression), so dense
// Llama tensors are written as they are, only renamed (model/hf_names.hpp).
// Hybrids: GDN conv1d becomes nn.Conv1d's [C][1][K]; Qwen3-Next's
// in_proj_qkvz and in_proj_ba are put back together per k-head group from
// the separate q, k, v, z, b, a (the inverse of the loader's split). Tied
// heads are not written.
//
// Numerics: Ŵ = blr::reconstruct (f64 sums of the f32 scales), rounded once
// to f32 (nearest); with --dtype bf16 / f16 the writer rounds the f32 values
// once more (nearest even). In f32 a forward of the export differs from the
// BLR forward only by summation order.
//
// The directory: it may not exist (it is created; its parent must exist) or
// be empty; a non-empty one is an error unless `force`, which writes over
// the four files and leaves any other file in it. The files are written
// into a staging folder inside DIR and renamed into place once all are
// complete; on failure the staging folder (and DIR, when this call created
// it) is removed. Every failure is a bitrank::Error naming the path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/decoder.hpp"
#include "bitrank/store/bitrank_format.hpp"

namespace bitrank::store {

// The compressed model as dense weights: each BLR matrix N reconstructed to
// N.weight [m][n] (f32), beside the dense tensors; checked as a model of its
// family first (check_weights with its BLR projections). `source` names it.
model::HostWeights expand_compressed(const CompressedModel& model, const std::string& source);

struct HfTensor {
  std::string name;
  std::vector<index_t> shape;
  std::vector<float> values;
};
// The tensors of a checkpoint of w's family in transformers' names and
// layouts (above), in w's name order; consumes w.tensors.
std::vector<HfTensor> hf_checkpoint_tensors(model::HostWeights&& w);

// config.json of the export (above); `tokenizer` gives bos/eos ids.
std::string hf_export_config_json(const io::ModelConfig& config, const std::optional<io::TokenizerSpec>& tokenizer,
                                  io::StDType dtype);

struct HfExportOptions {
  io::StDType dtype = io::StDType::F32;  // F32, BF16 or F16
  bool force = false;                    // write into a non-empty directory
  // The tokenizer to write when the model holds none (or to use instead).
  std::optional<io::TokenizerSpec> tokenizer;
};

struct HfExportSummary {
  std::vector<std::string> files;  // written, in DIR
  std::size_t tensors = 0;
  std::uint64_t params = 0;
  std::size_t expanded = 0;        // BLR matrices expanded to dense
  std::uint64_t bytes = 0;         // model.safetensors
  bool tokenizer = false;          // tokenizer files written
};

HfExportSummary export_hf(const CompressedModel& model, const std::string& source, const std::filesystem::path& dir,
                          const HfExportOptions& options);

}  // namespace bitrank::store
