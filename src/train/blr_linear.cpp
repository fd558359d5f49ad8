// A trainable BLR projection (contract: include/bitrank/train/blr_linear.hpp).
#include "bitrank/train/blr_linear.hpp"

#include <string>

#include "bitrank/error.hpp"

namespace bitrank::train {
namespace {

void check_dims(const BlrDims& d) {
  if (d.m <= 0 || d.n <= 0 || d.r <= 0 || d.paths <= 0)
    fail("BlrLinear: shape m={} n={} r={} paths={} must be positive", d.m, d.n, d.r, d.paths);
  if (d.r % 32 != 0) fail("BlrLinear: rank {} is not a multiple of 32", d.r);
}

// The shape of a host matrix, after blr::check_blr.
BlrDims checked_dims(const blr::HostBlrMatrix& w) {
  blr::check_blr(w, "BlrLinear");
  return BlrDims{w.m, w.n, w.r, static_cast<index_t>(w.paths.size())};
}

template <class T>
View<T> take(Carver& c, Shape s) {
  return View<T>(c.take<T>(s.numel()), s);
}

}  // namespace

template <class T>
typename BlrLinear<T>::Tensors BlrLinear<T>::carve(const BlrDims& d, SignOptimizer opt, ArenaRegions& at) {
  check_dims(d);
  const index_t P = d.paths, w = sign_words(d.r), s = d.scales_per_path();
  Tensors t;
  t.bits_u = take<std::uint32_t>(at.state, {P, d.m, w});
  t.bits_v = take<std::uint32_t>(at.state, {P, d.n, w});
  t.scales = take<T>(at.state, {P * s});
  t.adam_m = take<T>(at.state, {P * s});
  t.adam_v = take<T>(at.state, {P * s});
  const auto sign_state = [&](index_t rows) {
    SignState st;
    st.latent = take<T>(at.state, {P * rows, d.r});
    if (opt != SignOptimizer::sgd) st.moment = take<T>(at.state, {P * rows, d.r});
    if (opt == SignOptimizer::adam) st.second = take<T>(at.state, {P * rows, d.r});
    if (opt == SignOptimizer::factored_adam) {
      st.second_row = take<T>(at.state, {P * rows});
      st.second_col = take<T>(at.state, {P * d.r});
    }
    return st;
  };
  t.z_u = sign_state(d.m);
  t.z_v = sign_state(d.n);
  t.scale_grads = take<T>(at.grads, {P * s});
  t.g_u = take<T>(at.sign_grads, {P, d.m, d.r});
  t.g_v = take<T>(at.sign_grads, {P, d.n, d.r});
  return t;
}

template <class T>
void BlrLinear<T>::measure(const BlrDims& dims, SignOptimizer opt, ArenaRegions& at) {
  carve(dims, opt, at);
}

template <class T>
void BlrLinear<T>::bind(ArenaRegions& at) {
  if (static_cast<std::uint64_t>(sign_id_) + 2 * static_cast<std::uint64_t>(dims_.paths) > kSignMatrixIds)
    fail("BlrLinear: sign ids {}..{} reach past {}", sign_id_, sign_id_ + 2 * dims_.paths - 1, kSignMatrixIds);
  t_ = carve(dims_, sign_optimizer_, at);
  const index_t m = dims_.m, n = dims_.n, r = dims_.r, w = sign_words(r);
  paths_.clear();
  for (index_t p = 0; p < dims_.paths; ++p) {
    BlrPath<T> path;
    path.sign_u = CView<std::uint32_t>(t_.bits_u.data + p * m * w, Shape{m, w});
    path.sign_v = CView<std::uint32_t>(t_.bits_v.data + p * n * w, Shape{n, w});
    path.h = h(p);
    path.l = l(p);
    path.g = g(p);
    path.dh = slice(t_.scale_grads, p, 0, m);
    path.dl = slice(t_.scale_grads, p, m, r);
    path.dg = slice(t_.scale_grads, p, m + r, n);
    paths_.push_back(path);
  }
}

template <class T>
BlrLinear<T>::BlrLinear(Backend<T>& be, const blr::HostBlrMatrix& init, SignOptimizer sign_optimizer, float tau,
                        std::uint32_t sign_id)
    : be_(&be), dims_(checked_dims(init)), sign_optimizer_(sign_optimizer), sign_id_(sign_id) {
  ArenaRegions sizes;
  measure(dims_, sign_optimizer_, sizes);
  own_ = Arena(*be.memory, sizes);
  ArenaRegions at = own_.carvers();
  bind(at);
  upload(init, tau);
}

template <class T>
BlrLinear<T>::BlrLinear(Backend<T>& be, const BlrDims& dims, SignOptimizer sign_optimizer, std::uint32_t sign_id,
                        ArenaRegions& at)
    : be_(&be), dims_(dims), sign_optimizer_(sign_optimizer), sign_id_(sign_id) {
  bind(at);
}

template <class T>
SignMatrix<T> BlrLinear<T>::sign_matrix(bool u, index_t p) const {
  const SignState& st = u ? t_.z_u : t_.z_v;
  const View<std::uint32_t> bits = u ? t_.bits_u : t_.bits_v;
  const index_t rows = u ? dims_.m : dims_.n, r = dims_.r, w = sign_words(r);
  const auto rows_of = [&](View<T> v, index_t len) {
    return v.data ? View<T>(v.data + p * len, Shape{len}) : View<T>{};
  };
  SignMatrix<T> mat;
  mat.bits = View<std::uint32_t>(bits.data + p * rows * w, Shape{rows, w});
  mat.latent = View<T>(st.latent.data + p * rows * r, Shape{rows, r});
  if (st.moment.data) mat.moment = View<T>(st.moment.data + p * rows * r, Shape{rows, r});
  if (st.second.data) mat.second = View<T>(st.second.data + p * rows * r, Shape{rows, r});
  mat.second_row = rows_of(st.second_row, rows);
  mat.second_col = rows_of(st.second_col, r);
  mat.id = sign_id_ + 2 * static_cast<std::uint32_t>(p) + (u ? 0u : 1u);
  return mat;
}

template <class T>
void BlrLinear<T>::upload(const blr::HostBlrMatrix& w, float tau) {
  const index_t m = dims_.m, n = dims_.n, r = dims_.r, P = dims_.paths, words = sign_words(r);
  blr::check_blr(w, "BlrLinear upload");
  if (w.m != m || w.n != n || w.r != r || static_cast<index_t>(w.paths.size()) != P)
    fail("BlrLinear upload: matrix is {}x{} rank {} with {} paths, the layer {}x{} rank {} with {} paths", w.m, w.n,
         w.r, w.paths.size(), m, n, r, P);
  Memory& mem = *be_->memory;
  std::vector<T> scales(static_cast<std::size_t>(P * dims_.scales_per_path()));
  for (index_t p = 0; p < P; ++p) {
    const blr::HostBlrPath& path = w.paths[static_cast<std::size_t>(p)];
    T* dst = scales.data() + p * dims_.scales_per_path();
    for (const auto* v : {&path.h, &path.l, &path.g})
      for (float x : *v) *dst++ = static_cast<T>(x);
    mem.upload(t_.bits_u.data + p * m * words, path.sign_u.data(), path.sign_u.size() * sizeof(std::uint32_t));
    mem.upload(t_.bits_v.data + p * n * words, path.sign_v.data(), path.sign_v.size() * sizeof(std::uint32_t));
  }
  mem.upload(t_.scales.data, scales.data(), scales.size() * sizeof(T));
  mem.zero(t_.adam_m.data, scales.size() * sizeof(T));
  mem.zero(t_.adam_v.data, scales.size() * sizeof(T));
  SignOptions opt;
  opt.optimizer = sign_optimizer_;
  for (index_t p = 0; p < P; ++p)
    for (const bool u : {true, false}) be_->sign().sign_init(sign_matrix(u, p), opt, tau);
}

template <class T>
blr::HostBlrMatrix BlrLinear<T>::download() const {
  const index_t m = dims_.m, n = dims_.n, r = dims_.r, P = dims_.paths, words = sign_words(r),
                s = dims_.scales_per_path();
  Memory& mem = *be_->memory;
  std::vector<T> scales(static_cast<std::size_t>(P * s));
  mem.download(scales.data(), t_.scales.data, scales.size() * sizeof(T));
  blr::HostBlrMatrix out;
  out.m = m;
  out.n = n;
  out.r = r;
  for (index_t p = 0; p < P; ++p) {
    blr::HostBlrPath path;
    path.sign_u.resize(static_cast<std::size_t>(m * words));
    path.sign_v.resize(static_cast<std::size_t>(n * words));
    mem.download(path.sign_u.data(), t_.bits_u.data + p * m * words, path.sign_u.size() * sizeof(std::uint32_t));
    mem.download(path.sign_v.data(), t_.bits_v.data + p * n * words, path.sign_v.size() * sizeof(std::uint32_t));
    const T* src = scales.data() + p * s;
    path.h.assign(src, src + m);
    path.l.assign(src + m, src + m + r);
    path.g.assign(src + m + r, src + s);
    out.paths.push_back(std::move(path));
  }
  return out;
}

template <class T>
void BlrLinear<T>::forward(CView<T> x, BlrTape<T>& tape, View<T> y) {
  const index_t ntok = x.dim(0), P = dims_.paths;
  Memory& mem = *be_->memory;
  ensure_size(tape.a, mem, P * ntok * dims_.r);
  const index_t plane_halves = (dims_.m + dims_.n) * dims_.r;
  ensure_size(tape.xs, mem, ntok * dims_.n);
  ensure_size(tape.planes, mem, P * plane_halves);
  be_->blr().blr_forward(layer(), x, y,
                         {tape.a.view({P, ntok, dims_.r}), tape.xs.view({ntok, dims_.n}), tape.planes.view({P, plane_halves})});
}

template <class T>
void BlrLinear<T>::backward(CView<T> x, CView<T> dy, const BlrTape<T>& tape, View<T> dx, float grad_scale,
                            BlrWorkspace<T>& ws) {
  const index_t ntok = x.dim(0), P = dims_.paths, m = dims_.m, n = dims_.n, r = dims_.r;
  if (tape.a.size() < static_cast<std::size_t>(P * ntok * r) || tape.xs.size() < static_cast<std::size_t>(ntok * n) ||
      tape.planes.size() < static_cast<std::size_t>(P * (m + n) * r))
    fail("BlrLinear backward: the tape holds no forward of {} tokens", ntok);
  Memory& mem = *be_->memory;
  ensure_size(ws.b, mem, P * ntok * r);
  const View<T> a = tape.a.view({P, ntok, r}), b = ws.b.view({P, ntok, r});
  BlrOps<T>& ops = be_->blr();
  const BlrSaved<T> saved{a, tape.xs.view({ntok, n}), tape.planes.view({P, (m + n) * r})};
  if (!sign_grads_written_) {
    ops.blr_backward_sign_grad(layer(), x, dy, saved, dx, grad_scale, b, t_.g_u, t_.g_v);
    sign_grads_written_ = true;
    return;
  }
  // A later backward before the step: its sign gradients are added.
  ensure_size(ws.g_sign, mem, P * (m + n) * r);
  const View<T> gu(ws.g_sign.data(), Shape{P, m, r}), gv(ws.g_sign.data() + P * m * r, Shape{P, n, r});
  ops.blr_backward_sign_grad(layer(), x, dy, saved, dx, grad_scale, b, gu, gv);
  be_->sign().sign_defer(View<T>(gu.data, Shape{P * m, r}), View<T>(t_.g_u.data, Shape{P * m, r}));
  be_->sign().sign_defer(View<T>(gv.data, Shape{P * n, r}), View<T>(t_.g_v.data, Shape{P * n, r}));
}

template <class T>
void BlrLinear<T>::zero_grad() {
  be_->memory->zero(t_.scale_grads.data, static_cast<std::size_t>(t_.scale_grads.numel()) * sizeof(T));
  sign_grads_written_ = false;
}

template <class T>
double BlrLinear<T>::scale_grad_squares() const {
  return be_->reduce().sum_squares(t_.scale_grads);
}

template <class T>
double BlrLinear<T>::sign_grad_squares() const {
  if (!sign_grads_written_) return 0.0;
  return be_->reduce().sum_squares(t_.g_u) + be_->reduce().sum_squares(t_.g_v);
}

template <class T>
std::int64_t BlrLinear<T>::step(const AdamOptions& scales, const SignOptions& signs) {
  if (signs.optimizer != sign_optimizer_)
    fail("BlrLinear step: sign optimizer {} differs from the layer's {}", static_cast<int>(signs.optimizer),
         static_cast<int>(sign_optimizer_));
  be_->adam().adam_update(t_.scales, t_.scale_grads, t_.adam_m, t_.adam_v, CView<T>{}, scales);
  if (!sign_grads_written_) return 0;
  const index_t m = dims_.m, n = dims_.n, r = dims_.r;
  std::int64_t flips = 0;
  for (index_t p = 0; p < dims_.paths; ++p) {
    flips +=
        be_->sign().sign_step(sign_matrix(true, p), CView<T>(t_.g_u.data + p * m * r, Shape{m, r}), signs, scales.step);
    flips += be_->sign().sign_step(sign_matrix(false, p), CView<T>(t_.g_v.data + p * n * r, Shape{n, r}), signs,
                                   scales.step);
  }
  return flips;
}

template class BlrLinear<float>;
template class BlrLinear<double>;

}  // namespace bitrank::train
