// A compressed model → a dense Hugging Face directory (contract, layouts and
// the directory rules: include/bitrank/store/hf_export.hpp). Stages, each a
// function: expand the BLR matrices (expand_compressed), rename and re-lay
// the tensors (hf_checkpoint_tensors), the JSON files, then the directory
// (write_staged: everything into a staging folder, then renamed into place).
#include "bitrank/store/hf_export.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/safetensors_writer.hpp"
#include "bitrank/model/hf_names.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/projection.hpp"

namespace bitrank::store {
namespace fs = std::filesystem;

namespace {

using nlohmann::ordered_json;

// Rows [from, from + count) of a row-major matrix with `cols` columns, appended to out.
void append_rows(std::vector<float>& out, const std::vector<float>& m, index_t cols, index_t from, index_t count) {
  out.insert(out.end(), m.begin() + from * cols, m.begin() + (from + count) * cols);
}

// Qwen3-Next's in_proj_qkvz [Hk][q (dk) | k (dk) | v (r·dv) | z (r·dv)] and
// in_proj_ba [Hk][b (r) | a (r)] of block `blk` from the separate tensors
// (the inverse of the HF loader's deinterleave_qwen3_next).
void fuse_qwen3_next(const io::ModelConfig& c, model::HostWeights& w, const std::string& blk,
                     std::vector<HfTensor>& out) {
  const index_t d = c.hidden_size, hk = c.linear->num_key_heads, dk = c.linear->key_head_dim,
                dv = c.linear->value_head_dim, r = c.linear->num_value_heads / hk;
  const std::string p = "blk." + blk + ".";
  const std::vector<float> &qkv = w.at(p + "attn_qkv.weight").values, &z = w.at(p + "attn_gate.weight").values,
                           &b = w.at(p + "ssm_beta.weight").values, &a = w.at(p + "ssm_alpha.weight").values;
  std::vector<float> qkvz, ba;
  for (index_t g = 0; g < hk; ++g) {
    append_rows(qkvz, qkv, d, g * dk, dk);                     // q
    append_rows(qkvz, qkv, d, hk * dk + g * dk, dk);           // k
    append_rows(qkvz, qkv, d, 2 * hk * dk + g * r * dv, r * dv);  // v
    append_rows(qkvz, z, d, g * r * dv, r * dv);
    append_rows(ba, b, d, g * r, r);
    append_rows(ba, a, d, g * r, r);
  }
  const std::string h = "model.layers." + blk + ".linear_attn.";
  out.push_back({h + "in_proj_qkvz.weight", {2 * hk * dk + 2 * hk * r * dv, d}, std::move(qkvz)});
  out.push_back({h + "in_proj_ba.weight", {2 * hk * r, d}, std::move(ba)});
  for (const std::string_view rest : model::kQwen3NextFused) w.tensors.erase(p + std::string(rest));
}

const char* architecture_class(io::ModelFamily f) {
  switch (f) {
    case io::ModelFamily::llama: return "LlamaForCausalLM";
    case io::ModelFamily::qwen3_5: return "Qwen3_5ForCausalLM";
    case io::ModelFamily::qwen3_next: return "Qwen3NextForCausalLM";
    default: return nullptr;
  }
}

const char* torch_dtype_name(io::StDType t) {
  switch (t) {
    case io::StDType::F32: return "float32";
    case io::StDType::BF16: return "bfloat16";
    case io::StDType::F16: return "float16";
    default: fail("export: dtype {} is not one of F32, BF16, F16", io::st_dtype_name(t));
  }
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (f) f.close();
  if (!f) fail("{}: cannot write: {}", path.string(), std::strerror(errno));
}

// The directory `dir` ready to take the export: created (true) or existing
// and empty, or non-empty with `force`; writable. Error naming it otherwise.
bool prepare_dir(const fs::path& dir, bool force) {
  std::error_code ec;
  if (dir.empty()) fail("export: the output directory is empty");
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) fail("{}: exists and is not a directory", dir.string());
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
    if (ec) fail("{}: cannot list the directory: {}", dir.string(), ec.message());
    std::ranges::sort(names);
    if (!names.empty() && !force)
      fail("{}: the directory exists and is not empty ({} entries, first '{}'); export writes into a new or empty "
           "directory, or over the export's files with --force",
           dir.string(), names.size(), names.front());
    if (::access(dir.c_str(), W_OK) != 0) fail("{}: the directory is not writable", dir.string());
    return false;
  }
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  if (!fs::exists(parent, ec)) fail("{}: cannot create the directory: {} does not exist", dir.string(), parent.string());
  if (!fs::is_directory(parent, ec))
    fail("{}: cannot create the directory: {} is not a directory", dir.string(), parent.string());
  if (!fs::create_directory(dir, ec) || ec)
    fail("{}: cannot create the directory: {}", dir.string(), ec ? ec.message() : std::string("it exists"));
  return true;
}

// What goes into the directory, complete in memory before anything is written.
struct ExportFiles {
  std::vector<HfTensor> tensors;
  std::string config, tokenizer, tokenizer_config;  // the last two empty: no tokenizer
};

// Writes the files into a staging folder in `dir`, then renames them into place.
void write_staged(const fs::path& dir, const ExportFiles& files, io::StDType dtype) {
  const fs::path stage = dir / fmt::format(".bitrank-export.tmp.{}", ::getpid());
  std::error_code ec;
  fs::remove_all(stage, ec);
  if (!fs::create_directory(stage, ec)) fail("{}: cannot create a staging folder: {}", stage.string(), ec.message());
  try {
    std::vector<io::StTensorOut> outs;
    outs.reserve(files.tensors.size());
    for (const HfTensor& t : files.tensors)
      outs.push_back(io::StTensorOut::f32(t.name, dtype, std::vector<std::int64_t>(t.shape.begin(), t.shape.end()),
                                          t.values));
    io::write_safetensors(stage / "model.safetensors", outs, {{"format", "pt"}});
    write_text(stage / "config.json", files.config + "\n");
    if (!files.tokenizer.empty()) {
      write_text(stage / "tokenizer.json", files.tokenizer + "\n");
      write_text(stage / "tokenizer_config.json", files.tokenizer_config + "\n");
    }
    for (const auto& e : fs::directory_iterator(stage)) {
      fs::rename(e.path(), dir / e.path().filename(), ec);
      if (ec) fail("{}: cannot move the file into place: {}", (dir / e.path().filename()).string(), ec.message());
    }
    fs::remove(stage, ec);
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
}

}  // namespace

model::HostWeights expand_compressed(const CompressedModel& model, const std::string& source) {
  model::HostWeights w{model.config, source, model.dense, {}};
  model::check_weights(w, model.blr);
  for (const auto& [name, m] : model.blr) {
    const std::vector<double> wide = blr::reconstruct(m);
    HostTensor t{{m.m, m.n}, std::vector<float>(wide.begin(), wide.end())};
    w.tensors.insert_or_assign(name + ".weight", std::move(t));
  }
  return w;
}

std::vector<HfTensor> hf_checkpoint_tensors(model::HostWeights&& w) {
  const io::ModelConfig& c = w.config;
  std::vector<HfTensor> out;
  if (c.family == io::ModelFamily::qwen3_next) {
    std::vector<std::string> gdn_blocks;
    for (const auto& [name, t] : w.tensors)
      if (const auto [block, rest] = model::split_block(name); rest == "attn_qkv.weight") gdn_blocks.push_back(block);
    for (const std::string& block : gdn_blocks) fuse_qwen3_next(c, w, block, out);
  }
  for (auto& [name, t] : w.tensors) {
    HfTensor h{model::hf_tensor_name(c, name), std::move(t.shape), std::move(t.values)};
    if (name.ends_with(".ssm_conv1d.weight")) h.shape = {h.shape[0], 1, h.shape[1]};  // nn.Conv1d, depthwise
    out.push_back(std::move(h));
  }
  w.tensors.clear();
  return out;
}

std::string hf_export_config_json(const io::ModelConfig& config, const std::optional<io::TokenizerSpec>& tokenizer,
                                  io::StDType dtype) {
  io::ModelConfig c = config;
  const char* arch = architecture_class(c.family);
  if (!arch)
    fail("export: model_type '{}' has no Hugging Face export (llama, qwen3_5, qwen3_next)", c.model_type);
  c.model_type = c.family == io::ModelFamily::qwen3_5 ? "qwen3_5_text" : std::string(io::model_family_name(c.family));
  ordered_json j = ordered_json::parse(io::hf_config_to_json(c, "export: config.json"));
  j["architectures"] = ordered_json::array({arch});
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  if (c.is_hybrid()) j["rope_parameters"]["partial_rotary_factor"] = c.partial_rotary_factor;
  const auto id = [](std::int32_t v) { return v < 0 ? ordered_json(nullptr) : ordered_json(v); };
  j["bos_token_id"] = tokenizer ? id(tokenizer->bos_id) : ordered_json(nullptr);
  j["eos_token_id"] = tokenizer ? id(tokenizer->eos_id) : ordered_json(nullptr);
  j["dtype"] = j["torch_dtype"] = torch_dtype_name(dtype);
  j["use_cache"] = true;
  const std::string text = j.dump(2);
  if (io::parse_hf_config(text, "export: config.json") != c)
    fail("export: config.json does not read back as the model's config");
  return text;
}

HfExportSummary export_hf(const CompressedModel& model, const std::string& source, const fs::path& dir,
                          const HfExportOptions& o) {
  (void)torch_dtype_name(o.dtype);
  HfExportSummary s;
  s.expanded = model.blr.size();
  const std::optional<io::TokenizerSpec>& tok = o.tokenizer ? o.tokenizer : model.tokenizer;
  if (tok && static_cast<std::int64_t>(tok->tokens.size()) > model.config.vocab_size)
    fail("export: the tokenizer has {} tokens, more than the model's vocabulary of {}", tok->tokens.size(),
         model.config.vocab_size);
  ExportFiles files;
  files.config = hf_export_config_json(model.config, tok, o.dtype);
  if (tok) {
    files.tokenizer = io::tokenizer_spec_to_hf_json(*tok);
    files.tokenizer_config = io::hf_tokenizer_config_json(*tok, model.config.max_position_embeddings);
  }
  files.tensors = hf_checkpoint_tensors(expand_compressed(model, source));
  for (const HfTensor& t : files.tensors) s.params += t.values.size();
  s.tensors = files.tensors.size();

  const bool created = prepare_dir(dir, o.force);
  try {
    write_staged(dir, files, o.dtype);
  } catch (...) {
    std::error_code ec;
    if (created) fs::remove_all(dir, ec);
    throw;
  }
  s.files = {"model.safetensors", "config.json"};
  if (tok) s.files.insert(s.files.end(), {"tokenizer.json", "tokenizer_config.json"});
  s.tokenizer = tok.has_value();
  std::error_code ec;
  s.bytes = fs::file_size(dir / "model.safetensors", ec);
  return s;
}

}  // namespace bitrank::store
