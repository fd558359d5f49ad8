#include <fmt/format.h>

#include <fstream>
#include <string>

#include "cpu/ops.hpp"

namespace bitrank {
namespace {

// The "model name" line of /proc/cpuinfo (Linux x86 and most others), else
// "unknown CPU"; read once (backends are made per matrix in places, and the
// file lists every core).
const std::string& cpu_model_name() {
  static const std::string name = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("model name", 0) != 0) continue;
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
    return std::string("unknown CPU");
  }();
  return name;
}

}  // namespace

std::unique_ptr<Backend<float>> make_cpu_backend(ThreadPool& pool) {
  auto b = std::make_unique<Backend<float>>();
  // Host memory that counts its bytes (peak, cap), owned by the backend.
  std::shared_ptr<Memory> mem = make_counted_host_memory();
  b->resources = mem;
  b->name = "cpu";
  b->hardware = fmt::format("{}, {} threads", cpu_model_name(), pool.size());
  b->memory = mem.get();
  b->gemm_ops = cpu::make_gemm_ops(pool);
  b->bitmap_ops = cpu::make_bitmap_ops(pool);
  b->reduce_ops = cpu::make_reduce_ops(pool);
  b->dense_ops = cpu::make_dense_ops(pool);
  b->adam_ops = cpu::make_adam_ops(pool);
  b->sign_ops = cpu::make_sign_ops(pool);
  b->blr_ops = cpu::make_blr_ops(pool);
  b->norm_ops = cpu::make_norm_ops(pool);
  b->act_ops = cpu::make_act_ops(pool);
  b->rope_ops = cpu::make_rope_ops(pool);
  b->attention_ops = cpu::make_attention_ops(pool);
  b->gdn_ops = cpu::make_gdn_ops(pool);
  b->kl_ops = cpu::make_kl_ops(pool);
  return b;
}

}  // namespace bitrank
