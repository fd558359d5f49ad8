// Qwen3.5 / Qwen3-Next hybrid model: a tiny random model on the f32 CPU
// backend against the f64 reference; the Hugging Face loader on both GDN
// layouts (Qwen3.5's separate projections under model.language_model.,
// Qwen3-Next's group-interleaved ones under model.) written here by
// transformers' rules; the GGUF loader on a file written here by llama.cpp's
// conversion rules; bad input. The comparison with transformers itself is
// golden_hybrid_test.cpp.
#include "bitrank/model/hybrid.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "bitrank/io/gguf.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/model/make.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/store/load.hpp"
#include "support/backends.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/model_files.hpp"
#include "support/host_values.hpp"
#include "support/expect.hpp"

namespace bitrank {
namespace {

using test::expect_error_with;
using test::rel_l2;

using model::HostTensor;
using model::HostWeights;
using model::HybridModel;
using nlohmann::json;
using namespace test::tiny_hybrid;

TEST(Hybrid, TinyModelCpuMatchesReference) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const HostWeights w = tiny_weights(tied, tied ? 3 : 4);
    const HybridModel<double> ref(test::ref_backend(), w);
    const HybridModel<float> cpu(test::cpu_backend(), w);
    EXPECT_FALSE(ref.is_full_attention(0));
    EXPECT_TRUE(ref.is_full_attention(3));
    const index_t window = 12;
    const auto tokens = tiny_tokens(2 * window, 5);
    const auto z_ref = ref.logits(tokens, window);
    const auto z_cpu = cpu.logits(tokens, window);
    ASSERT_EQ(z_ref.size(), static_cast<std::size_t>(2 * window * kV));
    const double err = rel_l2(z_cpu, z_ref);
    std::printf("  [model] tiny hybrid (tied %d) cpu vs ref logits rel L2 %.3e (tol 3e-5)\n", tied, err);
    // Each block alone is within a few f32 roundings (below); this random
    // 4-block model amplifies the first blocks' errors about tenfold on
    // their way to the logits (measured 3e-6 and 6e-6).
    EXPECT_LE(err, 3e-5);

    // Block by block on the same (reference) input: f32 GEMMs, attention and
    // the GDN recurrence, a few f32 roundings each (measured ≤ 8e-7).
    const index_t n = 2 * window;
    Memory &mr = *test::ref_backend().memory, &mc = *test::cpu_backend().memory;
    Buffer<double> xr(mr, n * kD), yr(mr, n * kD);
    Buffer<float> xc(mc, n * kD), yc(mc, n * kD);
    ref.embed(tokens, xr.view({n, kD}));
    model::HybridBlockActivations<double> acts_ref;
    model::HybridBlockActivations<float> acts_cpu;
    for (index_t b = 0; b < kLayers; ++b) {
      const std::vector<double> x = xr.download();
      xc.upload(std::vector<float>(x.begin(), x.end()));
      ref.block_forward(b, xr.view({n, kD}), window, acts_ref, yr.view({n, kD}));
      cpu.block_forward(b, xc.view({n, kD}), window, acts_cpu, yc.view({n, kD}));
      const std::vector<float> yf = yc.download();
      const double block_err = rel_l2(std::vector<double>(yf.begin(), yf.end()), yr.download());
      std::printf("  [model]   block %lld (%s): cpu vs ref rel L2 %.2e (tol 2e-6)\n", static_cast<long long>(b),
                  ref.is_full_attention(b) ? "attention" : "GDN", block_err);
      EXPECT_LE(block_err, 2e-6) << "block " << b;
      std::swap(xr, yr);
    }
    double lo = 1e30, hi = -1e30;
    for (double v : z_ref) lo = std::min(lo, v), hi = std::max(hi, v);
    EXPECT_GT(hi - lo, 1.0);  // not degenerate

    // Slicing the vocabulary changes nothing; the NLL is the log-softmax of the logits.
    HybridModel<double> sliced(test::ref_backend(), w);
    sliced.vocab_slice = 37;
    EXPECT_LE(rel_l2(sliced.logits(tokens, window), z_ref), 1e-14);
    const auto nll = sliced.nll(tokens, window);
    double expect = 0;
    for (index_t r = 0; r < 2 * window; ++r) {
      if (r % window == window - 1) continue;
      double m = -1e300, s = 0;
      for (index_t j = 0; j < kV; ++j) m = std::max(m, z_ref[r * kV + j]);
      for (index_t j = 0; j < kV; ++j) s += std::exp(z_ref[r * kV + j] - m);
      expect += m + std::log(s) - z_ref[r * kV + tokens[r + 1]];
    }
    EXPECT_EQ(nll.count, 2 * (window - 1));
    EXPECT_NEAR(nll.sum, expect, 1e-10 * expect);
  }
}

// Every block reads only its own window, through attention and the GDN
// recurrence alike: changing the first window leaves the second's logits.
TEST(Hybrid, WindowsDoNotSeeEachOther) {
  const HostWeights w = tiny_weights(false, 6);
  const HybridModel<double> ref(test::ref_backend(), w);
  const index_t window = 7;
  auto a = tiny_tokens(2 * window, 7);
  auto b = a;
  b[1] = (b[1] + 1) % kV;
  b[6] = (b[6] + 9) % kV;
  const auto za = ref.logits(a, window), zb = ref.logits(b, window);
  const std::size_t half = za.size() / 2;
  EXPECT_NE(std::memcmp(za.data(), zb.data(), half * sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(za.data() + half, zb.data() + half, half * sizeof(double)), 0);
}

// The activations a backward needs stay in the tape; recording the GDN tape
// does not change the forward.
TEST(Hybrid, BlockForwardKeepsItsActivations) {
  const HostWeights w = tiny_weights(false, 8);
  HybridModel<float> m(test::cpu_backend(), w);
  m.gdn_ckpt_every = 5;
  const index_t window = 11, n = 2 * window;
  const auto tokens = tiny_tokens(n, 9);
  Memory& mem = *test::cpu_backend().memory;
  Buffer<float> x(mem, n * kD), y1(mem, n * kD), y2(mem, n * kD);
  m.embed(tokens, x.view({n, kD}));
  for (index_t b : {0, 3}) {
    model::HybridBlockActivations<float> rec, fwd;
    m.block_forward(b, x.view({n, kD}), window, rec, y1.view({n, kD}), true);
    m.block_forward(b, x.view({n, kD}), window, fwd, y2.view({n, kD}), false);
    EXPECT_EQ(y1.download(), y2.download()) << "block " << b;
    if (b == 0) {
      EXPECT_TRUE(rec.tape_recorded);
      EXPECT_FALSE(fwd.tape_recorded);
      EXPECT_GE(static_cast<index_t>(rec.tape.size()), gdn_tape_size(m.gdn_config(window), n, true));
      EXPECT_EQ(rec.qg.size(), 0u);  // attention buffers untouched in a GDN block
    } else {
      EXPECT_GE(rec.lse.size(), static_cast<std::size_t>(n * kH));
      EXPECT_EQ(rec.tape.size(), 0u);
    }
  }
  // hidden() is the blocks in sequence.
  model::HybridBlockActivations<float> acts;
  for (index_t b = 0; b < kLayers; ++b) {
    m.block_forward(b, x.view({n, kD}), window, acts, y1.view({n, kD}));
    std::swap(x, y1);
  }
  EXPECT_EQ(m.hidden(tokens, window).download(), x.download());
}

// ---------------------------------------------------------------------------
// Hugging Face checkpoints, written by transformers' naming and layouts.

TEST(Hybrid, HuggingFaceLayoutsGiveTheSameModel) {
  const HostWeights w = tiny_weights(false, 10);
  // Qwen3.5 multimodal: the language model under model.language_model., with
  // a vision tensor and a multi-token-prediction tensor that are not ours.
  auto t35 = hf_tensors(w, false, "model.language_model.");
  t35.push_back({"model.visual.blocks.0.attn.qkv.weight", {3, 2}, {1, 2, 3, 4, 5, 6}});
  t35.push_back({"mtp.fc.weight", {2, 2}, {1, 2, 3, 4}});
  const auto bytes35 = test::safetensors_image(t35), bytes_next = test::safetensors_image(hf_tensors(w, true, "model."));
  const auto st35 = io::Safetensors::from_memory(bytes35, "q35.safetensors");
  const auto st_next = io::Safetensors::from_memory(bytes_next, "next.safetensors");
  const HostWeights a = model::load_hybrid_hf_weights(st35, tiny_config(false, false), "q35");
  const HostWeights b = model::load_hybrid_hf_weights(st_next, tiny_config(false, true), "next");
  EXPECT_EQ(a.config.family, io::ModelFamily::qwen3_5);
  EXPECT_EQ(b.config.family, io::ModelFamily::qwen3_next);
  ASSERT_EQ(a.tensors.size(), w.tensors.size());
  ASSERT_EQ(b.tensors.size(), w.tensors.size());
  for (const auto& [name, t] : w.tensors) {
    EXPECT_EQ(a.at(name).values, t.values) << name;
    EXPECT_EQ(b.at(name).values, t.values) << name;
    EXPECT_EQ(b.at(name).shape, t.shape) << name;
  }
  // The same weights, so the same logits bit for bit.
  const HybridModel<float> ma(test::cpu_backend(), a), mb(test::cpu_backend(), b);
  const auto tokens = tiny_tokens(16, 11);
  EXPECT_EQ(ma.logits(tokens, 8), mb.logits(tokens, 8));

  // Tied: lm_head is not needed.
  const HostWeights wt = tiny_weights(true, 12);
  const auto bytes_tied = test::safetensors_image(hf_tensors(wt, false, "model."));
  EXPECT_NO_THROW(model::load_hybrid_hf_weights(io::Safetensors::from_memory(bytes_tied, "t.safetensors"),
                                                tiny_config(true, false), "tied"));
}

TEST(Hybrid, HuggingFaceBadInputIsAnError) {
  const HostWeights w = tiny_weights(false, 13);
  auto load = [&](const std::function<void(std::vector<test::NamedTensor>&)>& edit, const io::ModelConfig& c) {
    auto tensors = hf_tensors(w, c.family == io::ModelFamily::qwen3_next, "model.");
    edit(tensors);
    const auto bytes = test::safetensors_image(tensors);
    model::load_hybrid_hf_weights(io::Safetensors::from_memory(bytes, "tiny.safetensors"), c, "tiny");
  };
  auto drop = [](std::string name) {
    return [name](std::vector<test::NamedTensor>& t) { std::erase_if(t, [&](const auto& x) { return x.name == name; }); };
  };
  const auto q35 = tiny_config(false, false), next = tiny_config(false, true);
  const auto none = [](std::vector<test::NamedTensor>&) {};
  EXPECT_NO_THROW(load(none, q35));
  EXPECT_NO_THROW(load(none, next));
  expect_error_with([&] { load(drop("model.layers.1.linear_attn.dt_bias"), q35); },
               {"tiny", "model.layers.1.linear_attn.dt_bias", "missing"});
  expect_error_with([&] { load(drop("lm_head.weight"), q35); }, {"lm_head.weight", "missing"});
  expect_error_with([&] { load(drop("model.layers.0.linear_attn.in_proj_ba.weight"), next); },
               {"model.layers.0.linear_attn.in_proj_ba.weight", "missing"});
  expect_error_with([&] { load(drop("model.layers.2.linear_attn.in_proj_qkv.weight"), q35); },
               {"model.layers.2.linear_attn.in_proj_qkv.weight", "in_proj_qkvz", "missing"});
  expect_error_with([&] { load(drop("model.embed_tokens.weight"), q35); }, {"model.embed_tokens.weight", "missing"});
  expect_error_with(
      [&] {
        load(
            [](auto& t) {
              for (auto& x : t)
                if (x.name == "model.layers.0.linear_attn.in_proj_z.weight") {
                  x.shape[0] -= 1;
                  x.values.resize(x.values.size() - kD);
                }
            },
            q35);
      },
      {"tiny.safetensors", "model.layers.0.linear_attn.in_proj_z.weight", "shape [63, 64]", "expected [64, 64]"});
  expect_error_with([&] { load([](auto& t) { t.push_back({"model.layers.2.mlp.experts.0.up_proj.weight", {1}, {0}}); }, next); },
               {"block 2", "mlp.experts.0.up_proj.weight", "mixture-of-experts"});
  // MoE by the config: Qwen3-Next without mlp_only_layers (transformers' default 512 experts), or a block left out.
  expect_error_with([&] { load(none, tiny_config(false, true, {{"mlp_only_layers", json::array()}})); },
               {"block 0", "mixture-of-experts"});
  expect_error_with([&] { load(none, tiny_config(false, true, {{"mlp_only_layers", {0, 1, 3}}})); }, {"block 2"});
  expect_error_with([&] { load(none, tiny_config(false, true, {{"mlp_only_layers", nullptr}, {"num_experts", nullptr}})); },
               {"block 0", "512 experts"});
  EXPECT_NO_THROW(load(none, tiny_config(false, true, {{"mlp_only_layers", json::array()}, {"num_experts", 0}})));
  // What the GDN op cannot run: dk ≠ dv.
  expect_error_with([&] { load(none, tiny_config(false, true, {{"linear_value_head_dim", 32}})); },
               {"tiny", "key head dim 16", "value head dim 32"});
  // Weights that are not finite.
  HostWeights bad = w;
  bad.tensors["blk.2.ssm_dt.bias"].values[1] = NAN;
  expect_error_with([&] { HybridModel<float>(test::cpu_backend(), bad); }, {"blk.2.ssm_dt.bias", "non-finite"});
  bad = w;
  bad.tensors.erase("blk.3.attn_q_norm.weight");
  expect_error_with([&] { HybridModel<float>(test::cpu_backend(), bad); }, {"blk.3.attn_q_norm.weight", "missing"});
}

// ---------------------------------------------------------------------------
// GGUF, written by llama.cpp's conversion rules (convert_hf_to_gguf.py:
// Qwen3NextModel.modify_tensors, _LinearAttentionVReorderBase for Qwen3.5).

// v-heads from transformers' grouped order to llama.cpp's tiled one: the
// `heads` blocks of `block` elements from `from` of each of `outer` slices
// of `stride` elements are viewed as [Hk][r][block] and stored as
// [r][Hk][block] (_reorder_v_heads: reshape, swap the first two axes).
void tile_heads(std::vector<float>& v, index_t outer, index_t stride, index_t from, index_t block) {
  for (index_t o = 0; o < outer; ++o) {
    const std::vector<float> old(v.begin() + o * stride + from, v.begin() + o * stride + from + kHv * block);
    for (index_t g = 0; g < kHk; ++g)
      for (index_t j = 0; j < kR; ++j)
        for (index_t e = 0; e < block; ++e) v[o * stride + from + (j * kHk + g) * block + e] = old[(g * kR + j) * block + e];
  }
}

struct GgufEdits {
  std::string architecture = "qwen35";
  std::string drop;             // leave this GGUF tensor out
  bool recurrent_array = false;  // layer types as attention.recurrent_layers instead of the interval
  bool positive_a = false;      // store one ssm_a entry ≥ 0
};

std::vector<std::byte> write_gguf(const HostWeights& w, const GgufEdits& o = {}) {
  const io::ModelConfig& c = w.config;
  test::GgufImage g;
  const std::string a = "qwen35.";
  g.string("general.architecture", o.architecture)
      .u32(a + "block_count", static_cast<std::uint32_t>(c.num_layers + 1))  // + one MTP block
      .u32(a + "nextn_predict_layers", 1)
      .u32(a + "context_length", 256)
      .u32(a + "embedding_length", kD)
      .u32(a + "feed_forward_length", kF)
      .u32(a + "attention.head_count", kH)
      .u32(a + "attention.head_count_kv", kHkv)
      .u32(a + "attention.key_length", kHd)
      .u32(a + "attention.value_length", kHd)
      .f32(a + "rope.freq_base", 10000.0f)
      .u32(a + "rope.dimension_count", kHd / 4)
      .f32(a + "attention.layer_norm_rms_epsilon", 1e-6f)
      .u32(a + "ssm.conv_kernel", kK)
      .u32(a + "ssm.state_size", kDk)
      .u32(a + "ssm.group_count", kHk)
      .u32(a + "ssm.time_step_rank", kHv)
      .u32(a + "ssm.inner_size", kHv * kDk);
  if (o.recurrent_array)
    g.bool_array(a + "attention.recurrent_layers", {true, true, true, false, false});
  else
    g.u32(a + "full_attention_interval", 4);
  for (const auto& [name, t0] : w.tensors) {
    HostTensor t = t0;
    std::string gname = name;
    const bool norm = name.ends_with("attn_norm.weight") || name.ends_with("post_attention_norm.weight") ||
                      name.ends_with("q_norm.weight") || name.ends_with("k_norm.weight") || name == "output_norm.weight";
    if (norm)  // every "norm.weight" but linear_attn.norm gets + 1
      for (float& v : t.values) v += 1.0f;
    if (name.ends_with("ssm_a_log")) {  // A_log → ssm_a = −exp(A_log)
      gname = name.substr(0, name.size() - 5) + "a";
      for (float& v : t.values) v = -std::exp(v);
      if (o.positive_a) t.values[1] = 0.5f;
    }
    if (name.ends_with("attn_qkv.weight")) tile_heads(t.values, 1, 0, 2 * kHk * kDk * kD, kDk * kD);
    if (name.ends_with("attn_gate.weight")) tile_heads(t.values, 1, 0, 0, kDk * kD);
    if (name.ends_with("ssm_beta.weight") || name.ends_with("ssm_alpha.weight")) tile_heads(t.values, 1, 0, 0, kD);
    if (name.ends_with("ssm_a_log") || name.ends_with("ssm_dt.bias")) tile_heads(t.values, 1, 0, 0, 1);
    if (name.ends_with("ssm_conv1d.weight")) tile_heads(t.values, 1, 0, 2 * kHk * kDk * kK, kDk * kK);
    if (name.ends_with("ssm_out.weight")) tile_heads(t.values, kD, kHv * kDk, 0, kDk);
    if (gname != o.drop) g.tensor({gname, t.shape, t.values});
  }
  // The MTP block (not part of the forward; only some of its tensors).
  g.tensor({"blk.4.attn_norm.weight", {kD}, std::vector<float>(kD, 1.0f)});
  g.tensor({"blk.4.nextn.eh_proj.weight", {kD, 2 * kD}, std::vector<float>(2 * kD * kD, 0.01f)});
  return g.bytes();
}

TEST(Hybrid, GgufRoundTripUndoesLlamaCppConversions) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const HostWeights w = tiny_weights(tied, tied ? 14 : 15);
    GgufEdits edits;
    edits.recurrent_array = tied;
    const auto bytes = write_gguf(w, edits);
    const auto gguf = io::GgufFile::from_memory(bytes, "tiny.gguf");
    const HostWeights loaded = model::load_hybrid_gguf_weights(gguf);
    const io::ModelConfig& c = loaded.config;
    EXPECT_EQ(c.family, io::ModelFamily::qwen3_5);
    EXPECT_EQ(c.num_layers, kLayers);  // the MTP block is not ours
    EXPECT_EQ(c.vocab_size, kV);
    EXPECT_EQ(c.rotary_dim(), kHd / 4);
    EXPECT_EQ(c.tie_word_embeddings, tied);
    EXPECT_EQ(c.layer_types, w.config.layer_types);
    ASSERT_EQ(loaded.tensors.size(), w.tensors.size());
    // Everything comes back exactly (the gains are on a grid where w + 1 − 1
    // is exact) but A_log, through log(−(−exp(A_log))) in f32.
    for (const auto& [name, t] : w.tensors) {
      const auto& got = loaded.at(name).values;
      ASSERT_EQ(got.size(), t.values.size()) << name;
      double worst = 0;
      for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - t.values[i]));
      EXPECT_LE(worst, 4e-7) << name;
      if (!name.ends_with("a_log")) {
        EXPECT_EQ(worst, 0.0) << name;
      }
    }
    const HybridModel<double> a(test::ref_backend(), w), b(test::ref_backend(), loaded);
    const auto tokens = tiny_tokens(20, 16);
    const double err = rel_l2(b.logits(tokens, 10), a.logits(tokens, 10));
    std::printf("  [model] tiny hybrid through GGUF (tied %d): logits rel L2 %.2e (tol 1e-7)\n", tied, err);
    // Only A_log differs, by f32 roundings (measured < 1e-8).
    EXPECT_LE(err, 1e-7);
  }
}

TEST(Hybrid, GgufBadInputIsAnError) {
  const HostWeights w = tiny_weights(false, 17);
  auto load = [&](const GgufEdits& o) {
    const auto bytes = write_gguf(w, o);
    model::load_hybrid_gguf_weights(io::GgufFile::from_memory(bytes, "tiny.gguf"));
  };
  EXPECT_NO_THROW(load({}));
  auto edits = [](std::string arch, std::string drop, bool positive_a) {
    GgufEdits e;
    e.architecture = std::move(arch);
    e.drop = std::move(drop);
    e.positive_a = positive_a;
    return e;
  };
  expect_error_with([&] { load(edits("qwen35", "blk.2.ssm_alpha.weight", false)); },
               {"tiny.gguf", "blk.2.ssm_alpha.weight", "missing"});
  expect_error_with([&] { load(edits("qwen35", "blk.1.ssm_a", false)); }, {"tiny.gguf", "blk.1.ssm_a", "missing"});
  expect_error_with([&] { load(edits("qwen35", "", true)); }, {"tiny.gguf", "blk.0.ssm_a", "-exp(A_log)"});
  expect_error_with([&] { load(edits("qwen3next", "", false)); }, {"tiny.gguf", "qwen3next", "mixture of experts"});
  expect_error_with([&] { load(edits("llama", "", false)); }, {"tiny.gguf", "unknown architecture 'llama'"});
}

// load_weights picks the loader from the format and the family; make_model the class.
TEST(Hybrid, LoadWeightsPicksTheFamily) {
  const std::string golden = std::string(BITRANK_TEST_DATA_DIR) + "/golden/";
  for (const std::string& path : {golden + "qwen3_5", golden + "qwen3_next/config.json"}) {
    const HostWeights w = store::load_weights(path);
    EXPECT_TRUE(w.config.is_hybrid()) << path;
    const auto m = model::make_model(test::cpu_backend(), w);
    EXPECT_NE(dynamic_cast<const HybridModel<float>*>(m.get()), nullptr) << path;
  }
  // A qwen35 GGUF file.
  const HostWeights tiny = tiny_weights(false, 18);
  const auto bytes = write_gguf(tiny);
  const auto file = std::filesystem::temp_directory_path() / ("bitrank_tiny_qwen35_" + std::to_string(::getpid()) + ".gguf");
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const HostWeights g = store::load_weights(file);
  std::filesystem::remove(file);
  EXPECT_EQ(g.config.family, io::ModelFamily::qwen3_5);
  EXPECT_NE(dynamic_cast<const HybridModel<double>*>(model::make_model(test::ref_backend(), g).get()), nullptr);
  // The dense default model stays a LlamaModel.
  const std::string smollm2 = BITRANK_SMOLLM2_GGUF;
  if (smollm2.empty()) return;
  const HostWeights d = store::load_weights(smollm2);
  EXPECT_NE(dynamic_cast<const model::LlamaModel<float>*>(model::make_model(test::cpu_backend(), d).get()), nullptr);
}

}  // namespace
}  // namespace bitrank
