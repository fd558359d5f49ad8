// Column reductions: non-finite propagation of sum_squares, in-place
// scaling, gradient identities of the ref ops, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/gradcheck.hpp"
#include "support/expect.hpp"

namespace bitrank {
namespace {

// One NaN or ±inf anywhere (first element, both sides of a block boundary,
// the middle, the last element) makes the sum NaN or +inf on every backend.
template <class T>
void sum_squares_propagates(Backend<T>& be) {
  const index_t rows = 70, cols = 5120, n = rows * cols;
  const auto base = rnd(static_cast<std::size_t>(n), 41, 1.0f);
  Buffer<T> a(*be.memory, base.size());
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  int checked = 0;
  for (index_t pos : {index_t{0}, index_t{16383}, index_t{16384}, n / 2 + 7, n - 1}) {
    for (T bad : {nan, inf, -inf}) {
      std::vector<T> v(base.begin(), base.end());
      v[static_cast<std::size_t>(pos)] = bad;
      a.upload(v);
      const double s = be.reduce().sum_squares(a.view({rows, cols}));
      if (std::isnan(bad))
        EXPECT_TRUE(std::isnan(s)) << be.name << " NaN at " << pos << " gave " << s;
      else
        EXPECT_TRUE(std::isinf(s) && s > 0) << be.name << " " << bad << " at " << pos << " gave " << s;
      ++checked;
    }
  }
  // inf and NaN together: NaN.
  std::vector<T> v(base.begin(), base.end());
  v[3] = inf;
  v[static_cast<std::size_t>(n - 2)] = nan;
  a.upload(v);
  EXPECT_TRUE(std::isnan(be.reduce().sum_squares(a.view({rows, cols})))) << be.name;
  // And the clean data is finite and positive.
  a.upload(std::vector<T>(base.begin(), base.end()));
  const double clean = be.reduce().sum_squares(a.view({rows, cols}));
  EXPECT_TRUE(std::isfinite(clean) && clean > 0) << be.name;
  EXPECT_EQ(checked, 15);
}

TEST(Reduce, SumSquaresPropagatesNonFinite) {
  sum_squares_propagates(test::ref_backend());
  for (const auto& name : test::available_backends()) sum_squares_propagates(test::backend(name));
}

// squared_error: one NaN or ±inf in y or in the target makes the returned sum
// NaN or +inf, and the dy element at that position non-finite, on every backend.
template <class T>
void squared_error_propagates(Backend<T>& be) {
  const index_t rows = 70, cols = 5120, n = rows * cols;
  const auto yv = rnd(static_cast<std::size_t>(n), 44, 1.0f), tv = rnd(static_cast<std::size_t>(n), 45, 1.0f);
  Buffer<T> y(*be.memory, yv.size()), t(*be.memory, tv.size()), dy(*be.memory, yv.size());
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  int checked = 0;
  for (const bool in_target : {false, true})
    for (index_t pos : {index_t{0}, index_t{16384}, n - 1})
      for (T bad : {nan, inf, -inf}) {
        std::vector<T> a(yv.begin(), yv.end()), b(tv.begin(), tv.end());
        (in_target ? b : a)[static_cast<std::size_t>(pos)] = bad;
        y.upload(a);
        t.upload(b);
        const double s = be.reduce().squared_error(y.view({rows, cols}), t.view({rows, cols}), 0.5f, dy.view({rows, cols}));
        if (std::isnan(bad))
          EXPECT_TRUE(std::isnan(s)) << be.name << " NaN at " << pos << " gave " << s;
        else
          EXPECT_TRUE(std::isinf(s) && s > 0) << be.name << " " << bad << " at " << pos << " gave " << s;
        EXPECT_FALSE(std::isfinite(static_cast<double>(dy.download()[static_cast<std::size_t>(pos)]))) << be.name;
        ++checked;
      }
  EXPECT_EQ(checked, 18);
}

TEST(Reduce, SquaredErrorPropagatesNonFinite) {
  squared_error_propagates(test::ref_backend());
  for (const auto& name : test::available_backends()) squared_error_propagates(test::backend(name));
}

// squared_error in place (dy = y) equals the separate form; small integers
// make the sum exact and known.
TEST(Reduce, SquaredErrorInPlaceAndExact) {
  const index_t n = 40000;
  std::vector<float> yv(static_cast<std::size_t>(n)), tv(yv.size());
  double want = 0;
  for (index_t i = 0; i < n; ++i) {
    yv[static_cast<std::size_t>(i)] = static_cast<float>(i % 13) - 6.0f;
    tv[static_cast<std::size_t>(i)] = static_cast<float>(i % 7);
    want += static_cast<double>((i % 13) - 6 - i % 7) * ((i % 13) - 6 - i % 7);
  }
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    Buffer<float> y(*be.memory, yv.size()), t(*be.memory, tv.size()), dy(*be.memory, yv.size());
    y.upload(yv);
    t.upload(tv);
    EXPECT_EQ(be.reduce().squared_error(y.view({n}), t.view({n}), 0.25f, dy.view({n})), want) << name;
    EXPECT_EQ(be.reduce().squared_error(y.view({n}), t.view({n}), 0.25f, y.view({n})), want) << name;
    be.synchronize();
    const auto sep = dy.download(), in_place = y.download();
    EXPECT_EQ(sep, in_place) << name;
    EXPECT_EQ(sep[1], 0.25f * (-5.0f - 1.0f)) << name;
  }
}

// Small integers: the sum of squares is exact, and known.
TEST(Reduce, SumSquaresExactOnIntegers) {
  const index_t n = 40000;
  std::vector<float> v(static_cast<std::size_t>(n));
  double want = 0;
  for (index_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = static_cast<float>(i % 13) - 6.0f;
    want += static_cast<double>((i % 13) - 6) * ((i % 13) - 6);
  }
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    Buffer<float> a(*be.memory, v.size());
    a.upload(v);
    EXPECT_EQ(be.reduce().sum_squares(a.view({n})), want) << name;
  }
}

// scale_cols may write over its input: out = a in place equals out ≠ a.
TEST(Reduce, ScaleColsInPlace) {
  const index_t rows = 37, cols = 300;
  const auto av = rnd(static_cast<std::size_t>(rows * cols), 42, 2.0f), cv = rnd(static_cast<std::size_t>(cols), 43, 1.0f);
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    for (const bool accumulate : {false, true}) {
      Buffer<float> a(*be.memory, av.size()), col(*be.memory, cv.size());
      Buffer<float> src(*be.memory, av.size()), sep(*be.memory, av.size());
      a.upload(av);
      src.upload(av);
      sep.upload(av);  // the accumulate start equals a, as in place
      col.upload(cv);
      be.reduce().scale_cols(a.view({rows, cols}), col.view({cols}), a.view({rows, cols}), accumulate);
      be.reduce().scale_cols(src.view({rows, cols}), col.view({cols}), sep.view({rows, cols}), accumulate);
      be.synchronize();
      const auto in_place = a.download();
      EXPECT_EQ(in_place, sep.download()) << name << " accumulate " << accumulate;
      EXPECT_NE(in_place, std::vector<float>(av.begin(), av.end())) << name << ": nothing was written";
    }
  }
}

// View of a host vector (the reference works on host memory).
View<double> view_of(std::vector<double>& v, Shape s) { return View<double>(v.data(), s); }

// L = Σ dy ⊙ scale_cols(a, col): ∂L/∂a = scale_cols(dy, col) and ∂L/∂col =
// col_sum_prod(a, dy) — the pair the BLR layer uses for y = h⊙c, dh = Σ dy⊙c.
TEST(Reduce, ScaleColsGradients) {
  auto& ops = test::ref_backend().reduce();
  const index_t rows = 6, cols = 11;
  auto a = test::rnd64(static_cast<std::size_t>(rows * cols), 51, 1.0);
  auto col = test::rnd64(static_cast<std::size_t>(cols), 52, 1.0);
  auto dy = test::rnd64(static_cast<std::size_t>(rows * cols), 53, 1.0);
  std::vector<double> y(a.size());
  auto loss = [&] {
    ops.scale_cols(view_of(a, {rows, cols}), view_of(col, {cols}), view_of(y, {rows, cols}), false);
    return test::dot(dy, y);
  };
  std::vector<double> da(a.size());
  ops.scale_cols(view_of(dy, {rows, cols}), view_of(col, {cols}), view_of(da, {rows, cols}), false);
  auto dcol = test::rnd64(static_cast<std::size_t>(cols), 54, 1.0);  // accumulates: start anywhere
  const auto start = dcol;
  ops.col_sum_prod(view_of(a, {rows, cols}), view_of(dy, {rows, cols}), view_of(dcol, {cols}));
  for (std::size_t j = 0; j < dcol.size(); ++j) dcol[j] -= start[j];
  test::grad_check("scale_cols d/da", a, da, loss);
  test::grad_check("scale_cols d/dcol", col, dcol, loss);
}

// L = Σ dout ⊙ col_sum_prod(a, b): ∂L/∂a = scale_cols(b, dout).
TEST(Reduce, ColSumProdGradient) {
  auto& ops = test::ref_backend().reduce();
  const index_t rows = 7, cols = 9;
  auto a = test::rnd64(static_cast<std::size_t>(rows * cols), 61, 1.0);
  auto b = test::rnd64(static_cast<std::size_t>(rows * cols), 62, 1.0);
  auto dout = test::rnd64(static_cast<std::size_t>(cols), 63, 1.0);
  auto loss = [&] {
    std::vector<double> out(static_cast<std::size_t>(cols), 0.0);
    ops.col_sum_prod(view_of(a, {rows, cols}), view_of(b, {rows, cols}), view_of(out, {cols}));
    return test::dot(dout, out);
  };
  std::vector<double> da(a.size());
  ops.scale_cols(view_of(b, {rows, cols}), view_of(dout, {cols}), view_of(da, {rows, cols}), false);
  test::grad_check("col_sum_prod d/da", a, da, loss);
}

// L = Σ (y − t)²: ∂L/∂y is squared_error's dy with grad_mul = 2.
TEST(Reduce, SquaredErrorGradient) {
  auto& ops = test::ref_backend().reduce();
  const index_t rows = 5, cols = 13;
  auto y = test::rnd64(static_cast<std::size_t>(rows * cols), 64, 1.0);
  auto t = test::rnd64(static_cast<std::size_t>(rows * cols), 65, 1.0);
  std::vector<double> dy(y.size()), scratch(y.size());
  auto loss = [&] { return ops.squared_error(view_of(y, {rows, cols}), view_of(t, {rows, cols}), 2.0f, view_of(scratch, {rows, cols})); };
  ops.squared_error(view_of(y, {rows, cols}), view_of(t, {rows, cols}), 2.0f, view_of(dy, {rows, cols}));
  test::grad_check("squared_error d/dy", y, dy, loss);
}

TEST(Reduce, BadInputIsAnError) {
  auto& ops = test::cpu_backend().reduce();
  Buffer<float> a(host_memory(), 4096), b(host_memory(), 4096), out(host_memory(), 4096);
  test::expect_error([&] { ops.col_sum_prod(a.view({70, 32}), b.view({70, 31}), out.view({32})); },
               "col_sum_prod: b has shape [70, 31], expected [70, 32]");
  test::expect_error([&] { ops.col_sum_prod(a.view({70, 32}), b.view({70, 32}), out.view({70})); },
               "col_sum_prod: out has shape [70], expected [32]");
  test::expect_error([&] { ops.col_sum_prod(a.view({0, 32}), b.view({0, 32}), out.view({32})); }, "col_sum_prod: a is empty");
  test::expect_error([&] { ops.scale_cols(a.view({70, 32}), b.view({33}), out.view({70, 32}), false); },
               "scale_cols: col has shape [33], expected [32]");
  test::expect_error([&] { ops.scale_cols(a.view({70, 32}), b.view({32}), out.view({32, 70}), true); },
               "scale_cols: out has shape [32, 70], expected [70, 32]");
  test::expect_error([&] { ops.scale_cols(a.view({70}), b.view({70}), out.view({70}), true); }, "scale_cols: a has rank 1");
  test::expect_error([&] { ops.sum_squares(a.view({0})); }, "sum_squares: a would be empty");
  test::expect_error([&] { ops.sum_squares(View<float>::strided(a.data(), 10, 10, 20)); }, "sum_squares: a must be contiguous");
  test::expect_error([&] { ops.squared_error(a.view({7, 5}), b.view({5, 7}), 1.0f, out.view({7, 5})); },
               "squared_error: target has shape [5, 7], expected [7, 5]");
  test::expect_error([&] { ops.squared_error(a.view({7, 5}), b.view({7, 5}), 1.0f, out.view({35})); },
               "squared_error: dy has shape [35], expected [7, 5]");
  test::expect_error([&] { ops.squared_error(a.view({7, 5}), b.view({7, 5}), 1.0f / 0.0f, out.view({7, 5})); },
               "squared_error: grad_mul must be finite");
}

}  // namespace
}  // namespace bitrank
