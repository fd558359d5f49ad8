// The `bitrank` command: subcommands parse their options here and call the
// library; every error reaches the user as one line, never a crash.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

#include "bitrank/error.hpp"
#include "cli/bench.hpp"
#include "cli/compress.hpp"
#include "cli/eval.hpp"
#include "cli/export.hpp"
#include "cli/generate.hpp"
#include "cli/info.hpp"
#include "cli/serve.hpp"
#include "cli/tokenize.hpp"

namespace {

// Number checks whose messages name the bound that matters: CLI11's
// NonNegativeNumber / PositiveNumber print their upper bound, DBL_MAX, in
// 309 digits, and let NaN through.
CLI::Validator number_check(std::string description, bool (*ok)(double), std::string what) {
  return CLI::Validator(
      [ok, what](std::string& text) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "'" + text + "' is not a number";
        if (!ok(v)) return "must be " + what + ", got " + text;
        return {};
      },
      std::move(description));
}
const CLI::Validator kPositive =
    number_check("> 0", [](double v) { return std::isfinite(v) && v > 0; }, "a positive number");
const CLI::Validator kNonNegative =
    number_check(">= 0", [](double v) { return std::isfinite(v) && v >= 0; }, "0 or more");

// A whole number in [lo, hi] (CLI11's Range says "Value abc not in range …"
// for text that is no number, and an unsigned option takes "-1" as 2^64 − 1).
CLI::Validator whole_number(long long lo, long long hi) {
  const std::string bounds = hi == LLONG_MAX ? fmt::format(">= {}", lo) : fmt::format("in [{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, bounds](std::string& text) -> std::string {
        long long v = 0;
        std::size_t used = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::out_of_range&) {
          return "'" + text + "' is out of range: must be " + bounds;
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "'" + text + "' is not a whole number";
        if (v < lo || v > hi) return "must be " + bounds + ", got " + text;
        return {};
      },
      bounds);
}
const CLI::Validator kSeqLen = whole_number(2, 1L << 20), kWindows = whole_number(1, 1L << 20),
                     kSeed = whole_number(0, LLONG_MAX);

// --device-memory-cap, --stream and --no-stream (compress and eval); `whose`
// names the weights that decide the automatic choice.
void add_memory_options(CLI::App* cmd, std::string& cap, bool& stream, bool& no_stream, const std::string& whose) {
  cmd->add_option("--device-memory-cap", cap,
                  "most bytes the device memory may hold: 1073741824, 512MiB, 4GiB (default: no cap)");
  cmd->add_flag("--stream", stream,
                "keep the blocks in host memory, two at a time on the device (default: when the " + whose +
                    " weights exceed --device-memory-cap)");
  cmd->add_flag("--no-stream", no_stream, "keep every block on the device");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bitrank: compress LLMs to about one bit per weight with binary low-rank layers"};
  app.set_version_flag("--version", "bitrank 0.1.0");
  app.require_subcommand(1);

  bitrank::cli::BenchOptions bench;
  auto* bench_cmd = app.add_subcommand("bench", "time the ops at fixed shapes, next to their anchors (sgemm, …)");
  bench_cmd->add_option("--device", bench.device, "cpu or cuda (default cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  bench_cmd->add_option("--op", bench.op_filter, "only cases whose name contains this");
  bench_cmd->add_option("--shape", bench.shape_filter, "only cases whose shape contains this (e.g. 1x32768)");
  bench_cmd->add_option("--min-time", bench.min_time_s, "seconds of timing per case (default 0.3)")->check(kPositive);
  bench_cmd->add_option("--min-ratio", bench.min_ratio,
                        "fail (exit 1) when a case runs below this fraction of its anchor's rate, e.g. 0.75; the cases are named")
      ->check(CLI::Range(0.0, 100.0));
  bench_cmd->add_flag("--no-anchors", bench.no_anchors, "time the matching cases alone, not the anchors they name (for profilers)");
  bench_cmd->add_option("--gdn-design", bench.cuda.gdn_design,
                        "cuda: the Gated DeltaNet recurrence timed: 3 chunkwise on tensor cores (default), 2 or 1 token by token")
      ->check(CLI::IsMember({1, 2, 3}));
  bench_cmd->add_option("--attention", bench.cuda.attention,
                        "cuda: the attention kernels timed: auto (default: by shape), generic, recompute (dQ without the dS tiles)")
      ->check(CLI::IsMember({"auto", "generic", "recompute"}));

  bitrank::cli::CompressCliOptions compress;
  auto* compress_cmd =
      app.add_subcommand("compress", "compress a model into BLR layers, train them by distillation, save and measure");
  compress_cmd->add_option("--model", compress.model,
                           "a dense Llama-family or Qwen3.5 / Qwen3-Next hybrid .gguf or Hugging Face directory "
                           "(default: the SmolLM2-135M GGUF)");
  compress_cmd->add_option("-o,--out", compress.out, "the .bitrank file to write (default: <model>.<bpw>bpw.bitrank)");
  compress_cmd->add_option("--bpw", compress.job.bpw,
                           "target bits per weight over the projections (default 1.0; a target the model cannot "
                           "reach is an error naming the range it can)")
      ->check(kPositive);
  compress_cmd->add_option("--bpw-for", compress.bpw_for,
                           "PATTERN=BPW: projections whose name contains PATTERN (attn_v, ffn_down, blk.3., …) at "
                           "their own target; repeatable, the first match wins")
      ->take_all();
  compress_cmd->add_option("--paths", compress.job.paths, "BLR paths: 1, or 2 with the residual path (default 2)")
      ->check(CLI::IsMember({1, 2}));
  compress_cmd->add_option("--init", compress.job.init,
                           "start from this compressed model of the same teacher (a .bitrank: its ranks, scales, signs "
                           "and gains) instead of Dual-SVID; e.g. --objective e2e after a layer-wise run")
      ->check(CLI::ExistingFile);
  compress_cmd->add_option("--method", compress.method,
                           "train (default: the sequential objective over the training text, then on cuda --e2e-steps) "
                           "or ptq (post-training: the same, e2e stage included, over a calibration set of at most "
                           "262144 tokens, cpu 32768)")
      ->check(CLI::IsMember({"train", "ptq"}));
  auto* objective_opt = compress_cmd->add_option("--objective", compress.job.objective,
                           "layer (block-wise MSE to the teacher, teacher inputs), sequential (the same from the "
                           "student's own inputs) or e2e (KL on the logits + 10 × hidden MSE, all blocks at once); "
                           "default: sequential")
      ->check(CLI::IsMember({"layer", "sequential", "e2e"}));
  compress_cmd->add_flag("--diagnose", compress.job.diagnose,
                         "train nothing: the perplexity with one block, then one projection kind, replaced by its "
                         "initialisation, and each matrix's weight and output error (JSON on stdout)");
  auto* e2e_steps_opt = compress_cmd->add_option("--e2e-steps", compress.job.e2e_steps,
                           "after a block-wise objective (layer, sequential), this many end-to-end steps from its "
                           "result (default: cuda 600, cpu 0)")
      ->check(CLI::NonNegativeNumber);
  compress_cmd->add_option("--e2e-sign-lr", compress.job.e2e_sign_lr,
                           "peak learning rate of the sign latents in the --e2e-steps stage (default 1e-4)")
      ->check(CLI::NonNegativeNumber);
  auto* allocation_opt = compress_cmd->add_option("--allocation", compress.job.allocation,
                           "front (blocks 0 and 1 at twice --bpw, the rest lower so the projections stay at --bpw; "
                           "the cpu default from 1.0 bpw) or uniform (every projection at --bpw; the default below "
                           "1.0 bpw and on cuda); --bpw-for replaces it")
      ->check(CLI::IsMember({"front", "uniform"}));
  auto* init_method_opt = compress_cmd->add_option("--init-method", compress.job.init_method,
                           "act (Dual-SVID of the activation-weighted weights; the cuda default), gram (act, then the "
                           "refinement minimises the output error under each input's Gram XᵀX; the cpu default) or "
                           "svid (plain Dual-SVID)")
      ->check(CLI::IsMember({"act", "gram", "svid"}));
  auto* init_refine_opt = compress_cmd->add_option("--init-refine", compress.job.init_refine,
                           "sweeps of the exact sign and scale refinement of each matrix after Dual-SVID "
                           "(towards the activation-weighted weights with --init-method act; default 8, 0: none)")
      ->check(CLI::Range(0, 100));
  auto* init_rotate_opt = compress_cmd->add_option("--init-rotate", compress.job.init_rotate,
                           "rounds of the ITQ rotation of each path's latent SVD factors before their signs are "
                           "taken (the same low-rank product, a smaller sign-split error; default 12 (none with --init); "
                           "0: none, at most 1000)")
      ->check(kNonNegative);
  auto* calib_opt = compress_cmd->add_option("--calib-windows", compress.job.calib_windows,
                           "training windows the calibration statistics (input rms and Grams) run over (default 64)")
      ->check(kNonNegative);
  auto* text_tokens_opt = compress_cmd->add_option("--max-text-tokens", compress.job.max_text_tokens,
                           "use only the first N tokens of the training text (default: all; ptq: cpu 32768, cuda 262144)")
      ->check(kNonNegative);
  auto* tokens_opt =
      compress_cmd->add_option("--tokens", compress.tokens, "training tokens per block (default: cpu 30720, cuda 4096000)");
  auto* steps_opt = compress_cmd->add_option("--steps", compress.steps,
                                             "instead of --tokens: training steps per block (layer) or in all (e2e)");
  auto* seq_len_opt = compress_cmd->add_option("--seq-len", compress.job.seq_len, "tokens per training window (default: cpu 256, cuda 512)")
      ->check(kSeqLen);
  auto* windows_opt = compress_cmd->add_option("--windows", compress.job.windows_per_step, "windows per step (default: cpu 4, cuda 8)")
      ->check(kWindows);
  compress_cmd->add_option("--eval-windows", compress.job.eval_windows,
                           "perplexity windows of the evaluation split (default 16; 0: all)")
      ->check(kNonNegative);
  auto* eval_init_opt = compress_cmd->add_option("--eval-init", compress.job.eval_init,
                           "also measure the perplexity of the start, before training (default: cuda true, cpu false)");
  compress_cmd->add_option("--eval-seq-len", compress.job.eval_seq_len, "tokens per perplexity window (default 512)")
      ->check(kSeqLen);
  compress_cmd->add_option("--checkpoint-every", compress.job.checkpoint_every,
                           "steps between checkpoints <out>.ckpt (default 50; 0: only at the end of each block, or of e2e training)")
      ->check(kNonNegative);
  compress_cmd->add_flag("--resume", compress.job.resume,
                         "continue the interrupted run whose checkpoint <out>.ckpt exists (same options)");
  compress_cmd->add_option("--text", compress.job.texts,
                           "training text: a file, a directory (its .txt, .md, .rst, .jsonl files) or a .jsonl file "
                           "(the \"text\" field of each line); repeatable (default: the corpus training split)");
  compress_cmd->add_option("--data", compress.job.data,
                           "text (the training text, default) or teacher (text sampled from the teacher, cached in "
                           "<out>.teacher.ids)")
      ->check(CLI::IsMember({"text", "teacher"}));
  compress_cmd->add_option("--teacher-share", compress.job.teacher_share,
                           "with --data text: this share of the training windows sampled from the teacher instead "
                           "(default 0)")
      ->check(CLI::Range(0.0, 1.0));
  compress_cmd->add_option("--teacher-tokens", compress.job.teacher_tokens,
                           "tokens to sample from the teacher (default 131072; a forward of the whole window per token)")
      ->check(CLI::PositiveNumber);
  compress_cmd->add_option("--eval-text", compress.job.eval_text,
                           "perplexity text file (default: the corpus evaluation split)");
  auto* lr_opt = compress_cmd
                    ->add_option("--lr", compress.job.train.scales.lr,
                                 "peak learning rate of the BLR scales, relative steps (default 1e-2)")
                    ->check(kPositive);
  auto* sign_lr_opt = compress_cmd
                          ->add_option("--sign-lr", compress.job.train.signs.lr,
                                       "peak learning rate of the sign latents (default 1e-2; e2e 1e-4)")
                          ->check(kNonNegative);
  compress_cmd->add_option("--mse-weight", compress.job.mse_weight,
                           "e2e: λ of the hidden-state MSE terms, which enter as (λ/T)·MSE next to the per-token KL "
                           "(default 10, LittleBit's l2l_loss_scale)")
      ->check(kNonNegative);
  compress_cmd->add_option("--seed", compress.job.seed, "seed of the window order and the randomized SVD (default 0)")->check(kSeed);
  compress_cmd->add_option("--device", compress.job.device, "cpu or cuda (default cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  add_memory_options(compress_cmd, compress.device_memory_cap, compress.stream, compress.no_stream, "teacher's");

  bitrank::cli::EvalOptions eval;
  auto* eval_cmd = app.add_subcommand("eval", "perplexity over non-overlapping windows of T tokens");
  eval_cmd->add_option("--model", eval.model,
                       "a .gguf file, a Hugging Face directory (dense llama, qwen3_5, qwen3_next) or a .bitrank file "
                       "(default: the SmolLM2-135M GGUF found at build time)");
  eval_cmd->add_option("--text", eval.text, "a text file (default: the evaluation split of the Debian corpus)");
  eval_cmd->add_option("--ids", eval.ids, "instead of --text: a file of whitespace-separated token ids");
  eval_cmd->add_option("--seq-len", eval.seq_len, "tokens per window, at most the model's context (default 512, or the context when shorter)")
      ->check(kSeqLen);
  eval_cmd->add_option("--max-windows", eval.max_windows, "evaluate only the first N windows (0: all)")
      ->check(kNonNegative);
  eval_cmd->add_option("--device", eval.device, "cpu or cuda (default cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  add_memory_options(eval_cmd, eval.device_memory_cap, eval.stream, eval.no_stream, "model's");

  bitrank::cli::GenerateCliOptions gen;
  auto* gen_cmd = app.add_subcommand("generate", "text after a prompt, streamed to stdout (greedy or sampled)");
  gen_cmd->add_option("--model", gen.model, "a .gguf file, a Hugging Face directory or a .bitrank file (default: as eval)");
  gen_cmd->add_option("--prompt", gen.prompt, "the text to continue (control tokens such as <|im_start|> are matched)")
      ->required();
  gen_cmd->add_option("--max-tokens", gen.max_tokens, "tokens to generate at most (default 64)");
  gen_cmd->add_option("--temperature", gen.temperature, "0: greedy (default); > 0: sample from softmax(logits / t)");
  gen_cmd->add_option("--top-k", gen.top_k, "sample among the k most likely tokens only (default 0: all)");
  gen_cmd->add_option("--top-p", gen.top_p, "then among the most likely tokens holding this share of the mass (default 1)");
  gen_cmd->add_option("--seed", gen.seed, "seed of the sampling draws (default 0; same seed, same text)")->check(kSeed);
  gen_cmd->add_option("--device", gen.device, "cpu or cuda (default cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  bool stop_at_eos = false, no_stop_at_eos = false;  // two plain flags: CLI11 renders "A,!B" as "A,B{false}"
  gen_cmd->add_flag("--stop-at-eos", stop_at_eos, "stop after the tokenizer's end-of-sequence token (the default)");
  gen_cmd->add_flag("--no-stop-at-eos", no_stop_at_eos, "go on past the end-of-sequence token");
  gen_cmd->add_flag("--no-cache", gen.no_cache, "no KV cache: the whole sequence through the model for every token");

  bitrank::cli::ServeCliOptions serve;
  auto* serve_cmd = app.add_subcommand(
      "serve", "one model behind an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  serve_cmd->add_option("--model", serve.model, "a .gguf file, a Hugging Face directory or a .bitrank file (default: as eval)");
  serve_cmd->add_option("--host", serve.server.host, "the address to listen on (default 127.0.0.1: this machine only)");
  serve_cmd->add_option("--port", serve.server.port, "the port to listen on (default 8080; 0: any free port)")
      ->check(whole_number(0, 65535));
  serve_cmd->add_option("--device", serve.device, "cpu or cuda (default cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  serve_cmd->add_option("--max-tokens-limit", serve.server.max_tokens_limit,
                        "the most tokens one request may generate; also a request's default max_tokens, or what "
                        "the context leaves (default 256)")
      ->check(whole_number(1, 1L << 20));
  serve_cmd->add_option("--threads", serve.server.threads,
                        "HTTP worker threads: requests read at once (default 8); the model runs one at a time")
      ->check(whole_number(1, 1024));

  bitrank::cli::ExportOptions exp;
  auto* export_cmd = app.add_subcommand(
      "export", "a compressed model as a dense Hugging Face directory (model.safetensors, config.json, tokenizer)");
  export_cmd->add_option("model,--model", exp.model, "the .bitrank file to expand")->required();
  export_cmd->add_option("-o,--out", exp.out, "the directory to write: new or empty (see --force)")->required();
  export_cmd->add_option("--dtype", exp.dtype, "f32 (default: the BLR reconstruction exactly as f32), bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  export_cmd->add_option("--tokenizer", exp.tokenizer,
                         "take the tokenizer from this model (.gguf, Hugging Face directory or .bitrank) instead of "
                         "the model's own");
  export_cmd->add_flag("--force", exp.force,
                       "write into a non-empty directory, over the files the export writes (others are left)");

  bitrank::cli::InfoOptions info;
  auto* info_cmd = app.add_subcommand(
      "info", "what a model holds: architecture, tensors, tokenizer; for a bitrank file its BLR matrices and bits per weight");
  info_cmd->add_option("file", info.file, "a .bitrank or .gguf file or a Hugging Face directory")->required();
  info_cmd->add_flag("--json", info.json, "print one JSON object instead of text");

  bitrank::cli::TokenizeOptions tokenize;
  auto* tokenize_cmd = app.add_subcommand("tokenize", "text → token ids, written as raw little-endian int32");
  tokenize_cmd->add_option("--model", tokenize.model, "the model whose tokenizer is used: a .gguf, a Hugging Face directory or a .bitrank (default: as eval)");
  auto* split_opt = tokenize_cmd->add_option("--split", tokenize.split, "corpus part when no --text: train (default) or eval")
                        ->check(CLI::IsMember({"train", "eval"}));
  tokenize_cmd->add_option("--text", tokenize.text, "a text file instead of the corpus")->excludes(split_opt);
  tokenize_cmd->add_option("-o,--out", tokenize.out, "the id file to write")->required();

  // A first word that is no command is a mistyped one: name it and the
  // commands (CLI11 alone says "A subcommand is required").
  std::string commands;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->check_name(argv[1]));
  }
  if (argc < 2) {
    std::fprintf(stderr, "bitrank: no command given; the commands are %s (bitrank --help)\n", commands.c_str());
    return 1;
  }
  if (argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "bitrank: unknown command '%s'; the commands are %s (bitrank --help)\n", argv[1],
                 commands.c_str());
    return 1;
  }
  CLI11_PARSE(app, argc, argv);
  try {
    if (bench_cmd->parsed()) return bitrank::cli::run_bench(bench);
    if (compress_cmd->parsed()) {
      compress.given = {.objective = objective_opt->count() > 0,
                        .init_method = init_method_opt->count() > 0,
                        .calib_windows = calib_opt->count() > 0,
                        .max_text_tokens = text_tokens_opt->count() > 0,
                        .seq_len = seq_len_opt->count() > 0,
                        .windows = windows_opt->count() > 0,
                        .steps = false,  // --tokens or --steps: run_compress
                        .lr = lr_opt->count() > 0,
                        .sign_lr = sign_lr_opt->count() > 0,
                        .e2e_steps = e2e_steps_opt->count() > 0,
                        .allocation = allocation_opt->count() > 0,
                        .init_refine = init_refine_opt->count() > 0,
                        .eval_init = eval_init_opt->count() > 0,
                        .init_rotate = init_rotate_opt->count() > 0};
      compress.bpw_given = compress_cmd->get_option("--bpw")->count() > 0;
      compress.tokens_given = tokens_opt->count() > 0;
      compress.steps_given = steps_opt->count() > 0;
      compress.eval_seq_len_given = compress_cmd->get_option("--eval-seq-len")->count() > 0;
      return bitrank::cli::run_compress(compress);
    }
    if (eval_cmd->parsed()) {
      eval.seq_len_given = eval_cmd->get_option("--seq-len")->count() > 0;
      return bitrank::cli::run_eval(eval);
    }
    if (gen_cmd->parsed()) {
      if (stop_at_eos && no_stop_at_eos) bitrank::fail("generate: give --stop-at-eos or --no-stop-at-eos, not both");
      gen.stop_at_eos = !no_stop_at_eos;
      return bitrank::cli::run_generate(gen);
    }
    if (serve_cmd->parsed()) return bitrank::cli::run_serve(serve);
    if (export_cmd->parsed()) return bitrank::cli::run_export(exp);
    if (info_cmd->parsed()) return bitrank::cli::run_info(info);
    if (tokenize_cmd->parsed()) return bitrank::cli::run_tokenize(tokenize);
  } catch (const bitrank::Error& e) {
    std::fprintf(stderr, "bitrank: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bitrank: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
