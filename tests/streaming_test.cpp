// Streaming and the device-memory cap (DESIGN §7 "Streaming";
// model/streamed_weights.hpp, train/streaming.hpp), on every backend present:
//
//  * the cap: an allocation past it is an Error naming the cap, the bytes
//    held and the request; byte counts parse ("512MiB", "4GiB", plain bytes);
//  * BlockSlots: blocks come back from their slots with their images'
//    bytes, a modified slot is copied back before reuse, in any order;
//  * a streamed model (dense Llama, hybrid) gives the resident model's
//    logits bit for bit;
//  * the e2e trainer with streamed student and teacher equals the resident
//    trainer bit for bit (losses, the whole trained state) under a cap the
//    resident run exceeds (the resident run fails under it with the cap's
//    Error), for both families (dense Llama, hybrid);
//  * `compress` (layer-wise and e2e) of a tiny Llama of 12 blocks streams
//    under a cap its resident run exceeds — automatically when the
//    teacher's weights exceed the cap — and its step log and saved tensors
//    equal the resident run's bit for bit; --no-stream under the cap fails
//    with the cap's Error.
// The caps are set between the streamed and the resident run's peaks
// measured first on the same backend (the device's size classes and the
// cuBLASLt workspace differ from the cpu's byte counts): the test asserts
// that streaming needs clearly less (under 80 % of the resident run's use
// above what the backend held before), that the resident run fails under
// the cap and the streamed one does not.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bitrank/model/make.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/model/streamed_weights.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/store/bitrank_format.hpp"
#include "bitrank/store/load.hpp"
#include "bitrank/train/compress.hpp"
#include "bitrank/train/e2e.hpp"
#include "bitrank/train/report.hpp"
#include "bitrank/train/streaming.hpp"
#include "support/backends.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/model_files.hpp"
#include "support/student_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace bitrank {
namespace {

// Runs f, expecting the cap's Error.
template <class F>
void expect_cap_error(F&& f, const std::string& where) {
  try {
    f();
    ADD_FAILURE() << where << ": no Error under the cap";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device memory cap of"), std::string::npos) << where << ": " << m;
    EXPECT_NE(m.find("held"), std::string::npos) << where << ": " << m;
    EXPECT_NE(m.find("requested"), std::string::npos) << where << ": " << m;
    EXPECT_NE(m.find("--stream"), std::string::npos) << where << ": " << m;
  }
}

TEST(MemoryCap, AllocationPastTheCapIsAnErrorNamingIt) {
  for (const auto& name : test::available_backends()) {
    Memory& mem = *test::backend(name).memory;
    ASSERT_TRUE(mem.counts_bytes()) << name;
    const std::size_t held = mem.current_bytes(), mib = std::size_t{1} << 20;
    {
      const train::DeviceMemoryCap cap(mem, held + 9 * mib);
      Buffer<float> a(mem, 1 << 20);  // 4 MiB
      EXPECT_GE(mem.current_bytes(), held + 4 * mib) << name;
      try {
        Buffer<float> b(mem, 1 << 21);  // 8 MiB more
        ADD_FAILURE() << name << ": 12 MiB under a 9 MiB cap";
      } catch (const Error& e) {
        const std::string m = e.what();
        std::printf("  [cap] %s: %s\n", name.c_str(), m.c_str());
        EXPECT_NE(m.find(std::to_string(held + 9 * mib) + " bytes"), std::string::npos) << m;  // the cap
        EXPECT_NE(m.find("held"), std::string::npos) << m;
        EXPECT_NE(m.find("requested"), std::string::npos) << m;
      }
      a.reset();
      Buffer<float> c(mem, 1 << 21);  // fits once the first is released
      EXPECT_GE(mem.peak_bytes(), held + 8 * mib) << name;
    }
    EXPECT_EQ(mem.cap(), 0u) << name;
    Buffer<float> d(mem, 1 << 22);  // the cap is gone with its scope
  }
  EXPECT_THROW(host_memory().set_cap(1 << 20), Error);  // host memory does not count
  Memory& cpu = *test::backend("cpu").memory;
  Buffer<float> held(cpu, 1024);
  EXPECT_THROW(cpu.set_cap(16), Error);  // below what it holds
}

TEST(MemoryCap, ByteCountsParse) {
  EXPECT_EQ(parse_bytes("1073741824", "cap"), 1073741824u);
  EXPECT_EQ(parse_bytes("4GiB", "cap"), 4ull << 30);
  EXPECT_EQ(parse_bytes("512MiB", "cap"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1.5 GiB", "cap"), 3ull << 29);
  EXPECT_EQ(parse_bytes("64kb", "cap"), 64ull << 10);
  for (const char* bad : {"", "abc", "0", "-1", "1.5", "4XB", "GiB", "1e3", "4GiBs"})
    EXPECT_THROW(parse_bytes(bad, "cap"), Error) << bad;
  EXPECT_EQ(format_bytes(3ull << 29), "1.5 GiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

TEST(Streaming, ChoiceSaysWhichAndWhy) {
  EXPECT_TRUE(train::choose_streaming("on", 0, 10).stream);
  EXPECT_FALSE(train::choose_streaming("off", 5, 10).stream);
  EXPECT_TRUE(train::choose_streaming("auto", 5, 10).stream);
  EXPECT_NE(train::choose_streaming("auto", 5, 10).reason.find("exceed"), std::string::npos);
  EXPECT_FALSE(train::choose_streaming("auto", 50, 10).stream);
  EXPECT_FALSE(train::choose_streaming("auto", 0, 10).stream);
  EXPECT_THROW(train::choose_streaming("yes", 0, 10), Error);
}

// Blocks of different sizes, random bytes; sweeps up, down and at random
// see their images' bytes; a modified block's new bytes reach its image
// (when its slot is reused, and at flush).
TEST(Streaming, BlockSlotsCopyBlocksInAndBack) {
  for (const auto& name : test::available_backends()) {
    Memory& mem = *test::backend(name).memory;
    const std::vector<std::size_t> sizes{1000, 4096, 256, 3000, 77};
    model::BlockSlots slots(mem, sizes);
    std::vector<std::vector<std::byte>> want;
    XorShift g(5);
    for (std::size_t b = 0; b < sizes.size(); ++b) {
      std::vector<std::byte> v(sizes[b]);
      for (auto& x : v) x = static_cast<std::byte>(g.next_u64());
      std::memcpy(slots.image(static_cast<index_t>(b)), v.data(), v.size());
      want.push_back(std::move(v));
    }
    const index_t L = static_cast<index_t>(sizes.size());
    const auto check = [&](index_t b, index_t next) {
      std::byte* slot = slots.acquire(b, next);
      std::vector<std::byte> got(sizes[static_cast<std::size_t>(b)]);
      mem.download(got.data(), slot, got.size());
      EXPECT_TRUE(got == want[static_cast<std::size_t>(b)]) << name << " block " << b;
      return slot;
    };
    for (index_t b = 0; b < L; ++b) check(b, b + 1 < L ? b + 1 : -1);
    for (index_t b = L - 1; b >= 0; --b) check(b, b - 1);
    for (int i = 0; i < 20; ++i) {
      const index_t b = static_cast<index_t>(g.next_u64() % L);
      std::byte* slot = check(b, static_cast<index_t>(g.next_u64() % L));
      if (i % 3 == 0) {  // the block changes in its slot
        auto& v = want[static_cast<std::size_t>(b)];
        for (auto& x : v) x = static_cast<std::byte>(g.next_u64());
        mem.upload(slot, v.data(), v.size());
        slots.modified(b);
      }
    }
    slots.flush();
    for (index_t b = 0; b < L; ++b)
      EXPECT_EQ(std::memcmp(slots.image(b), want[static_cast<std::size_t>(b)].data(), sizes[static_cast<std::size_t>(b)]),
                0)
          << name << " image " << b;
    EXPECT_EQ(slots.slot_bytes(), 4096u);
    EXPECT_THROW(slots.acquire(L), Error);
  }
}

// A streamed model's logits are the resident model's, bit for bit: a
// dense Llama of 6 blocks and the tiny hybrid (GDN and attention blocks).
TEST(Streaming, StreamedModelsGiveTheResidentLogits) {
  for (const auto& name : test::available_backends()) {
    Backend<float>& be = test::backend(name);
    const auto dims = test::tiny_block_dims();
    std::vector<train::StudentBlockWeights> blocks;
    for (int b = 0; b < 6; ++b) blocks.push_back(test::random_student(dims, 32, 2, 100 + b));
    const model::HostWeights llama = test::teacher_of(dims, blocks, 300, true, 7);
    const model::HostWeights hybrid = test::tiny_hybrid::tiny_weights(false, 8);
    for (const model::HostWeights* w : {&llama, &hybrid}) {
      const auto tokens = test::tiny_hybrid::tiny_tokens(3 * 16, 9);
      const auto resident = model::make_model(be, *w);
      const auto streamed = model::make_model(be, *w, {}, true);
      EXPECT_FALSE(resident->streamed());
      EXPECT_TRUE(streamed->streamed());
      const std::vector<double> a = resident->logits(tokens, 16);
      for (int pass = 0; pass < 2; ++pass) {  // the second pass starts with the last blocks in the slots
        const std::vector<double> b = streamed->logits(tokens, 16);
        ASSERT_EQ(a.size(), b.size());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < a.size(); ++i) differ += std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i]);
        EXPECT_EQ(differ, 0u) << name << " " << w->config.model_type << " pass " << pass;
      }
    }
  }
}

// The e2e trainer of either family, streamed (student and teacher)
// against resident: four steps on two batches, the loss evaluated, the
// whole state downloaded (through the slots). An odd number of blocks: each
// step's sweeps then move every block between the two slots (with an even
// number a block would keep its slot, and a missed rebind go unseen).
template <class Student>
void e2e_streamed_equals_resident(Backend<float>& be, const model::HostWeights& teacher_w,
                                  const typename train::E2eTrainerOf<Student>::Weights& init, const std::string& family) {
  using Teacher = typename train::E2eFamily<Student>::Teacher;
  Memory& mem = *be.memory;
  const std::string tag = be.name + " " + family;
  const index_t window = 16, n = 2 * window;
  train::E2eOptions opt;
  opt.optim.signs.lr = 0.05f;
  const std::vector<std::vector<std::int32_t>> batches{test::tiny_hybrid::tiny_tokens(n, 12),
                                                       test::tiny_hybrid::tiny_tokens(n, 13)};
  struct Run {
    std::vector<double> losses;
    std::vector<std::int64_t> flips;
    std::vector<std::byte> state;
    std::size_t peak = 0;
  };
  const std::size_t base = mem.current_bytes();
  const auto run = [&](bool stream) {
    mem.reset_peak();
    Run r;
    Teacher teacher(be, teacher_w, {}, stream);
    teacher.vocab_slice = 128;
    train::E2eTrainerOf<Student> tr(teacher, init, train::e2e_scaler_options(n), opt, SignOptimizer::factored_adam,
                                    0.25f, stream);
    EXPECT_EQ(tr.streamed(), stream);
    for (int s = 0; s < 4; ++s) {
      const train::E2eReport rep = tr.step(batches[static_cast<std::size_t>(s % 2)], window);
      r.losses.push_back(rep.loss.total);
      r.flips.push_back(rep.step.flips);
    }
    r.losses.push_back(tr.evaluate(batches[0], window).total);
    r.state = tr.download_state();
    r.peak = mem.peak_bytes() - base;
    return r;
  };
  const Run resident = run(false), streamed = run(true);
  std::printf("  [streaming] e2e %s: peak above the backend's own %.2f MiB resident, %.2f MiB streamed\n",
              tag.c_str(), static_cast<double>(resident.peak) / (1 << 20),
              static_cast<double>(streamed.peak) / (1 << 20));
  EXPECT_LT(static_cast<double>(streamed.peak), 0.8 * static_cast<double>(resident.peak)) << tag;
  EXPECT_GT(resident.flips.back(), 0) << tag << ": signs must move for the test to bite";
  const std::size_t cap = base + (resident.peak + streamed.peak) / 2;
  {
    const train::DeviceMemoryCap guard(mem, cap);
    const Run capped = run(true);
    for (std::size_t i = 0; i < resident.losses.size(); ++i)
      EXPECT_EQ(std::bit_cast<std::uint64_t>(capped.losses[i]), std::bit_cast<std::uint64_t>(resident.losses[i]))
          << tag << " step " << i;
    EXPECT_EQ(capped.flips, resident.flips) << tag;
    EXPECT_TRUE(capped.state == resident.state) << tag << ": the streamed student's state differs";
    expect_cap_error([&] { run(false); }, tag + " e2e resident");
  }
}

// The dense Llama family: 7 blocks of tiny_block_dims, the student at rank 64.
TEST(Streaming, E2eStreamedEqualsResidentUnderACap) {
  const auto dims = test::tiny_block_dims();
  std::vector<train::StudentBlockWeights> teacher_blocks, student_blocks;
  for (std::uint64_t b = 0; b < 7; ++b) {
    teacher_blocks.push_back(test::random_student(dims, 32, 2, 200 + b));
    student_blocks.push_back(test::random_student(dims, 64, 2, 300 + b));
  }
  const model::HostWeights teacher = test::teacher_of(dims, teacher_blocks, 300, true, 11);
  const train::E2eStudentWeights init{student_blocks, {}};
  for (const auto& name : test::available_backends())
    e2e_streamed_equals_resident<train::StudentLlamaBlock<float>>(test::backend(name), teacher, init, "llama");
}

// The hybrid family: the tiny hybrid with 7 blocks (GDN ×3, attention, GDN
// ×3), the student by Dual-SVID at rank 64 of another random hybrid's blocks
// (the frozen GDN tensors stream with each block's arena).
TEST(Streaming, HybridE2eStreamedEqualsResidentUnderACap) {
  namespace th = test::tiny_hybrid;
  const nlohmann::json seven{{"text_config", {{"num_hidden_layers", 7}}}};
  const model::HostWeights teacher = th::tiny_weights(false, 221, seven), other = th::tiny_weights(false, 222, seven);
  ASSERT_EQ(teacher.config.num_layers, 7);
  train::HybridE2eStudentWeights init;
  for (index_t b = 0; b < 7; ++b)
    init.blocks.push_back(train::hybrid_student_init(other, b, blr::InitOptions{.rank = 64, .paths = 2}));
  for (const auto& name : test::available_backends())
    e2e_streamed_equals_resident<train::StudentHybridBlock<float>>(test::backend(name), teacher, init, "hybrid");
}

// 12 blocks, hidden 128, 4 heads / 2 kv of 32, MLP 512: the blocks' weights
// (11.3 MiB) outweigh the tied head (1.5 MiB).
constexpr const char* kConfig12 = R"({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 12,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 3001,
    "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": true})";

void same_files(const std::filesystem::path& a, const std::filesystem::path& b, const std::string& what) {
  const auto la = train::read_step_log(a.string() + ".steps.jsonl"), lb = train::read_step_log(b.string() + ".steps.jsonl");
  ASSERT_EQ(la.size(), lb.size()) << what;
  for (std::size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(la[i].loss), std::bit_cast<std::uint64_t>(lb[i].loss)) << what << " step " << i;
    EXPECT_EQ(la[i].flips, lb[i].flips) << what << " step " << i;
  }
  const store::CompressedModel ma = store::load_bitrank(a), mb = store::load_bitrank(b);
  ASSERT_EQ(ma.blr.size(), mb.blr.size()) << what;
  for (const auto& [name, w] : ma.blr) {
    const blr::HostBlrMatrix& v = mb.blr.at(name);
    ASSERT_EQ(w.paths.size(), v.paths.size()) << what << " " << name;
    for (std::size_t p = 0; p < w.paths.size(); ++p) {
      EXPECT_EQ(w.paths[p].sign_u, v.paths[p].sign_u) << what << " " << name;
      EXPECT_EQ(w.paths[p].sign_v, v.paths[p].sign_v) << what << " " << name;
      EXPECT_EQ(w.paths[p].h, v.paths[p].h) << what << " " << name;
      EXPECT_EQ(w.paths[p].l, v.paths[p].l) << what << " " << name;
      EXPECT_EQ(w.paths[p].g, v.paths[p].g) << what << " " << name;
    }
  }
  for (const auto& [name, t] : ma.dense) EXPECT_EQ(t.values, mb.dense.at(name).values) << what << " " << name;
}

void compress_streams_under_a_cap(Backend<float>& be, const std::string& objective) {
  test::TempDir tmp;
  const std::string tag = be.name + " " + objective;
  train::CompressOptions o;
  o.model = test::random_llama_dir(tmp.path(), kConfig12, 17);
  o.texts = {tmp.path() / "train.txt"};
  o.eval_text = tmp.path() / "eval.txt";
  std::ofstream(o.texts.front()) << test::word_text(1, 20);
  std::ofstream(o.eval_text) << test::word_text(2, 6);
  o.objective = objective;
  o.bpw = 1.13;  // 2 paths: rank 32 everywhere (1.1292 bpw at hidden 128), the smallest model there is
  o.paths = 2;
  o.steps = objective == "e2e" ? 4 : 2;
  o.seq_len = 32;
  o.windows_per_step = 2;
  o.eval_windows = 1;
  o.eval_seq_len = 64;
  o.device = be.name;
  o.train.signs.lr = 0.05f;
  const std::size_t base = be.memory->current_bytes();
  const auto job = [&](const std::string& out, const std::string& stream, std::size_t cap) {
    train::CompressOptions j = o;
    j.out = tmp.path() / out;
    j.stream = stream;
    j.device_memory_cap = cap;
    return train::compress(j, be);
  };
  const auto peak = [&](const nlohmann::ordered_json& s) {
    return s.at("peak_device_memory_bytes").get<std::size_t>() - base;
  };
  const auto resident = job("resident.bitrank", "off", 0), streamed = job("streamed.bitrank", "on", 0);
  EXPECT_FALSE(resident.at("streaming").get<bool>());
  EXPECT_TRUE(streamed.at("streaming").get<bool>());
  std::printf("  [streaming] compress %s: peak above the backend's own %.2f MiB resident, %.2f MiB streamed\n",
              tag.c_str(), static_cast<double>(peak(resident)) / (1 << 20),
              static_cast<double>(peak(streamed)) / (1 << 20));
  EXPECT_LT(static_cast<double>(peak(streamed)), 0.8 * static_cast<double>(peak(resident))) << tag;
  same_files(tmp.path() / "resident.bitrank", tmp.path() / "streamed.bitrank", tag + " streamed");

  // A quarter of the way from the streamed peak to the resident one.
  const std::size_t cap = base + peak(streamed) + (peak(resident) - peak(streamed)) / 4;
  const std::size_t teacher_bytes = model::model_device_bytes<float>(store::load_weights(o.model));
  // The teacher's weights alone exceed the cap (cpu's exact byte counts;
  // the device's size classes may round past them), and then auto streams.
  if (be.name == "cpu" && objective == "layer") {
    EXPECT_GT(teacher_bytes, cap) << tag;
  }
  const std::string mode = teacher_bytes > cap ? "auto" : "on";
  const auto capped = job("capped.bitrank", mode, cap);
  std::printf("  [streaming] compress %s: cap %.2f MiB (teacher weights %.2f MiB): %s, %s\n", tag.c_str(),
              static_cast<double>(cap) / (1 << 20), static_cast<double>(teacher_bytes) / (1 << 20), mode.c_str(),
              capped.at("streaming_reason").get<std::string>().c_str());
  EXPECT_TRUE(capped.at("streaming").get<bool>()) << tag;
  EXPECT_EQ(capped.at("device_memory_cap_bytes").get<std::size_t>(), cap) << tag;
  EXPECT_LE(capped.at("peak_device_memory_bytes").get<std::size_t>(), cap) << tag;
  same_files(tmp.path() / "resident.bitrank", tmp.path() / "capped.bitrank", tag + " capped");
  expect_cap_error([&] { job("refused.bitrank", "off", cap); }, tag + " --no-stream");
  EXPECT_EQ(be.memory->cap(), 0u) << tag;  // the run's cap is gone with it
}

TEST(Streaming, CompressLayerwiseStreamsUnderACap) {
  for (const auto& name : test::available_backends()) compress_streams_under_a_cap(test::backend(name), "layer");
}

TEST(Streaming, CompressE2eStreamsUnderACap) {
  for (const auto& name : test::available_backends()) compress_streams_under_a_cap(test::backend(name), "e2e");
}

}  // namespace
}  // namespace bitrank
