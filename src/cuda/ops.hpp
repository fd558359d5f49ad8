// Factories of the CUDA backend's op families (one per src/cuda/<family>.cu).
#pragma once

#include <memory>

#include "bitrank/backend.hpp"
#include "cuda/runtime.hpp"

namespace bitrank::cuda {

std::unique_ptr<GemmOps<float>> make_gemm_ops(Context& ctx);
std::unique_ptr<BitmapOps<float>> make_bitmap_ops(Context& ctx);
std::unique_ptr<ReduceOps<float>> make_reduce_ops(Context& ctx);
std::unique_ptr<DenseOps<float>> make_dense_ops(Context& ctx);
std::unique_ptr<AdamOps<float>> make_adam_ops(Context& ctx);
std::unique_ptr<NormOps<float>> make_norm_ops(Context& ctx);
std::unique_ptr<ActOps<float>> make_act_ops(Context& ctx);
std::unique_ptr<GdnOps<float>> make_gdn_ops(Context& ctx);
std::unique_ptr<KlOps<float>> make_kl_ops(Context& ctx);
std::unique_ptr<RopeOps<float>> make_rope_ops(Context& ctx);
std::unique_ptr<AttentionOps<float>> make_attention_ops(Context& ctx);
std::unique_ptr<SignOps<float>> make_sign_ops(Context& ctx);
std::unique_ptr<BlrOps<float>> make_blr_ops(Context& ctx);

}  // namespace bitrank::cuda
