// What a model path holds, by content (contract: include/bitrank/io/model_file.hpp).
#include "bitrank/io/model_file.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <system_error>

#include "bitrank/error.hpp"

namespace bitrank::io {
namespace {

// Up to n bytes from the start of the file (fewer when it is shorter).
std::string head_bytes(const std::filesystem::path& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path.string(), std::error_code(errno, std::generic_category()).message());
  std::string b(n, '\0');
  in.read(b.data(), static_cast<std::streamsize>(n));
  b.resize(static_cast<std::size_t>(in.gcount()));
  return b;
}

std::string bytes_text(std::string_view b) {
  std::string hex, ascii;
  for (const char ch : b) {
    const auto u = static_cast<unsigned char>(ch);
    hex += fmt::format("{}{:02x}", hex.empty() ? "" : " ", u);
    if (u >= 0x20 && u < 0x7f && ch != '"' && ch != '\\') ascii += ch;
    else ascii += '.';
  }
  return fmt::format("{} \"{}\"", hex, ascii);
}

std::string extension_lower(const std::filesystem::path& path) {
  std::string e = path.extension().string();
  for (char& ch : e) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  return e;
}

}  // namespace

std::string_view model_file_kind_name(ModelFileKind kind) {
  switch (kind) {
    case ModelFileKind::hf_directory: return "Hugging Face directory";
    case ModelFileKind::gguf: return "GGUF";
    case ModelFileKind::safetensors: return "safetensors";
  }
  return "?";
}

std::string first_bytes_text(const std::filesystem::path& path, std::size_t n) {
  return bytes_text(head_bytes(path, n));
}

std::string safetensors_header_problem(const std::filesystem::path& path) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return fmt::format("cannot read its size: {}", ec.message());
  const std::string b = head_bytes(path, 9);
  if (b.size() < 9) return fmt::format("{} bytes, too short for a safetensors header", b.size());
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
  if (len > size - 8)
    return fmt::format("its first 8 bytes ({}) read as a header length of {} bytes, but only {} follow", bytes_text(b.substr(0, 8)),
                       len, size - 8);
  if (b[8] != '{') return fmt::format("the header after the length field does not start with '{{' ({})", bytes_text(b.substr(8, 1)));
  return "";
}

ModelFileKind identify_model_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) fail("{}: no such file or directory", path.string());
  if (path.filename() == "config.json") return ModelFileKind::hf_directory;
  if (std::filesystem::is_directory(status)) {
    if (!std::filesystem::exists(path / "config.json", ec))
      fail("{}: a directory without config.json, not a Hugging Face model directory", path.string());
    return ModelFileKind::hf_directory;
  }
  if (!std::filesystem::is_regular_file(status)) fail("{}: not a regular file, not a model file", path.string());
  const std::string magic = head_bytes(path, 4);
  if (magic.empty()) fail("{}: the file is empty, not a model file", path.string());
  if (magic == "GGUF") return ModelFileKind::gguf;
  const std::string ext = extension_lower(path);
  if (ext == ".gguf")
    fail("{}: not a GGUF file (bad magic {}, expected 47 47 55 46 \"GGUF\")", path.string(), bytes_text(magic));
  const std::string problem = safetensors_header_problem(path);
  if (problem.empty()) return ModelFileKind::safetensors;
  if (ext == ".bitrank" || ext == ".safetensors")
    fail("{}: not a bitrank model file (no safetensors header: {})", path.string(), problem);
  fail("{}: not a model file (not a GGUF file, a bitrank / safetensors file or a Hugging Face directory; it starts "
       "with {})",
       path.string(), first_bytes_text(path, 8));
}

}  // namespace bitrank::io
