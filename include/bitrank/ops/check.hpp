// Argument checks shared by every backend of an op.
//
// Each op family's public (non-virtual) methods validate their arguments
// with these and then call the backend's virtual implementation, so the
// checks are written once and every backend rejects the same bad input with
// the same bitrank::Error: "<op>: <tensor> has shape [..], expected [..]".
#pragma once

#include <string_view>

#include "bitrank/error.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank::check {

template <class T>
void shape(std::string_view op, std::string_view name, const View<T>& v, const Shape& expected) {
  if (expected.numel() == 0) fail("{}: {} would be empty (shape {})", op, name, expected.str());
  if (!(v.shape == expected)) fail("{}: {} has shape {}, expected {}", op, name, v.shape.str(), expected.str());
  if (v.numel() > 0 && v.data == nullptr) fail("{}: {} has shape {} but no data", op, name, v.shape.str());
}

template <class T>
void contiguous(std::string_view op, std::string_view name, const View<T>& v) {
  if (!v.contiguous()) fail("{}: {} must be contiguous (shape {})", op, name, v.shape.str());
}

// Shape and contiguity in one. Every checked tensor must be non-empty.
template <class T>
void dense(std::string_view op, std::string_view name, const View<T>& v, const Shape& expected) {
  shape(op, name, v, expected);
  contiguous(op, name, v);
}

template <class T>
void rank(std::string_view op, std::string_view name, const View<T>& v, int r) {
  if (v.rank() != r) fail("{}: {} has rank {} (shape {}), expected rank {}", op, name, v.rank(), v.shape.str(), r);
  if (v.numel() == 0) fail("{}: {} is empty (shape {})", op, name, v.shape.str());
  if (v.data == nullptr) fail("{}: {} has shape {} but no data", op, name, v.shape.str());
}

inline void positive(std::string_view op, std::string_view what, index_t v) {
  if (v <= 0) fail("{}: {} must be positive, got {}", op, what, v);
}

template <class... Args>
void require(bool cond, std::string_view op, format_string<Args...> f, Args&&... args) {
  if (!cond) fail("{}: {}", op, ::bitrank::format(f, std::forward<Args>(args)...));
}

// A finite float option (learning rates, eps, scales).
inline void finite(std::string_view op, std::string_view what, double v) {
  if (!(v == v) || v == 1.0 / 0.0 || v == -1.0 / 0.0) fail("{}: {} must be finite, got {}", op, what, v);
}

}  // namespace bitrank::check
