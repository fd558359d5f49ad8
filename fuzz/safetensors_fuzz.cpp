// libFuzzer target for the safetensors reader: parse the bytes as a file
// image, then read every tensor (as f32 where the dtype allows, raw bytes
// always). Bad input may only ever surface as bitrank::Error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "bitrank/error.hpp"
#include "bitrank/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto st = bitrank::io::Safetensors::from_memory(image, "fuzz.safetensors");
    volatile float sink = 0;
    for (const auto& t : st.tensors()) {
      const auto raw = st.bytes(t.name);
      if (!raw.empty()) sink = sink + static_cast<float>(raw.back());
      try {
        for (const float v : st.read_f32(t.name)) sink = sink + v;
      } catch (const bitrank::Error&) {  // a dtype that is listed only
      }
    }
  } catch (const bitrank::Error&) {
  }
  return 0;
}
