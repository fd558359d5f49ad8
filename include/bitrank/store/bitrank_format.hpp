// The bitrank model file (DESIGN §8): a compressed model as one safetensors
// file (byte layout in bitrank/io/safetensors.hpp, written atomically by
// bitrank/io/safetensors_writer.hpp), readable by any safetensors reader.
//
// Tensors. A BLR matrix N (the teacher tensor's name without ".weight",
// e.g. blk.3.attn_q) of m×n with rank r (a multiple of 32) and P paths
// (DESIGN §1) stores, for each path p = 0..P-1:
//
//   N.p{p}.su   U32      [m][r/32]   S_U: bit j of word w is rank 32w+j, 1 = +1
//   N.p{p}.sv   U32      [n][r/32]   S_V
//   N.p{p}.h    F16|F32  [m]         row scale
//   N.p{p}.l    F16|F32  [r]         rank scale ℓ
//   N.p{p}.g    F16|F32  [n]         column scale
//
// Row order. Every projection, BLR or dense, is the matrix W of y = x·Wᵀ
// (rows = outputs, columns = inputs) with its rows and columns in Hugging
// Face transformers' order, whatever checkpoint the model came from: the
// reconstruction Ŵ of a BLR matrix N approximates the teacher's N.weight as
// the loaders (store/load.hpp) hand it over, and those put every layout in
// transformers' order first. With d the hidden size, H / Hkv the query / kv
// heads of hd dims each:
//
//   dense Llama family (llama, qwen2, qwen3)
//     blk.N.attn_q       [H·hd][d]    head-major (head h: rows h·hd … h·hd + hd − 1);
//                                     within a head RoPE's half-split order: rows
//                                     i and i + hd/2 are one rotation pair
//     blk.N.attn_k       [Hkv·hd][d]  the same, per kv head
//     blk.N.attn_v       [Hkv·hd][d]  head-major
//     blk.N.attn_output  [d][H·hd]    columns head-major, as attention's output
//   llama.cpp's converter stores attn_q and attn_k of a "llama" GGUF in its
//   adjacent-pair RoPE order instead: within each head, GGUF row 2i + j is
//   row j·hd/2 + i above (j ∈ {0, 1}, i < hd/2; convert_hf_to_gguf.py's
//   LlamaModel.permute). The GGUF loader undoes that (model/model.hpp), so a
//   bitrank file made from a GGUF holds the order above, not the GGUF's: a
//   reader that compares with the GGUF's tensors, or writes a GGUF back, must
//   apply the permutation again. attn_v and attn_output are not permuted.
//
//   Qwen3.5 / Qwen3-Next hybrids (model/hybrid.hpp), full-attention blocks
//     blk.N.attn_q       [2·H·hd][d]  per head h, rows [q_h (hd) | gate_h (hd)]; q in
//                                     half-split RoPE order over its first rotary
//                                     dims (pairs i, i + rotary_dim/2), as both
//                                     transformers and the "qwen35" GGUF store it
//     blk.N.attn_k, attn_v [Hkv·hd][d], attn_output [d][H·hd]  head-major
//   GDN blocks
//     blk.N.attn_qkv     [C][d]       rows [q (Hk·dk) | k (Hk·dk) | v (Hv·dv)]
//     blk.N.attn_gate    [Hv·dv][d]   (z)
//     blk.N.ssm_out      [d][Hv·dv]   columns by v-head
//   with v-heads in transformers' grouped order (v-head h belongs to k-head
//   h / (Hv/Hk)); the loader undoes the GGUF's tiled v-head order and
//   Qwen3-Next's interleaved in_proj_qkvz.
//
// Every other tensor is dense (embeddings, norms, biases, the head, any
// projection left uncompressed), stored under its own name as F32 or F16
// with its shape — or, for a matrix N of rows × cols whose values Q8_0
// blocks hold exactly (bitrank/q8_0.hpp: a GGUF teacher's Q8_0 tensors, such
// as SmolLM2's tied embedding), as ggml's Q8_0 blocks in two tensors:
//
//   N.q8_0        I8   [rows][cols]     q
//   N.q8_0_scale  F16  [rows][cols/32]  d of each block of 32 along a row
//
// whose values are d·q (8.5 bits a value where F16 takes 16 and rounds).
// Nothing is quantised to get there: a matrix that is not exactly Q8_0
// stays F32 or F16. A dense tensor may not be named N.weight or N.p{k}.{su,
// sv,h,l,g} for a BLR matrix N (it would shadow or extend the matrix).
//
// Metadata ("__metadata__", all values strings; JSON where said):
//
//   bitrank.format      "bitrank"
//   bitrank.version     "2" ("1": no Q8_0 tensors, and no "q8_0" key below;
//                       this build reads both)
//   bitrank.config      the architecture as config.json text (hf_config_to_json)
//   bitrank.tokenizer   TokenizerSpec JSON (tokenizer_spec_to_json); absent
//                       when the model carries no tokenizer
//   bitrank.storage     {"scales": "F16"|"F32", "dense": "F32"|"F16",
//                       "q8_0": [N, ...]}: the dtype of every scale tensor and
//                       of every dense tensor not in the list, and the dense
//                       tensors stored as Q8_0 blocks
//   bitrank.blr         {"N": {"m": m, "n": n, "rank": r, "paths": P}, ...}
//   bitrank.accounting  bitrank_accounting(model): the honest bit count
//                       (DESIGN §1) per matrix and in total; recomputed and
//                       compared on load, so it cannot disagree with the tensors
//   bitrank.summary     the training summary: a free-form JSON object
//
// Other metadata keys are ignored; an incompatible change bumps the version.
//
// Numerics: scales and dense values are f32 in a CompressedModel (a Q8_0
// tensor's d·q, exact); F16 storage rounds them to nearest even once (a value that would overflow to
// ±inf is an error), and loading converts back exactly, so a second save is
// bit-identical to the first. A model made from them for inference keeps
// F16-stored values in f16 again (model::WeightForm, model/decoder.hpp).
//
// Checks (save before writing anything, load after reading), each a
// bitrank::Error naming the file and the tensor or metadata key: format and
// version; config valid (parse_hf_config accepts its config.json form and
// reads it back unchanged); tokenizer valid (a Tokenizer accepts it) and no
// larger than the vocabulary; every BLR matrix with 1 <= m, n, 32 <= r,
// r % 32 == 0, 1 <= P <= 8 and every path tensor present with its dtype,
// shape and element count, scales finite; dense tensors finite with an
// element count equal to their shape's, of the storage dtype; every Q8_0
// entry a 2-D dense tensor whose values are its blocks' d·q, bit for bit; no
// stray or shadowing tensor; summary an object; accounting equal to the
// recomputed one.
// Not checked here: that the tensors are the complete set the architecture
// needs — the model loader that consumes a CompressedModel does that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/io/hf_config.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/q8_0.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank::store {

inline constexpr const char* kBitrankFormatName = "bitrank";
inline constexpr int kBitrankFormatVersion = 2;
inline constexpr std::int64_t kBitrankMaxPaths = 8;

enum class StoredFloat : std::uint8_t { f32, f16 };
std::string_view stored_float_name(StoredFloat f);  // "F32", "F16" (the safetensors dtype)

// How save() stores the f32 values of the model; load() sets what the file held.
struct Storage {
  StoredFloat scales = StoredFloat::f16;  // h, ℓ, g of every path
  StoredFloat dense = StoredFloat::f32;   // every dense tensor not stored as Q8_0
  bool q8_0 = true;  // CompressedModel::q8_0_blocks stored as those blocks (false: a version 1 file)
  bool operator==(const Storage&) const = default;
};

// There is no accounting field: the accounting is computed from the tensors
// (bitrank_accounting) so that it cannot disagree with them. A compressor's
// own notes (target bpw, rank allocation, losses) belong in `summary`.
struct CompressedModel {
  io::ModelConfig config;
  std::optional<io::TokenizerSpec> tokenizer;
  std::map<std::string, HostTensor> dense;  // by tensor name (e.g. token_embd.weight)
  std::map<std::string, blr::HostBlrMatrix> blr;   // by matrix name (e.g. blk.3.attn_q)
  // The dense matrices held as Q8_0 blocks, by tensor name: their values in
  // `dense` are exactly the blocks' d·q. load() fills it from the file;
  // record_exact_q8_0 from the values. Stored as blocks when storage.q8_0.
  std::map<std::string, std::vector<q8_0>> q8_0_blocks;
  Storage storage;
  nlohmann::json summary = nlohmann::json::object();  // training summary, stored as given
};

// Records in model.q8_0_blocks every 2-D dense tensor whose values Q8_0 blocks hold
// exactly (exact_q8_0: a GGUF's Q8_0 tensor dequantised), once, so that the
// accounting, the checks, the writer and the model read the blocks instead
// of finding them again. Nothing when !model.storage.q8_0.
void record_exact_q8_0(CompressedModel& model);

// The honest bit count of `model` as stored with model.storage:
//   {"scale_bits": 16|32, "dense_value_bits": 32|16 (of the tensors not Q8_0),
//    "matrices": {"N": {"m", "n", "rank", "paths", "bits", "bpw"}, ...},
//    "blr":   {"matrices", "weights" (Σ m·n), "bits", "bpw"},
//    "dense": {"tensors", "params", "bits", "q8_0_params" (version 2)},
//    "model": {"params" (BLR weights + dense params), "bits", "bpw"}}
// Matrix bits are blr::honest_bits; dense bits are params · value bits (a
// Q8_0 tensor's: 8 a value and 16 a block of 32); a
// bpw with nothing under it is null.
nlohmann::json bitrank_accounting(const CompressedModel& model);

// The checks listed above on a model in memory; `where` names it in errors.
void check_compressed_model(const CompressedModel& model, const std::string& where);

// Checks `model`, then writes it to `path` atomically.
void save_bitrank(const std::filesystem::path& path, const CompressedModel& model);
// The same file image in memory.
std::vector<std::byte> bitrank_image(const CompressedModel& model);

// Reads and checks a bitrank file (or an image held by the caller; `name`
// stands for it in errors).
// A file that is not safetensors at all is an Error saying "not a bitrank
// model file (no safetensors header: …)".
CompressedModel load_bitrank(const std::filesystem::path& path);
// The format and version checks and the architecture (bitrank.config) only:
// no tensor is read.
io::ModelConfig bitrank_config(const std::filesystem::path& path);
CompressedModel load_bitrank(std::span<const std::byte> image, const std::string& name);

// `bitrank info`: the file's description,
//   {"file", "file_bytes", "format", "version", "architecture" (the config.json
//    object), "tokenizer": {"tokens", "merges", "pre", "normalizer"} | null,
//    "storage": {"scales", "dense"}, "accounting" (as above), "summary"}
// and its rendering as text (architecture line, one line per BLR matrix with
// m×n, rank, paths and bpw, the totals, the summary).
nlohmann::ordered_json describe_bitrank(const std::filesystem::path& path);
std::string describe_bitrank_text(const nlohmann::ordered_json& description);
// Its pieces, for descriptions of other model files (`bitrank info` on a
// GGUF or a Hugging Face directory): the architecture line of a config.json
// object (hf_config_to_json), the tokenizer object and its line ("none" for null).
std::string architecture_text(const nlohmann::ordered_json& config_json);
nlohmann::ordered_json tokenizer_description(const io::TokenizerSpec& tokenizer);
std::string tokenizer_text(const nlohmann::ordered_json& tokenizer_description);

}  // namespace bitrank::store
