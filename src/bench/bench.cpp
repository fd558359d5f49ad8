#include "bench/bench.hpp"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <map>
#include <thread>

#include "bitrank/error.hpp"

namespace bitrank::bench {
namespace {

// The error text of a run, across Google Benchmark versions (1.7 reports
// error_occurred, 1.8+ reports skipped).
template <class R>
auto run_error(const R& r, int) -> decltype(r.error_occurred, std::string()) {
  return r.error_occurred ? std::string(r.error_message) : std::string();
}
template <class R>
auto run_error(const R& r, long) -> decltype(r.skipped, std::string()) {
  return r.skipped ? std::string(r.skip_message) : std::string();
}

// Collects the per-case real time (seconds per iteration) instead of printing.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (std::string e = run_error(r, 0); !e.empty()) {
        errors[r.run_name.function_name] = e;
        continue;
      }
      seconds[r.run_name.function_name] = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
    }
  }
  std::map<std::string, double> seconds;
  std::map<std::string, std::string> errors;
};

std::string human_rate(double per_s, const char* unit) {
  if (per_s >= 1e12) return fmt::format("{:.2f} T{}/s", per_s / 1e12, unit);
  if (per_s >= 1e9) return fmt::format("{:.2f} G{}/s", per_s / 1e9, unit);
  return fmt::format("{:.2f} M{}/s", per_s / 1e6, unit);
}

}  // namespace

int run_bench(Backend<float>& be, const BenchOptions& opt) {
  if (!(opt.min_time_s > 0)) fail("bench: --min-time must be positive, got {}", opt.min_time_s);
  std::vector<BenchCase> cases;
  std::string device_line;
  if (opt.device == "cpu") {
    cases = cpu_bench_cases(be);
    device_line = fmt::format("cpu, {} threads", std::thread::hardware_concurrency());
  } else {
#ifdef BITRANK_HAS_CUDA
    cases = cuda_bench_cases(be);
#endif
    device_line = "cuda device 0";
  }

  // Keep the filtered cases and every anchor they name (unless no_anchors). A case is known by
  // its name and shape (the same op may run at several shapes); anchors are
  // named by name alone and must be unique.
  auto key = [](const BenchCase& c) { return c.name + " [" + c.shape + "]"; };
  std::map<std::string, const BenchCase*> by_name;
  for (const auto& c : cases) by_name.emplace(c.name, &c);
  std::vector<const BenchCase*> selected;
  std::map<std::string, bool> chosen;
  for (const auto& c : cases) {
    if (c.name.find(opt.op_filter) == std::string::npos || c.shape.find(opt.shape_filter) == std::string::npos) continue;
    if (!c.anchor.empty() && !opt.no_anchors) {
      auto it = by_name.find(c.anchor);
      BR_ASSERT(it != by_name.end(), "bench case {} names unknown anchor {}", c.name, c.anchor);
      if (!chosen[key(*it->second)]) selected.push_back(it->second), chosen[key(*it->second)] = true;
    }
    if (!chosen[key(c)]) selected.push_back(&c), chosen[key(c)] = true;
  }
  if (selected.empty()) fail("bench: no case matches --op '{}' --shape '{}'", opt.op_filter, opt.shape_filter);

  int argc = 1;
  char arg0[] = "bitrank";
  char* argv[] = {arg0, nullptr};
  benchmark::Initialize(&argc, argv);
  for (const BenchCase* c : selected) {
    Backend<float>* bp = &be;
    benchmark::RegisterBenchmark(key(*c).c_str(), [c, bp](benchmark::State& st) {
      c->body();  // warm-up: first-touch allocations, caches, GEMM plans
      bp->synchronize();
      for (auto _ : st) {
        c->body();
        bp->synchronize();  // device work is timed to completion
      }
    })->UseRealTime()->MinTime(opt.min_time_s)->Unit(benchmark::kMillisecond);
  }
  fmt::print("bitrank bench: {}, {} cases (min time {:.2f} s each)\n", device_line, selected.size(), opt.min_time_s);
  CollectingReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::ClearRegisteredBenchmarks();

  fmt::print("\n{:<28} {:<36} {:>10} {:>14} {:>22}\n", "op", "shape", "ms", "rate", "vs anchor");
  fmt::print("{:-<114}\n", "");
  std::vector<std::string> below;  // cases under --min-ratio
  for (const BenchCase* c : selected) {
    auto err = rep.errors.find(key(*c));
    if (err != rep.errors.end()) {
      fmt::print("{:<28} {:<36} error: {}\n", c->name, c->shape, err->second);
      continue;
    }
    const double s = rep.seconds.at(key(*c));
    std::string rate = c->flops > 0 ? human_rate(c->flops / s, "FLOP") : c->bytes > 0 ? human_rate(c->bytes / s, "B") : "";
    std::string vs;
    if (!c->anchor.empty() && rep.seconds.count(key(*by_name.at(c->anchor)))) {
      const BenchCase& a = *by_name.at(c->anchor);
      const double ours = c->flops / s, theirs = a.flops / rep.seconds.at(key(a));
      vs = fmt::format("{:.0f}% of {}", 100.0 * ours / theirs, a.name);
      if (ours < opt.min_ratio * theirs)
        below.push_back(fmt::format("{} [{}] at {:.0f}% of {}", c->name, c->shape, 100.0 * ours / theirs, a.name));
    }
    fmt::print("{:<28} {:<36} {:>10.3f} {:>14} {:>22}\n", c->name, c->shape, s * 1e3, rate, vs);
  }

  // Memory of the cases that report it: one more run of the body from a
  // reset peak gives what it allocates on top of the buffers it holds.
  bool header = false;
  for (const BenchCase* c : selected) {
    if (c->memory_note.empty() || rep.errors.count(key(*c))) continue;
    if (!header) {
      fmt::print("\npeak memory of one run on {} (GB = 1e9 B)\n", be.name);
      header = true;
    }
    if (c->held_bytes == 0) {  // a memory that does not track its use
      fmt::print("{:<28} {:<36} peak not tracked; {}\n", c->name, c->shape, c->memory_note);
      continue;
    }
    Memory& mem = *be.memory;
    be.synchronize();
    mem.reset_peak();
    const std::size_t before = mem.current_bytes();
    c->body();
    be.synchronize();
    const std::size_t extra = mem.peak_bytes() - before;
    const auto gb = [](std::size_t bytes) { return static_cast<double>(bytes) / 1e9; };
    fmt::print("{:<28} {:<36} peak {:.3f} GB = buffers {:.3f} GB + {:.3f} GB during the run; {}\n", c->name,
               c->shape, gb(c->held_bytes + extra), gb(c->held_bytes), gb(extra), c->memory_note);
  }
  if (below.empty()) return 0;
  fmt::print(stderr, "\nbitrank bench: below --min-ratio {:.0f}%:\n", 100.0 * opt.min_ratio);
  for (const auto& b : below) fmt::print(stderr, "  {}\n", b);
  return 1;
}

}  // namespace bitrank::bench
