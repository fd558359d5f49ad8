// `bitrank info`: tells the kind of model by content (io/model_file.hpp) and
// describes it. A bitrank file is loaded with every check of the format (a
// file that fails one is an error, not a partial listing); a GGUF file is
// described from its header (architecture, tensor count and types,
// parameters, tokenizer) and a Hugging Face directory from config.json, its
// safetensors headers and tokenizer.json, without reading tensor data.
// Anything else is an error saying it is not a model file.
#include "cli/info.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/hf_config.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/load.hpp"

namespace bitrank::cli {
namespace {

using nlohmann::ordered_json;

// The architecture as a config.json object, or null with the reason when
// bitrank does not run this model (the rest of the description stands).
void put_architecture(ordered_json& d, const std::filesystem::path& path) {
  try {
    d["architecture"] = ordered_json::parse(io::hf_config_to_json(store::read_model_config(path), path.string()));
  } catch (const Error& e) {
    d["architecture"] = nullptr;
    d["architecture_error"] = e.what();
  }
}

ordered_json describe_gguf(const std::filesystem::path& path) {
  const io::GgufFile g = io::GgufFile::open(path, {.verify_data = false});
  ordered_json d;
  d["file"] = path.string();
  d["file_bytes"] = g.file_size();
  d["format"] = "GGUF";
  d["version"] = g.version();
  d["gguf_architecture"] = g.has("general.architecture") ? ordered_json(g.get_string("general.architecture")) : nullptr;
  d["name"] = g.has("general.name") ? ordered_json(g.get_string("general.name")) : nullptr;
  put_architecture(d, path);
  std::map<std::string, std::size_t> types;
  std::uint64_t params = 0;
  for (const io::GgufTensorInfo& t : g.tensors()) {
    ++types[std::string(t.type_name())];
    params += t.n_elements;
  }
  d["tensors"] = g.tensors().size();
  d["tensor_types"] = types;
  d["params"] = params;
  try {
    d["tokenizer"] = store::tokenizer_description(io::tokenizer_spec_from_gguf(g));
  } catch (const Error& e) {
    d["tokenizer"] = nullptr;
    d["tokenizer_error"] = e.what();
  }
  return d;
}

ordered_json describe_hf(const std::filesystem::path& given) {
  const std::filesystem::path dir = given.filename() == "config.json" ? given.parent_path() : given;
  ordered_json d;
  d["file"] = dir.string();
  d["format"] = "Hugging Face directory";
  put_architecture(d, dir);
  try {
    const io::Safetensors st = io::Safetensors::open(dir);
    std::map<std::string, std::size_t> types;
    std::uint64_t params = 0;
    for (const io::TensorInfo& t : st.tensors()) {
      ++types[std::string(io::st_dtype_name(t.dtype))];
      params += t.numel;
    }
    d["tensors"] = st.tensors().size();
    d["tensor_types"] = types;
    d["params"] = params;
  } catch (const Error& e) {
    d["tensors"] = nullptr;
    d["tensors_error"] = e.what();
  }
  try {
    d["tokenizer"] = store::tokenizer_description(io::load_tokenizer_json(dir / "tokenizer.json"));
  } catch (const Error& e) {
    d["tokenizer"] = nullptr;
    d["tokenizer_error"] = e.what();
  }
  return d;
}

std::string describe_text(const ordered_json& d) {
  std::string out;
  const auto line = [&](std::string_view key, const std::string& value) {
    out += fmt::format("{:<14}{}\n", key, value);
  };
  line("file", d.contains("file_bytes") ? fmt::format("{} ({} bytes)", d.at("file").get<std::string>(),
                                                       d.at("file_bytes").get<std::uint64_t>())
                                        : d.at("file").get<std::string>());
  line("format", d.contains("version") ? fmt::format("{} v{}", d.at("format").get<std::string>(),
                                                      d.at("version").get<std::uint32_t>())
                                       : d.at("format").get<std::string>());
  if (d.contains("name") && !d.at("name").is_null()) line("name", d.at("name").get<std::string>());
  line("architecture", d.at("architecture").is_null()
                           ? fmt::format("{}not supported by bitrank: {}",
                                         d.contains("gguf_architecture") && !d.at("gguf_architecture").is_null()
                                             ? d.at("gguf_architecture").get<std::string>() + ", "
                                             : std::string(),
                                         d.at("architecture_error").get<std::string>())
                           : store::architecture_text(d.at("architecture")));
  line("tokenizer", d.at("tokenizer").is_null() && d.contains("tokenizer_error")
                        ? "none (" + d.at("tokenizer_error").get<std::string>() + ")"
                        : store::tokenizer_text(d.at("tokenizer")));
  if (d.at("tensors").is_null()) {
    line("tensors", "? (" + d.at("tensors_error").get<std::string>() + ")");
  } else {
    std::string types;
    for (const auto& [name, n] : d.at("tensor_types").items())
      types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n.get<std::size_t>(), name);
    line("tensors", fmt::format("{} ({}), {} params", d.at("tensors").get<std::size_t>(), types,
                                d.at("params").get<std::uint64_t>()));
  }
  return out;
}

}  // namespace

int run_info(const InfoOptions& o) {
  ordered_json d;
  std::string text;
  switch (io::identify_model_file(o.file)) {
    case io::ModelFileKind::safetensors:
      d = store::describe_bitrank(o.file);
      if (!o.json) text = store::describe_bitrank_text(d);
      break;
    case io::ModelFileKind::gguf:
      d = describe_gguf(o.file);
      if (!o.json) text = describe_text(d);
      break;
    case io::ModelFileKind::hf_directory:
      d = describe_hf(o.file);
      if (!o.json) text = describe_text(d);
      break;
  }
  if (o.json) text = d.dump(2) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace bitrank::cli
