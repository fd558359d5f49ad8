// Factories of the f64 reference's op families (one per src/ref/<family>.cpp).
#pragma once

#include <memory>

#include "bitrank/backend.hpp"

namespace bitrank::ref {

std::unique_ptr<GemmOps<double>> make_gemm_ops();
std::unique_ptr<BitmapOps<double>> make_bitmap_ops();
std::unique_ptr<ReduceOps<double>> make_reduce_ops();
std::unique_ptr<DenseOps<double>> make_dense_ops();
std::unique_ptr<AdamOps<double>> make_adam_ops();
std::unique_ptr<SignOps<double>> make_sign_ops();
std::unique_ptr<BlrOps<double>> make_blr_ops();
std::unique_ptr<NormOps<double>> make_norm_ops();
std::unique_ptr<ActOps<double>> make_act_ops();
std::unique_ptr<RopeOps<double>> make_rope_ops();
std::unique_ptr<AttentionOps<double>> make_attention_ops();
// chunk 0: the token-by-token core; chunk ≥ 1: the chunkwise core with
// chunks of that many tokens (gdn_chunked.hpp; tests only).
std::unique_ptr<GdnOps<double>> make_gdn_ops(index_t chunk = 0);
std::unique_ptr<KlOps<double>> make_kl_ops();

}  // namespace bitrank::ref
