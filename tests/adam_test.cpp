// Adam: frozen entries, the first step's closed form, and option checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/host_values.hpp"

namespace bitrank {
namespace {

using test::upload;

// Entries with mask 0 keep w, m and v bit for bit; every other entry (mask
// 1, 0.5, −2: any nonzero value) is updated in all three.
template <class T>
void mask_freezes(Backend<T>& be) {
  const index_t n = 1000;
  const auto wv = rnd(n, 101, 1.0f), gv = rnd(n, 102, 1.0f), mv = rnd(n, 103, 0.1f);
  auto vv = rnd(n, 104, 0.1f);
  for (auto& x : vv) x = std::fabs(x) + 0.01f;
  std::vector<float> maskv(n);
  for (index_t i = 0; i < n; ++i) maskv[static_cast<std::size_t>(i)] = i % 4 == 0 ? 0.0f : i % 4 == 1 ? 1.0f : i % 4 == 2 ? 0.5f : -2.0f;
  auto w = upload(be, wv), g = upload(be, gv), m = upload(be, mv), v = upload(be, vv), mask = upload(be, maskv);
  AdamOptions opt;
  opt.lr = 1e-2f;
  opt.step = 5;
  opt.relative_floor = 0.1f;
  be.adam().adam_update(w.view({n}), g.view({n}), m.view({n}), v.view({n}), mask.view({n}), opt);
  be.synchronize();
  const auto w1 = w.download(), m1 = m.download(), v1 = v.download();
  int frozen_changed = 0, trained_unchanged = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    const bool same = w1[i] == static_cast<T>(wv[i]) && m1[i] == static_cast<T>(mv[i]) && v1[i] == static_cast<T>(vv[i]);
    const bool all_moved = w1[i] != static_cast<T>(wv[i]) && m1[i] != static_cast<T>(mv[i]) && v1[i] != static_cast<T>(vv[i]);
    if (maskv[i] == 0)
      frozen_changed += !same;
    else
      trained_unchanged += !all_moved;
  }
  EXPECT_EQ(frozen_changed, 0) << be.name;
  EXPECT_EQ(trained_unchanged, 0) << be.name;
}

TEST(Adam, MaskFreezesEntries) {
  mask_freezes(test::ref_backend());
  for (const auto& name : test::available_backends()) mask_freezes(test::backend(name));
}

// From m = v = 0 at step 1 the bias corrections cancel the (1 − β) factors:
// m = (1 − β1)·ĝ, v = (1 − β2)·ĝ², Δw = −lr·ĝ/(|ĝ| + eps)·(max(|w|, floor)
// with relative steps), ĝ = grad·grad_scale — written out here in f64 and
// compared on the reference and every backend.
template <class T>
void first_step_closed_form(Backend<T>& be, bool relative) {
  const index_t n = 513;
  const auto wv = rnd(n, 111, 2.0f), gv = rnd(n, 112, 300.0f);
  AdamOptions opt;
  opt.lr = 0.05f;
  opt.beta1 = 0.9f;
  opt.beta2 = 0.99f;
  opt.eps = 1e-3f;
  opt.grad_scale = 1.0f / 256;
  opt.relative_floor = relative ? 0.5f : 0.0f;
  opt.step = 1;
  auto w = upload(be, wv), g = upload(be, gv);
  auto m = upload(be, std::vector<float>(n, 0.0f)), v = upload(be, std::vector<float>(n, 0.0f));
  be.adam().adam_update(w.view({n}), g.view({n}), m.view({n}), v.view({n}), {}, opt);
  be.synchronize();
  const auto w1 = w.download(), m1 = m.download(), v1 = v.download();
  double worst_w = 0, worst_m = 0, worst_v = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    const double gh = static_cast<double>(gv[i]) * opt.grad_scale;
    const double mag = relative ? std::max(std::fabs(static_cast<double>(wv[i])), 0.5) : 1.0;
    const double dw = -static_cast<double>(opt.lr) * gh / (std::fabs(gh) + static_cast<double>(opt.eps)) * mag;
    const double m_want = (1 - static_cast<double>(opt.beta1)) * gh, v_want = (1 - static_cast<double>(opt.beta2)) * gh * gh;
    // Relative to the size of each quantity, after allowing half an ulp of
    // w_new: storing w in T rounds the update by that much.
    const T up = std::nextafter(w1[i], std::numeric_limits<T>::infinity());
    const T down = std::nextafter(w1[i], -std::numeric_limits<T>::infinity());
    const double half_ulp = 0.5 * std::max(static_cast<double>(up - w1[i]), static_cast<double>(w1[i] - down));
    const double err = std::fabs((static_cast<double>(w1[i]) - wv[i]) - dw);
    worst_w = std::max(worst_w, std::max(0.0, err - half_ulp) / std::fabs(dw));
    worst_m = std::max(worst_m, std::fabs(m1[i] - m_want) / std::fabs(m_want));
    worst_v = std::max(worst_v, std::fabs(v1[i] - v_want) / v_want);
  }
  std::printf("  [closed form] adam first step on %s (relative %d): worst w %.2e  m %.2e  v %.2e\n", be.name.c_str(),
              relative, worst_w, worst_m, worst_v);
  EXPECT_LE(worst_w, 1e-6) << be.name << " relative " << relative;
  EXPECT_LE(worst_m, 1e-6) << be.name;
  EXPECT_LE(worst_v, 1e-6) << be.name;
}

TEST(Adam, FirstStepClosedForm) {
  for (const bool relative : {false, true}) {
    first_step_closed_form(test::ref_backend(), relative);
    for (const auto& name : test::available_backends()) first_step_closed_form(test::backend(name), relative);
  }
}

TEST(Adam, BadOptionsAreErrors) {
  auto& ops = test::cpu_backend().adam();
  Buffer<float> w(host_memory(), 64), g(host_memory(), 64), m(host_memory(), 64), v(host_memory(), 64), mask(host_memory(), 64);
  auto run = [&](const AdamOptions& o) { ops.adam_update(w.view({64}), g.view({64}), m.view({64}), v.view({64}), {}, o); };
  auto with = [](auto set) {
    AdamOptions o;
    set(o);
    return o;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.lr = nan; })); }, "adam_update: lr must be finite");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.lr = inf; })); }, "adam_update: lr must be finite");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.lr = -1e-3f; })); }, "adam_update: lr must be ≥ 0");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.beta1 = 1.0f; })); }, "adam_update: beta1 must be in [0, 1), got 1");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.beta1 = -0.1f; })); }, "adam_update: beta1 must be in [0, 1)");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.beta2 = nan; })); }, "adam_update: beta2 must be finite");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.beta2 = 1.5f; })); }, "adam_update: beta2 must be in [0, 1)");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.eps = 0.0f; })); }, "adam_update: eps must be > 0");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.eps = inf; })); }, "adam_update: eps must be finite");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.grad_scale = -inf; })); }, "adam_update: grad_scale must be finite");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.relative_floor = -0.5f; })); }, "adam_update: relative_floor must be ≥ 0");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.relative_floor = nan; })); }, "adam_update: relative_floor must be finite");
  test::expect_error([&] { run(with([&](AdamOptions& o) { o.step = 0; })); }, "adam_update: step must be ≥ 1 (1-based), got 0");
  // Shapes.
  const AdamOptions ok;
  test::expect_error([&] { ops.adam_update(w.view({64}), g.view({63}), m.view({64}), v.view({64}), {}, ok); },
               "adam_update: grad has shape [63], expected [64]");
  test::expect_error([&] { ops.adam_update(w.view({8, 8}), g.view({8, 8}), m.view({64}), v.view({8, 8}), {}, ok); },
               "adam_update: m has shape [64], expected [8, 8]");
  test::expect_error([&] { ops.adam_update(w.view({64}), g.view({64}), m.view({64}), v.view({64}), mask.view({32}), ok); },
               "adam_update: mask has shape [32], expected [64]");
  test::expect_error([&] { ops.adam_update(w.view({0}), g.view({0}), m.view({0}), v.view({0}), {}, ok); }, "adam_update: w would be empty");
  // A valid call goes through.
  EXPECT_NO_THROW(ops.adam_update(w.view({64}), g.view({64}), m.view({64}), v.view({64}), mask.view({64}), ok));
}

}  // namespace
}  // namespace bitrank
