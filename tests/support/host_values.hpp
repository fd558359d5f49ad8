// Moving test data between the host and a backend, and the relative L2
// error the model and trainer tests report (the parity harness's own
// rel_l2 over f32 outputs is in parity.hpp).
#pragma once

#include <cmath>
#include <type_traits>
#include <vector>

#include "bitrank/backend.hpp"

namespace bitrank::test {

// A buffer on `be` holding v rounded to T.
template <class T>
Buffer<T> upload(Backend<T>& be, const std::vector<float>& v) {
  Buffer<T> b(*be.memory, v.size());
  b.upload(std::vector<T>(v.begin(), v.end()));
  return b;
}

// The values of a view on `be`, widened to f64 (T from the backend: views of T convert).
template <class T>
std::vector<double> values(const Backend<T>& be, std::type_identity_t<CView<T>> v) {
  std::vector<T> host(static_cast<std::size_t>(v.numel()));
  be.memory->download(host.data(), v.data, host.size() * sizeof(T));
  return std::vector<double>(host.begin(), host.end());
}

// ‖got − want‖ / ‖want‖.
inline double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace bitrank::test
