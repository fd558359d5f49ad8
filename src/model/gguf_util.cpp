// GGUF look-ups shared by the model loaders (contract: gguf_util.hpp).
#include "model/gguf_util.hpp"

#include "bitrank/error.hpp"
#include "bitrank/model/decoder.hpp"

namespace bitrank::model {

double gguf_real(const io::GgufFile& g, const std::string& key) {
  const io::GgufValue& v = g.value(key);
  if (const float* f = v.get_if<float>()) return *f;
  if (const double* d = v.get_if<double>()) return *d;
  fail("gguf '{}': key {} holds {}, expected f32 or f64", g.name(), key, v.type_name());
}

std::int64_t gguf_positive(const io::GgufFile& g, const std::string& key) {
  const std::int64_t v = g.get_int(key);
  if (v <= 0) fail("gguf '{}': key {} is {}, expected a positive integer", g.name(), key, v);
  return v;
}

const io::GgufTensorInfo& gguf_tensor(const io::GgufFile& g, const std::string& name,
                                      const std::vector<index_t>& shape) {
  const io::GgufTensorInfo* info = g.find_tensor(name);
  if (!info) fail("gguf '{}': tensor {} is missing", g.name(), name);
  std::vector<index_t> stored;
  for (std::uint32_t i = info->n_dims; i-- > 0;) stored.push_back(static_cast<index_t>(info->dims[i]));
  if (stored != shape)
    fail("gguf '{}': tensor {} has shape {} (rows, cols), expected {}", g.name(), name, shape_str(stored),
         shape_str(shape));
  if (!io::ggml_type_info(info->type).dequantizable)
    fail("gguf '{}': tensor {} has type {}, which bitrank does not dequantize", g.name(), name, info->type_name());
  return *info;
}

}  // namespace bitrank::model
