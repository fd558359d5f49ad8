#include "support/parity.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "support/backends.hpp"

namespace bitrank::test {
namespace {

std::uint64_t seed_of(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: a case's data depends only on its name
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

template <class R, class B>
void fill_both(Operand<R, B>& o, std::span<const R> ref_vals, std::span<const B> be_vals) {
  std::copy(ref_vals.begin(), ref_vals.end(), o.ref_buffer().data());
  o.be_buffer().upload(be_vals);
}

}  // namespace

ParityRun::ParityRun(Backend<double>& r, Backend<float>& b, std::string case_name)
    : ref(r), be(b), case_(std::move(case_name)), seed_(seed_of(case_)) {}
ParityRun::~ParityRun() = default;

Real ParityRun::input(Shape s, float scale, float offset) {
  auto v = rnd(static_cast<std::size_t>(s.numel()), next_seed(), scale);
  for (auto& x : v) x += offset;
  return input(s, v);
}

Real ParityRun::input(Shape s, std::span<const float> values) {
  BR_ASSERT(values.size() == static_cast<std::size_t>(s.numel()), "{} values for shape {}", values.size(), s.str());
  Real o(*be.memory, s);
  std::vector<double> d(values.begin(), values.end());
  fill_both<double, float>(o, d, values);
  return o;
}

Real ParityRun::output(Shape s) {
  Real o(*be.memory, s);
  const std::size_t n = static_cast<std::size_t>(s.numel());
  std::vector<double> d(n, std::numeric_limits<double>::quiet_NaN());
  std::vector<float> f(n, std::numeric_limits<float>::quiet_NaN());
  fill_both<double, float>(o, d, f);
  return o;
}

Half ParityRun::input_f16(Shape s, float scale) {
  auto v = rnd(static_cast<std::size_t>(s.numel()), next_seed(), scale);
  std::vector<f16> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = to_f16(v[i]);
  return input_f16(s, h);
}

Half ParityRun::input_f16(Shape s, std::span<const f16> values) {
  Half o(*be.memory, s);
  fill_both<f16, f16>(o, values, values);
  return o;
}

Half ParityRun::output_f16(Shape s) {
  std::vector<f16> h(static_cast<std::size_t>(s.numel()), f16{0x7e5a});  // a NaN no op produces
  return input_f16(s, h);
}

Q8 ParityRun::input_q8_0(Shape s, float scale) {
  XorShift g(next_seed());
  std::vector<q8_0> blocks(static_cast<std::size_t>(s.numel()));
  for (q8_0& b : blocks) {
    b.d = to_f16(scale / 127.0f * static_cast<float>((g.next_u64() % 1000) + 1) / 1000.0f);
    for (std::int8_t& q : b.q) q = static_cast<std::int8_t>(static_cast<int>(g.next_u64() % 255) - 127);
  }
  Q8 o(*be.memory, s);
  fill_both<q8_0, q8_0>(o, blocks, blocks);
  return o;
}

Bits ParityRun::input_bits(Shape s) {
  XorShift g(next_seed());
  std::vector<std::uint32_t> w(static_cast<std::size_t>(s.numel()));
  for (auto& x : w) x = static_cast<std::uint32_t>(g.next_u64() >> 17);
  return input_bits(s, w);
}

Bits ParityRun::input_bits(Shape s, std::span<const std::uint32_t> values) {
  Bits o(*be.memory, s);
  fill_both<std::uint32_t, std::uint32_t>(o, values, values);
  return o;
}

Bits ParityRun::output_bits(Shape s) {
  std::vector<std::uint32_t> w(static_cast<std::size_t>(s.numel()), 0xDEADBEEFu);
  return input_bits(s, w);
}

double rel_l2(std::span<const float> got, std::span<const double> want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  if (std::isnan(num) || std::isnan(den)) return std::numeric_limits<double>::quiet_NaN();
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

double ParityRun::expect_close(std::string_view name, const Real& o, double tol) {
  be.synchronize();
  return expect_close(name, o.be_values(), o.ref_values(), tol);
}

double ParityRun::expect_close(std::string_view name, std::span<const float> got, std::span<const double> want,
                               double tol) {
  EXPECT_EQ(got.size(), want.size()) << case_ << ": " << name;
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  bool ref_nan = false;
  for (double w : want) ref_nan |= std::isnan(w);
  EXPECT_FALSE(ref_nan) << case_ << ": the reference left NaN in " << name << " (an element it did not write)";
  const double e = rel_l2(got, want);
  std::printf("  [parity] %-34s %-5s %-10s rel %.3e  tol %.1e  %s\n", case_.c_str(), be.name.c_str(),
              std::string(name).c_str(), e, tol, e <= tol ? "ok" : "FAIL");
  EXPECT_LE(e, tol) << case_ << " on " << be.name << ": " << name << " relative L2 error " << e << " > " << tol;
  return e;
}

double ParityRun::expect_close(std::string_view name, double got, double want, double tol) {
  const double e = want == 0 ? std::fabs(got) : std::fabs(got - want) / std::fabs(want);
  std::printf("  [parity] %-34s %-5s %-10s rel %.3e  tol %.1e  %s\n", case_.c_str(), be.name.c_str(),
              std::string(name).c_str(), e, tol, e <= tol ? "ok" : "FAIL");
  EXPECT_LE(e, tol) << case_ << " on " << be.name << ": " << name << " got " << got << " want " << want;
  return e;
}

namespace {
template <class T, class Bitsof>
std::size_t count_mismatch(const std::vector<T>& a, const std::vector<T>& b, Bitsof bits) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += bits(a[i]) != bits(b[i]);
  return bad;
}
}  // namespace

std::size_t ParityRun::expect_equal(std::string_view name, const Half& o) {
  be.synchronize();
  const std::size_t bad = count_mismatch(o.be_values(), o.ref_values(), [](f16 h) { return h.bits; });
  std::printf("  [parity] %-34s %-5s %-10s %zu of %lld f16 differ  %s\n", case_.c_str(), be.name.c_str(),
              std::string(name).c_str(), bad, static_cast<long long>(o.shape().numel()), bad ? "FAIL" : "ok");
  EXPECT_EQ(bad, 0u) << case_ << " on " << be.name << ": " << name;
  return bad;
}

std::size_t ParityRun::expect_equal(std::string_view name, const Bits& o) {
  be.synchronize();
  const std::size_t bad = count_mismatch(o.be_values(), o.ref_values(), [](std::uint32_t w) { return w; });
  std::printf("  [parity] %-34s %-5s %-10s %zu of %lld words differ  %s\n", case_.c_str(), be.name.c_str(),
              std::string(name).c_str(), bad, static_cast<long long>(o.shape().numel()), bad ? "FAIL" : "ok");
  EXPECT_EQ(bad, 0u) << case_ << " on " << be.name << ": " << name;
  return bad;
}

std::vector<ParityCase>& parity_registry() {
  static std::vector<ParityCase> cases;
  return cases;
}

ParityRegistrar::ParityRegistrar(const char* name, ParityBody body) {
  parity_registry().push_back({name, std::move(body)});
}

namespace {
class ParityTest : public ::testing::Test {
 public:
  ParityTest(const ParityCase* c, std::string backend) : case_(c), backend_(std::move(backend)) {}
  void TestBody() override {
    ParityRun run(ref_backend(), backend(backend_), case_->name);
    case_->body(run);
  }

 private:
  const ParityCase* case_;
  std::string backend_;
};
}  // namespace

void register_parity_tests() {
  for (const auto& c : parity_registry()) {
    for (const auto& b : available_backends()) {
      const ParityCase* cp = &c;
      ::testing::RegisterTest(("Parity/" + c.name).c_str(), b.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                              [cp, b]() -> ::testing::Test* { return new ParityTest(cp, b); });
    }
  }
}

}  // namespace bitrank::test
