#include "bitrank/tensor.hpp"

#include "bitrank/dtype.hpp"

namespace bitrank {

Shape::Shape(std::initializer_list<index_t> d) {
  BR_ASSERT(d.size() <= 4, "rank {} > 4", d.size());
  for (index_t v : d) dims[static_cast<std::size_t>(rank++)] = v;
}

index_t Shape::numel() const {
  index_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<std::size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[static_cast<std::size_t>(i)] != o.dims[static_cast<std::size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<std::size_t>(i)]);
  }
  return s + "]";
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::u32: return "u32";
    case DType::f64: return "f64";
  }
  return "?";
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16: return 2;
    case DType::f32:
    case DType::u32: return 4;
    case DType::f64: return 8;
  }
  return 0;
}

}  // namespace bitrank
