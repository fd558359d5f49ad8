// Parity cases of the BLR layer: forward, backward and sign gradients of a
// multi-path layer, and the inference op (f32 and f16 scales), against the
// f64 reference.
#include <cmath>
#include <tuple>
#include <type_traits>
#include <vector>

#include "support/parity.hpp"

namespace bitrank::test {
namespace {

// Per-layer data on both sides; each per-path tensor stacks the paths.
struct LayerOperands {
  Bits sign_u, sign_v;
  Real h, l, g, dh, dl, dg;
};

// The data of an operand on the reference (T = double) or the backend (T = float).
template <class T, class R, class B>
auto side(const Operand<R, B>& o) {
  if constexpr (std::is_same_v<T, double>) {
    return o.ref().data;
  } else {
    return o.be().data;
  }
}

template <class T>
std::vector<BlrPath<T>> make_paths(const LayerOperands& o, index_t m, index_t n, index_t r, index_t paths) {
  std::vector<BlrPath<T>> out;
  const index_t words = sign_words(r);
  for (index_t p = 0; p < paths; ++p) {
    BlrPath<T> path;
    path.sign_u = CView<std::uint32_t>(side<T>(o.sign_u) + p * m * words, Shape{m, words});
    path.sign_v = CView<std::uint32_t>(side<T>(o.sign_v) + p * n * words, Shape{n, words});
    path.h = CView<T>(side<T>(o.h) + p * m, Shape{m});
    path.l = CView<T>(side<T>(o.l) + p * r, Shape{r});
    path.g = CView<T>(side<T>(o.g) + p * n, Shape{n});
    path.dh = View<T>(side<T>(o.dh) + p * m, Shape{m});
    path.dl = View<T>(side<T>(o.dl) + p * r, Shape{r});
    path.dg = View<T>(side<T>(o.dg) + p * n, Shape{n});
    out.push_back(path);
  }
  return out;
}

// |v|·mul + add for fresh uniform v in (−scale, scale): the seed's positive scales.
std::vector<float> positive(ParityRun& p, std::size_t count, float scale, float add, float mul) {
  auto v = p.random(count, scale);
  for (auto& e : v) e = add + std::fabs(e) * mul;
  return v;
}

// Forward, backward (with b) and sign gradients of a layer of `paths`
// paths at the seed's input scales (x 2, dy 1e-3, grad_scale 1024). With
// `zero_h`, every third output row's h is 0 (and g's every fifth input
// column): their dh, dg are not 0 and must not be derived through h or g.
void blr_case(ParityRun& p, index_t m, index_t n, index_t r, index_t ntok, index_t paths, bool zero_h = false) {
  const auto P = static_cast<std::size_t>(paths);
  auto h = positive(p, P * static_cast<std::size_t>(m), 0.5f, 0.02f, 0.05f);
  auto g = positive(p, P * static_cast<std::size_t>(n), 0.5f, 0.1f, 0.2f);
  if (zero_h) {
    for (std::size_t i = 0; i < h.size(); i += 3) h[i] = 0.0f;
    for (std::size_t i = 0; i < g.size(); i += 5) g[i] = 0.0f;
  }
  LayerOperands o{
      p.input_bits({paths * m, sign_words(r)}),
      p.input_bits({paths * n, sign_words(r)}),
      p.input({paths * m}, h),
      p.input({paths * r}, positive(p, P * static_cast<std::size_t>(r), 0.5f, 0.5f, 1.0f)),
      p.input({paths * n}, g),
      // start values near the gradients' size (1e-4..1e-1), so a lost sum shows
      p.accumulator({paths * m}, 1e-3f),
      p.accumulator({paths * r}, 1e-3f),
      p.accumulator({paths * n}, 1e-3f),
  };
  auto x = p.input({ntok, n}, 2.0f);
  auto dy = p.input({ntok, m}, 1e-3f);
  auto y = p.output({ntok, m});
  auto a = p.output({paths, ntok, r});
  auto dx = p.output({ntok, n});
  auto b = p.output({paths, ntok, r});
  auto g_u = p.output({paths, m, r});
  auto g_v = p.output({paths, n, r});
  const float grad_scale = 1024.0f;

  const auto ref_paths = make_paths<double>(o, m, n, r, paths);
  const BlrLayer<double> ref_layer{m, n, r, ref_paths};
  p.ref.blr().blr_forward(ref_layer, x.ref(), y.ref(), {a.ref()});
  p.ref.blr().blr_backward(ref_layer, x.ref(), dy.ref(), {a.ref()}, dx.ref(), grad_scale, b.ref());
  p.ref.blr().blr_sign_grad(ref_layer, x.ref(), dy.ref(), a.ref(), b.ref(), grad_scale, g_u.ref(), g_v.ref());

  const auto be_paths = make_paths<float>(o, m, n, r, paths);
  const BlrLayer<float> be_layer{m, n, r, be_paths};
  p.be.blr().blr_forward(be_layer, x.be(), y.be(), {a.be()});
  p.be.blr().blr_backward(be_layer, x.be(), dy.be(), {a.be()}, dx.be(), grad_scale, b.be());
  p.be.blr().blr_sign_grad(be_layer, x.be(), dy.be(), a.be(), b.be(), grad_scale, g_u.be(), g_v.be());

  // Every output goes through at least one GEMM on f16-rounded operands
  // (relative rounding 2^-11 per operand, f32 sums): 3e-3 as DESIGN §4.
  const double tol = 3e-3;
  p.expect_close("y", y, tol);
  p.expect_close("a", a, tol);
  p.expect_close("dx", dx, tol);
  p.expect_close("b", b, tol);
  p.expect_close("dh", o.dh, tol);
  p.expect_close("dl", o.dl, tol);
  p.expect_close("dg", o.dg, tol);
  p.expect_close("G_U", g_u, tol);
  p.expect_close("G_V", g_v, tol);
}

// blr_infer of a layer of `paths` paths at the seed's scales, against the
// reference and against the backend's own blr_forward.
void blr_infer_case(ParityRun& p, index_t m, index_t n, index_t r, index_t ntok, index_t paths) {
  const auto P = static_cast<std::size_t>(paths);
  LayerOperands o{
      p.input_bits({paths * m, sign_words(r)}),
      p.input_bits({paths * n, sign_words(r)}),
      p.input({paths * m}, positive(p, P * static_cast<std::size_t>(m), 0.5f, 0.02f, 0.05f)),
      p.input({paths * r}, positive(p, P * static_cast<std::size_t>(r), 0.5f, 0.5f, 1.0f)),
      p.input({paths * n}, positive(p, P * static_cast<std::size_t>(n), 0.5f, 0.1f, 0.2f)),
      p.output({paths * m}),  // no gradients: left NaN, and not read
      p.output({paths * r}),
      p.output({paths * n}),
  };
  auto x = p.input({ntok, n}, 2.0f);
  auto y = p.output({ntok, m});
  auto y_fwd = p.output({ntok, m});
  auto a = p.output({paths, ntok, r});

  const auto ref_paths = make_paths<double>(o, m, n, r, paths);
  p.ref.blr().blr_infer(BlrLayer<double>{m, n, r, ref_paths}, x.ref(), y.ref());
  const auto be_paths = make_paths<float>(o, m, n, r, paths);
  const BlrLayer<float> be_layer{m, n, r, be_paths};
  p.be.blr().blr_infer(be_layer, x.be(), y.be());
  p.be.blr().blr_forward(be_layer, x.be(), y_fwd.be(), {a.be()});

  // The CPU and CUDA backends read the bits for few tokens: f32 sums over n
  // and r terms with no f16 rounding (~1e-7 per term, ~1e-6 over the sums; a
  // lost term or a wrong sign is O(1e-2) and an f16 operand ~5e-4).
  // Otherwise blr_infer is the forward: f16 operands, 3e-3 as DESIGN §4.
  const bool bits = (p.be.name == "cpu" || p.be.name == "cuda") && ntok <= kBlrInferBitTokens;
  p.expect_close("y", y, bits ? 1e-5 : 3e-3);
  // Against the backend's own forward (f16 operands): within the forward's tolerance.
  const std::vector<float> fwd = y_fwd.be_values(), inf = y.be_values();
  p.expect_close("y vs blr_forward", inf, std::vector<double>(fwd.begin(), fwd.end()), 3e-3);
  // A second call on 2x gives exactly 2y (doubling is exact in every sum and
  // product): nothing the first call left behind (scratch, the CUDA rank
  // pass's counters) is read as this call's.
  std::vector<float> x2 = x.be_values();
  for (float& v : x2) v *= 2.0f;
  auto x_twice = p.input({ntok, n}, x2);
  auto y_twice = p.output({ntok, m});
  p.be.blr().blr_infer(be_layer, x_twice.be(), y_twice.be());
  std::vector<double> want(inf.size());
  for (std::size_t i = 0; i < inf.size(); ++i) want[i] = 2.0 * inf[i];
  p.expect_close("y(2x) = 2y exactly", y_twice.be_values(), want, 0.0);
}

// blr_infer with f16 scales (BlrPath::scales16, a loaded model's form)
// against the reference reading the same f16 scales, and against the
// backend's own blr_infer with f32 scales of the same values: those must
// be the same bits (the f16 scales are widened exactly before the kernel).
void blr_infer_f16_case(ParityRun& p, index_t m, index_t n, index_t r, index_t ntok, index_t paths) {
  const auto P = static_cast<std::size_t>(paths);
  const index_t per_path = m + r + n;
  std::vector<f16> half;
  std::vector<float> wide;  // the same values in f32: h, ℓ, g of each path in turn
  const std::tuple<index_t, float, float> parts[] = {{m, 0.02f, 0.05f}, {r, 0.5f, 1.0f}, {n, 0.1f, 0.2f}};
  for (std::size_t k = 0; k < P; ++k)
    for (const auto& [count, add, mul] : parts)
      for (float v : positive(p, static_cast<std::size_t>(count), 0.5f, add, mul)) {
        half.push_back(to_f16(v));
        wide.push_back(to_f32(half.back()));
      }
  auto scales16 = p.input_f16({paths * per_path}, half);
  auto scales = p.input({paths * per_path}, wide);
  auto sign_u = p.input_bits({paths * m, sign_words(r)});
  auto sign_v = p.input_bits({paths * n, sign_words(r)});
  auto x = p.input({ntok, n}, 2.0f);
  auto y = p.output({ntok, m});
  auto y_f32 = p.output({ntok, m});

  const index_t words = sign_words(r);
  // The backend's paths, over the f16 scales or over their f32 copy.
  const auto paths_of = [&](const std::uint32_t* su, const std::uint32_t* sv, const f16* s16, const float* s32) {
    std::vector<BlrPath<float>> out;
    for (index_t k = 0; k < paths; ++k) {
      BlrPath<float> path;
      path.sign_u = CView<std::uint32_t>(su + k * m * words, Shape{m, words});
      path.sign_v = CView<std::uint32_t>(sv + k * n * words, Shape{n, words});
      if (s16) {
        path.scales16 = CView<f16>(s16 + k * per_path, Shape{per_path});
      } else {
        path.h = CView<float>(s32 + k * per_path, Shape{m});
        path.l = CView<float>(s32 + k * per_path + m, Shape{r});
        path.g = CView<float>(s32 + k * per_path + m + r, Shape{n});
      }
      out.push_back(path);
    }
    return out;
  };
  std::vector<BlrPath<double>> ref_paths;
  for (index_t k = 0; k < paths; ++k) {
    BlrPath<double>& path = ref_paths.emplace_back();
    path.sign_u = CView<std::uint32_t>(sign_u.ref().data + k * m * words, Shape{m, words});
    path.sign_v = CView<std::uint32_t>(sign_v.ref().data + k * n * words, Shape{n, words});
    path.scales16 = CView<f16>(scales16.ref().data + k * per_path, Shape{per_path});
  }
  p.ref.blr().blr_infer(BlrLayer<double>{m, n, r, ref_paths}, x.ref(), y.ref());
  const auto be16 = paths_of(sign_u.be().data, sign_v.be().data, scales16.be().data, nullptr);
  const auto be32 = paths_of(sign_u.be().data, sign_v.be().data, nullptr, scales.be().data);
  p.be.blr().blr_infer(BlrLayer<float>{m, n, r, be16}, x.be(), y.be());
  p.be.blr().blr_infer(BlrLayer<float>{m, n, r, be32}, x.be(), y_f32.be());

  const bool bits = (p.be.name == "cpu" || p.be.name == "cuda") && ntok <= kBlrInferBitTokens;
  p.expect_close("y", y, bits ? 1e-5 : 3e-3);  // as blr_infer_case
  const std::vector<float> a = y.be_values(), b = y_f32.be_values();
  p.expect_close("y vs f32 scales of the same values", a, std::vector<double>(b.begin(), b.end()), 0.0);
}

}  // namespace

BR_PARITY_CASE(blr_256x384_r128_t70_p2) { blr_case(p, 256, 384, 128, 70, 2); }  // the seed's shape
BR_PARITY_CASE(blr_72x40_r32_t5_p1) { blr_case(p, 72, 40, 32, 5, 1); }        // odd sizes, one path
BR_PARITY_CASE(blr_33x100_r96_t129_p3) { blr_case(p, 33, 100, 96, 129, 3); }  // three paths, ragged token blocks
BR_PARITY_CASE(blr_64x96_r64_t33_p2_zero_scales) { blr_case(p, 64, 96, 64, 33, 2, true); }  // h, g with zeros

// blr_infer: m, n not multiples of 16, the tokens of decoding (1, 3, 8),
// the kernel's largest count (16) and the first past it (17), one and two paths.
BR_PARITY_CASE(blr_infer_75x53_r32_t1_p1) { blr_infer_case(p, 75, 53, 32, 1, 1); }
BR_PARITY_CASE(blr_infer_75x53_r96_t3_p2) { blr_infer_case(p, 75, 53, 96, 3, 2); }
BR_PARITY_CASE(blr_infer_129x211_r160_t8_p2) { blr_infer_case(p, 129, 211, 160, 8, 2); }
BR_PARITY_CASE(blr_infer_90x70_r96_t16_p2) { blr_infer_case(p, 90, 70, 96, 16, 2); }
BR_PARITY_CASE(blr_infer_211x129_r64_t17_p1) { blr_infer_case(p, 211, 129, 64, 17, 1); }
BR_PARITY_CASE(blr_infer_1000x577_r224_t5_p2) { blr_infer_case(p, 1000, 577, 224, 5, 2); }  // large enough for threads
// more than 8 words of ranks and a last word of 32 lanes with one in use (the
// CUDA rank pass's word groups, the row pass's second sweep), many input chunks
BR_PARITY_CASE(blr_infer_300x2100_r1056_t2_p2) { blr_infer_case(p, 300, 2100, 1056, 2, 2); }
// f16 scales: decoding (1, 3 tokens), the kernels' last count (16), the forward past it (17).
BR_PARITY_CASE(blr_infer_f16_scales_75x53_r32_t1_p1) { blr_infer_f16_case(p, 75, 53, 32, 1, 1); }
BR_PARITY_CASE(blr_infer_f16_scales_129x211_r160_t3_p2) { blr_infer_f16_case(p, 129, 211, 160, 3, 2); }
BR_PARITY_CASE(blr_infer_f16_scales_90x70_r96_t16_p2) { blr_infer_f16_case(p, 90, 70, 96, 16, 2); }
BR_PARITY_CASE(blr_infer_f16_scales_211x129_r64_t17_p2) { blr_infer_f16_case(p, 211, 129, 64, 17, 2); }

}  // namespace bitrank::test
