// The GPU engine of the truncated SVD (contract: include/bitrank/svd_engine.hpp,
// which the CPU engine in blr shares; this file sees nothing of blr):
// f64 throughout, one stream, cuSOLVER for the factorizations and cuBLAS
// for the products. Input checks, sketch width and the sign convention are
// svd_engine.hpp's, applied on the host, so both engines answer the same
// inputs with the same errors and signs.
//
// Layout: A arrives row-major f32 [m][n]; its bytes are the column-major
// n×m matrix D = Aᵀ, widened to f64 on the device as it is (no transpose).
// Results come back column-major and are rearranged on the host into
// SvdF64's row-major u [m][k], v [n][k].
//
// Exact (cusolverDnXgesvd): LAPACK's algorithm — Householder
// bidiagonalization, then implicit-shift QR on the bidiagonal. Chosen over
// gesvdj (Jacobi: iterates to a tolerance within a sweep limit, and slows
// down sharply past ~2k columns) and gesvdr (a randomized method with its
// own random numbers, not the CPU's sketch): gesvd is backward stable with
// no convergence knobs, takes rank-deficient input (zero singular values
// come out as zeros), and its 64-bit API covers every shape we meet (up to
// 5120×25600). It wants rows ≥ columns, so the tall orientation is
// factored: D itself when n ≥ m, else A column-major (Dᵀ, one cublasDgeam).
// When rows ≥ 2·columns the tall matrix is QR-factored first (geqrf),
// gesvd runs on the columns×columns R, and U = Q·U_R (orgqr + one GEMM) —
// LAPACK's dgesvd takes the same detour past rows ≈ 1.6·columns, and it
// keeps the bidiagonalization (memory-bound on a GPU) on the small square.
//
// Randomized: the CPU engine's algorithm step for step from the same Ω
// (rng.hpp gaussian, same seed, widened to f64): Y = A·Ω, Q = qr(Y), q
// power iterations re-orthonormalised at every product (geqrf + orgqr),
// then Bᵀ = Aᵀ·Q [n][l] — formed directly, tall — factored as above, and
// U = Q·Ũ. Both engines thus sketch the same subspace; the CPU's passes are
// f32 GEMMs and QR, these f64 (on Hopper f64 GEMMs run on the tensor cores
// at about the f32 rate), so the two agree to the CPU's f32 rounding.
//
// Device memory for one call (f64; s = m·n·8 bytes, c = min(m, n), k ≤ c
// triplets, l the sketch width):
//   exact       A (s); when m > n also its transpose (s) until A is freed;
//               then U (s direct, or max(m, n)·k·8 after a QR), and Vᵀ, R,
//               U_R (≤ 3·c²·8), plus the gesvd workspace: at most about
//               2·s + 3·c²·8 + workspace — for 5120×25600 (either way
//               round) about 2.6 GiB + workspace.
//   randomized  A (s), Ω (n·l·8, freed after Y = A·Ω), Y (m·l·8), Z (n·l·8):
//               s + (m + 2n)·l·8 at the peak; A is freed before the SVD of
//               Bᵀ (n×l) and U, which need less — for 5120×25600 at
//               l = 2165 about 1.9 GiB.
// Nothing stays allocated between calls (the engine's pool is trimmed), so
// compress's training afterwards has the device to itself; SvdF64::
// device_bytes reports the call's peak (pool blocks, cuBLAS / cuSOLVER
// internals aside).
//
// Calls from several threads take turns (a mutex): compress's pool threads
// queue their SVDs on the one stream while the rest of their Dual-SVID runs
// on the host. Deterministic on a given GPU and CUDA version: cuSOLVER in
// CUSOLVER_DETERMINISTIC_RESULTS mode, cuBLAS without atomics (its default).
#include <cublas_v2.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "bitrank/error.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/svd_engine.hpp"
#include "cuda/device_info.hpp"
#include "cuda/runtime.hpp"

namespace bitrank {
namespace {

constexpr unsigned kThreads = 256;

__global__ void widen_kernel(const float* __restrict__ x, double* __restrict__ y, std::size_t n) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    y[i] = static_cast<double>(x[i]);
}

// r (k×k, column-major) = the upper triangle of a's leading k×k block
// (column-major, leading dimension lda), zeros below the diagonal.
__global__ void upper_triangle_kernel(const double* __restrict__ a, std::int64_t lda, double* __restrict__ r,
                                      std::int64_t k) {
  const std::size_t total = static_cast<std::size_t>(k) * static_cast<std::size_t>(k);
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = static_cast<std::int64_t>(i % static_cast<std::size_t>(k));
    const std::int64_t col = static_cast<std::int64_t>(i / static_cast<std::size_t>(k));
    r[i] = row <= col ? a[row + col * lda] : 0.0;
  }
}

unsigned grid_for(std::size_t n) { return std::min(cuda::blocks_for(n, kThreads), 65535u); }

// A 32-bit size for the cuBLAS / legacy cuSOLVER calls.
int i32(index_t v, std::string_view name) {
  if (v > INT_MAX) fail("truncated_svd (cuda): {} has a dimension {} beyond 32-bit sizes", name, v);
  return static_cast<int>(v);
}

std::size_t sz(index_t v) { return static_cast<std::size_t>(v); }

// The row-major [rows][k] of SvdF64 from a downloaded column-major matrix
// (leading dimension ld): its first k columns, or, when `transposed`, the
// transpose of its first k rows.
std::vector<double> leading_columns(const std::vector<double>& x, index_t rows, index_t k, index_t ld, bool transposed) {
  std::vector<double> out(sz(rows * k));
  for (index_t i = 0; i < rows; ++i)
    for (index_t c = 0; c < k; ++c) out[sz(i * k + c)] = transposed ? x[sz(c + i * ld)] : x[sz(i + c * ld)];
  return out;
}

// The device factors of a tall X [rows][cols] (column-major, rows ≥ cols):
// u (rows×≥k, leading dimension rows), s (cols), vt (cols×cols, ld cols).
struct TallSvd {
  Buffer<double> u, s, vt;
};

class Engine {
 public:
  explicit Engine(int device);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  SvdF64 run(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts, std::string_view name);

 private:
  Buffer<double> widened(std::span<const float> x);
  void check_info(const char* what, std::string_view name, index_t rows, index_t cols);
  void geqrf(double* x, index_t rows, index_t cols, double* tau, std::string_view name);
  void orgqr(double* x, index_t rows, index_t cols, const double* tau, std::string_view name);
  void gesvd(double* x, index_t rows, index_t cols, double* s, double* u, double* vt, std::string_view name);
  // C [rows][cols] = op(A)·op(B), column-major, f64.
  void gemm(bool ta, bool tb, index_t rows, index_t cols, index_t inner, const double* a, index_t lda, const double* b,
            index_t ldb, double* c, index_t ldc, std::string_view name);
  TallSvd tall_svd(Buffer<double>& x, index_t rows, index_t cols, index_t k, std::string_view name);
  std::vector<double> download(const Buffer<double>& b, std::size_t count);
  void exact(std::span<const float> a, SvdF64& out, std::string_view name);
  void randomized(std::span<const float> a, SvdF64& out, const SvdOptions& opts, std::string_view name);

  int device_;
  cuda::Stream stream_;
  cuda::DeviceMemory memory_;
  cublasHandle_t blas_ = nullptr;
  cusolverDnHandle_t solver_ = nullptr;
  cusolverDnParams_t params_ = nullptr;
  Buffer<int> info_;  // the status word of the last cuSOLVER call
  std::mutex mu_;
};

int select(int device) {
  const int count = cuda::visible_device_count();
  if (device < 0 || device >= count) fail("truncated_svd (cuda): device {} requested, {} visible", device, count);
  BR_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

Engine::Engine(int device) : device_(select(device)), memory_(stream_.get()) {
  BR_CUBLAS_CHECK(cublasCreate(&blas_));
  BR_CUBLAS_CHECK(cublasSetStream(blas_, stream_.get()));
  BR_CUSOLVER_CHECK(cusolverDnCreate(&solver_));
  BR_CUSOLVER_CHECK(cusolverDnSetStream(solver_, stream_.get()));
  BR_CUSOLVER_CHECK(cusolverDnSetDeterministicMode(solver_, CUSOLVER_DETERMINISTIC_RESULTS));
  BR_CUSOLVER_CHECK(cusolverDnCreateParams(&params_));
  info_ = Buffer<int>(memory_, 1);
}

Engine::~Engine() {
  info_.reset();
  if (params_) cusolverDnDestroyParams(params_);
  if (solver_) cusolverDnDestroy(solver_);
  if (blas_) cublasDestroy(blas_);
}

Buffer<double> Engine::widened(std::span<const float> x) {
  Buffer<float> staged(memory_, x.size());
  staged.upload(x);
  Buffer<double> out(memory_, x.size());
  widen_kernel<<<grid_for(x.size()), kThreads, 0, stream_.get()>>>(staged.data(), out.data(), x.size());
  BR_CUDA_LAUNCHED();
  return out;  // `staged` is released in stream order: the kernel has read it before any reuse
}

std::vector<double> Engine::download(const Buffer<double>& b, std::size_t count) {
  BR_ASSERT(count <= b.size(), "download of {} values from a buffer of {}", count, b.size());
  std::vector<double> out(count);
  if (count) memory_.download(out.data(), b.data(), count * sizeof(double));
  return out;
}

void Engine::check_info(const char* what, std::string_view name, index_t rows, index_t cols) {
  int info = 0;
  memory_.download(&info, info_.data(), sizeof(int));
  if (info > 0 && std::string_view(what) == "gesvd")
    fail("truncated_svd (cuda): cusolverDnXgesvd on {} [{}×{}] did not converge ({} superdiagonals left)", name, rows,
         cols, info);
  if (info != 0) fail("truncated_svd (cuda): {} on {} [{}×{}] failed (info {})", what, name, rows, cols, info);
}

void Engine::geqrf(double* x, index_t rows, index_t cols, double* tau, std::string_view name) {
  std::size_t dev_bytes = 0, host_bytes = 0;
  BR_CUSOLVER_CHECK(cusolverDnXgeqrf_bufferSize(solver_, params_, rows, cols, CUDA_R_64F, x, rows, CUDA_R_64F, tau,
                                                CUDA_R_64F, &dev_bytes, &host_bytes));
  Buffer<std::byte> work(memory_, dev_bytes);
  std::vector<std::byte> host(host_bytes);
  BR_CUSOLVER_CHECK(cusolverDnXgeqrf(solver_, params_, rows, cols, CUDA_R_64F, x, rows, CUDA_R_64F, tau, CUDA_R_64F,
                                     work.data(), dev_bytes, host.data(), host_bytes, info_.data()));
  check_info("geqrf", name, rows, cols);
}

void Engine::orgqr(double* x, index_t rows, index_t cols, const double* tau, std::string_view name) {
  const int r = i32(rows, name), c = i32(cols, name);
  int lwork = 0;
  BR_CUSOLVER_CHECK(cusolverDnDorgqr_bufferSize(solver_, r, c, c, x, r, tau, &lwork));
  Buffer<double> work(memory_, sz(std::max(lwork, 1)));
  BR_CUSOLVER_CHECK(cusolverDnDorgqr(solver_, r, c, c, x, r, tau, work.data(), lwork, info_.data()));
  check_info("orgqr", name, rows, cols);
}

void Engine::gesvd(double* x, index_t rows, index_t cols, double* s, double* u, double* vt, std::string_view name) {
  std::size_t dev_bytes = 0, host_bytes = 0;
  BR_CUSOLVER_CHECK(cusolverDnXgesvd_bufferSize(solver_, params_, 'S', 'S', rows, cols, CUDA_R_64F, x, rows, CUDA_R_64F,
                                                s, CUDA_R_64F, u, rows, CUDA_R_64F, vt, cols, CUDA_R_64F, &dev_bytes,
                                                &host_bytes));
  Buffer<std::byte> work(memory_, dev_bytes);
  std::vector<std::byte> host(host_bytes);
  BR_CUSOLVER_CHECK(cusolverDnXgesvd(solver_, params_, 'S', 'S', rows, cols, CUDA_R_64F, x, rows, CUDA_R_64F, s,
                                     CUDA_R_64F, u, rows, CUDA_R_64F, vt, cols, CUDA_R_64F, work.data(), dev_bytes,
                                     host.data(), host_bytes, info_.data()));
  check_info("gesvd", name, rows, cols);
}

void Engine::gemm(bool ta, bool tb, index_t rows, index_t cols, index_t inner, const double* a, index_t lda,
                  const double* b, index_t ldb, double* c, index_t ldc, std::string_view name) {
  const double one = 1.0, zero = 0.0;
  BR_CUBLAS_CHECK(cublasDgemm(blas_, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, i32(rows, name),
                              i32(cols, name), i32(inner, name), &one, a, i32(lda, name), b, i32(ldb, name), &zero, c,
                              i32(ldc, name)));
}

TallSvd Engine::tall_svd(Buffer<double>& x, index_t rows, index_t cols, index_t k, std::string_view name) {
  BR_ASSERT(rows >= cols && k <= cols, "tall_svd of {}×{} for {} triplets", rows, cols, k);
  TallSvd t;
  t.s = Buffer<double>(memory_, sz(cols));
  t.vt = Buffer<double>(memory_, sz(cols * cols));
  if (rows < 2 * cols) {
    t.u = Buffer<double>(memory_, sz(rows * cols));
    gesvd(x.data(), rows, cols, t.s.data(), t.u.data(), t.vt.data(), name);
    return t;
  }
  // X = Q·R; R = U_R·S·Vᵀ; U = Q·U_R (only its first k columns are needed).
  Buffer<double> tau(memory_, sz(cols)), rr(memory_, sz(cols * cols)), ur(memory_, sz(cols * cols));
  geqrf(x.data(), rows, cols, tau.data(), name);
  const std::size_t square = sz(cols * cols);
  upper_triangle_kernel<<<grid_for(square), kThreads, 0, stream_.get()>>>(x.data(), rows, rr.data(), cols);
  BR_CUDA_LAUNCHED();
  gesvd(rr.data(), cols, cols, t.s.data(), ur.data(), t.vt.data(), name);
  orgqr(x.data(), rows, cols, tau.data(), name);
  t.u = Buffer<double>(memory_, sz(rows * k));
  gemm(false, false, rows, k, cols, x.data(), rows, ur.data(), cols, t.u.data(), rows, name);
  return t;
}

// Row-major A [m][n] is D = Aᵀ column-major (n×m); gesvd factors the tall one of D and A.
void Engine::exact(std::span<const float> a, SvdF64& out, std::string_view name) {
  const index_t m = out.m, n = out.n, k = out.k;
  Buffer<double> d = widened(a);
  if (n >= m) {
    // D = U_D·S·V_Dᵀ (n×m tall) ⇒ A = V_D·S·U_Dᵀ: U_A = V_D (row i of U_A is column i of V_Dᵀ), V_A = U_D.
    TallSvd t = tall_svd(d, n, m, k, name);
    const std::vector<double> ud = download(t.u, sz(n * k)), vdt = download(t.vt, sz(m * m));
    out.s = download(t.s, sz(k));
    out.u = leading_columns(vdt, m, k, m, true);
    out.v = leading_columns(ud, n, k, n, false);
  } else {
    // A column-major (m×n tall) = Dᵀ; A = U·S·Vᵀ.
    Buffer<double> x(memory_, sz(m * n));
    const double one = 1.0, zero = 0.0;
    BR_CUBLAS_CHECK(cublasDgeam(blas_, CUBLAS_OP_T, CUBLAS_OP_N, i32(m, name), i32(n, name), &one, d.data(),
                                i32(n, name), &zero, x.data(), i32(m, name), x.data(), i32(m, name)));
    d.reset();
    TallSvd t = tall_svd(x, m, n, k, name);
    const std::vector<double> u = download(t.u, sz(m * k)), vt = download(t.vt, sz(n * n));
    out.s = download(t.s, sz(k));
    out.u = leading_columns(u, m, k, m, false);
    out.v = leading_columns(vt, n, k, n, true);
  }
}

void Engine::randomized(std::span<const float> a, SvdF64& out, const SvdOptions& opts, std::string_view name) {
  const index_t m = out.m, n = out.n, k = out.k, l = detail::sketch_columns(m, n, k, opts);
  Buffer<double> d = widened(a);  // Aᵀ, n×m
  Buffer<double> y(memory_, sz(m * l)), z(memory_, sz(n * l)), tau(memory_, sz(l));
  {
    // The CPU's Ω [n][l] row-major is Ωᵀ column-major (l×n): Y = A·Ω = Dᵀ·(Ωᵀ)ᵀ.
    const std::vector<float> omega = gaussian(sz(n * l), opts.seed);
    Buffer<double> w = widened(omega);
    gemm(true, true, m, l, n, d.data(), n, w.data(), l, y.data(), m, name);
  }
  const auto orthonormalize = [&](Buffer<double>& q, index_t rows) {
    geqrf(q.data(), rows, l, tau.data(), name);
    orgqr(q.data(), rows, l, tau.data(), name);
  };
  orthonormalize(y, m);
  for (int it = 0; it < opts.power_iters; ++it) {
    gemm(false, false, n, l, m, d.data(), n, y.data(), m, z.data(), n, name);  // Z = Aᵀ·Q = D·Q
    orthonormalize(z, n);
    gemm(true, false, m, l, n, d.data(), n, z.data(), n, y.data(), m, name);  // Y = A·Z = Dᵀ·Z
    orthonormalize(y, m);
  }
  gemm(false, false, n, l, m, d.data(), n, y.data(), m, z.data(), n, name);  // Bᵀ = Aᵀ·Q (n×l)
  d.reset();
  // Bᵀ = U_B·S·Ṽᵀ ⇒ B = Ṽ·S·U_Bᵀ: V_A = U_B, Ũ = Ṽ, U_A = Q·Ũ = Q·(Ṽᵀ's first k rows)ᵀ.
  TallSvd t = tall_svd(z, n, l, k, name);
  Buffer<double> ua(memory_, sz(m * k));
  gemm(false, true, m, k, l, y.data(), m, t.vt.data(), l, ua.data(), m, name);
  out.s = download(t.s, sz(k));
  out.u = leading_columns(download(ua, sz(m * k)), m, k, m, false);
  out.v = leading_columns(download(t.u, sz(n * k)), n, k, n, false);
}

SvdF64 Engine::run(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts,
                   std::string_view name) {
  detail::check_svd_input(a, m, n, r, opts, name);
  SvdF64 out = detail::svd_frame(m, n, r, opts);
  std::lock_guard lock(mu_);
  BR_CUDA_CHECK(cudaSetDevice(device_));  // this thread's current device
  memory_.reset_peak();
  // Trim on every exit, so that no block outlives the call (or a failed one).
  struct Trim {
    cuda::DeviceMemory& mem;
    ~Trim() { mem.trim(); }
  } trim{memory_};
  if (out.method == SvdMethod::exact)
    exact(a, out, name);
  else
    randomized(a, out, opts, name);
  out.device_bytes = memory_.peak_bytes();
  detail::normalize_signs(out);
  return out;
}

}  // namespace

SvdEngine make_cuda_svd_engine(int device) {
  auto engine = std::make_shared<Engine>(device);
  return [engine](std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts,
                  std::string_view name) { return engine->run(a, m, n, r, opts, name); };
}

}  // namespace bitrank
