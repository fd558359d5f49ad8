// Trainer state: JSON round trip bit for bit (u64 seeds, awkward doubles),
// strict reading (missing, unknown, mistyped keys, broken invariants), and
// the resume property of the model-independent plumbing: a loop of data
// windows + grad scaler (with injected NaN steps) + schedule, stopped,
// saved through JSON and resumed, continues exactly like the uninterrupted run.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "bitrank/rng.hpp"
#include "bitrank/train/state.hpp"
#include "support/expect.hpp"

namespace bitrank::train {
namespace {

using test::expect_error;

TrainerState sample_state() {
  TrainerState s;
  s.step = 1200;
  s.applied_steps = 1197;
  s.flip_seed = 0xFFFFFFFFFFFFFFFFull;  // above 2^63: must stay exact
  s.tokens = 4915200;
  s.seconds = 0.1 + 0.2;  // not a short decimal
  s.data = {.seed = 0x8000000000000001ull, .epoch = 3, .index = 17, .seq_len = 512, .windows_per_step = 8,
            .windows = 6102, .fingerprint = 0x0123456789abcdefull};
  s.scaler = {.log2_scale = -3, .clean_steps = 37, .consecutive_skips = 1, .skipped_total = 3};
  s.schedule = {.peak = 1.0 / 3.0, .warmup_steps = 100, .total_steps = 5000, .floor_fraction = 1e-300};
  return s;
}

TEST(TrainState, JsonRoundTripIsExact) {
  const TrainerState s = sample_state();
  const std::string j = trainer_state_to_json(s);
  EXPECT_NE(j.find("\"format\":\"bitrank.trainer_state\",\"version\":1"), std::string::npos) << j;
  EXPECT_NE(j.find("\"fingerprint\":\"0123456789abcdef\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"flip_seed\":18446744073709551615"), std::string::npos) << j;
  const TrainerState back = trainer_state_from_json(j, "ckpt");
  EXPECT_EQ(back, s);  // every field, doubles bit for bit
  EXPECT_EQ(trainer_state_to_json(back), j);
  // Random doubles too.
  XorShift g(5);
  for (int i = 0; i < 200; ++i) {
    TrainerState t = s;
    t.seconds = std::abs(g.next_signed()) * std::pow(10.0, static_cast<int>(g.next_u64() % 40) - 20);
    t.schedule.peak = std::abs(g.next_signed()) + 1e-9;
    t.schedule.floor_fraction = std::abs(g.next_signed());
    ASSERT_EQ(trainer_state_from_json(trainer_state_to_json(t), "r"), t);
  }
}

// Replace `from` (which must occur once) in the sample's JSON.
std::string edited(const std::string& from, const std::string& to) {
  std::string j = trainer_state_to_json(sample_state());
  const std::size_t at = j.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(j.find(from, at + 1), std::string::npos) << from;
  return j.replace(at, from.size(), to);
}

TEST(TrainState, RejectsBadJson) {
  auto bad = [](const std::string& text, const std::string& needle) {
    expect_error([&] { trainer_state_from_json(text, "run.ckpt"); }, needle);
  };
  bad("", "run.ckpt: trainer state is not well-formed JSON");
  bad("[]", "run.ckpt: trainer state  is [], expected an object");
  bad(edited("\"version\":1", "\"version\":2"), "version 2 is not the supported version 1");
  bad(edited("\"bitrank.trainer_state\"", "\"other\""), "\"format\" is \"other\", expected \"bitrank.trainer_state\"");
  bad(edited("\"step\":1200,", ""), "run.ckpt: trainer state has no \"step\"");
  bad(edited("\"clean_steps\":37,", ""), "has no \"scaler.clean_steps\"");
  bad(edited("\"tokens\":", "\"tokenz\":"), "has no \"tokens\"");
  bad(edited("\"epoch\":3", "\"epoch\":3,\"extra\":1"), "unknown key \"data.extra\"");
  bad(edited("\"version\":1", "\"version\":1,\"note\":\"x\""), "unknown key \"note\"");
  bad(edited("\"step\":1200", "\"step\":1200.5"), "\"step\" is 1200.5, expected an integer");
  bad(edited("\"step\":1200", "\"step\":\"1200\""), "\"step\" is \"1200\", expected an integer");
  bad(edited("\"flip_seed\":18446744073709551615", "\"flip_seed\":-1"), "\"flip_seed\" is -1, expected an integer ≥ 0");
  bad(edited("\"step\":1200", "\"step\":18446744073709551615"), "expected an integer");
  bad(edited("\"fingerprint\":\"0123456789abcdef\"", "\"fingerprint\":\"0123\""), "\"data.fingerprint\" is \"0123\", expected 16 hex digits");
  bad(edited("\"fingerprint\":\"0123456789abcdef\"", "\"fingerprint\":81985529216486895"), "expected 16 hex digits");
  bad(edited("\"data\":{", "\"data\":[],\"x\":{"), "\"data\" is [], expected an object");
  bad(edited("\"step\":1200", "\"step\":1201"), "step 1201 is not applied_steps 1197 + scaler.skipped_total 3");
  bad(edited("\"consecutive_skips\":1", "\"consecutive_skips\":4"), "scaler counts");
  bad(edited("\"index\":17", "\"index\":6102"), "data position (epoch 3, index 6102) with 6102 windows of 512");
  bad(edited("\"warmup_steps\":100", "\"warmup_steps\":6000"), "lr schedule: warmup_steps must be in [0, total_steps = 5000]");
  bad(edited("\"log2_scale\":-3", "\"log2_scale\":5000"), "\"scaler.log2_scale\" is 5000");
  bad(edited("\"tokens\":4915200", "\"tokens\":4915200,\"tokens\":1"), "duplicate key");
  bad(edited("\"seconds\":0.30000000000000004", "\"seconds\":1e400"), "number overflow");
  bad(edited("\"seconds\":0.30000000000000004", "\"seconds\":-1"), "tokens 4915200 and seconds -1 must be ≥ 0");
}

// The plumbing of a training loop with everything but the model: the trace
// of what each step sees (lr, scale, windows, applied, multiplier).
struct Loop {
  static constexpr std::int64_t kSteps = 60;
  static constexpr GradScalerOptions kScaler{.init_log2 = 12, .growth_interval = 5, .max_consecutive_skips = 8};
  std::vector<std::int32_t> ids;
  Loop() {
    XorShift g(21);
    for (int i = 0; i < 23 * 16 + 7; ++i) ids.push_back(static_cast<std::int32_t>(g.next_u64() % 1000));
  }
  // Runs steps until state.step == until, appending one trace line per step.
  void run(TrainerState& st, TrainWindows& data, GradScaler& scaler, const LrSchedule& schedule, std::int64_t until,
           std::vector<std::string>& trace) const {
    while (st.step < until) {
      const Batch b = data.next();
      const double lr = schedule.lr(st.step);
      const double scale = scaler.scale();
      // A fake gradient: its sum of squares from the batch, non-finite on some steps.
      double sum = 0;
      for (const std::int32_t id : b.ids) sum += static_cast<double>(id) * 1e-6 * scale * (1e-6 * scale);
      if (st.step % 11 == 4 || st.step == 30 || st.step == 31) sum = st.step % 2 ? std::nan("") : HUGE_VAL;
      const bool applied = scaler.update(sum);
      const double mult = applied ? grad_multiplier(sum, scale, 1e-3) : 0.0;
      trace.push_back(fmt::format("{} lr {} scale {} windows {} {} applied {} mult {}", st.step, lr, scale, b.windows[0],
                                  b.windows[1], applied, mult));
      ++st.step;
      st.applied_steps += applied;
      st.tokens += static_cast<std::int64_t>(b.ids.size());
      st.seconds += 0.25;
    }
    st.data = data.position();
    st.scaler = scaler.state();
  }
};

TEST(TrainState, ResumeThroughJsonContinuesIdentically) {
  const Loop loop;
  const WindowOptions wo{.seq_len = 16, .windows_per_step = 2, .seed = 99};
  const LrScheduleOptions so{.peak = 1e-3, .warmup_steps = 6, .total_steps = Loop::kSteps, .floor_fraction = 0.1};

  TrainerState whole_state{.flip_seed = 7, .schedule = so};
  TrainWindows whole_data(loop.ids, wo);
  GradScaler whole_scaler(Loop::kScaler);
  std::vector<std::string> whole;
  loop.run(whole_state, whole_data, whole_scaler, LrSchedule(so), Loop::kSteps, whole);
  EXPECT_GT(whole_state.scaler.skipped_total, 5);  // the trace includes skips …
  EXPECT_GT(whole_state.data.epoch, 2);            // … and several epochs

  for (const std::int64_t cut : {1, 13, 30, 31, 45}) {
    TrainerState st{.flip_seed = 7, .schedule = so};
    std::vector<std::string> trace;
    {
      TrainWindows data(loop.ids, wo);
      GradScaler scaler(Loop::kScaler);
      loop.run(st, data, scaler, LrSchedule(so), cut, trace);
    }
    // Everything below is rebuilt from the saved text alone (and the same ids and options).
    const TrainerState saved = trainer_state_from_json(trainer_state_to_json(st), "ckpt");
    ASSERT_EQ(saved, st);
    TrainerState resumed = saved;
    TrainWindows data(loop.ids, {.seq_len = saved.data.seq_len, .windows_per_step = saved.data.windows_per_step,
                                 .seed = saved.data.seed});
    data.seek(saved.data);
    GradScaler scaler(Loop::kScaler, saved.scaler);
    loop.run(resumed, data, scaler, LrSchedule(saved.schedule), Loop::kSteps, trace);
    EXPECT_EQ(trace, whole) << "cut " << cut;
    EXPECT_EQ(resumed, whole_state) << "cut " << cut;
  }
}

}  // namespace
}  // namespace bitrank::train
