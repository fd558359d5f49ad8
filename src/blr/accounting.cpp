// Honest bit accounting (formula in include/bitrank/blr/accounting.hpp).
// Bits are exact integers; only the final division to bpw is floating point.
#include "bitrank/blr/accounting.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bitrank/error.hpp"

namespace bitrank::blr {
namespace {

void check_layout(std::string_view op, index_t m, index_t n, int paths, int scale_bits) {
  if (m < 1 || n < 1) fail("{}: shape {}×{} is empty", op, m, n);
  if (paths != 1 && paths != 2) fail("{}: {} paths, expected 1 or 2", op, paths);
  if (scale_bits != 16 && scale_bits != 32) fail("{}: scale width {} bits, expected 16 or 32", op, scale_bits);
}

std::int64_t bits_unchecked(index_t m, index_t n, index_t r, int paths, int scale_bits) {
  return static_cast<std::int64_t>(honest_bits(m, n, r, paths, scale_bits));
}

// Exact "bits / (m·n) ≤ bpw" without dividing the bits.
bool fits(std::int64_t bits, index_t m, index_t n, double bpw) {
  return static_cast<double>(bits) <= bpw * static_cast<double>(m) * static_cast<double>(n);
}

}  // namespace

std::int64_t blr_bits(index_t m, index_t n, index_t r, int paths, int scale_bits) {
  check_layout("blr_bits", m, n, paths, scale_bits);
  if (r < 32 || r % 32 != 0) fail("blr_bits: rank {} is not a positive multiple of 32", r);
  return bits_unchecked(m, n, r, paths, scale_bits);
}

double blr_bpw(index_t m, index_t n, index_t r, int paths, int scale_bits) {
  return static_cast<double>(blr_bits(m, n, r, paths, scale_bits)) / (static_cast<double>(m) * static_cast<double>(n));
}

index_t rank_for_bpw(index_t m, index_t n, double bpw, int paths, int scale_bits) {
  check_layout("rank_for_bpw", m, n, paths, scale_bits);
  if (!std::isfinite(bpw) || bpw <= 0) fail("rank_for_bpw: target {} bpw is not a positive number", bpw);
  const std::int64_t b = scale_bits;
  if (!fits(bits_unchecked(m, n, 32, paths, scale_bits), m, n, bpw))
    fail("rank_for_bpw: {}×{} with {} path(s) and {}-bit scales cannot meet {} bpw: rank 32 already costs {:.4f} bpw",
         m, n, paths, scale_bits, bpw, blr_bpw(m, n, 32, paths, scale_bits));
  // Closed form, then exact integer checks either side (the division may round).
  const double r_real = (bpw * double(m) * double(n) / paths - double((m + n) * b)) / double(m + n + b);
  index_t r = std::max<index_t>(32, static_cast<index_t>(std::floor(r_real / 32.0)) * 32);
  while (fits(bits_unchecked(m, n, r + 32, paths, scale_bits), m, n, bpw)) r += 32;
  while (r > 32 && !fits(bits_unchecked(m, n, r, paths, scale_bits), m, n, bpw)) r -= 32;
  return r;
}

void ModelBits::add_blr(std::string name, index_t m, index_t n, index_t rank, int paths, int scale_bits) {
  TensorBits t;
  t.bits = blr::blr_bits(m, n, rank, paths, scale_bits);
  t.name = std::move(name);
  t.weights = m * n;
  t.m = m;
  t.n = n;
  t.rank = rank;
  t.paths = paths;
  t.width = scale_bits;
  tensors_.push_back(std::move(t));
}

void ModelBits::add_dense(std::string name, index_t numel, int bits_per_value) {
  if (numel < 1) fail("model bits: dense tensor '{}' has {} values", name, numel);
  if (bits_per_value < 1 || bits_per_value > 64) fail("model bits: dense tensor '{}' at {} bits per value", name, bits_per_value);
  TensorBits t;
  t.bits = numel * bits_per_value;
  t.name = std::move(name);
  t.weights = numel;
  t.width = bits_per_value;
  tensors_.push_back(std::move(t));
}

std::int64_t ModelBits::bits() const {
  std::int64_t s = 0;
  for (const auto& t : tensors_) s += t.bits;
  return s;
}

index_t ModelBits::weights() const {
  index_t s = 0;
  for (const auto& t : tensors_) s += t.weights;
  return s;
}

double ModelBits::bpw() const { return weights() > 0 ? static_cast<double>(bits()) / static_cast<double>(weights()) : 0.0; }

std::int64_t ModelBits::blr_bits() const {
  std::int64_t s = 0;
  for (const auto& t : tensors_) s += t.rank > 0 ? t.bits : 0;
  return s;
}

index_t ModelBits::blr_weights() const {
  index_t s = 0;
  for (const auto& t : tensors_) s += t.rank > 0 ? t.weights : 0;
  return s;
}

double ModelBits::blr_bpw() const {
  return blr_weights() > 0 ? static_cast<double>(blr_bits()) / static_cast<double>(blr_weights()) : 0.0;
}

index_t max_useful_rank(index_t m, index_t n) {
  if (m < 1 || n < 1) fail("max_useful_rank: shape {}×{} is empty", m, n);
  return std::max<index_t>(32, std::min(m, n) / 32 * 32);
}

std::vector<RankPlan> plan_ranks(std::vector<RankPlan> plan, double bpw, int paths, int scale_bits) {
  if (plan.empty()) fail("plan_ranks: no matrices");
  if (!(std::isfinite(bpw) && bpw > 0)) fail("plan_ranks: target {} bpw is not a positive number", bpw);
  std::int64_t budget_weights = 0, min_bits = 0, max_bits = 0, min_bits_1path = 0;
  for (const RankPlan& p : plan) {
    min_bits += blr_bits(p.m, p.n, 32, paths, scale_bits);  // shape, paths and width errors surface here
    min_bits_1path += blr_bits(p.m, p.n, 32, 1, scale_bits);
    max_bits += blr_bits(p.m, p.n, max_useful_rank(p.m, p.n), paths, scale_bits);
    budget_weights += static_cast<std::int64_t>(p.m) * p.n;
  }
  const double budget_bits = bpw * static_cast<double>(budget_weights);
  const auto per_weight = [&](std::int64_t bits) { return static_cast<double>(bits) / static_cast<double>(budget_weights); };
  if (static_cast<double>(min_bits) > budget_bits)
    fail("plan_ranks: target {} bpw is below the smallest reachable {:.4f} bpw of these {} matrices: rank 32, the "
         "smallest rank, in every one costs that with {} path(s) and {}-bit scales{}",
         bpw, per_weight(min_bits), plan.size(), paths, scale_bits,
         paths > 1 ? fmt::format(" (with 1 path: {:.4f} bpw)", per_weight(min_bits_1path)) : std::string());
  if (static_cast<double>(max_bits) < budget_bits)
    fail("plan_ranks: target {} bpw is above the largest useful {:.4f} bpw of these {} matrices: every rank at its "
         "cap, the largest multiple of 32 ≤ min(m, n) (a rank past min(m, n) adds nothing to the factorisation), "
         "costs that with {} path(s) and {}-bit scales",
         bpw, per_weight(max_bits), plan.size(), paths, scale_bits);
  for (RankPlan& p : plan) {
    try {
      p.rank = std::min(rank_for_bpw(p.m, p.n, bpw, paths, scale_bits), max_useful_rank(p.m, p.n));
    } catch (const Error&) {
      p.rank = 32;  // the smallest rank there is; the budget is met below by the others
    }
  }
  const auto total = [&] {
    std::int64_t bits = 0;
    for (const RankPlan& p : plan) bits += blr_bits(p.m, p.n, p.rank, paths, scale_bits);
    return bits;
  };
  for (std::int64_t bits = total(); static_cast<double>(bits) > budget_bits;) {
    RankPlan* pick = nullptr;
    for (RankPlan& p : plan) {
      if (p.rank <= 32) continue;
      const double b = blr_bpw(p.m, p.n, p.rank, paths, scale_bits);
      if (!pick) {
        pick = &p;
        continue;
      }
      const double pb = blr_bpw(pick->m, pick->n, pick->rank, paths, scale_bits);
      if (b > pb || (b == pb && p.m * p.n > pick->m * pick->n)) pick = &p;
    }
    BR_ASSERT(pick);  // every rank at 32 fits: checked above
    bits -= blr_bits(pick->m, pick->n, pick->rank, paths, scale_bits);
    pick->rank -= 32;
    bits += blr_bits(pick->m, pick->n, pick->rank, paths, scale_bits);
  }
  // Hand back what the lowering (or the per-matrix rounding) left unused:
  // raise the lowest-bpw matrix whose next 32 still fits and stays within
  // its cap, until none does.
  for (std::int64_t bits = total();;) {
    RankPlan* pick = nullptr;
    std::int64_t pick_bits = 0;
    for (RankPlan& p : plan) {
      if (p.rank + 32 > max_useful_rank(p.m, p.n)) continue;
      const std::int64_t more =
          bits - blr_bits(p.m, p.n, p.rank, paths, scale_bits) + blr_bits(p.m, p.n, p.rank + 32, paths, scale_bits);
      if (static_cast<double>(more) > budget_bits) continue;
      if (!pick || blr_bpw(p.m, p.n, p.rank, paths, scale_bits) < blr_bpw(pick->m, pick->n, pick->rank, paths, scale_bits)) {
        pick = &p;
        pick_bits = more;
      }
    }
    if (!pick) return plan;
    pick->rank += 32;
    bits = pick_bits;
  }
}

std::vector<RankPlan> plan_ranks(std::vector<RankPlan> matrices, double bpw, std::span<const BpwOverride> overrides,
                                 int paths, int scale_bits) {
  if (overrides.empty()) return plan_ranks(std::move(matrices), bpw, paths, scale_bits);
  // group[i]: the override matrix i takes, or overrides.size() for the global target.
  std::vector<std::size_t> group(matrices.size(), overrides.size());
  for (std::size_t o = 0; o < overrides.size(); ++o) {
    const BpwOverride& ov = overrides[o];
    if (ov.pattern.empty()) fail("plan_ranks: a per-projection target has an empty pattern");
    if (!(std::isfinite(ov.bpw) && ov.bpw > 0))
      fail("plan_ranks: the target for '{}' must be a positive bpw, got {}", ov.pattern, ov.bpw);
    bool matched = false;
    for (std::size_t i = 0; i < matrices.size(); ++i)
      if (matrices[i].name.find(ov.pattern) != std::string::npos) {
        matched = true;
        if (group[i] == overrides.size()) group[i] = o;
      }
    if (!matched) fail("plan_ranks: no projection's name contains '{}' (e.g. {})", ov.pattern, matrices.front().name);
  }
  // The overridden groups first; then the rest at the bpw that brings the
  // whole to `bpw` (what the per-projection targets leave of its bits).
  std::int64_t total_weights = 0, override_bits = 0, rest_weights = 0;
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    const std::int64_t w = static_cast<std::int64_t>(matrices[i].m) * matrices[i].n;
    total_weights += w;
    if (group[i] == overrides.size()) rest_weights += w;
  }
  for (std::size_t g = 0; g <= overrides.size(); ++g) {
    std::vector<RankPlan> part;
    for (std::size_t i = 0; i < matrices.size(); ++i)
      if (group[i] == g) part.push_back(matrices[i]);
    if (part.empty()) continue;  // every matrix overridden, or an override shadowed by an earlier one
    double target = g < overrides.size() ? overrides[g].bpw : 0.0;
    if (g == overrides.size()) {
      const double left = bpw * static_cast<double>(total_weights) - static_cast<double>(override_bits);
      if (left <= 0)
        fail("plan_ranks: the per-projection targets take {:.4f} bpw of the whole, more than the {} bpw target; "
             "lower them or raise --bpw",
             static_cast<double>(override_bits) / static_cast<double>(total_weights), bpw);
      target = left / static_cast<double>(rest_weights);
    }
    try {
      part = plan_ranks(std::move(part), target, paths, scale_bits);
    } catch (const Error& e) {
      // Name the group: "plan_ranks: target …" → "plan_ranks: the matrices matching 'attn_v': target …".
      const std::string_view what = e.what(), prefix = "plan_ranks: ";
      fail("plan_ranks: {}: {}",
           g < overrides.size()
               ? fmt::format("the matrices matching '{}'", overrides[g].pattern)
               : fmt::format("the matrices no per-projection pattern matches (planned at {:.4f} bpw so that the "
                             "whole is {} bpw)",
                             target, bpw),
           what.starts_with(prefix) ? what.substr(prefix.size()) : what);
    }
    for (std::size_t i = 0, k = 0; i < matrices.size(); ++i)
      if (group[i] == g) {
        matrices[i].rank = part[k].rank;
        if (g < overrides.size()) override_bits += blr_bits(part[k].m, part[k].n, part[k].rank, paths, scale_bits);
        ++k;
      }
  }
  return matrices;
}

}  // namespace bitrank::blr
