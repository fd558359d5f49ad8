// Factories of the CUDA backend's op families (one per src/cuda/<family>.cu).
#pragma once

#include <memory>

#include "bitrank/backend.hpp"
#include "cuda/runtime.hpp"

namespace bitrank::cuda {

std::unique_ptr<GemmOps<float>> make_gemm_ops(Context& ctx);
std::unique_ptr<BitmapOps<float>> make_bitmap_ops(Context& ctx);
std::unique_ptr<SignOps<float>> make_sign_ops(Context& ctx);
std::unique_ptr<BlrOps<float>> make_blr_ops(Context& ctx);

}  // namespace bitrank::cuda
