// A student block's projections, gains and their bookkeeping (contract:
// include/bitrank/train/student_arena.hpp).
#include "bitrank/train/student_arena.hpp"

#include <cmath>

#include "bitrank/error.hpp"

namespace bitrank::train {

template <class T>
void StudentArena<T>::carve_rest(ArenaRegions& at) {
  const GainViews v = carve_gains(at, gain_count_, extra_);
  gains_ = v.gains;
  gains_m_ = v.m;
  gains_v_ = v.v;
  gain_grads_ = v.grads;
}

template <class T>
typename StudentArena<T>::GainViews StudentArena<T>::carve_gains(ArenaRegions& at, index_t gains,
                                                                 const std::function<void(Carver& state)>& extra) {
  GainViews v;
  v.gains = View<T>(at.state.take<T>(gains), Shape{gains});
  v.m = View<T>(at.state.take<T>(gains), Shape{gains});
  v.v = View<T>(at.state.take<T>(gains), Shape{gains});
  v.grads = View<T>(at.grads.take<T>(gains), Shape{gains});
  if (extra) extra(at.state);
  return v;
}

template <class T>
ArenaRegions StudentArena<T>::measure(std::span<const BlrDims> projs, index_t gains, SignOptimizer sign_optimizer,
                                      const std::function<void(Carver& state)>& extra) {
  ArenaRegions sizes;
  for (const BlrDims& d : projs) BlrLinear<T>::measure(d, sign_optimizer, sizes);
  carve_gains(sizes, gains, extra);
  return sizes;
}

template <class T>
StudentArena<T>::StudentArena(Backend<T>& be, std::span<const BlrDims> projs, index_t gains,
                              SignOptimizer sign_optimizer, std::uint32_t sign_id, std::string who,
                              const std::function<void(Carver& state)>& extra, std::byte* place)
    : be_(&be), who_(std::move(who)), gain_count_(gains), extra_(extra) {
  if (gains < 0) fail("{}: {} gains", who_, gains);
  // Pass 1 measures, pass 2 carves the same tensors from the arena.
  const ArenaRegions sizes = measure(projs, gains, sign_optimizer, extra_);
  arena_ = place ? Arena(sizes, place) : Arena(*be.memory, sizes);
  ArenaRegions at = arena_.carvers();
  proj_.reserve(projs.size());
  std::uint32_t id = sign_id;
  for (const BlrDims& d : projs) {
    proj_.emplace_back(be, d, sign_optimizer, id, at);
    id += 2 * static_cast<std::uint32_t>(d.paths);
  }
  carve_rest(at);
}

template <class T>
std::size_t StudentArena<T>::bytes(std::span<const BlrDims> projs, index_t gains, SignOptimizer sign_optimizer,
                                   const std::function<void(Carver& state)>& extra) {
  const ArenaRegions sizes = measure(projs, gains, sign_optimizer, extra);
  return sizes.state.size() + sizes.grads.size() + sizes.sign_grads.size();
}

template <class T>
void StudentArena<T>::rebind(std::byte* base) {
  arena_.rebind(base);
  ArenaRegions at = arena_.carvers();
  for (auto& p : proj_) p.rebind(at);
  carve_rest(at);
}

template <class T>
void StudentArena<T>::upload_gains(const std::vector<float>& values) {
  if (static_cast<index_t>(values.size()) != gains_.numel())
    fail("{}: {} gain values, expected {}", who_, values.size(), gains_.numel());
  const std::vector<T> v(values.begin(), values.end());
  Memory& mem = *be_->memory;
  mem.upload(gains_.data, v.data(), v.size() * sizeof(T));
  mem.zero(gains_m_.data, v.size() * sizeof(T));
  mem.zero(gains_v_.data, v.size() * sizeof(T));
}

template <class T>
std::vector<float> StudentArena<T>::download_gains() const {
  std::vector<T> v(static_cast<std::size_t>(gains_.numel()));
  be_->memory->download(v.data(), gains_.data, v.size() * sizeof(T));
  return std::vector<float>(v.begin(), v.end());
}

template <class T>
void StudentArena<T>::zero_grad() {
  be_->memory->zero(arena_.grads(), arena_.grads_bytes());
  for (auto& p : proj_) p.mark_grads_zeroed();
}

template <class T>
StudentGradSquares StudentArena<T>::grad_squares() const {
  StudentGradSquares sq;
  ReduceOps<T>& reduce = be_->reduce();
  sq.adam = reduce.sum_squares(region_as<T>(arena_.grads(), arena_.grads_bytes()));
  bool all = true;
  for (const auto& p : proj_) all = all && p.sign_grads_written();
  if (all) {
    sq.signs = reduce.sum_squares(region_as<T>(arena_.sign_grads(), arena_.sign_grads_bytes()));
  } else {
    for (const auto& p : proj_) sq.signs += p.sign_grad_squares();
  }
  return sq;
}

template <class T>
std::int64_t StudentArena<T>::step(const AdamOptions& scales, const AdamOptions& gains, const SignOptions& signs) {
  if (gains.step != scales.step)
    fail("{} step: the gains' step {} differs from the scales' {}", who_, gains.step, scales.step);
  std::int64_t flips = 0;
  for (auto& p : proj_) flips += p.step(scales, signs);
  be_->adam().adam_update(gains_, gain_grads_, gains_m_, gains_v_, CView<T>{}, gains);
  return flips;
}

template <class T>
std::vector<std::byte> StudentArena<T>::download_state() const {
  std::vector<std::byte> bytes(arena_.state_bytes());
  be_->memory->download(bytes.data(), arena_.state(), bytes.size());
  return bytes;
}

template <class T>
void StudentArena<T>::upload_state(std::span<const std::byte> bytes) {
  if (bytes.size() != arena_.state_bytes())
    fail("{} upload_state: {} bytes, the block's state has {}", who_, bytes.size(), arena_.state_bytes());
  be_->memory->upload(arena_.state(), bytes.data(), bytes.size());
}

template class StudentArena<float>;
template class StudentArena<double>;

}  // namespace bitrank::train
