// A loaded bitrank model in its file's 16-bit form (model::WeightForm,
// decoder.hpp): BLR scales and weight matrices kept in f16, as the file
// stores them, on a tiny Llama with a tied head (the embedding read from
// the head's own buffer) and the tiny hybrid (untied head; the GDN's b and
// a projections stay dense, in f16), saved as the compressor saves them
// (scales F16, dense F16), and the tiny Llama again with its tied embedding
// as a GGUF's Q8_0 tensor dequantised (the file stores it as Q8_0 blocks, the
// model keeps those and reads them with dense_forward_q8):
// - its resident weights (DecoderModel::weight_bytes, every allocation it
//   holds) are at most the file's bytes + 5 %, and `bitrank generate` says so;
// - it computes what the same file's model in T computes (f32 scales and
//   matrices of the same values): on the f64 reference to 1e-12 (the same
//   values, f64 sums: measured 0), on the cpu to 1e-5 relative L2 over the
//   logits — blr_infer's output is the same bits (the f16 scales widen
//   exactly), the head and the dense projections sum in another order than
//   sgemm (dense_forward's 1e-6 per op) — and greedy generation gives the
//   same tokens;
// - the trainer's reads are refused clearly: head() of an f16 head, and
//   f16 scales anywhere but blr_infer.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "bitrank/io/safetensors.hpp"
#include "bitrank/model/generate.hpp"
#include "bitrank/model/make.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/load.hpp"
#include "support/backends.hpp"
#include "support/command.hpp"
#include "support/expect.hpp"
#include "support/ggml_q8_0.hpp"
#include "support/host_values.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/model_files.hpp"
#include "support/student_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace bitrank {
namespace {

struct SavedModel {
  std::string name;
  std::filesystem::path file;
};

// The tiny Llama (2 blocks, vocabulary 300, tied head) and the tiny hybrid
// with some projections compressed, saved in the compressor's storage.
std::vector<SavedModel> save_models(const std::filesystem::path& dir) {
  const auto dims = test::tiny_block_dims();
  model::HostWeights llama =
      test::teacher_of(dims, {test::random_student(dims, 32, 1, 81), test::random_student(dims, 32, 1, 82)}, 300,
                       true, 83);
  std::vector<std::string> all;
  for (int b = 0; b < 2; ++b)
    for (const char* p : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
      all.push_back(fmt::format("blk.{}.{}", b, p));
  const model::BlrProjections llama_blr = test::compress_randomly(llama, all, 90);
  model::HostWeights hybrid = test::tiny_hybrid::tiny_weights(false, 84);
  const model::BlrProjections hybrid_blr = test::compress_randomly(
      hybrid, {"blk.0.ffn_gate", "blk.0.ffn_up", "blk.0.ffn_down", "blk.3.ffn_up", "blk.3.attn_output"}, 95);

  model::HostWeights llama_q8 = llama;
  auto& table = llama_q8.tensors.at("token_embd.weight").values;
  table = test::as_ggml_q8_0(table);

  std::vector<SavedModel> out;
  using Entry = std::tuple<const char*, const model::HostWeights*, const model::BlrProjections*>;
  for (const auto& [name, w, blr] : {Entry{"llama", &llama, &llama_blr}, Entry{"hybrid", &hybrid, &hybrid_blr},
                                     Entry{"llama-q8", &llama_q8, &llama_blr}}) {
    store::CompressedModel cm;
    cm.config = w->config;
    cm.tokenizer = test::byte_tokenizer(w->config.vocab_size);
    cm.dense = w->tensors;
    cm.blr = *blr;
    cm.storage = store::Storage{.scales = store::StoredFloat::f16, .dense = store::StoredFloat::f16};
    store::record_exact_q8_0(cm);
    const auto file = dir / (std::string(name) + ".bitrank");
    store::save_bitrank(file, cm);
    out.push_back({name, file});
  }
  return out;
}

TEST(WeightForm, ResidentWeightsAreAboutTheFileSize) {
  const test::TempDir dir;
  for (const SavedModel& s : save_models(dir.path())) {
    SCOPED_TRACE(s.name);
    const store::LoadedWeights lw = store::load_any(s.file);
    EXPECT_TRUE(lw.form.f16_scales);
    EXPECT_TRUE(lw.form.f16_matrices);
    EXPECT_TRUE(lw.form.q8_0_matrices);
    EXPECT_EQ(io::Safetensors::open(s.file).contains("token_embd.weight.q8_0"), s.name == "llama-q8");
    const auto packed = model::make_model(test::cpu_backend(), lw.weights, lw.blr, false, lw.form);
    const auto wide = model::make_model(test::cpu_backend(), lw.weights, lw.blr);
    const std::size_t file_bytes = std::filesystem::file_size(s.file);
    const std::size_t bytes = packed->weight_bytes();
    std::printf("  [weight_form] %s: file %zu bytes, resident weights %zu (%.3f× the file), in f32 %zu\n",
                s.name.c_str(), file_bytes, bytes, static_cast<double>(bytes) / static_cast<double>(file_bytes),
                wide->weight_bytes());
    EXPECT_LE(static_cast<double>(bytes), 1.05 * static_cast<double>(file_bytes));
    // Every tensor is counted (only each tensor's alignment in its block comes on top).
    EXPECT_GE(bytes, model::model_device_bytes<float>(lw.weights, lw.blr, lw.form));
    EXPECT_LT(bytes, wide->weight_bytes());
    // A streamed model holds its images and two slots.
    const auto streamed = model::make_model(test::cpu_backend(), lw.weights, lw.blr, true, lw.form);
    EXPECT_GT(streamed->weight_bytes(), bytes);

    // The CLI reports the same figure beside the file's bytes.
    const std::string cmd = fmt::format("'{}' generate --model '{}' --prompt 'Once' --max-tokens 2 2>&1", BITRANK_CLI,
                                        s.file.string());
    const auto [status, out] = test::run_command(cmd);
    ASSERT_EQ(status, 0) << out;
    EXPECT_NE(out.find(fmt::format("({} bytes; the file {} bytes)", bytes, file_bytes)), std::string::npos) << out;
  }
}

TEST(WeightForm, SixteenBitModelComputesWhatTheWideOneDoes) {
  const test::TempDir dir;
  for (const SavedModel& s : save_models(dir.path())) {
    SCOPED_TRACE(s.name);
    const store::LoadedWeights lw = store::load_any(s.file);
    std::vector<std::int32_t> tokens(24);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<std::int32_t>((static_cast<index_t>(i) * 37 + 11) % lw.weights.config.vocab_size);
    const std::vector<std::int32_t> prompt(tokens.begin(), tokens.begin() + 5);
    {  // the reference: the same values, f64 sums
      const auto packed = model::make_model(test::ref_backend(), lw.weights, lw.blr, false, lw.form);
      const auto wide = model::make_model(test::ref_backend(), lw.weights, lw.blr);
      EXPECT_LE(test::rel_l2(packed->logits(tokens, 24), wide->logits(tokens, 24)), 1e-12);
      EXPECT_LE(test::rel_l2(packed->last_logits(prompt), wide->last_logits(prompt)), 1e-12);
    }
    const auto packed = model::make_model(test::cpu_backend(), lw.weights, lw.blr, false, lw.form);
    const auto wide = model::make_model(test::cpu_backend(), lw.weights, lw.blr);
    const double window = test::rel_l2(packed->logits(tokens, 24), wide->logits(tokens, 24));  // 24 rows: blr_forward
    const double last = test::rel_l2(packed->last_logits(prompt), wide->last_logits(prompt));  // 5 rows: the bit kernel
    std::printf("  [weight_form] %s: cpu logits, f16 form against f32: %.2e (24 tokens), %.2e (5 tokens)\n",
                s.name.c_str(), window, last);
    EXPECT_LE(window, 1e-5);
    EXPECT_LE(last, 1e-5);
    const model::GenerateOptions o{.max_tokens = 8};
    EXPECT_EQ(model::generate(*packed, prompt, o).tokens, model::generate(*wide, prompt, o).tokens);
  }
}

TEST(WeightForm, TrainerReadsOfSixteenBitWeightsAreErrors) {
  const test::TempDir dir;
  const store::LoadedWeights lw = store::load_any(save_models(dir.path()).front().file);
  const auto packed = model::make_model(test::cpu_backend(), lw.weights, lw.blr, false, lw.form);
  test::expect_error([&] { (void)packed->head(); }, "head: this model keeps its head in f16");
  const store::LoadedWeights lq = store::load_any(save_models(dir.path()).back().file);  // llama-q8
  const auto q8 = model::make_model(test::cpu_backend(), lq.weights, lq.blr, false, lq.form);
  test::expect_error([&] { (void)q8->head(); }, "head: this model keeps its head in Q8_0 blocks");

  // f16 scales reach blr_infer only.
  const index_t m = 4, n = 3, r = 32;
  std::vector<std::uint32_t> su(m, 0x1234u), sv(n, 0x4321u);
  std::vector<f16> scales(m + r + n, to_f16(0.5f));
  std::vector<float> x(2 * n, 1.0f), y(2 * m), a(2 * r);
  BlrPath<float> path;
  path.sign_u = CView<std::uint32_t>(su.data(), Shape{m, 1});
  path.sign_v = CView<std::uint32_t>(sv.data(), Shape{n, 1});
  path.scales16 = CView<f16>(scales.data(), Shape{m + r + n});
  const BlrLayer<float> layer{m, n, r, std::span(&path, 1)};
  auto& ops = test::cpu_backend().blr();
  ops.blr_infer(layer, CView<float>(x.data(), Shape{2, n}), View<float>(y.data(), Shape{2, m}));
  test::expect_error(
      [&] {
        ops.blr_forward(layer, CView<float>(x.data(), Shape{2, n}), View<float>(y.data(), Shape{2, m}),
                        BlrSaved<float>{View<float>(a.data(), Shape{1, 2, r})});
      },
      "blr_forward: path 0 has f16 scales, which only blr_infer reads");
  BlrPath<float> both = path;
  both.h = CView<float>(x.data(), Shape{m});
  test::expect_error(
      [&] {
        ops.blr_infer(BlrLayer<float>{m, n, r, std::span(&both, 1)}, CView<float>(x.data(), Shape{2, n}),
                      View<float>(y.data(), Shape{2, m}));
      },
      "blr_infer: path 0 has both f16 scales and h, l, g");
  BlrPath<float> short_scales = path;
  short_scales.scales16 = CView<f16>(scales.data(), Shape{m + r});
  test::expect_error(
      [&] {
        ops.blr_infer(BlrLayer<float>{m, n, r, std::span(&short_scales, 1)}, CView<float>(x.data(), Shape{2, n}),
                      View<float>(y.data(), Shape{2, m}));
      },
      "blr_infer: path 0 scales16 has shape [36], expected [39]");
}

}  // namespace
}  // namespace bitrank
