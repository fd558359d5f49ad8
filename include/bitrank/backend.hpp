// A backend: one implementation of every op family over one kind of memory.
//
//   ref   Backend<double>  f64 plain loops — the oracle of every test
//   cpu   Backend<float>   f32, threads, OpenBLAS for the GEMMs
//   cuda  Backend<float>   f32 on the GPU, cuBLASLt for the GEMMs
//
// All three have identical op semantics (the contracts in ops/*.hpp); the
// model and the trainer are written once over Backend<float>. A family a
// backend does not provide is null, and asking for it throws.
#pragma once

#include <memory>
#include <string>

#include "bitrank/memory.hpp"
#include "bitrank/ops/act.hpp"
#include "bitrank/ops/adam.hpp"
#include "bitrank/ops/attention.hpp"
#include "bitrank/ops/bitmap.hpp"
#include "bitrank/ops/blr.hpp"
#include "bitrank/ops/dense.hpp"
#include "bitrank/ops/gdn.hpp"
#include "bitrank/ops/gemm.hpp"
#include "bitrank/ops/kl.hpp"
#include "bitrank/ops/norm.hpp"
#include "bitrank/ops/reduce.hpp"
#include "bitrank/ops/rope.hpp"
#include "bitrank/ops/sign.hpp"
#include "bitrank/thread_pool.hpp"

namespace bitrank {

template <class T>
struct Backend {
  // Backend-wide state (the CUDA context); declared first, so it is
  // destroyed after the families that use it.
  std::shared_ptr<void> resources;
  std::string name;
  // What it runs on, for the summaries a figure is quoted from (a CPU
  // backend's figures depend on the CPU as much as on the seed): the GPU's
  // name, or the CPU's model and the pool's threads.
  std::string hardware;
  Memory* memory = nullptr;

  std::unique_ptr<GemmOps<T>> gemm_ops;
  std::unique_ptr<BitmapOps<T>> bitmap_ops;
  std::unique_ptr<ReduceOps<T>> reduce_ops;
  std::unique_ptr<DenseOps<T>> dense_ops;
  std::unique_ptr<AdamOps<T>> adam_ops;
  std::unique_ptr<SignOps<T>> sign_ops;
  std::unique_ptr<BlrOps<T>> blr_ops;
  std::unique_ptr<NormOps<T>> norm_ops;
  std::unique_ptr<ActOps<T>> act_ops;
  std::unique_ptr<RopeOps<T>> rope_ops;
  std::unique_ptr<AttentionOps<T>> attention_ops;
  std::unique_ptr<GdnOps<T>> gdn_ops;
  std::unique_ptr<KlOps<T>> kl_ops;

  // The op families; a family this backend lacks is a bitrank::Error.
  GemmOps<T>& gemm() const { return family(gemm_ops, "gemm"); }
  BitmapOps<T>& bitmap() const { return family(bitmap_ops, "bitmap"); }
  ReduceOps<T>& reduce() const { return family(reduce_ops, "reduce"); }
  DenseOps<T>& dense() const { return family(dense_ops, "dense"); }
  AdamOps<T>& adam() const { return family(adam_ops, "adam"); }
  SignOps<T>& sign() const { return family(sign_ops, "sign"); }
  BlrOps<T>& blr() const { return family(blr_ops, "blr"); }
  NormOps<T>& norm() const { return family(norm_ops, "norm"); }
  ActOps<T>& act() const { return family(act_ops, "act"); }
  RopeOps<T>& rope() const { return family(rope_ops, "rope"); }
  AttentionOps<T>& attention() const { return family(attention_ops, "attention"); }
  GdnOps<T>& gdn() const { return family(gdn_ops, "gdn"); }
  KlOps<T>& kl() const { return family(kl_ops, "kl"); }

  // Waits until all queued work is done (a no-op on host backends).
  void synchronize() const { memory->synchronize(); }

 private:
  template <class F>
  F& family(const std::unique_ptr<F>& f, const char* what) const {
    if (!f) fail("backend {} has no {} ops", name, what);
    return *f;
  }
};

std::unique_ptr<Backend<double>> make_ref_backend();
std::unique_ptr<Backend<float>> make_cpu_backend(ThreadPool& pool = ThreadPool::global());

// The CUDA backend's kernel choices, fixed when it is made. The defaults are
// the kernels bitrank runs; the others stay for the tests that hold them to
// the same contract and for benchmarks (`bitrank bench --gdn-design`,
// `--attention`).
struct CudaOptions {
  // Gated DeltaNet recurrence: 3 chunkwise on the tensor cores (default),
  // 2 token by token with the state in registers, 1 token by token with the
  // state in shared memory (src/cuda/gdn.cu).
  int gdn_design = 3;
  // Attention: "auto" (the tiled kernels where the head width and shared
  // memory allow, the backward's dQ from kept dS tiles where they fit),
  // "generic" (the generic kernels at every shape), "recompute" (dQ by
  // attn_dq, never the dS tiles) (src/cuda/attention.cu).
  std::string attention = "auto";
};

// Error naming the option and the values it takes.
void check_cuda_options(const CudaOptions& options);

// The CUDA backend (defined only in builds with BITRANK_HAS_CUDA).
int cuda_device_count();  // GPUs visible to this process, 0 without a driver
std::unique_ptr<Backend<float>> make_cuda_backend(int device = 0, const CudaOptions& options = {});

}  // namespace bitrank
