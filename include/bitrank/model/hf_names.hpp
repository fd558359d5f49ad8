// Hugging Face transformers' tensor names of the internal (GGUF-style) ones:
// what the HF loader reads (weights.cpp) and the HF export writes
// (store/hf_export.hpp).
//
//   token_embd.weight      model.embed_tokens.weight
//   output_norm.weight     model.norm.weight
//   output.weight          lm_head.weight
//   blk.N.<rest>           model.layers.N.<transformers' name of rest>
//                          (attn_q.weight → self_attn.q_proj.weight,
//                          attn_qkv.weight → linear_attn.in_proj_qkv.weight, …)
//
// Qwen3-Next stores attn_qkv, attn_gate, ssm_beta and ssm_alpha fused
// (in_proj_qkvz, in_proj_ba), so they have no name of their own there.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "bitrank/model/decoder.hpp"

namespace bitrank::model {

// The transformers name of an internal tensor name of a model of `config`'s
// family (above). Error for a name the family has not (and for Qwen3-Next's
// qkv/gate/beta/alpha, which have no name of their own).
std::string hf_tensor_name(const ModelConfig& config, const std::string& name);

// The block tensors Qwen3-Next keeps inside in_proj_qkvz and in_proj_ba
// (the part of the name after "blk.N.").
inline constexpr std::string_view kQwen3NextFused[] = {"attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight",
                                                       "ssm_alpha.weight"};

// "blk.N.<rest>" → {N, rest}; {"", ""} for other names.
std::pair<std::string, std::string> split_block(const std::string& name);

}  // namespace bitrank::model
