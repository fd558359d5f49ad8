// Reports: the step record's JSON (round trip, NaN as null, bad lines), the
// JSON-lines log (write, read, resume cutting later and half-written lines),
// the progress line (terminal redraws vs periodic plain lines, with a fake
// clock) and the trainer's progress text.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "bitrank/progress.hpp"
#include "bitrank/train/report.hpp"
#include "support/expect.hpp"

namespace bitrank::train {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

StepRecord record(std::int64_t step) {
  return {.step = step, .loss = 1.0 / static_cast<double>(step + 3), .lr = 1e-3 * 0.97, .scale = 65536,
          .flips = 100 + step, .skipped = step % 4 == 3, .tokens = 4096 * (step + 1), .seconds = 0.7 * static_cast<double>(step + 1)};
}

void expect_same(const StepRecord& a, const StepRecord& b) {
  EXPECT_EQ(a.step, b.step);
  if (std::isnan(a.loss)) EXPECT_TRUE(std::isnan(b.loss));
  else EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.lr, b.lr);
  EXPECT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.flips, b.flips);
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.seconds, b.seconds);
  EXPECT_EQ(a.block_loss, b.block_loss);
}

fs::path temp_file(const char* name) {
  return fs::temp_directory_path() / fmt::format("bitrank_{}_{}", ::testing::UnitTest::GetInstance()->random_seed(), name);
}

TEST(TrainReport, StepRecordJson) {
  StepRecord r = record(41);
  r.block_loss = {0.5, 1e-7, 3.25};
  const std::string line = step_record_json(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("{\"step\":41,\"loss\":", 0), 0u) << line;
  EXPECT_NE(line.find("\"block_loss\":[0.5,1e-07,3.25]"), std::string::npos) << line;
  expect_same(parse_step_record(line, "t"), r);
  // No per-block losses: no key. A NaN loss is null and reads back as NaN.
  r.block_loss.clear();
  r.loss = std::numeric_limits<double>::quiet_NaN();
  const std::string nan_line = step_record_json(r);
  EXPECT_EQ(nan_line.find("block_loss"), std::string::npos);
  EXPECT_NE(nan_line.find("\"loss\":null"), std::string::npos) << nan_line;
  expect_same(parse_step_record(nan_line, "t"), r);
}

TEST(TrainReport, StepRecordRejectsBadLines) {
  expect_error([] { parse_step_record("[1]", "log:3"); }, "log:3: step record is [1], expected an object");
  expect_error([] { parse_step_record("{\"step\":1", "log:3"); }, "log:3: step record is not well-formed JSON");
  std::string ok = step_record_json(record(2));
  expect_error([&] { parse_step_record(fmt::format("{{\"loss\":1,{}", ok.substr(ok.find("\"lr\""))), "log:4"); },
               "log:4: step record has no \"step\"");
  expect_error([] { parse_step_record(R"({"step":1.5})", "l"); }, "\"step\" is 1.5, expected an integer");
  expect_error([] { parse_step_record(R"({"step":1,"loss":"x"})", "l"); }, "\"loss\" is \"x\", expected a number or null");
  std::string skipped = ok;
  skipped.replace(skipped.find("\"skipped\":false"), 15, "\"skipped\":1");
  expect_error([&] { parse_step_record(skipped, "l"); }, "\"skipped\" is 1, expected true or false");
  std::string dup = ok;
  dup.insert(1, "\"step\":3,");
  expect_error([&] { parse_step_record(dup, "l"); }, "duplicate key");
}

TEST(TrainReport, StepLogWritesAndResumes) {
  const fs::path path = temp_file("steps.jsonl");
  {
    StepLog log(path);
    for (int s = 0; s < 6; ++s) log.write(record(s));
  }
  auto records = read_step_log(path);
  ASSERT_EQ(records.size(), 6u);
  for (int s = 0; s < 6; ++s) expect_same(records[s], record(s));
  // The checkpoint was taken after 4 steps: records 4 and 5 go, the run goes on from 4.
  {
    StepLog log(path, 4);
    for (int s = 4; s < 8; ++s) log.write(record(s));
  }
  records = read_step_log(path);
  ASSERT_EQ(records.size(), 8u);
  for (int s = 0; s < 8; ++s) expect_same(records[s], record(s));
  // An interrupted run left half a line behind: it is cut too.
  {
    std::ofstream f(path, std::ios::app | std::ios::binary);
    f << step_record_json(record(8)).substr(0, 20);
  }
  expect_error([&] { read_step_log(path); }, ":9: step record is not well-formed JSON");
  {
    StepLog log(path, 100);
    log.write(record(8));
  }
  records = read_step_log(path);
  ASSERT_EQ(records.size(), 9u);
  expect_same(records[8], record(8));
  // Resuming at 0 empties it; starting afresh truncates; a missing file starts empty.
  { StepLog log(path, 0); }
  EXPECT_TRUE(read_step_log(path).empty());
  fs::remove(path);
  {
    StepLog log(path, 5);
    log.write(record(5));
  }
  ASSERT_EQ(read_step_log(path).size(), 1u);
  fs::remove(path);
  expect_error([&] { read_step_log(path); }, "step log: cannot read");
  expect_error([&] { StepLog(temp_file("no_such_dir") / "x.jsonl"); }, "step log: cannot write");
}

// A fake clock and an in-memory FILE.
struct Captured {
  double now = 0;
  std::FILE* f = std::tmpfile();
  ~Captured() { std::fclose(f); }
  ProgressLine::Options options(int tty) {
    return {.out = f, .tty = tty, .redraw_s = 0.1, .plain_every_s = 30, .clock = [this] { return now; }};
  }
  std::string text() {
    std::fflush(f);
    std::string s(static_cast<std::size_t>(std::ftell(f)), '\0');
    std::rewind(f);
    EXPECT_EQ(std::fread(s.data(), 1, s.size(), f), s.size());
    return s;
  }
};

TEST(TrainReport, ProgressLinePlainLinesWhenNotATerminal) {
  Captured c;
  ProgressLine p(c.options(0));
  EXPECT_FALSE(p.tty());
  EXPECT_TRUE(p.due());
  p.update("a");  // the first is always shown
  c.now = 29.9;
  EXPECT_FALSE(p.due());
  p.update("b");  // too soon
  c.now = 30.0;
  p.update("c");
  c.now = 31;
  p.update("d", /*force=*/true);
  p.finish("d");  // already the last line: not repeated
  p.finish("e");
  EXPECT_EQ(c.text(), "a\nc\nd\ne\n");
}

TEST(TrainReport, ProgressLineRedrawsOnATerminal) {
  Captured c;
  ProgressLine p(c.options(1));
  EXPECT_TRUE(p.tty());
  p.update("step 1");
  c.now = 0.05;
  p.update("step 2");  // within 0.1 s: not drawn
  c.now = 0.1;
  p.update("step 3");
  p.finish("done");
  EXPECT_EQ(c.text(), "\rstep 1\x1b[K\rstep 3\x1b[K\rdone\x1b[K\n");
}

TEST(TrainReport, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(2 * 86400 + 3 * 3600 + 5), "2d03h");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::quiet_NaN()), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
}

TEST(TrainReport, ProgressText) {
  EXPECT_EQ(train_progress_text({.step = 120, .total_steps = 2000, .tokens_per_s = 31234, .loss = 0.0123456,
                                 .flips_per_step = 1834.4, .skipped = 0, .eta_s = 3725}),
            "step 120/2000  31.2k tok/s  loss 0.01235  flips 1834/step  ETA 1h02m");
  EXPECT_EQ(train_progress_text({.step = 3, .total_steps = 10, .tokens_per_s = 1.5e6, .loss = 2.5,
                                 .flips_per_step = 0, .skipped = 2, .eta_s = std::numeric_limits<double>::quiet_NaN()}),
            "step 3/10  1.5M tok/s  loss 2.5  flips 0/step  skipped 2 (non-finite gradients)  ETA ?");
  // A block-wise run: the block and the step within it, the loss named.
  EXPECT_EQ(train_progress_text({.step = 37, .total_steps = 480, .tokens_per_s = 3500, .loss = 0.52,
                                 .flips_per_step = 12, .skipped = 0, .eta_s = 60, .steps_per_block = 16,
                                 .loss_name = "block MSE"}),
            "block 3/30 step 5/16  3.5k tok/s  block MSE 0.52  flips 12/step  ETA 1m00s");
}

// Rates from this process's steps; loss and flips as means since the last line shown.
TEST(TrainReport, TrainProgressFigures) {
  Captured c;
  const StepRecord start{.step = 9, .tokens = 10000, .seconds = 500};  // resumed after 10 steps
  TrainProgress p(100, &start, c.options(0));
  auto rec = [](std::int64_t step, double loss, std::int64_t flips, bool skipped) {
    return StepRecord{.step = step, .loss = loss, .flips = flips, .skipped = skipped,
                      .tokens = 10000 + 1000 * (step - 9), .seconds = 500 + 2.0 * static_cast<double>(step - 9)};
  };
  p.step(rec(10, 4.0, 10, false));  // shown (the first)
  c.now = 10;
  p.step(rec(11, 2.0, 30, false));
  p.step(rec(12, std::numeric_limits<double>::quiet_NaN(), 50, true));
  c.now = 40;
  p.step(rec(13, 1.0, 70, false));  // shown: means over steps 11..13
  p.finish();                       // nothing new: that line stands, not repeated
  // This process: 1000 tokens per 2 s = 500 tok/s; 2 s per step.
  EXPECT_EQ(c.text(),
            "step 11/100  500 tok/s  loss 4  flips 10/step  ETA 2m58s\n"
            "step 14/100  500 tok/s  loss 1.5  flips 50/step  skipped 1 (non-finite gradients)  ETA 2m52s\n");
  // On a terminal the last line is redrawn and ended; steps after the last line shown are summed into it.
  Captured t;
  TrainProgress q(4, nullptr, t.options(1));
  auto fresh = [](std::int64_t step, double loss, std::int64_t flips) {
    return StepRecord{.step = step, .loss = loss, .flips = flips, .tokens = 1000 * (step + 1),
                      .seconds = 2.0 * static_cast<double>(step + 1)};
  };
  q.step(fresh(0, 2.0, 8));
  q.step(fresh(1, 4.0, 4));  // within 0.1 s: not drawn
  q.finish();
  EXPECT_EQ(t.text(),
            "\rstep 1/4  500 tok/s  loss 2  flips 8/step  ETA 6s\x1b[K"
            "\rstep 2/4  500 tok/s  loss 4  flips 4/step  ETA 4s\x1b[K\n");
}

}  // namespace
}  // namespace bitrank::train
