// The op-parity harness (after ggml's test-backend-ops).
//
// A case is a function of a ParityRun: it makes inputs (fresh random values
// that are exact in f32, the same numbers on the f64 reference and on the
// backend under test), outputs poisoned with NaN on both sides (so an
// element an op forgets to write shows), runs the op on `p.ref` and on
// `p.be`, and compares with a per-op tolerance — relative L2 error
// ‖out − ref‖ / ‖ref‖ — or bit equality for exact ops.
//
// Every case runs on every available backend (cpu always, cuda where a GPU
// is visible) as the gtest `Parity/<case>.<backend>`; a family the backend
// lacks makes the case fail, never pass silently.
//
//   BR_PARITY_CASE(rmsnorm_37x5120) {
//     auto x = p.input({37, 5120}, 1.0f);
//     ...
//     p.ref.norm().rmsnorm_forward(x.ref(), ...);
//     p.be.norm().rmsnorm_forward(x.be(), ...);
//     p.expect_close("y", y, 1e-6);  // f32 rounding of a 5120-long sum
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/rng.hpp"

namespace bitrank::test {

// The same tensor on the reference (R, host memory) and on the backend
// under test (B, its memory).
template <class R, class B>
class Operand {
 public:
  Operand(Memory& be_mem, Shape s) : shape_(s), ref_(host_memory(), static_cast<std::size_t>(s.numel())),
                                     be_(be_mem, static_cast<std::size_t>(s.numel())) {}
  View<R> ref() const { return ref_.view(shape_); }
  View<B> be() const { return be_.view(shape_); }
  const Shape& shape() const { return shape_; }
  std::vector<B> be_values() const { return be_.download(); }
  std::vector<R> ref_values() const { return std::vector<R>(ref_.data(), ref_.data() + ref_.size()); }
  Buffer<R>& ref_buffer() { return ref_; }
  Buffer<B>& be_buffer() { return be_; }

 private:
  Shape shape_;
  Buffer<R> ref_;
  Buffer<B> be_;
};

using Real = Operand<double, float>;
using Half = Operand<f16, f16>;
using Bits = Operand<std::uint32_t, std::uint32_t>;
using Q8 = Operand<q8_0, q8_0>;

class ParityRun {
 public:
  ParityRun(Backend<double>& ref, Backend<float>& be, std::string case_name);
  ~ParityRun();

  Backend<double>& ref;
  Backend<float>& be;

  // Uniform in (offset − scale, offset + scale), rounded to f32; identical on both sides.
  Real input(Shape s, float scale, float offset = 0.0f);
  Real input(Shape s, std::span<const float> values);
  // Outputs: NaN on both sides until the op writes them.
  Real output(Shape s);
  // Accumulation targets: random initial values, identical on both sides.
  Real accumulator(Shape s, float scale) { return input(s, scale); }
  Half input_f16(Shape s, float scale);
  Half input_f16(Shape s, std::span<const f16> values);
  Half output_f16(Shape s);  // poisoned with a NaN pattern
  // Q8_0 blocks, shape [rows][blocks]: d of each block uniform in (0, scale/127]
  // rounded to f16, every q uniform in [−127, 127].
  Q8 input_q8_0(Shape s, float scale);
  Bits input_bits(Shape s);  // random words
  Bits input_bits(Shape s, std::span<const std::uint32_t> values);
  Bits output_bits(Shape s);  // poisoned with 0xDEADBEEF

  // A fresh seed for data the case draws itself.
  std::uint64_t next_seed() { return ++seed_; }
  std::vector<float> random(std::size_t n, float scale) { return rnd(n, next_seed(), scale); }

  // Relative L2 error of the backend's output against the reference's,
  // recorded and checked against tol; NaN anywhere fails.
  double expect_close(std::string_view name, const Real& o, double tol);
  // Same for a host-side scalar (ops that return a value).
  double expect_close(std::string_view name, double got, double want, double tol);
  // Same for values the case downloaded itself (tensors an object owns).
  double expect_close(std::string_view name, std::span<const float> got, std::span<const double> want, double tol);
  // Bit equality of every element; returns the number of mismatches.
  std::size_t expect_equal(std::string_view name, const Half& o);
  std::size_t expect_equal(std::string_view name, const Bits& o);

 private:
  std::string case_;
  std::uint64_t seed_;
};

using ParityBody = std::function<void(ParityRun&)>;
struct ParityCase {
  std::string name;
  ParityBody body;
};
std::vector<ParityCase>& parity_registry();
struct ParityRegistrar {
  ParityRegistrar(const char* name, ParityBody body);
};

// Registers every parity case on every available backend with gtest.
void register_parity_tests();

// Relative L2 error ‖got − want‖ / ‖want‖ (NaN if got has a NaN where want
// is finite; 0/0 is 0).
double rel_l2(std::span<const float> got, std::span<const double> want);

}  // namespace bitrank::test

#define BR_PARITY_CASE(name)                                                                       \
  static void br_parity_##name(::bitrank::test::ParityRun& p);                                    \
  static const ::bitrank::test::ParityRegistrar br_parity_reg_##name(#name, br_parity_##name);     \
  static void br_parity_##name([[maybe_unused]] ::bitrank::test::ParityRun& p)
