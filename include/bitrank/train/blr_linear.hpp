// A trainable BLR projection on a backend (DESIGN §1, §5, §7): the layer
// y = Σ_p h⊙((((x⊙g)·S_V)⊙ℓ)·S_Uᵀ) of shape m×n, rank r, P paths, with
// everything its training needs, on top of the blr, sign, adam and reduce
// op families.
//
// Tensors (arena.hpp regions; per-path tensors stack the paths first):
//   state       S_U bits [P][m][r/32], S_V bits [P][n][r/32] (u32)
//               scales [P][m+r+n]: per path h [m], ℓ [r], g [n], back to back
//               Adam first/second moments of the scales, same layout
//               sign latents z_U [P][m][r], z_V [P][n][r]
//               sign optimizer state (sign.hpp): moment [P][rows][r] (factored
//               Adam, Adam), second [P][rows][r] (Adam), R [P][rows] and
//               C [P][r] (factored Adam), for U and V
//   grads       d(scales) [P][m+r+n], the scales' layout (dh, dℓ, dg)
//   sign_grads  G_U [P][m][r], G_V [P][n][r]
// The scales of all paths being one vector makes their Adam update one
// adam_update and their sum of squares one sum_squares.
//
// Gradients: every gradient buffer holds ∂L/∂θ in loss units. grad_scale
// (a power of two) only enters the BLR backward, which multiplies it into
// its f16-staged operands (dy, b⊙ℓ) and divides it out of the GEMM
// outputs (blr.hpp), keeping small gradients out of the f16 subnormals. A
// scale too large overflows f16 to inf, which shows as a non-finite sum of
// squares: the trainer then skips the step and halves the scale.
//
// Accumulation: dh, dℓ, dg accumulate over backward calls until zero_grad.
// G_U, G_V do too: the first backward after zero_grad writes them (the op
// overwrites), later ones add theirs through the workspace (sign_defer). A
// step with no backward since zero_grad leaves the signs alone.
//
// Step: Adam on the scales (relative steps when AdamOptions.relative_floor
// > 0; AdamOptions.grad_scale is the clipping multiplier, the gradients
// being in loss units already), then sign_step on each latent — z moves,
// a sign flips when s·z < −δ and its bit is rewritten in place; returns the
// number of flips. Sign matrix ids (stochastic flips) are sign_id + 2p for
// S_U of path p and sign_id + 2p + 1 for S_V.
#pragma once

#include <cstdint>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/train/arena.hpp"

namespace bitrank::train {

struct BlrDims {
  index_t m = 0, n = 0, r = 0;  // outputs, inputs, rank (a multiple of 32)
  index_t paths = 1;
  index_t scales_per_path() const { return m + r + n; }
};

// What forward saves for backward (grown to the token count; may serve
// several layers one after another, but a backward needs its forward's).
template <class T>
struct BlrTape {
  Buffer<T> a;     // [P][ntok][r]  (x⊙g)·S_V
  Buffer<f16> xs;      // [ntok][n]  f16(x), the staged x the backward reuses (BlrSaved::xs)
  Buffer<f16> planes;  // [P][(m + n)·r]  the forward's GEMM planes (BlrSaved::planes)
};

// Backward scratch, shared by any number of layers (grown as needed).
template <class T>
struct BlrWorkspace {
  Buffer<T> b;       // [P][ntok][r]  (dy⊙h)·S_U, read by the sign gradient
  Buffer<T> g_sign;  // [P][m + n][r]  a later backward's G_U, G_V before they are added
};

template <class T>
class BlrLinear {
 public:
  // Owns one allocation; parameters from `init`, latents z = τ·s.
  BlrLinear(Backend<T>& be, const blr::HostBlrMatrix& init, SignOptimizer sign_optimizer, float tau,
            std::uint32_t sign_id = 0);
  // Placed in the caller's arena (a second carving pass over `at`, the
  // first having been measure()); all zero until upload.
  BlrLinear(Backend<T>& be, const BlrDims& dims, SignOptimizer sign_optimizer, std::uint32_t sign_id, ArenaRegions& at);
  // Adds this layer's tensors to the measuring carvers.
  static void measure(const BlrDims& dims, SignOptimizer sign_optimizer, ArenaRegions& at);
  // Its views carved again from `at` (the arena's bytes moved: streaming).
  void rebind(ArenaRegions& at) { bind(at); }

  BlrLinear(BlrLinear&&) noexcept = default;
  BlrLinear(const BlrLinear&) = delete;
  BlrLinear& operator=(const BlrLinear&) = delete;

  const BlrDims& dims() const { return dims_; }
  SignOptimizer sign_optimizer() const { return sign_optimizer_; }

  // Signs and scales from `w` (blr::check_blr, and the layer's shape); z = τ·s;
  // the Adam moments and the sign optimizer state are zeroed.
  void upload(const blr::HostBlrMatrix& w, float tau);
  // Signs and scales (as f32).
  blr::HostBlrMatrix download() const;

  // y [ntok][m] (overwritten) from x [ntok][n]; a, the staged x and the GEMM planes go to the tape.
  void forward(CView<T> x, BlrTape<T>& tape, View<T> y);
  // dx [ntok][n] (overwritten); d(scales) and G_U, G_V accumulate (see
  // above). x and tape are those of the forward.
  void backward(CView<T> x, CView<T> dy, const BlrTape<T>& tape, View<T> dx, float grad_scale, BlrWorkspace<T>& ws);
  // Zeroes d(scales); the next backward writes G_U, G_V afresh.
  void zero_grad();
  // Marks the sign gradients as not written (the caller zeroed d(scales),
  // e.g. a whole arena's grads region at once).
  void mark_grads_zeroed() { sign_grads_written_ = false; }
  bool sign_grads_written() const { return sign_grads_written_; }

  // Σ of the squared gradients; NaN or inf when any entry is (reduce.hpp).
  double scale_grad_squares() const;
  double sign_grad_squares() const;  // 0 when no backward since zero_grad

  // One optimizer step at t = scales.step (1-based; also the sign step's t).
  // signs.optimizer must be the one the layer was built for. Returns flips.
  std::int64_t step(const AdamOptions& scales, const SignOptions& signs);

  // Views of the tensors (backend memory).
  View<T> scales() const { return t_.scales; }                   // [P·(m+r+n)]
  View<T> scale_grads() const { return t_.scale_grads; }         // [P·(m+r+n)]
  View<T> sign_grad_u() const { return t_.g_u; }                 // [P][m][r]
  View<T> sign_grad_v() const { return t_.g_v; }                 // [P][n][r]
  View<std::uint32_t> sign_bits_u() const { return t_.bits_u; }  // [P][m][r/32]
  View<std::uint32_t> sign_bits_v() const { return t_.bits_v; }  // [P][n][r/32]
  View<T> latent_u() const { return t_.z_u.latent; }             // [P·m][r]
  View<T> latent_v() const { return t_.z_v.latent; }             // [P·n][r]
  // h, ℓ, g of path p inside scales().
  View<T> h(index_t p) const { return slice(t_.scales, p, 0, dims_.m); }
  View<T> l(index_t p) const { return slice(t_.scales, p, dims_.m, dims_.r); }
  View<T> g(index_t p) const { return slice(t_.scales, p, dims_.m + dims_.r, dims_.n); }

 private:
  // One sign matrix's tensors for all paths: [P·rows][r] (R: [P·rows], C: [P·r]).
  struct SignState {
    View<T> latent, moment, second, second_row, second_col;
  };
  struct Tensors {
    View<std::uint32_t> bits_u, bits_v;
    View<T> scales, adam_m, adam_v;
    SignState z_u, z_v;
    View<T> scale_grads, g_u, g_v;
  };

  static Tensors carve(const BlrDims& dims, SignOptimizer opt, ArenaRegions& at);
  void bind(ArenaRegions& at);
  SignMatrix<T> sign_matrix(bool u, index_t p) const;
  View<T> slice(View<T> v, index_t p, index_t offset, index_t len) const {
    return View<T>(v.data + p * dims_.scales_per_path() + offset, Shape{len});
  }
  BlrLayer<T> layer() const { return BlrLayer<T>{dims_.m, dims_.n, dims_.r, paths_}; }

  Backend<T>* be_;
  BlrDims dims_;
  SignOptimizer sign_optimizer_;
  std::uint32_t sign_id_;
  Arena own_;  // empty when placed in the caller's arena
  Tensors t_;
  std::vector<BlrPath<T>> paths_;
  bool sign_grads_written_ = false;
};

extern template class BlrLinear<float>;
extern template class BlrLinear<double>;

}  // namespace bitrank::train
