// The harness of `bitrank bench` (src/cli/bench.cpp makes the backend from
// --device and runs it): timings of the ops at fixed shapes, each next to the
// anchor of the same work measured in the same run. Its own library
// (bitrank_bench), linked by the command, not part of the bitrank library.
//
// A BenchCase is one timed body (Google Benchmark runs it until its timing
// is stable) with the FLOPs it does; a case may name an anchor case (e.g.
// OpenBLAS sgemm of the same shapes) and the table reports our rate as a
// fraction of the anchor's.
//
// A case may also report memory: held_bytes (what its buffers hold,
// counted when it was made) and a memory_note (what the design implies).
// After the table, each such case runs once more with the peak reset, and a
// line gives its peak = held + the most its body allocated on top; only on
// a backend whose Memory tracks its use (the CUDA device memory).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bitrank/backend.hpp"

namespace bitrank::bench {

struct BenchCase {
  std::string name;    // "blr fwd+bwd"
  std::string shape;   // "m=n=576 r=256 T=512 P=2"
  double flops = 0;    // per iteration (0: not a FLOP-bound op; bytes then)
  double bytes = 0;    // per iteration, moved at least once (for memory-bound ops)
  std::string anchor;  // name of the anchor case, "" for none
  std::function<void()> body;
  std::size_t held_bytes = 0;  // bytes of the backend's memory the case's buffers hold (0: not tracked)
  std::string memory_note{};   // "" = no memory line
};

struct BenchOptions {
  std::string device = "cpu";
  std::string op_filter;     // substring of the case name; empty = all
  std::string shape_filter;  // substring of the case's shape; empty = all
  double min_time_s = 0.3;
  bool no_anchors = false;  // time the matching cases alone (e.g. under a profiler)
  double min_ratio = 0;     // guard: a case below this fraction of its anchor's rate fails the run (0: none)
  CudaOptions cuda{};       // --gdn-design, --attention: the CUDA kernels timed
};

// The CPU cases (src/bench/bench_cpu.cpp) and the CUDA cases (bench_cuda.cpp,
// in builds with CUDA).
std::vector<BenchCase> cpu_bench_cases(Backend<float>& be);
std::vector<BenchCase> cuda_bench_cases(Backend<float>& be);

// Runs opt's cases on `be`, the backend of opt.device (the caller makes it),
// through Google Benchmark and prints the table; returns 0, or 1 when a
// case ran below opt.min_ratio of its anchor's rate (each such case named).
int run_bench(Backend<float>& be, const BenchOptions& opt);

}  // namespace bitrank::bench
