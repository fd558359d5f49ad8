// The `bitrank` command: subcommands parse their options here and call the
// library; every error reaches the user as one line, never a crash.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "bitrank/error.hpp"
#include "cli/bench.hpp"
#include "cli/eval.hpp"
#include "cli/info.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bitrank: compress LLMs to about one bit per weight with binary low-rank layers"};
  app.set_version_flag("--version", "bitrank 0.1.0");
  app.require_subcommand(1);

  bitrank::cli::BenchOptions bench;
  auto* bench_cmd = app.add_subcommand("bench", "time the ops at fixed shapes, next to their anchors (sgemm, …)");
  bench_cmd->add_option("--device", bench.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  bench_cmd->add_option("--op", bench.op_filter, "only cases whose name contains this");
  bench_cmd->add_option("--min-time", bench.min_time_s, "seconds of timing per case")->check(CLI::PositiveNumber);

  bitrank::cli::EvalOptions eval;
  auto* eval_cmd = app.add_subcommand("eval", "perplexity over non-overlapping windows of T tokens");
  eval_cmd->add_option("--model", eval.model, "a .gguf file or a Hugging Face directory (dense llama, qwen3_5, qwen3_next; default: the SmolLM2-135M GGUF found at build time)");
  eval_cmd->add_option("--text", eval.text, "a text file (default: the evaluation split of the Debian corpus)");
  eval_cmd->add_option("--ids", eval.ids, "instead of --text: a file of whitespace-separated token ids");
  eval_cmd->add_option("--seq-len", eval.seq_len, "tokens per window")->check(CLI::Range(2L, 1L << 20));
  eval_cmd->add_option("--max-windows", eval.max_windows, "evaluate only the first N windows (0: all)")
      ->check(CLI::NonNegativeNumber);
  eval_cmd->add_option("--device", eval.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));

  bitrank::cli::InfoOptions info;
  auto* info_cmd = app.add_subcommand("info", "what a bitrank model file holds: architecture, BLR matrices, bits per weight");
  info_cmd->add_option("file", info.file, "a bitrank model file")->required();
  info_cmd->add_flag("--json", info.json, "print one JSON object instead of text");

  CLI11_PARSE(app, argc, argv);
  try {
    if (bench_cmd->parsed()) return bitrank::cli::run_bench(bench);
    if (eval_cmd->parsed()) return bitrank::cli::run_eval(eval);
    if (info_cmd->parsed()) return bitrank::cli::run_info(info);
  } catch (const bitrank::Error& e) {
    std::fprintf(stderr, "bitrank: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bitrank: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
