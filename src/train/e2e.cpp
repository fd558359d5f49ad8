// The end-to-end objective and step (contract: include/bitrank/train/e2e.hpp).
#include "bitrank/train/e2e.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "bitrank/error.hpp"

namespace bitrank::train {

GradScalerOptions e2e_scaler_options(index_t tokens) {
  if (tokens <= 0) fail("e2e_scaler_options: {} tokens", tokens);
  return layerwise_scaler_options(2 * tokens);  // its 2^k ≤ elements/2, here 2^k ≤ tokens
}

template <class Student>
E2eTrainerOf<Student>::E2eTrainerOf(const Teacher& teacher, const Weights& init, const GradScalerOptions& scaler,
                                    const E2eOptions& options, SignOptimizer sign_optimizer, float tau, bool stream)
    : teacher_(&teacher),
      be_(&teacher.backend()),
      dims_(Family::dims(teacher)),
      options_(options),
      state_(scaler) {
  const index_t L = teacher.config().num_layers, d = dims_.hidden;
  if (static_cast<index_t>(init.blocks.size()) != L)
    fail("E2eTrainer: {} student blocks for a teacher of {}", init.blocks.size(), L);
  Memory& mem = *be_->memory;
  for (index_t b = 0; b < L; ++b) Family::check_block(teacher, b, init.blocks[static_cast<std::size_t>(b)]);
  if (stream) {
    // Each block is made in a slot (zeroed: its image's bytes) and copied back to its image when the slot is reused.
    std::vector<std::size_t> bytes;
    for (index_t b = 0; b < L; ++b) {
      try {
        bytes.push_back(Student::arena_bytes(dims_, init.blocks[static_cast<std::size_t>(b)], sign_optimizer));
      } catch (const Error& e) {
        fail("E2eTrainer: student block {}: {}", b, e.what());
      }
    }
    slots_ = std::make_unique<model::BlockSlots>(mem, std::move(bytes));
    block_squares_.resize(static_cast<std::size_t>(L));
  }
  std::uint32_t sign_id = 0;
  for (index_t b = 0; b < L; ++b) {
    const auto& w = init.blocks[static_cast<std::size_t>(b)];
    std::byte* place = slots_ ? slots_->acquire(b) : nullptr;
    try {
      blocks_.push_back(std::make_unique<Student>(*be_, dims_, w, sign_optimizer, tau, sign_id, place));
    } catch (const Error& e) {
      fail("E2eTrainer: student block {}: {}", b, e.what());
    }
    if (slots_) slots_->modified(b);
    if (b > 0) blocks_.back()->share_scratch(*blocks_.front());  // the blocks run one after another
    for (const auto& m : w.proj) sign_id += 2 * static_cast<std::uint32_t>(m.paths.size());  // (dense: none)
  }
  std::vector<T> gain;
  if (init.final_norm.empty()) {
    gain.resize(static_cast<std::size_t>(d));
    mem.download(gain.data(), teacher.final_norm().data, gain.size() * sizeof(T));
  } else {
    if (static_cast<index_t>(init.final_norm.size()) != d)
      fail("E2eTrainer: final_norm has {} entries, expected {}", init.final_norm.size(), d);
    for (float v : init.final_norm) {
      if (!std::isfinite(v)) fail("E2eTrainer: final_norm has a non-finite entry {}", v);
      gain.push_back(static_cast<T>(v));
    }
  }
  for (Buffer<T>* buf : {&final_, &final_m_, &final_v_, &final_grad_}) {
    *buf = Buffer<T>(mem, static_cast<std::size_t>(d));
    buf->zero();
  }
  final_.upload(gain);
}

// Streamed, the device holds x_b in slice b % 2 and one g; the host copies hold them all.
template <class Student>
auto E2eTrainerOf<Student>::x(index_t b, index_t n) const -> View<T> {
  return View<T>(xs_.data() + (slots_ ? b % 2 : b) * n * dims_.hidden, Shape{n, dims_.hidden});
}

template <class Student>
auto E2eTrainerOf<Student>::mse_grad(index_t b, index_t n) const -> View<T> {
  return View<T>(mse_grads_.data() + (slots_ ? 0 : b) * n * dims_.hidden, Shape{n, dims_.hidden});
}

template <class Student>
void E2eTrainerOf<Student>::keep_boundary(index_t b, index_t n, bool x_too, bool g_too) {
  if (!slots_) return;
  const std::size_t at = static_cast<std::size_t>(b * n * dims_.hidden), bytes = static_cast<std::size_t>(n * dims_.hidden) * sizeof(T);
  if (x_too) be_->memory->download(xs_host_.data() + at, x(b, n).data, bytes);
  if (g_too) be_->memory->download(mse_grads_host_.data() + at, mse_grad(b, n).data, bytes);
}

template <class Student>
void E2eTrainerOf<Student>::bring_boundary(index_t b, index_t n) {
  if (!slots_) return;
  const std::size_t at = static_cast<std::size_t>(b * n * dims_.hidden), bytes = static_cast<std::size_t>(n * dims_.hidden) * sizeof(T);
  be_->memory->upload(x(b, n).data, xs_host_.data() + at, bytes);
  be_->memory->upload(mse_grad(b, n).data, mse_grads_host_.data() + at, bytes);
}

template <class Student>
Student& E2eTrainerOf<Student>::use(index_t b, index_t next, bool write) const {
  Student& block = *blocks_.at(static_cast<std::size_t>(b));
  if (!slots_) return block;
  block.rebind(slots_->acquire(b, next));
  if (write) slots_->modified(b);
  return block;
}

template <class Student>
Student& E2eTrainerOf<Student>::block(index_t b) {
  if (slots_) block_squares_.at(static_cast<std::size_t>(b)).reset();  // the caller may write its gradients
  return use(b, -1, true);
}

template <class Student>
E2eLoss E2eTrainerOf<Student>::forward(std::span<const std::int32_t> tokens, index_t window) {
  if (!std::isfinite(options_.mse_weight) || options_.mse_weight < 0)
    fail("e2e step: mse_weight must be finite and ≥ 0, got {}", options_.mse_weight);
  model::check_tokens(tokens, window, teacher_->config().vocab_size, "e2e step");
  const double lambda = mse_lambda(window);
  const index_t n = static_cast<index_t>(tokens.size()), d = dims_.hidden, L = blocks();
  Memory& mem = *be_->memory;
  ensure_size(xs_, mem, (slots_ ? 2 : L + 1) * n * d);
  ensure_size(mse_grads_, mem, (slots_ ? 1 : L) * n * d);
  if (slots_) {
    ensure_size(xs_host_, mem.staging_memory(), (L + 1) * n * d);
    ensure_size(mse_grads_host_, mem.staging_memory(), L * n * d);
  }
  for (Buffer<T>* buf : {&teacher_a_, &teacher_b_}) ensure_size(*buf, mem, n * d);

  E2eLoss loss;
  teacher_->embed(tokens, x(0, n));
  keep_boundary(0, n, true, false);
  const double elements = static_cast<double>(n * d);
  CView<T> teacher_in = x(0, n);  // both models start from the embedding
  for (index_t b = 0; b < L; ++b) {
    Buffer<T>& out = b % 2 == 0 ? teacher_a_ : teacher_b_;
    Family::teacher_block(*teacher_, b, teacher_in, window, teacher_acts_, out.view({n, d}));
    use(b, b + 1 < L ? b + 1 : -1, false).forward(x(b, n), window, tape_, x(b + 1, n));
    const double sum =
        be_->reduce().squared_error(x(b + 1, n), out.view({n, d}), 2.0 * lambda / elements, mse_grad(b, n));
    keep_boundary(b + 1, n, true, false);
    keep_boundary(b, n, false, true);
    loss.block_mse.push_back(sum / elements);
    loss.mse += sum / elements;
    teacher_in = out.view({n, d});
  }
  teacher_y_ = teacher_in.data;
  return loss;
}

template <class Student>
void E2eTrainerOf<Student>::head(E2eLoss& loss, index_t n, index_t window, bool backward) {
  const index_t d = dims_.hidden, V = teacher_->config().vocab_size, L = blocks();
  const index_t slice = teacher_->head_slice_rows(n);
  Memory& mem = *be_->memory;
  ensure_size(xn_, mem, 2 * n * d);
  ensure_size(inv_, mem, 2 * n);
  ensure_size(logits_, mem, 2 * n * slice);
  ensure_size(runs_, mem, 4 * n);
  for (Buffer<T>* buf : {&dxn_, &dh_}) ensure_size(*buf, mem, n * d);

  const GainStyle style = teacher_->final_gain();
  const float eps = dims_.eps;
  const View<T> xn_s(xn_.data(), Shape{n, d}), xn_t(xn_.data() + n * d, Shape{n, d});
  const View<T> inv_s(inv_.data(), Shape{n}), inv_t(inv_.data() + n, Shape{n});
  const View<T> run_s(runs_.data(), Shape{n, 2}), run_t(runs_.data() + 2 * n, Shape{n, 2});
  NormOps<T>& norm = be_->norm();
  norm.rmsnorm_forward(x(L, n), final_norm(), style, eps, xn_s, inv_s);
  norm.rmsnorm_forward(CView<T>(teacher_y_, Shape{n, d}), teacher_->final_norm(), style, eps, xn_t, inv_t);

  const CView<T> head = teacher_->head();
  const index_t slices = (V + slice - 1) / slice;
  // z = xn·W_vᵀ [2n][vs] of slice v0: the student's rows, then the teacher's.
  const auto logits = [&](index_t v0, index_t vs) {
    const CView<T> w(head.data + v0 * d, Shape{vs, d});
    be_->dense().dense_forward(xn_.view({2 * n, d}), w, logits_.view({2 * n, vs}), false);
  };
  const auto student_z = [&](index_t vs) { return View<T>(logits_.data(), Shape{n, vs}); };
  const auto teacher_z = [&](index_t vs) { return View<T>(logits_.data() + n * vs, Shape{n, vs}); };
  KlOps<T>& kl = be_->kl();
  for (index_t k = 0; k < slices; ++k) {
    const index_t v0 = k * slice, vs = std::min(slice, V - v0);
    logits(v0, vs);
    kl.kl_lse_merge(student_z(vs), run_s, k == 0);
    kl.kl_lse_merge(teacher_z(vs), run_t, k == 0);
  }
  if (backward) dxn_.zero();
  double sum = 0;
  for (index_t k = 0; k < slices; ++k) {
    const index_t v0 = k * slice, vs = std::min(slice, V - v0);
    if (slices > 1) logits(v0, vs);    // one slice: pass 1's logits are still there
    const View<T> dz = student_z(vs);  // over the student's logits, in place
    sum += kl.kl_slice_backward(student_z(vs), teacher_z(vs), run_s, run_t, 1.0 / static_cast<double>(n), dz);
    if (backward) be_->dense().dense_backward(dz, CView<T>(head.data + v0 * d, Shape{vs, d}), dxn_.view({n, d}));
  }
  loss.kl = sum / static_cast<double>(n);
  loss.total = loss.kl + mse_lambda(window) * loss.mse;
  if (!backward) return;
  norm.rmsnorm_gain_grad(x(L, n), inv_s, dxn_.view({n, d}), final_norm_grad());
  norm.rmsnorm_backward(x(L, n), final_norm(), inv_s, dxn_.view({n, d}), style, dh_.view({n, d}));
}

template <class Student>
E2eLoss E2eTrainerOf<Student>::evaluate(std::span<const std::int32_t> tokens, index_t window) {
  E2eLoss loss = forward(tokens, window);
  head(loss, static_cast<index_t>(tokens.size()), window, false);
  return loss;
}

template <class Student>
E2eLoss E2eTrainerOf<Student>::forward_backward(std::span<const std::int32_t> tokens, index_t window) {
  if (!slots_)
    for (auto& b : blocks_) b->zero_grad();  // streamed: each block's in the backward sweep, where it is in a slot
  final_grad_.zero();
  E2eLoss loss = forward(tokens, window);
  const index_t n = static_cast<index_t>(tokens.size()), d = dims_.hidden;
  head(loss, n, window, true);
  Memory& mem = *be_->memory;
  for (Buffer<T>* buf : {&dy_, &dx_, &y_}) ensure_size(*buf, mem, n * d);
  const float grad_scale = static_cast<float>(state_.scaler.scale());
  for (index_t b = blocks() - 1; b >= 0; --b) {
    bring_boundary(b, n);
    be_->act().add(dh_.view({n * d}), mse_grad(b, n).flat(), dy_.view({n * d}));
    Student& block = use(b, b - 1, true);
    // The tape of block b; the last block's is still the forward's.
    if (b < blocks() - 1) block.forward(x(b, n), window, tape_, y_.view({n, d}));
    if (slots_) block.zero_grad();
    block.backward(x(b, n), tape_, dy_.view({n, d}), grad_scale, dx_.view({n, d}));
    if (slots_) block_squares_[static_cast<std::size_t>(b)] = block.grad_squares();
    std::swap(dh_, dx_);
  }
  return loss;
}

template <class Student>
E2eReport E2eTrainerOf<Student>::finish_step(const E2eLoss& loss) {
  StudentGradSquares sq;
  for (index_t b = 0; b < blocks(); ++b) {  // in block order, streamed or not: the same sums
    std::optional<StudentGradSquares>* kept = slots_ ? &block_squares_[static_cast<std::size_t>(b)] : nullptr;
    const StudentGradSquares s = kept && kept->has_value() ? **kept : use(b, -1, false).grad_squares();
    sq.adam += s.adam;
    sq.signs += s.signs;
  }
  sq.adam += be_->reduce().sum_squares(final_norm_grad());
  E2eReport rep{loss, decide_step(loss.total, sq, state_, options_.optim.clip_norm, "e2e step")};
  if (rep.step.skipped) return rep;
  const LayerwiseOptions& o = options_.optim;
  const AdamOptions scales = step_adam(o.scales, state_, rep.step), gains = step_adam(o.gains, state_, rep.step);
  for (index_t b = 0; b < blocks(); ++b)  // streamed: the last block prefetches the next step's first
    rep.step.flips += use(b, b + 1 < blocks() ? b + 1 : 0, true).step(scales, gains, o.signs);
  be_->adam().adam_update(final_norm(), final_norm_grad(), final_m_.view({dims_.hidden}), final_v_.view({dims_.hidden}),
                          CView<T>{}, gains);
  return rep;
}

template <class Student>
E2eReport E2eTrainerOf<Student>::step(std::span<const std::int32_t> tokens, index_t window) {
  return finish_step(forward_backward(tokens, window));
}

template <class Student>
auto E2eTrainerOf<Student>::download() const -> Weights {
  Weights w;
  for (index_t b = 0; b < blocks(); ++b) w.blocks.push_back(use(b, b + 1 < blocks() ? b + 1 : -1, false).download());
  const std::vector<T> gain = final_.download();
  w.final_norm.assign(gain.begin(), gain.end());
  return w;
}

template <class Student>
std::vector<std::byte> E2eTrainerOf<Student>::download_state() const {
  std::vector<std::byte> bytes;
  for (index_t b = 0; b < blocks(); ++b) {
    const auto s = use(b, b + 1 < blocks() ? b + 1 : -1, false).download_state();
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  for (const Buffer<T>* buf : {&final_, &final_m_, &final_v_}) {
    const std::vector<T> v = buf->download();
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  return bytes;
}

template <class Student>
void E2eTrainerOf<Student>::upload_state(std::span<const std::byte> bytes) {
  const std::size_t gain_bytes = static_cast<std::size_t>(dims_.hidden) * sizeof(T);
  std::size_t want = 3 * gain_bytes;
  for (const auto& b : blocks_) want += b->state_bytes();
  if (bytes.size() != want) fail("E2eTrainer upload_state: {} bytes, the student's state has {}", bytes.size(), want);
  std::size_t at = 0;
  for (index_t b = 0; b < blocks(); ++b) {
    Student& block = use(b, b + 1 < blocks() ? b + 1 : -1, true);
    block.upload_state(bytes.subspan(at, block.state_bytes()));
    at += block.state_bytes();
  }
  for (Buffer<T>* buf : {&final_, &final_m_, &final_v_}) {
    be_->memory->upload(buf->data(), bytes.data() + at, gain_bytes);
    at += gain_bytes;
  }
}

template class E2eTrainerOf<StudentLlamaBlock<float>>;
template class E2eTrainerOf<StudentLlamaBlock<double>>;
template class E2eTrainerOf<StudentHybridBlock<float>>;
template class E2eTrainerOf<StudentHybridBlock<double>>;

}  // namespace bitrank::train
