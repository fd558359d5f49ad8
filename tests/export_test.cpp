// `bitrank export` (store/hf_export.hpp): a compressed tiny model (random
// BLR matrices with two paths in place of projections, F16 scales as
// compress saves them) written as a Hugging Face directory and read back by
// bitrank's own HF loaders.
//   - Weights: every exported projection equals the f64 reconstruction Ŵ of
//     its BLR matrix rounded once to f32 — bit for bit, so the tolerance is
//     half an f32 ulp of Ŵ (the max |Ŵ_f32 − Ŵ_f64| is printed); every other
//     tensor equals the stored one exactly.
//   - Model: on the f64 reference the NLL of the export equals the .bitrank
//     file's on the same random tokens within rel 1e-6 (the only difference
//     is Ŵ's f32 rounding; measured 2e-9 … 7e-8), and the export's NLL on the
//     f32 CPU backend (an f32 GEMM) is that exact value within rel 1e-5
//     (measured 2e-8 … 8e-7). The .bitrank file's own f32 forward is not the
//     yardstick: the f32 BLR op multiplies f16 operands (ops/blr.hpp,
//     Numerics) and lands 2e-5 … 7e-4 from the exact NLL on these random
//     models, whose logits are large; it is printed beside.
//   Dense Llama (tied and untied), Qwen3.5 and Qwen3-Next (fused
//   in_proj_qkvz / in_proj_ba) hybrids.
//   - Tokenizer: tokenizer.json reads back to the same spec (bos / eos ids
//     only where added) and encodes text the same.
//   - The command: the files, eval's perplexity of the directory equal to the
//     file's, and bad inputs (missing, not a bitrank file, a GGUF or HF
//     directory, a non-empty or unwritable output) refused with one line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/dtype.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/model/make.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/hf_export.hpp"
#include "bitrank/store/load.hpp"
#include "support/backends.hpp"
#include "support/command.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/model_files.hpp"
#include "support/student_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace bitrank {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(BITRANK_TEST_DATA_DIR);

// Every compressible projection of the model (model::is_llama_projection's and
// the hybrid's GDN and attention ones).
std::vector<std::string> all_projections(const model::HostWeights& w) {
  std::vector<std::string> names;
  for (const blr::RankPlan& p : model::compressible_projections(w.config)) names.push_back(p.name);
  return names;
}

store::CompressedModel compressed(model::HostWeights w, std::uint64_t seed) {
  store::CompressedModel cm;
  cm.blr = test::compress_randomly(w, all_projections(w), seed);
  cm.config = w.config;
  cm.tokenizer = test::byte_tokenizer(w.config.vocab_size);
  cm.dense = std::move(w.tensors);
  return cm;  // storage: F16 scales, F32 dense (the format's default)
}

struct Case {
  std::string name;
  store::CompressedModel model;
};

std::vector<Case> cases() {
  const auto dims = test::tiny_block_dims();
  auto llama = [&](bool tied, std::uint64_t seed) {
    return test::teacher_of(dims, {test::random_student(dims, 32, 1, seed), test::random_student(dims, 32, 1, seed + 1)},
                            300, tied, seed + 2);
  };
  model::HostWeights next = test::tiny_hybrid::tiny_weights(false, 44);
  next.config = test::tiny_hybrid::tiny_config(false, true);
  std::vector<Case> out;
  out.push_back({"llama_untied", compressed(llama(false, 11), 100)});
  out.push_back({"llama_tied", compressed(llama(true, 21), 200)});
  out.push_back({"qwen3_5_tied", compressed(test::tiny_hybrid::tiny_weights(true, 33), 300)});
  out.push_back({"qwen3_next", compressed(std::move(next), 400)});
  return out;
}

std::vector<std::int32_t> random_tokens(index_t n, index_t vocab, std::uint64_t seed) {
  XorShift rng(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = static_cast<std::int32_t>(rng.next_u64() % static_cast<std::uint64_t>(vocab));
  return t;
}

// The .bitrank file of `cm` in `dir` and its export to dir/hf (f32).
struct Exported {
  fs::path file, hf;
  store::CompressedModel loaded;  // the file as read back: the scales as stored
};

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

// NLL per token of the same tokens: the .bitrank file's model (its BLR
// projections) and the export's dense one, on the f64 reference and the f32
// CPU backend.
struct Nlls {
  double blr64, dense64, blr32, dense32;
};
Nlls nlls(const store::LoadedWeights& file, const model::HostWeights& dense, std::span<const std::int32_t> tokens,
          index_t window) {
  auto per_token = [&](const auto& m) {
    const model::Nll n = m->nll(tokens, window);
    return n.sum / static_cast<double>(n.count);
  };
  return {per_token(model::make_model(test::ref_backend(), file.weights, file.blr)),
          per_token(model::make_model(test::ref_backend(), dense)),
          per_token(model::make_model(test::cpu_backend(), file.weights, file.blr)),
          per_token(model::make_model(test::cpu_backend(), dense))};
}

Exported save_and_export(const store::CompressedModel& cm, const fs::path& dir, const std::string& name) {
  Exported e{dir / (name + ".bitrank"), dir / (name + "_hf"), {}};
  store::save_bitrank(e.file, cm);
  e.loaded = store::load_bitrank(e.file);
  store::export_hf(e.loaded, e.file.string(), e.hf, {});
  return e;
}

TEST(Export, WeightsAreTheReconstructionAndTheForwardIsTheFiles) {
  const test::TempDir dir;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Exported e = save_and_export(c.model, dir.path(), c.name);
    const model::HostWeights hf = store::load_weights(e.hf);  // bitrank's HF loader of the family
    ASSERT_EQ(hf.config.family, c.model.config.family);

    // (a) weights: each projection is Ŵ rounded to f32, the rest as stored.
    double max_abs = 0, max_wide = 0;
    for (const auto& [name, m] : e.loaded.blr) {
      const std::vector<double> wide = blr::reconstruct(m);
      const model::HostTensor& got = hf.at(name + ".weight");
      ASSERT_EQ(got.shape, (std::vector<index_t>{m.m, m.n})) << name;
      for (std::size_t i = 0; i < wide.size(); ++i) {
        ASSERT_EQ(got.values[i], static_cast<float>(wide[i])) << name << " [" << i << "]";
        max_abs = std::max(max_abs, std::abs(static_cast<double>(got.values[i]) - wide[i]));
        max_wide = std::max(max_wide, std::abs(wide[i]));
      }
    }
    for (const auto& [name, t] : e.loaded.dense) {
      ASSERT_EQ(hf.at(name).shape, t.shape) << name;
      EXPECT_EQ(hf.at(name).values, t.values) << name;
    }
    EXPECT_EQ(hf.tensors.size(), e.loaded.dense.size() + e.loaded.blr.size());
    std::printf("[export] %s: %zu BLR matrices, max |W_f32 - W_f64| = %.3g (max |W| %.3g)\n", c.name.c_str(),
                e.loaded.blr.size(), max_abs, max_wide);

    // (b) the forward: NLL of the export against the file's BLR model.
    const store::LoadedWeights file = store::load_any(e.file);
    const auto tokens = random_tokens(2 * 48, c.model.config.vocab_size, 7);
    const Nlls n = nlls(file, hf, tokens, 48);
    std::printf("[export] %s: NLL/token, f64 reference: bitrank %.12f export %.12f (rel %.2g); f32 cpu: export %.9f "
                "(rel %.2g to the f64), bitrank's BLR op %.9f (rel %.2g: f16 operands)\n",
                c.name.c_str(), n.blr64, n.dense64, rel(n.dense64, n.blr64), n.dense32, rel(n.dense32, n.blr64),
                n.blr32, rel(n.blr32, n.blr64));
    EXPECT_LE(rel(n.dense64, n.blr64), 1e-6);
    EXPECT_LE(rel(n.dense32, n.blr64), 1e-5);
  }
}

// The checkpoint as transformers reads it: names, format metadata, shapes of
// the layouts that differ from bitrank's, config keys.
TEST(Export, TheDirectoryIsInTransformersLayout) {
  const test::TempDir dir;
  std::vector<Case> all = cases();
  for (const Case& c : all) {
    SCOPED_TRACE(c.name);
    const Exported e = save_and_export(c.model, dir.path(), c.name);
    std::vector<std::string> files;
    for (const auto& f : fs::directory_iterator(e.hf)) files.push_back(f.path().filename().string());
    std::ranges::sort(files);
    EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json",
                                               "tokenizer_config.json"}));
    const io::Safetensors st = io::Safetensors::open(e.hf / "model.safetensors");
    EXPECT_EQ(st.metadata().at("format"), "pt");
    for (const io::TensorInfo& t : st.tensors()) EXPECT_EQ(t.dtype, io::StDType::F32) << t.name;
    EXPECT_TRUE(st.contains("model.embed_tokens.weight"));
    EXPECT_TRUE(st.contains("model.norm.weight"));
    EXPECT_EQ(st.contains("lm_head.weight"), !c.model.config.tie_word_embeddings);
    const nlohmann::json config = nlohmann::json::parse(std::ifstream(e.hf / "config.json"));
    EXPECT_EQ(config.at("bos_token_id"), nullptr);  // the byte tokenizer adds no BOS
    EXPECT_EQ(config.at("eos_token_id"), 256);
    EXPECT_EQ(config.at("dtype"), "float32");
    if (!c.model.config.is_hybrid()) {
      EXPECT_TRUE(st.contains("model.layers.1.self_attn.q_proj.weight"));
      EXPECT_TRUE(st.contains("model.layers.1.post_attention_layernorm.weight"));
      EXPECT_EQ(config.at("architectures")[0], "LlamaForCausalLM");
      EXPECT_EQ(config.at("model_type"), "llama");
      continue;
    }
    namespace th = test::tiny_hybrid;
    EXPECT_EQ(st.info("model.layers.0.linear_attn.conv1d.weight").shape, (std::vector<index_t>{th::kC, 1, th::kK}));
    EXPECT_TRUE(st.contains("model.layers.3.self_attn.q_norm.weight"));
    EXPECT_EQ(config.at("rope_parameters").at("partial_rotary_factor"), 0.25);
    if (c.model.config.family == io::ModelFamily::qwen3_5) {
      EXPECT_EQ(config.at("model_type"), "qwen3_5_text");
      EXPECT_EQ(config.at("architectures")[0], "Qwen3_5ForCausalLM");
      EXPECT_TRUE(st.contains("model.layers.0.linear_attn.in_proj_qkv.weight"));
      EXPECT_FALSE(st.contains("model.layers.0.linear_attn.in_proj_qkvz.weight"));
    } else {
      EXPECT_EQ(config.at("model_type"), "qwen3_next");
      EXPECT_EQ(config.at("architectures")[0], "Qwen3NextForCausalLM");
      EXPECT_EQ(st.info("model.layers.0.linear_attn.in_proj_qkvz.weight").shape,
                (std::vector<index_t>{2 * th::kHk * th::kDk + 2 * th::kHv * th::kDk, th::kD}));
      EXPECT_EQ(st.info("model.layers.0.linear_attn.in_proj_ba.weight").shape,
                (std::vector<index_t>{2 * th::kHv, th::kD}));
      EXPECT_FALSE(st.contains("model.layers.0.linear_attn.in_proj_qkv.weight"));
    }
  }
}

// bf16 and f16: each value the f32 export's rounded once more (nearest even).
TEST(Export, HalfPrecisionRoundsTheF32ValuesOnce) {
  const test::TempDir dir;
  const Case c = cases().front();
  const Exported e = save_and_export(c.model, dir.path(), c.name);
  const model::HostWeights f32 = store::load_weights(e.hf);
  using Round = float (*)(float);
  const Round bf16_round = [](float v) { return to_f32(to_bf16(v)); }, f16_round = [](float v) { return round_f16(v); };
  for (const auto& [dtype, round] : {std::pair{io::StDType::BF16, bf16_round}, std::pair{io::StDType::F16, f16_round}}) {
    SCOPED_TRACE(std::string(io::st_dtype_name(dtype)));
    const fs::path out = dir.path() / std::string(io::st_dtype_name(dtype));
    store::export_hf(e.loaded, "tiny", out, {.dtype = dtype, .force = false, .tokenizer = {}});
    const io::Safetensors st = io::Safetensors::open(out / "model.safetensors");
    EXPECT_EQ(st.info("model.layers.0.self_attn.q_proj.weight").dtype, dtype);
    const model::HostWeights half = store::load_weights(out);
    for (const auto& [name, t] : f32.tensors)
      for (std::size_t i = 0; i < t.values.size(); ++i)
        ASSERT_EQ(half.at(name).values[i], round(t.values[i])) << name << " [" << i << "]";
  }
}

// tokenizer.json reads back to the spec (bos / eos ids only where added) and
// encodes text the same: the test BPE tokenizers of both pre-tokenizer
// families, the byte tokenizer with a BOS added, SmolLM2's GGUF tokenizer.
TEST(Export, TokenizerJsonReadsBackToTheSpec) {
  std::vector<std::pair<std::string, io::TokenizerSpec>> specs{
      {"smollm.json", io::load_tokenizer_json(kData / "tokenizer" / "smollm.json")},
      {"qwen2.json", io::load_tokenizer_json(kData / "tokenizer" / "qwen2.json")},
      {"byte, add_bos", test::byte_tokenizer(300, true)}};
  io::TokenizerSpec llama3 = specs[1].second;
  llama3.pre = io::PreTokenizer::llama3;
  llama3.add_prefix_space = true;
  specs.emplace_back("qwen2.json as llama3", llama3);
  if (const std::string gguf = BITRANK_SMOLLM2_GGUF; !gguf.empty())
    specs.emplace_back("SmolLM2 GGUF", io::tokenizer_spec_from_gguf(io::GgufFile::open(gguf, {.verify_data = false})));
  const std::string text = "Hello world, 12345 tokens! <|im_start|>user\n  don't   stop\tnow — ÿ é 中文 <user tag>\r\n";
  for (const auto& [name, spec] : specs) {
    SCOPED_TRACE(name);
    const io::TokenizerSpec back = io::parse_tokenizer_json(io::tokenizer_spec_to_hf_json(spec), name);
    io::TokenizerSpec want = spec;
    if (!want.add_bos) want.bos_id = -1;
    if (!want.add_eos) want.eos_id = -1;
    EXPECT_EQ(back, want);
    const io::Tokenizer a(spec), b(back);
    EXPECT_EQ(a.encode(text), b.encode(text));
    EXPECT_EQ(a.encode(text, {.parse_special = true, .add_special = true}),
              b.encode(text, {.parse_special = true, .add_special = true}));
    const nlohmann::json config = nlohmann::json::parse(io::hf_tokenizer_config_json(spec, 2048));
    EXPECT_EQ(config.at("eos_token"), spec.eos_id < 0 ? nlohmann::json(nullptr) : nlohmann::json(spec.tokens[spec.eos_id]));
    EXPECT_EQ(config.at("model_max_length"), 2048);
  }
  io::TokenizerSpec twice = test::byte_tokenizer(300);
  twice.tokens[299] = twice.tokens[298];
  EXPECT_THROW(
      {
        try {
          (void)io::tokenizer_spec_to_hf_json(twice);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("repeats token 298"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

// ---- the command --------------------------------------------------------------

std::string quote(const std::string& a) {
  std::string q = "'";
  for (const char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::pair<int, std::string> cli(const std::vector<std::string>& args) {
  std::string cmd = fmt::format("timeout 120 {}", quote(BITRANK_CLI));
  for (const std::string& a : args) {
    cmd += ' ';
    cmd += quote(a);
  }
  return test::run_command(cmd + " 2>&1 </dev/null");
}

// Exit status 1 (an Error, not a crash or CLI11's usage status), one line naming `fragment`.
#define EXPECT_EXPORT_REFUSED(result, fragment)                                                      \
  do {                                                                                               \
    const auto& r_ = (result);                                                                       \
    EXPECT_EQ(r_.first, 1) << r_.second;                                                             \
    EXPECT_NE(r_.second.find(fragment), std::string::npos) << "'" << (fragment) << "' not in: " << r_.second; \
    EXPECT_EQ(std::count(r_.second.begin(), r_.second.end(), '\n'), 1) << r_.second;                 \
  } while (0)

TEST(Export, TheCommandWritesADirectoryEvalScoresAsTheFile) {
  const test::TempDir dir;
  const Case c = cases().front();
  const fs::path file = dir.path() / "m.bitrank", out = dir.path() / "hf";
  store::save_bitrank(file, c.model);
  const auto r = cli({"export", "--model", file.string(), "-o", out.string()});
  ASSERT_EQ(r.first, 0) << r.second;
  const nlohmann::json summary = nlohmann::json::parse(r.second);
  EXPECT_EQ(summary.at("blr_expanded"), c.model.blr.size());
  EXPECT_EQ(summary.at("dtype"), "f32");
  EXPECT_EQ(summary.at("files").size(), 4u);

  // eval (f32 CPU) of the directory: the perplexity of the file's model
  // computed exactly (f64 reference, same windows). eval of the file itself
  // runs the BLR op on f16 operands (ops/blr.hpp) and is only near it.
  const auto tokens = random_tokens(4 * 64, c.model.config.vocab_size, 9);
  const fs::path ids = dir.path() / "ids.txt";
  {
    std::ofstream f(ids);
    for (const std::int32_t t : tokens) f << t << ' ';
  }
  auto eval = [&](const fs::path& model) {
    const auto [status, text] =
        test::run_command(fmt::format("{} eval --model {} --ids {} --seq-len 64 2>/dev/null", quote(BITRANK_CLI),
                                      quote(model.string()), quote(ids.string())));
    EXPECT_EQ(status, 0) << text;
    return nlohmann::json::parse(text).at("ppl").get<double>();
  };
  const Nlls n = nlls(store::load_any(file), store::load_weights(out), tokens, 64);
  const double exact = std::exp(n.blr64), ppl_dir = eval(out), ppl_file = eval(file);
  std::printf("[export] eval perplexity: export %.9g, exact (f64) %.9g (rel %.2g); .bitrank on f32 %.9g (rel %.2g)\n",
              ppl_dir, exact, rel(ppl_dir, exact), ppl_file, rel(ppl_file, exact));
  EXPECT_LE(rel(ppl_dir, exact), 1e-5);
  EXPECT_LE(rel(ppl_file, exact), 1e-2);

  // A non-empty directory needs --force, which keeps the files it does not write.
  EXPECT_EXPORT_REFUSED(cli({"export", "--model", file.string(), "-o", out.string()}),
                        "the directory exists and is not empty (4 entries, first 'config.json')");
  std::ofstream(out / "README.md") << "mine\n";
  const auto forced = cli({"export", file.string(), "-o", out.string(), "--force", "--dtype", "bf16"});
  ASSERT_EQ(forced.first, 0) << forced.second;
  EXPECT_TRUE(fs::exists(out / "README.md"));
  EXPECT_EQ(io::Safetensors::open(out / "model.safetensors").info("model.norm.weight").dtype, io::StDType::BF16);
  for (const auto& f : fs::directory_iterator(out))
    EXPECT_FALSE(f.path().filename().string().starts_with(".bitrank-export")) << f.path();
}

// A model without a tokenizer: a warning and no tokenizer files, unless
// --tokenizer names a model to take one from.
TEST(Export, TheTokenizerComesFromTheModelOrFromTokenizer) {
  const test::TempDir dir;
  Case c = cases().front();
  const fs::path with = dir.path() / "with.bitrank", without = dir.path() / "without.bitrank";
  store::save_bitrank(with, c.model);
  c.model.tokenizer.reset();
  store::save_bitrank(without, c.model);
  const auto bare = cli({"export", "--model", without.string(), "-o", (dir.path() / "bare").string()});
  ASSERT_EQ(bare.first, 0) << bare.second;
  EXPECT_NE(bare.second.find("holds no tokenizer; tokenizer.json is not written"), std::string::npos) << bare.second;
  EXPECT_FALSE(fs::exists(dir.path() / "bare" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir.path() / "bare" / "config.json"));
  const fs::path taken = dir.path() / "taken";
  const auto r = cli({"export", "--model", without.string(), "-o", taken.string(), "--tokenizer", with.string()});
  ASSERT_EQ(r.first, 0) << r.second;
  EXPECT_EQ(io::load_model_tokenizer(taken).encode("Once upon a time"),
            io::Tokenizer(test::byte_tokenizer(c.model.config.vocab_size)).encode("Once upon a time"));
}

TEST(Export, BadInputsAreRefusedWithOneLine) {
  const test::TempDir dir;
  const Case c = cases().front();
  const fs::path file = dir.path() / "m.bitrank";
  store::save_bitrank(file, c.model);
  const std::string out = (dir.path() / "out").string();

  EXPECT_EXPORT_REFUSED(cli({"export", "--model", (dir.path() / "none.bitrank").string(), "-o", out}),
                        "none.bitrank: no such file");
  const fs::path text = dir.path() / "notes.bitrank";
  std::ofstream(text) << "not a model at all\n";
  EXPECT_EXPORT_REFUSED(cli({"export", "--model", text.string(), "-o", out}), "notes.bitrank");
  // A truncated bitrank file: the format's checks, nothing created.
  const fs::path cut = dir.path() / "cut.bitrank";
  fs::copy_file(file, cut);
  fs::resize_file(cut, fs::file_size(file) / 2);
  EXPECT_EXPORT_REFUSED(cli({"export", "--model", cut.string(), "-o", out}), "cut.bitrank");
  // Uncompressed models are named as what they are.
  fs::create_directories(dir.path() / "llama");
  const fs::path hf_dir = test::random_llama_dir(dir.path() / "llama", R"({"model_type": "llama", "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 3001,
      "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": true})", 3);
  EXPECT_EXPORT_REFUSED(cli({"export", "--model", hf_dir.string(), "-o", out}),
                        "is a Hugging Face directory, not a bitrank model");
  EXPECT_FALSE(fs::exists(out));

  // Outputs that cannot be written.
  EXPECT_EXPORT_REFUSED(cli({"export", "--model", file.string(), "-o", text.string()}),
                        "exists and is not a directory");
  EXPECT_EXPORT_REFUSED(cli({"export", "--model", file.string(), "-o", (text / "sub").string()}),
                        "is not a directory");
  EXPECT_EXPORT_REFUSED(cli({"export", "--model", file.string(), "-o", (dir.path() / "a" / "b").string()}),
                        "does not exist");
  if (::geteuid() != 0) {  // root writes anywhere
    const fs::path locked = dir.path() / "locked";
    fs::create_directories(locked);
    ::chmod(locked.c_str(), 0555);
    EXPECT_EXPORT_REFUSED(cli({"export", "--model", file.string(), "-o", (locked / "hf").string()}),
                          "cannot create the directory");
    EXPECT_EXPORT_REFUSED(cli({"export", "--model", file.string(), "-o", locked.string()}),
                          "is not writable");
    ::chmod(locked.c_str(), 0755);
  }

  // Options: CLI11's own refusals (status other than 0, no crash).
  const auto bad_dtype = cli({"export", "--model", file.string(), "-o", out, "--dtype", "q4"});
  EXPECT_NE(bad_dtype.first, 0);
  EXPECT_NE(bad_dtype.first, -1);
  EXPECT_NE(bad_dtype.second.find("--dtype"), std::string::npos) << bad_dtype.second;
  const auto no_out = cli({"export", "--model", file.string()});
  EXPECT_NE(no_out.first, 0);
  EXPECT_NE(no_out.second.find("--out"), std::string::npos) << no_out.second;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace bitrank
