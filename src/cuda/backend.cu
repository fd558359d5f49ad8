#include "cuda/device_info.hpp"
#include "cuda/ops.hpp"

namespace bitrank {

int cuda_device_count() { return cuda::visible_device_count(); }

std::unique_ptr<Backend<float>> make_cuda_backend(int device, const CudaOptions& options) {
  check_cuda_options(options);
  const int n = cuda::visible_device_count();
  if (device < 0 || device >= n) fail("cuda: device {} requested, {} visible", device, n);
  auto ctx = std::make_shared<cuda::Context>(device, options);
  auto b = std::make_unique<Backend<float>>();
  b->resources = ctx;
  b->name = "cuda";
  b->hardware = cuda::device_description(device);
  b->memory = &ctx->memory;
  b->gemm_ops = cuda::make_gemm_ops(*ctx);
  b->bitmap_ops = cuda::make_bitmap_ops(*ctx);
  b->reduce_ops = cuda::make_reduce_ops(*ctx);
  b->dense_ops = cuda::make_dense_ops(*ctx);
  b->adam_ops = cuda::make_adam_ops(*ctx);
  b->norm_ops = cuda::make_norm_ops(*ctx);
  b->act_ops = cuda::make_act_ops(*ctx);
  b->gdn_ops = cuda::make_gdn_ops(*ctx);
  b->rope_ops = cuda::make_rope_ops(*ctx);
  b->attention_ops = cuda::make_attention_ops(*ctx);
  b->sign_ops = cuda::make_sign_ops(*ctx);
  b->blr_ops = cuda::make_blr_ops(*ctx);
  b->kl_ops = cuda::make_kl_ops(*ctx);
  return b;
}

}  // namespace bitrank
