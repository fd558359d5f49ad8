// What a model path holds, told by its content rather than its name, so that
// a wrong file is refused with a message about what it is, not with the
// first error of whichever reader its name led to:
//
//   a directory holding config.json, or a
//   file named config.json                      a Hugging Face checkpoint
//   a file starting with the 4 bytes "GGUF"     a GGUF file
//   a file of 9 bytes or more whose first 8 are a little-endian header
//   length that fits in the rest of the file, and whose 9th byte is '{'
//                                               a safetensors file (a bitrank
//                                               model is one)
//
// Errors (bitrank::Error, the path first):
//   no such file or directory; a directory without config.json; not a
//   regular file (a device, a fifo);
//   an empty file: "is empty, not a model file";
//   a file named *.gguf without the magic:
//       "not a GGUF file (bad magic 54 68 65 20 "The ", expected "GGUF")";
//   a file named *.bitrank or *.safetensors that fails the safetensors test:
//       "not a bitrank model file (no safetensors header: …)";
//   any other file: "not a model file (not a GGUF file, a bitrank /
//       safetensors file or a Hugging Face directory; it starts with …)".
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace bitrank::io {

enum class ModelFileKind { hf_directory, gguf, safetensors };

// "Hugging Face directory", "GGUF", "safetensors".
std::string_view model_file_kind_name(ModelFileKind kind);

// The kind of model at `path` (see above); Error when it is none.
ModelFileKind identify_model_file(const std::filesystem::path& path);

// Why `path` is not a safetensors file ("" when it passes the test above);
// reads at most the first 9 bytes.
std::string safetensors_header_problem(const std::filesystem::path& path);

// The first bytes of a file as text for messages: up to `n` bytes in hex,
// then the printable ASCII ones in quotes ("54 68 65 20 "The "").
std::string first_bytes_text(const std::filesystem::path& path, std::size_t n = 4);

}  // namespace bitrank::io
