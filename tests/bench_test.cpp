// `bitrank bench` from the command line: a case runs and reports its time
// and rate; a filter that matches nothing and an unknown device are errors.
// (The timings themselves are benchmarks, kept in docs/perf.md, not tested.)
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/command.hpp"

namespace bitrank {
namespace {

TEST(BenchCli, LayerwiseStepRunsAndReportsItsRate) {
  const auto [status, out] =
      test::run_command("'" BITRANK_CLI "' bench --device cpu --op 'layer-wise step' --min-time 0.01 2>&1");
  ASSERT_EQ(status, 0) << out;
  // "layer-wise step   SmolLM2-135M block, 1x256, ranks …   <ms>   <rate> GFLOP/s"
  const std::regex line(R"(layer-wise step +SmolLM2-135M block, 1x256, ranks [0-9/]+ \(1\.0 bpw, P=2\) +([0-9.]+) +([0-9.]+) GFLOP/s)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, line)) << out;
  EXPECT_GT(std::stod(m[1].str()), 0.0);
  EXPECT_GT(std::stod(m[2].str()), 0.0);
}

// The BLR layer's row carries its ratio to the six sgemm calls of its
// shapes, timed in the same run (the figure docs/perf.md quotes): the line
// is checked, not the number.
TEST(BenchCli, BlrPrintsItsRatioToTheSixSgemmCalls) {
  const auto [status, out] =
      test::run_command("'" BITRANK_CLI "' bench --device cpu --op 'blr fwd+bwd' --min-time 0.01 2>&1");
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(sgemm, six BLR GEMMs +m=576 n=576 r=256 T=512 P=2 +[0-9.]+ +[0-9.]+ GFLOP/s)")))
      << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(blr fwd\+bwd +m=576 n=576 r=256 T=512 P=2 +[0-9.]+ +[0-9.]+ GFLOP/s +[0-9]+% of sgemm, six BLR GEMMs)")))
      << out;
}

// --min-ratio guards the ratio: a bar no case can reach fails the run and
// names the case below it; a bar every case clears passes.
TEST(BenchCli, MinRatioFailsTheRunBelowItsBar) {
  const std::string cmd = "'" BITRANK_CLI "' bench --device cpu --op 'blr fwd+bwd' --min-time 0.01 --min-ratio ";
  const auto high = test::run_command(cmd + "50 2>&1");
  EXPECT_EQ(high.first, 1) << high.second;
  EXPECT_TRUE(std::regex_search(high.second, std::regex(R"(below --min-ratio 5000%:\n  blr fwd\+bwd \[m=576 n=576 r=256 T=512 P=2\] at [0-9]+% of sgemm, six BLR GEMMs)")))
      << high.second;
  const auto low = test::run_command(cmd + "0.001 2>&1");
  EXPECT_EQ(low.first, 0) << low.second;
  EXPECT_EQ(low.second.find("below --min-ratio"), std::string::npos) << low.second;
}

TEST(BenchCli, ShapeSelectsOneCaseOfAnOp) {
  const auto [status, out] =
      test::run_command("'" BITRANK_CLI "' bench --device cpu --op gdn --shape 1x256 --min-time 0.01 2>&1");
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(gdn fwd\+bwd +1x256 [^\n]* [0-9.]+ +[0-9.]+ GFLOP/s)"))) << out;
  const auto none = test::run_command("'" BITRANK_CLI "' bench --device cpu --op gdn --shape 9x9 2>&1");
  EXPECT_NE(none.first, 0);
  EXPECT_NE(none.second.find("no case matches --op 'gdn' --shape '9x9'"), std::string::npos) << none.second;
}

TEST(BenchCli, BadOptionsAreErrors) {
  const auto none = test::run_command("'" BITRANK_CLI "' bench --device cpu --op 'no such case' 2>&1");
  EXPECT_NE(none.first, 0);
  EXPECT_NE(none.second.find("no case matches"), std::string::npos) << none.second;
  const auto device = test::run_command("'" BITRANK_CLI "' bench --device tpu 2>&1");
  EXPECT_NE(device.first, 0);
  EXPECT_NE(device.second.find("tpu"), std::string::npos) << device.second;
}

}  // namespace
}  // namespace bitrank
