// libFuzzer target for the GGUF reader: parse the input from memory, in both
// the header-only and the full data-checking mode, then read every key and
// dequantize every tensor. Only bitrank::Error may leave the reader; any
// other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"

namespace {

void exercise(std::span<const std::byte> bytes, bool verify_data) {
  using namespace bitrank::io;
  const GgufFile f = GgufFile::from_memory(bytes, "fuzz.gguf", {.verify_data = verify_data});
  for (const auto& kv : f.metadata()) {
    (void)f.value(kv.key).type_name();
    (void)kv.value.array_size();
    try {
      (void)f.get_int(kv.key);
    } catch (const bitrank::Error&) {
    }
  }
  std::vector<float> out;
  for (const auto& t : f.tensors()) {
    const GgufTensorView v = f.tensor(t.name);
    if (v.bytes.size() != t.n_bytes) __builtin_trap();
    if (!ggml_type_info(t.type).dequantizable) {
      try {
        (void)f.dequantize(t.name);
        __builtin_trap();  // must have thrown
      } catch (const bitrank::Error&) {
      }
      continue;
    }
    out.assign(t.n_elements, 0.0f);
    f.dequantize(t.name, out);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  for (bool verify : {false, true}) {
    try {
      exercise(bytes, verify);
    } catch (const bitrank::Error&) {
    }
  }
  return 0;
}
