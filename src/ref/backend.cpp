#include "ref/ops.hpp"

namespace bitrank {

std::unique_ptr<Backend<double>> make_ref_backend() {
  auto b = std::make_unique<Backend<double>>();
  b->name = "ref";
  b->hardware = "f64 reference on the host";
  b->memory = &host_memory();
  b->gemm_ops = ref::make_gemm_ops();
  b->bitmap_ops = ref::make_bitmap_ops();
  b->reduce_ops = ref::make_reduce_ops();
  b->dense_ops = ref::make_dense_ops();
  b->adam_ops = ref::make_adam_ops();
  b->sign_ops = ref::make_sign_ops();
  b->blr_ops = ref::make_blr_ops();
  b->norm_ops = ref::make_norm_ops();
  b->act_ops = ref::make_act_ops();
  b->rope_ops = ref::make_rope_ops();
  b->attention_ops = ref::make_attention_ops();
  b->gdn_ops = ref::make_gdn_ops();
  b->kl_ops = ref::make_kl_ops();
  return b;
}

}  // namespace bitrank
