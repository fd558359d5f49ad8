// `bitrank compress`: options → train::compress, summary JSON on stdout.
//
// The defaults that depend on the device, the method and the objective
// come from train::apply_recipe_defaults (with no arguments the job
// finishes in a few minutes). --tokens sets the budget, rounded up to whole
// steps; --steps sets the step count directly.
// Checkpoints go to <out>.ckpt every --checkpoint-every steps; --resume
// continues from it (the same command line, --resume added). With --device
// cuda the Dual-SVID SVDs of matrices ≥ 2048 wide run on the GPU, the rest on
// the CPU's threads (blr::route_by_size).
// --device-memory-cap caps the backend's memory; --stream / --no-stream
// choose whether the blocks stream from host memory (default: when the
// teacher's weights exceed the cap; train/streaming.hpp).
#include "cli/compress.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "bitrank/blr/accounting.hpp"
#include "bitrank/blr/svd.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/model/projection.hpp"
#include "bitrank/store/load.hpp"
#include "cli/device.hpp"
#include "cli/inputs.hpp"

namespace bitrank::cli {
namespace {
constexpr bitrank::index_t kGpuSvdMinDim = 2048;  // blr::route_by_size's measured crossover, in round numbers
}  // namespace

int run_compress(CompressCliOptions o) {
  train::CompressOptions& job = o.job;
  job.model = model_or_default(o.model, "compress");
  job.stream = stream_mode("compress", o.stream, o.no_stream);
  job.device_memory_cap = device_memory_cap("compress", o.device_memory_cap);
  const std::unique_ptr<Backend<float>> be = make_device_backend("compress", job.device);
  if (job.device == "cuda") {
#ifdef BITRANK_HAS_CUDA
    // Dual-SVID's large SVDs on the GPU, the many small ones on the CPU's threads (blr::route_by_size).
    job.svd_engine = blr::route_by_size(make_cuda_svd_engine(0), kGpuSvdMinDim);
    job.svd_label = fmt::format("gpu from {} wide, cpu below", kGpuSvdMinDim);
#endif
  }
  o.given.steps = o.tokens_given || o.steps_given;
  train::apply_recipe_defaults(job, o.method, o.given);
  for (const std::string& spec : o.bpw_for) {
    const auto eq = spec.rfind('=');
    double bpw = 0;
    std::size_t used = 0;
    try {
      if (eq != std::string::npos) bpw = std::stod(spec.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (eq == std::string::npos || eq == 0 || used == 0 || used != spec.size() - eq - 1 || !(bpw > 0 && bpw <= 16))
      fail("compress: --bpw-for takes PATTERN=BPW with a non-empty pattern and 0 < BPW ≤ 16, got '{}'", spec);
    job.bpw_overrides.push_back({spec.substr(0, eq), bpw});
  }
  if (o.tokens_given && o.tokens < 1) fail("compress: --tokens must be at least 1, got {}", o.tokens);
  if (o.steps_given && o.steps < 1) fail("compress: --steps must be at least 1, got {}", o.steps);
  if (o.tokens_given && o.steps_given) fail("compress: give --tokens or --steps, not both");
  if (!job.init.empty() && (o.bpw_given || !o.bpw_for.empty()))
    fail("compress: --init {} brings its own ranks; --bpw and --bpw-for do not apply", job.init.string());
  if (o.out.empty() && !job.init.empty()) {
    job.out = fmt::format("{}.{}.bitrank", std::filesystem::path(job.init).stem().string(), job.objective);
  } else if (o.out.empty()) {
    job.out = fmt::format("{}.{}bpw.bitrank", std::filesystem::path(job.model).stem().string(), job.bpw);
  } else {
    job.out = o.out;
  }
  check_output_path("compress", "-o", job.out.string());
  // What the model's header alone refuses, before anything is loaded: a window past its context (windows
  // not given are shortened to it), a bpw target its projections cannot reach (blr::plan_ranks names the
  // range they can).
  if (io::identify_model_file(job.model) == io::ModelFileKind::safetensors)
    fail("compress: --model {} is a compressed (bitrank) model, not a teacher: give the .gguf or Hugging Face "
         "directory it was made from (--init {} continues from it)",
         job.model.string(), job.model.string());
  const io::ModelConfig config = store::read_model_config(job.model);
  if (!o.given.seq_len) job.seq_len = default_seq_len(job.seq_len, config);
  if (!o.eval_seq_len_given) job.eval_seq_len = default_seq_len(job.eval_seq_len, config);
  check_seq_len_fits("compress", "--seq-len", job.seq_len, config);
  check_seq_len_fits("compress", "--eval-seq-len", job.eval_seq_len, config);
  if (job.init.empty())
    (void)train::plan_ranks_for(job, model::compressible_projections(config));
  const long long per_step = static_cast<long long>(job.seq_len) * job.windows_per_step;
  if (o.steps_given) job.steps = o.steps;
  else if (o.tokens_given) job.steps = (o.tokens + per_step - 1) / per_step;
  const nlohmann::ordered_json summary = train::compress_recipe(job, *be);
  std::printf("%s\n", summary.dump(2).c_str());
  if (job.diagnose) return 0;
  const auto& p = summary.at("perplexity");
  const double teacher = p.at("teacher").at("ppl").get<double>(), student = p.at("student").at("ppl").get<double>();
  const std::string start = summary.value("init_method", std::string("init"));
  std::string stages = p.at("init").is_null()
                           ? fmt::format("the start ({}) not measured: --eval-init", start)
                           : fmt::format("the start ({}): {:.4g}", start, p.at("init").at("ppl").get<double>());
  if (p.contains("blockwise"))
    stages += fmt::format(", after the block-wise stage: {:.4g}", p.at("blockwise").at("ppl").get<double>());
  std::fprintf(stderr,
               "compress: wrote %s: %.4f bits per weight over the projections (%.4f over the whole model).\n"
               "compress: perplexity on %lld evaluation windows of %lld tokens: teacher %.3f, compressed %.3f — "
               "%.2f× the teacher's (%s).\n",
               job.out.string().c_str(), summary.at("accounting").at("blr").at("bpw").get<double>(),
               summary.at("accounting").at("model").at("bpw").get<double>(),
               static_cast<long long>(p.at("teacher").at("windows").get<std::int64_t>()),
               static_cast<long long>(job.eval_seq_len), teacher, student, student / teacher, stages.c_str());
  return 0;
}

}  // namespace bitrank::cli
