// Tensor views: a typed pointer with a shape (rank ≤ 4) and element strides.
//
// A view never owns memory; the backend that made the buffer does (see
// memory.hpp). Views made from a shape alone are contiguous row-major; the
// one non-contiguous form the ops accept is a 2-D view with a row stride
// larger than its width (a column slice of a wider matrix), and only where
// an op's contract says so.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "bitrank/error.hpp"

namespace bitrank {

using index_t = std::int64_t;

struct Shape {
  std::array<index_t, 4> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<index_t> d);

  index_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  index_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[37, 5120]"
};

template <class T>
struct View {
  T* data = nullptr;
  Shape shape;
  std::array<index_t, 4> strides{};  // in elements

  View() = default;
  View(T* p, Shape s) : data(p), shape(s) {
    index_t st = 1;
    for (int i = s.rank - 1; i >= 0; --i) {
      strides[static_cast<std::size_t>(i)] = st;
      st *= s.dims[static_cast<std::size_t>(i)];
    }
  }
  // 2-D view of `rows` × `cols` with a row stride of `ld` elements.
  static View strided(T* p, index_t rows, index_t cols, index_t ld) {
    View v(p, Shape{rows, cols});
    v.strides[0] = ld;
    return v;
  }
  // Mutable → const conversion.
  template <class U = T, std::enable_if_t<!std::is_const_v<U>, int> = 0>
  operator View<const U>() const {  // NOLINT(google-explicit-constructor)
    View<const U> v;
    v.data = data;
    v.shape = shape;
    v.strides = strides;
    return v;
  }

  int rank() const { return shape.rank; }
  index_t dim(int i) const { return shape[i]; }
  index_t numel() const { return shape.numel(); }
  bool empty() const { return numel() == 0; }
  bool contiguous() const {
    index_t st = 1;
    for (int i = shape.rank - 1; i >= 0; --i) {
      if (shape.dims[static_cast<std::size_t>(i)] != 1 && strides[static_cast<std::size_t>(i)] != st) return false;
      st *= shape.dims[static_cast<std::size_t>(i)];
    }
    return true;
  }
  index_t ld() const { return shape.rank >= 2 ? strides[static_cast<std::size_t>(shape.rank - 2)] : numel(); }
  // Same data as a flat contiguous vector (requires contiguous()).
  View flat() const { return View(data, Shape{numel()}); }
  T& operator[](index_t i) const { return data[i]; }
};

template <class T>
using CView = View<const T>;

// A tensor in host memory as files hold it and models load it: f32 values,
// row-major, with their shape ([rows, cols] or [d]).
struct HostTensor {
  std::vector<index_t> shape;
  std::vector<float> values;
};

}  // namespace bitrank
