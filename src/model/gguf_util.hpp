// GGUF look-ups shared by the model loaders: typed hparams with the file and
// key in every error, and tensors checked against the shape a model needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bitrank/io/gguf.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank::model {

// An f32 or f64 value.
double gguf_real(const io::GgufFile& g, const std::string& key);
// Any integer type, > 0.
std::int64_t gguf_positive(const io::GgufFile& g, const std::string& key);
// The tensor `name`, present, of a type we dequantize, and of `shape` given
// rows first (numpy order: GGUF stores a [rows][cols] matrix as dims
// {cols, rows}); Error naming the file and tensor otherwise. Reads no data.
const io::GgufTensorInfo& gguf_tensor(const io::GgufFile& g, const std::string& name,
                                      const std::vector<index_t>& shape);

}  // namespace bitrank::model
