// `bitrank export`: checks the input is a bitrank model (a GGUF or a Hugging
// Face directory is already dense and is named as such), loads it with every
// check of the format, picks the tokenizer (--tokenizer, else the model's;
// none: a warning, no tokenizer files) and hands the rest to
// store::export_hf, which refuses a non-empty directory without --force.
#include "cli/export.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bitrank/error.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/hf_export.hpp"

namespace bitrank::cli {
namespace {

io::StDType export_dtype(const std::string& name) {
  if (name == "f32") return io::StDType::F32;
  if (name == "bf16") return io::StDType::BF16;
  if (name == "f16") return io::StDType::F16;
  fail("export: --dtype must be f32, bf16 or f16, got '{}'", name);
}

// The model file: present and a bitrank model (Error naming what it is otherwise).
void check_model_file(const std::string& path) {
  std::error_code ec;
  if (path.empty()) fail("export: no model given (--model M.bitrank)");
  if (!std::filesystem::exists(path, ec)) fail("export: --model {}: no such file", path);
  switch (io::identify_model_file(path)) {
    case io::ModelFileKind::safetensors: return;
    case io::ModelFileKind::gguf:
      fail("export: --model {} is a GGUF file, not a bitrank model; export expands a compressed (.bitrank) model", path);
    case io::ModelFileKind::hf_directory:
      fail("export: --model {} is a Hugging Face directory, not a bitrank model; export expands a compressed "
           "(.bitrank) model",
           path);
  }
}

}  // namespace

int run_export(const ExportOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  store::HfExportOptions options{.dtype = export_dtype(o.dtype), .force = o.force, .tokenizer = {}};
  if (o.out.empty()) fail("export: no output directory given (-o DIR)");
  check_model_file(o.model);
  const store::CompressedModel cm = store::load_bitrank(o.model);
  if (!o.tokenizer.empty()) options.tokenizer = io::load_model_tokenizer(o.tokenizer).spec();
  if (!cm.tokenizer && !options.tokenizer)
    std::fprintf(stderr,
                 "bitrank: export: %s holds no tokenizer; tokenizer.json is not written (--tokenizer MODEL takes one "
                 "from another model file)\n",
                 o.model.c_str());
  const store::HfExportSummary s = store::export_hf(cm, o.model, o.out, options);
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["out"] = o.out;
  j["dtype"] = o.dtype;
  j["tensors"] = s.tensors;
  j["params"] = s.params;
  j["blr_expanded"] = s.expanded;
  j["files"] = s.files;
  j["bytes"] = s.bytes;
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace bitrank::cli
