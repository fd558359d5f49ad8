// Checkpoints of `bitrank compress` (layout and contract:
// include/bitrank/train/compress_checkpoint.hpp).
#include "bitrank/train/compress_checkpoint.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "bitrank/error.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/safetensors_writer.hpp"
#include "bitrank/train/compress.hpp"
#include "bitrank/train/data.hpp"
#include "io/json_checked.hpp"

namespace bitrank::train {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace key {
constexpr const char* format = "bitrank.format";
constexpr const char* version = "bitrank.version";
constexpr const char* compress = "bitrank.compress";
}  // namespace key
constexpr const char* kStateTensor = "student.state";
constexpr const char* kPathParts[] = {"su", "sv", "h", "l", "g"};

std::string path_tensor(const std::string& matrix, std::size_t p, std::string_view part) {
  return fmt::format("{}.p{}.{}", matrix, p, part);
}

std::string hex64(std::uint64_t x) { return fmt::format("{:016x}", x); }

std::uint64_t parse_hex64(const std::string& s, const std::string& where) {
  std::uint64_t x = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), x, 16);
  if (s.size() != 16 || r.ec != std::errc() || r.ptr != s.data() + s.size())
    fail("{}: \"{}\" is not 16 hex digits", where, s);
  return x;
}

// Losses as JSON: a non-finite loss is null (JSON has no NaN), read back as NaN.
json loss_json(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double loss_value(const json& v) { return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>(); }

std::string abs_path(const fs::path& p) {
  return p.empty() ? std::string() : fs::absolute(p).lexically_normal().string();
}

void add_adam(ordered_json& j, const std::string& prefix, const AdamOptions& a) {
  // grad_scale and step are set by every step; the rest is the run's.
  j[prefix + ".lr"] = a.lr;
  j[prefix + ".beta1"] = a.beta1;
  j[prefix + ".beta2"] = a.beta2;
  j[prefix + ".eps"] = a.eps;
  j[prefix + ".relative_floor"] = a.relative_floor;
}

// The tensor `name`, checked for dtype and shape.
const io::TensorInfo& need_tensor(const io::Safetensors& st, const std::string& file, const std::string& name,
                                  io::StDType dtype, const std::vector<std::int64_t>& shape) {
  if (!st.contains(name)) fail("{}: the checkpoint has no tensor {}", file, name);
  const io::TensorInfo& t = st.info(name);
  if (t.dtype != dtype || t.shape != shape)
    fail("{}: checkpoint tensor {} is {} {}, expected {} {}", file, name, io::st_dtype_name(t.dtype),
         json(t.shape).dump(), io::st_dtype_name(dtype), json(shape).dump());
  return t;
}

}  // namespace

fs::path compress_checkpoint_path(const fs::path& out) { return fs::path(out.string() + ".ckpt"); }

ordered_json compress_options_json(const CompressOptions& o) {
  ordered_json j;
  j["model"] = abs_path(o.model);
  if (o.texts.size() <= 1) {  // one source: the key checkpoints had before several existed
    j["text"] = abs_path(o.texts.empty() ? fs::path() : o.texts.front());
  } else {
    ordered_json texts = ordered_json::array();
    for (const fs::path& t : o.texts) texts.push_back(abs_path(t));
    j["texts"] = texts;
  }
  if (o.data != "text" || o.teacher_share > 0) {  // only when used, as bpw_overrides
    j["data"] = o.data;
    j["teacher_share"] = o.teacher_share;
    j["teacher_tokens"] = o.teacher_tokens;
  }
  j["eval_text"] = abs_path(o.eval_text);
  j["objective"] = o.objective;
  j["init_method"] = o.init_method;
  j["calib_windows"] = o.calib_windows;
  if (o.init_refine > 0) j["init_refine"] = o.init_refine;  // only when used, as bpw_overrides
  if (o.init_rotate > 0) j["init_rotate"] = o.init_rotate;  // only when used, as bpw_overrides
  j["max_text_tokens"] = o.max_text_tokens;
  j["bpw"] = o.bpw;
  j["paths"] = o.paths;
  if (!o.bpw_overrides.empty()) {  // only when given: checkpoints written before overrides existed still match
    ordered_json ov = ordered_json::array();
    for (const blr::BpwOverride& b : o.bpw_overrides) ov.push_back({{"pattern", b.pattern}, {"bpw", b.bpw}});
    j["bpw_overrides"] = ov;
  }
  if (o.allocation != "uniform" && o.bpw_overrides.empty() && o.init.empty())
    j["allocation"] = o.allocation;  // only when it shapes the plan, as bpw_overrides
  if (!o.init.empty()) j["init"] = abs_path(o.init);  // only when given, as bpw_overrides
  j["steps"] = o.steps;
  j["seq_len"] = o.seq_len;
  j["windows_per_step"] = o.windows_per_step;
  j["eval_windows"] = o.eval_windows;  // the checkpoint keeps the teacher's and init's perplexities
  j["eval_seq_len"] = o.eval_seq_len;
  j["seed"] = o.seed;
  j["tau"] = o.tau;
  j["warmup_fraction"] = o.warmup_fraction;
  add_adam(j, "train.scales", o.train.scales);
  add_adam(j, "train.gains", o.train.gains);
  const SignOptions& s = o.train.signs;
  j["train.signs.optimizer"] = static_cast<int>(s.optimizer);
  j["train.signs.lr"] = s.lr;
  j["train.signs.beta1"] = s.beta1;
  j["train.signs.beta2"] = s.beta2;
  j["train.signs.eps"] = s.eps;
  j["train.signs.clamp"] = s.clamp;
  j["train.signs.hysteresis"] = s.hysteresis;
  j["train.signs.stochastic"] = s.stochastic;
  j["train.signs.seed"] = s.seed;
  j["train.clip_norm"] = o.train.clip_norm;
  return j;
}

void check_resume_options(const ordered_json& saved, const ordered_json& current, const fs::path& checkpoint) {
  // Compare as read back from text, as the saved side was.
  const json now = json::parse(current.dump());
  const json then = json::parse(saved.dump());
  for (const auto& [k, v] : now.items()) {
    if (!then.contains(k)) fail("compress --resume: {} does not record the option {}", checkpoint.string(), k);
    if (then.at(k) != v)
      fail(
          "compress --resume: {} was written with {} = {}, this run has {} = {}; resume with the same options, or "
          "delete the checkpoint to start afresh",
          checkpoint.string(), k, then.at(k).dump(), k, v.dump());
  }
  for (const auto& [k, v] : then.items())
    if (!now.contains(k)) fail("compress --resume: {} records an unknown option {}", checkpoint.string(), k);
}

std::uint64_t blr_fingerprint(const blr::HostBlrMatrix& w) {
  const std::int64_t dims[] = {w.m, w.n, w.r, static_cast<std::int64_t>(w.paths.size())};
  std::uint64_t h = fnv1a64(std::as_bytes(std::span(dims)));
  for (const blr::HostBlrPath& p : w.paths) {
    h = fnv1a64(std::as_bytes(std::span(p.sign_u)), h);
    h = fnv1a64(std::as_bytes(std::span(p.sign_v)), h);
    h = fnv1a64(std::as_bytes(std::span(p.h)), h);
    h = fnv1a64(std::as_bytes(std::span(p.l)), h);
    h = fnv1a64(std::as_bytes(std::span(p.g)), h);
  }
  return h;
}

void write_compress_checkpoint(const fs::path& path, const CompressCheckpoint& c) {
  std::vector<io::StTensorOut> tensors;
  json trained = json::array();
  for (const auto& [name, w] : c.trained) {
    const std::int64_t words = w.r / 32;
    for (std::size_t p = 0; p < w.paths.size(); ++p) {
      const blr::HostBlrPath& q = w.paths[p];
      tensors.push_back(io::StTensorOut::u32(path_tensor(name, p, "su"), {w.m, words}, q.sign_u));
      tensors.push_back(io::StTensorOut::u32(path_tensor(name, p, "sv"), {w.n, words}, q.sign_v));
      tensors.push_back(io::StTensorOut::f32(path_tensor(name, p, "h"), io::StDType::F32, {w.m}, q.h));
      tensors.push_back(io::StTensorOut::f32(path_tensor(name, p, "l"), io::StDType::F32, {w.r}, q.l));
      tensors.push_back(io::StTensorOut::f32(path_tensor(name, p, "g"), io::StDType::F32, {w.n}, q.g));
    }
    trained.push_back(name);
  }
  json gains = json::array();
  for (const auto& [name, v] : c.trained_gains) {
    tensors.push_back(io::StTensorOut::f32(name, io::StDType::F32, {static_cast<std::int64_t>(v.size())}, v));
    gains.push_back(name);
  }
  if (!c.student_state.empty())
    tensors.push_back(io::StTensorOut::raw(kStateTensor, io::StDType::U8,
                                           {static_cast<std::int64_t>(c.student_state.size())}, c.student_state));

  ordered_json j;
  j["objective"] = c.objective;
  j["block"] = c.block;
  j["options"] = c.options;
  j["blocks"] = json::array();
  for (const CompressBlockLog& b : c.blocks) {
    json losses = json::array();
    for (double v : b.losses) losses.push_back(loss_json(v));
    j["blocks"].push_back({{"losses", losses}, {"flips", b.flips}, {"skipped", b.skipped}});
  }
  ordered_json matrices = ordered_json::object();
  for (const auto& [name, m] : c.matrices)
    matrices[name] = {{"m", m.m},
                      {"n", m.n},
                      {"rank", m.rank},
                      {"paths", m.paths},
                      {"init_rel_error", m.init_rel_error},
                      {"init_fingerprint", hex64(m.init_fingerprint)},
                      {"init_output_error", loss_json(m.init_output_error)}};
  j["matrices"] = matrices;
  j["init_seconds"] = c.init_seconds;
  j["perplexity"] = c.perplexity;
  j["trained"] = trained;
  j["trained_gains"] = gains;

  std::map<std::string, std::string> meta;
  meta[key::format] = kCompressCheckpointFormat;
  meta[key::version] = std::to_string(kCompressCheckpointVersion);
  meta[std::string(kTrainerStateKey)] = trainer_state_to_json(c.trainer);
  meta[key::compress] = j.dump();
  io::write_safetensors(path, tensors, meta);
}

CompressCheckpoint read_compress_checkpoint(const fs::path& path) {
  const std::string file = path.string();
  const io::Safetensors st = io::Safetensors::open(path);
  const auto& meta = st.metadata();
  const auto need = [&](const std::string& k) -> const std::string& {
    const auto it = meta.find(k);
    if (it == meta.end()) fail("{}: metadata has no '{}' (not a compress checkpoint?)", file, k);
    return it->second;
  };
  if (need(key::format) != kCompressCheckpointFormat)
    fail("{}: metadata '{}' is \"{}\", expected \"{}\"", file, key::format, need(key::format),
         kCompressCheckpointFormat);
  // Version 1 predates the e2e checkpoints: the same layout without "objective", always a layer-wise run.
  const std::string& version = need(key::version);
  if (version != "1" && version != std::to_string(kCompressCheckpointVersion))
    fail("{}: checkpoint version {}; this build reads versions 1 to {}", file, version, kCompressCheckpointVersion);

  CompressCheckpoint c;
  c.trainer = trainer_state_from_json(need(std::string(kTrainerStateKey)), file);
  const json j = io::parse_json_checked(need(key::compress), file, key::compress, /*max_depth=*/8);
  std::vector<std::string> trained, gains;
  try {
    if (version != "1") c.objective = j.at("objective").get<std::string>();
    if (c.objective != "layer" && c.objective != "sequential" && c.objective != "e2e")
      fail("{}: objective \"{}\" is not one of layer, sequential, e2e", file, c.objective);
    c.block = j.at("block").get<std::int64_t>();
    c.options = j.at("options");
    for (const json& b : j.at("blocks")) {
      CompressBlockLog log;
      for (const json& v : b.at("losses")) log.losses.push_back(loss_value(v));
      log.flips = b.at("flips").get<std::int64_t>();
      log.skipped = b.at("skipped").get<std::int64_t>();
      c.blocks.push_back(std::move(log));
    }
    for (const auto& [name, m] : j.at("matrices").items())
      c.matrices[name] = CompressMatrixInit{
          .m = m.at("m").get<index_t>(),
          .n = m.at("n").get<index_t>(),
          .rank = m.at("rank").get<index_t>(),
          .paths = m.at("paths").get<index_t>(),
          .init_rel_error = m.at("init_rel_error").get<double>(),
          .init_fingerprint = parse_hex64(m.at("init_fingerprint").get<std::string>(),
                                          fmt::format("{}: matrices.{}.init_fingerprint", file, name)),
          .init_output_error = m.contains("init_output_error") ? loss_value(m.at("init_output_error"))
                                                               : std::numeric_limits<double>::quiet_NaN()};
    c.init_seconds = j.at("init_seconds").get<double>();
    c.perplexity = j.at("perplexity");
    trained = j.at("trained").get<std::vector<std::string>>();
    gains = j.at("trained_gains").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    fail("{}: metadata '{}': {}", file, key::compress, e.what());
  }
  if (c.block < 0 || c.trainer.step < 0 || c.blocks.size() > static_cast<std::size_t>(c.block) + 1 ||
      (c.objective == "e2e" && (c.block > 1 || c.blocks.size() != 1)))
    fail("{}: block {} with {} block logs is inconsistent ({} objective)", file, c.block, c.blocks.size(),
         c.objective);

  std::size_t expected_tensors = 0;
  for (const std::string& name : trained) {
    const auto it = c.matrices.find(name);
    if (it == c.matrices.end()) fail("{}: trained matrix {} is not in the plan", file, name);
    const CompressMatrixInit& m = it->second;
    if (m.m < 1 || m.n < 1 || m.rank < 32 || m.rank % 32 != 0 || m.paths < 1 || m.paths > 2)
      fail("{}: matrix {} has m {} n {} rank {} paths {}", file, name, m.m, m.n, m.rank, m.paths);
    blr::HostBlrMatrix w{m.m, m.n, m.rank, std::vector<blr::HostBlrPath>(static_cast<std::size_t>(m.paths))};
    for (std::size_t p = 0; p < w.paths.size(); ++p) {
      blr::HostBlrPath& q = w.paths[p];
      const auto name_of = [&](std::string_view part) { return path_tensor(name, p, part); };
      need_tensor(st, file, name_of("su"), io::StDType::U32, {m.m, m.rank / 32});
      need_tensor(st, file, name_of("sv"), io::StDType::U32, {m.n, m.rank / 32});
      need_tensor(st, file, name_of("h"), io::StDType::F32, {m.m});
      need_tensor(st, file, name_of("l"), io::StDType::F32, {m.rank});
      need_tensor(st, file, name_of("g"), io::StDType::F32, {m.n});
      q.sign_u = st.read_u32(name_of("su"));
      q.sign_v = st.read_u32(name_of("sv"));
      q.h = st.read_f32(name_of("h"));
      q.l = st.read_f32(name_of("l"));
      q.g = st.read_f32(name_of("g"));
      expected_tensors += std::size(kPathParts);
    }
    blr::check_blr(w, file + ": " + name);
    c.trained.emplace(name, std::move(w));
  }
  for (const std::string& name : gains) {
    if (!st.contains(name)) fail("{}: the checkpoint has no tensor {}", file, name);
    const io::TensorInfo& t = st.info(name);
    if (t.dtype != io::StDType::F32 || t.shape.size() != 1)
      fail("{}: checkpoint tensor {} must be a F32 vector", file, name);
    c.trained_gains.emplace(name, st.read_f32(name));
    ++expected_tensors;
  }
  if (st.contains(kStateTensor)) {
    const io::TensorInfo& t = st.info(kStateTensor);
    if (t.dtype != io::StDType::U8 || t.shape.size() != 1)
      fail("{}: checkpoint tensor {} must be a U8 vector", file, kStateTensor);
    const auto bytes = st.bytes(kStateTensor);
    c.student_state.assign(bytes.begin(), bytes.end());
    ++expected_tensors;
  }
  if ((c.trainer.step > 0) != !c.student_state.empty())
    fail("{}: step {} within block {} {} a student state", file, c.trainer.step, c.block,
         c.student_state.empty() ? "lacks" : "must not have");
  if (st.tensors().size() != expected_tensors)
    fail("{}: the checkpoint holds {} tensors, its metadata names {}", file, st.tensors().size(), expected_tensors);
  return c;
}

}  // namespace bitrank::train
