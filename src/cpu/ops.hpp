// Factories of the f32 CPU backend's op families (one per src/cpu/<family>.cpp).
#pragma once

#include <memory>

#include "bitrank/backend.hpp"

namespace bitrank::cpu {

std::unique_ptr<GemmOps<float>> make_gemm_ops(ThreadPool& pool);
std::unique_ptr<BitmapOps<float>> make_bitmap_ops(ThreadPool& pool);
std::unique_ptr<ReduceOps<float>> make_reduce_ops(ThreadPool& pool);
std::unique_ptr<DenseOps<float>> make_dense_ops(ThreadPool& pool);
std::unique_ptr<AdamOps<float>> make_adam_ops(ThreadPool& pool);
std::unique_ptr<SignOps<float>> make_sign_ops(ThreadPool& pool);
std::unique_ptr<BlrOps<float>> make_blr_ops(ThreadPool& pool);
std::unique_ptr<NormOps<float>> make_norm_ops(ThreadPool& pool);
std::unique_ptr<ActOps<float>> make_act_ops(ThreadPool& pool);
std::unique_ptr<RopeOps<float>> make_rope_ops(ThreadPool& pool);
std::unique_ptr<AttentionOps<float>> make_attention_ops(ThreadPool& pool);
std::unique_ptr<GdnOps<float>> make_gdn_ops(ThreadPool& pool);
std::unique_ptr<KlOps<float>> make_kl_ops(ThreadPool& pool);

}  // namespace bitrank::cpu
