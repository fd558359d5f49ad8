// Teacher-generated training text: batched seeded sampling, the cache file,
// the teacher's fingerprint (contract and formats: include/bitrank/train/teacher_text.hpp).
#include "bitrank/train/teacher_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "bitrank/error.hpp"
#include "bitrank/log.hpp"
#include "bitrank/model/generate.hpp"
#include "bitrank/progress.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/train/data.hpp"

namespace bitrank::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kMagic = "bitrank teacher text 1";
// The header keys that identify the text; the others are counts or the record.
constexpr const char* kIdentityKeys[] = {"model", "vocab", "tokenizer", "seed", "seq_len",
                                         "temperature", "top_k", "top_p", "greedy_tokens"};

std::string hex64(std::uint64_t h) { return fmt::format("{:016x}", h); }

std::string duration_str(double s) {
  if (s < 90) return fmt::format("{:.0f} s", s);
  if (s < 5400) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

// The ids of a cache whose header matches `want` and holds ≥ samples
// samples; otherwise nullopt with `why` set. Error when the file exists,
// is not empty and is not a cache.
std::optional<std::vector<std::int32_t>> read_cache(const fs::path& path, const json& want, std::int64_t samples,
                                                    std::string& why, json& header) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    why = "no cache yet";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("teacher text: cannot read the cache {}", path.string());
  std::string magic;
  std::getline(in, magic);
  if (magic.empty() && in.eof()) {
    why = "the cache file is empty";
    return std::nullopt;
  }
  if (magic != kMagic)
    fail("teacher text: {} is not a teacher-text cache (its first line is not \"{}\"); not overwriting it: "
         "remove it or name another cache file",
         path.string(), kMagic);
  std::string line;
  std::getline(in, line);
  try {
    header = json::parse(line);
    std::vector<std::string> differ;
    for (const char* key : kIdentityKeys)
      if (!header.contains(key) || header.at(key) != want.at(key))
        differ.push_back(fmt::format("{} {} (this run: {})", key, header.contains(key) ? header.at(key).dump() : "none",
                                     want.at(key).dump()));
    if (!differ.empty()) {
      why = "it was made for other options: ";
      for (std::size_t i = 0; i < differ.size(); ++i) why += (i ? ", " : "") + differ[i];
      return std::nullopt;
    }
    const auto cached = header.at("samples").get<std::int64_t>();
    const auto tokens = header.at("tokens").get<std::int64_t>();
    const auto seq_len = want.at("seq_len").get<std::int64_t>();
    if (cached < samples) {
      why = fmt::format("it holds {} samples, this run asks {}", cached, samples);
      return std::nullopt;
    }
    if (tokens != cached * seq_len) {
      why = fmt::format("its header says {} tokens for {} samples of {}", tokens, cached, seq_len);
      return std::nullopt;
    }
    const auto at = static_cast<std::uintmax_t>(in.tellg());
    const std::uintmax_t size = fs::file_size(path);
    if (size != at + static_cast<std::uintmax_t>(tokens) * 4) {
      why = fmt::format("it holds {} bytes of ids, its header says {} tokens ({} bytes): damaged", size - at, tokens,
                        tokens * 4);
      return std::nullopt;
    }
    static_assert(std::endian::native == std::endian::little, "the cache holds little-endian int32");
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
    in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
    if (!in) {
      why = "its ids could not be read";
      return std::nullopt;
    }
    if (hex64(ids_fingerprint(ids)) != header.at("ids_fingerprint").get<std::string>()) {
      why = "its ids do not match their fingerprint: damaged";
      return std::nullopt;
    }
    ids.resize(static_cast<std::size_t>(samples * seq_len));
    return ids;
  } catch (const json::exception& e) {
    why = fmt::format("its header is unreadable ({})", e.what());
    return std::nullopt;
  }
}

// Writes the cache ("<path>.tmp", then renamed); false with `why` on failure.
bool write_cache(const fs::path& path, const json& header, const std::vector<std::int32_t>& ids, std::string& why) {
  const fs::path tmp = fs::path(path.string() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (out) {
      out << kMagic << '\n' << header.dump() << '\n';
      out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
      out.flush();
    }
    if (!out) {
      why = fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno));
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    why = fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace

void check_teacher_text_options(const TeacherTextOptions& o) {
  if (o.tokens < 1) fail("teacher text: tokens must be ≥ 1, got {}", o.tokens);
  if (o.seq_len < 2) fail("teacher text: seq_len must be ≥ 2, got {}", o.seq_len);
  if (o.greedy_tokens < 0) fail("teacher text: greedy_tokens must be ≥ 0, got {}", o.greedy_tokens);
  if (o.batch < 1) fail("teacher text: batch must be ≥ 1, got {}", o.batch);
  model::check_sampling_options({.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p});
  if (!o.cache.empty() && o.model_id.empty())
    fail("teacher text: the cache {} needs the teacher's identity (model_id, e.g. teacher_fingerprint(weights))",
         o.cache.string());
}

template <class T>
TeacherText generate_teacher_text(const model::DecoderModel<T>& teacher, const io::Tokenizer& tokenizer,
                                  const TeacherTextOptions& o) {
  check_teacher_text_options(o);
  const model::ModelConfig& c = teacher.config();
  const index_t V = c.vocab_size, Tq = o.seq_len;
  if (c.max_position_embeddings > 0 && Tq > c.max_position_embeddings)
    fail("teacher text: seq_len {} exceeds the teacher's context of {} positions", Tq, c.max_position_embeddings);
  const io::TokenizerSpec& spec = tokenizer.spec();
  std::vector<std::int32_t> candidates;
  const auto n_tok = std::min<index_t>(static_cast<index_t>(spec.tokens.size()), V);
  for (index_t id = 0; id < n_tok; ++id)
    if (spec.types[static_cast<std::size_t>(id)] == io::TokenType::normal && id != spec.bos_id && id != spec.eos_id)
      candidates.push_back(static_cast<std::int32_t>(id));
  if (candidates.empty())
    fail("teacher text: the tokenizer has no normal token below the teacher's vocabulary of {} to start a sample", V);
  const bool bos = spec.add_bos && spec.bos_id >= 0 && spec.bos_id < V;
  const index_t start = bos ? 2 : 1;  // ids before the first drawn from the teacher
  const std::int64_t S = (o.tokens + Tq - 1) / Tq;

  TeacherText r;
  r.samples = S;
  r.name = fmt::format("teacher text ({} samples of {}, seed {}, temperature {}, top-k {}, top-p {})", S, Tq, o.seed,
                       o.temperature, o.top_k, o.top_p);
  const json want = {{"model", o.model_id},
                     {"vocab", V},
                     {"tokenizer", tokenizer_fingerprint(tokenizer)},
                     {"seed", o.seed},
                     {"seq_len", Tq},
                     {"temperature", o.temperature},
                     {"top_k", o.top_k},
                     {"top_p", o.top_p},
                     {"greedy_tokens", o.greedy_tokens}};
  std::string why = "no cache";
  if (!o.cache.empty()) {
    json header;
    if (auto ids = read_cache(o.cache, want, S, why, header)) {
      r.ids = std::move(*ids);
      r.from_cache = true;
      r.cache_status = fmt::format("reused {} ({} of its {} samples; made with batch {} on {})", o.cache.string(), S,
                                   header.value("samples", std::int64_t{0}), header.value("batch", std::int64_t{0}),
                                   header.value("backend", std::string("?")));
      BR_LOG_INFO("teacher text: {}", r.cache_status);
      return r;
    }
    if (why != "no cache yet") BR_LOG_INFO("teacher text: regenerating the cache {}: {}", o.cache.string(), why);
  }

  // Generation: batches of samples in lockstep, one position at a time.
  BR_LOG_INFO("teacher text: generating {} samples of {} tokens ({} at a time; no KV cache: ≈ {} token forwards)", S,
              Tq, o.batch, S * Tq * (Tq + 1) / 2);
  r.ids.resize(static_cast<std::size_t>(S * Tq));
  std::optional<ProgressLine> progress;
  if (o.progress) progress.emplace();
  const double work = static_cast<double>(S) * static_cast<double>(Tq * (Tq - 1) / 2);  // token forwards
  double done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::vector<std::int32_t> flat;
  for (std::int64_t s0 = 0; s0 < S; s0 += o.batch) {
    const std::int64_t B = std::min(o.batch, S - s0);
    std::int32_t* rows = r.ids.data() + s0 * Tq;  // B rows of Tq, filled left to right
    for (std::int64_t b = 0; b < B; ++b) {
      const auto s = static_cast<std::uint64_t>(s0 + b);
      if (bos) rows[b * Tq] = spec.bos_id;
      rows[b * Tq + start - 1] =
          candidates[static_cast<std::size_t>(hash_counter(o.seed ^ kFirstTokenSalt, s) % candidates.size())];
    }
    for (index_t t = start; t < Tq; ++t) {
      flat.resize(static_cast<std::size_t>(B * t));
      for (std::int64_t b = 0; b < B; ++b) std::copy(rows + b * Tq, rows + b * Tq + t, flat.data() + b * t);
      const std::vector<double> z = teacher.last_logits(flat, t);
      const bool greedy = t - start < o.greedy_tokens;
      for (std::int64_t b = 0; b < B; ++b) {
        const model::SamplingOptions so{.temperature = greedy ? 0.0 : o.temperature, .top_k = o.top_k,
                                        .top_p = o.top_p, .seed = hash_counter(o.seed, static_cast<std::uint64_t>(s0 + b))};
        rows[b * Tq + t] = model::sample_token(std::span(z).subspan(static_cast<std::size_t>(b * V),
                                                                    static_cast<std::size_t>(V)),
                                               so, static_cast<std::uint64_t>(t));
      }
      done += static_cast<double>(B * t);
      if (progress && progress->due()) {
        const double sec = elapsed();
        const double tokens_done = static_cast<double>(s0 * Tq + B * (t + 1));
        progress->update(fmt::format("teacher text: samples {}–{} of {}, {:.0f}/{} tokens, {:.0f} tokens/s, ~{} left",
                                     s0 + 1, s0 + B, S, tokens_done, S * Tq, tokens_done / std::max(sec, 1e-9),
                                     duration_str(sec / std::max(done, 1.0) * (work - done))));
      }
    }
  }
  r.seconds = elapsed();
  if (progress)
    progress->finish(fmt::format("teacher text: {} samples of {} ({} tokens) in {} ({:.0f} tokens/s)", S, Tq, S * Tq,
                                 duration_str(r.seconds), static_cast<double>(S * Tq) / std::max(r.seconds, 1e-9)));

  if (o.cache.empty()) {
    r.cache_status = "none";
  } else {
    json header = want;
    header["samples"] = S;
    header["tokens"] = S * Tq;
    header["ids_fingerprint"] = hex64(ids_fingerprint(r.ids));
    header["batch"] = o.batch;
    header["backend"] = teacher.backend().name;
    header["seconds"] = r.seconds;
    std::string failed;
    if (write_cache(o.cache, header, r.ids, failed)) {
      r.cache_status = why == "no cache yet" ? fmt::format("written {}", o.cache.string())
                                             : fmt::format("regenerated {}: {}", o.cache.string(), why);
      BR_LOG_INFO("teacher text: wrote the cache {}", o.cache.string());
    } else {
      r.cache_status = "not written: " + failed;
      BR_LOG_WARN("teacher text: the cache is not written: {}", failed);
    }
  }
  return r;
}

template TeacherText generate_teacher_text(const model::DecoderModel<float>&, const io::Tokenizer&,
                                           const TeacherTextOptions&);
template TeacherText generate_teacher_text(const model::DecoderModel<double>&, const io::Tokenizer&,
                                           const TeacherTextOptions&);

std::string teacher_fingerprint(const model::HostWeights& w) {
  std::uint64_t h = 0x62697472616E6B31ull;  // "bitrank1"
  const auto mix = [&](std::uint64_t word) { h = hash_counter(h, word); };
  const auto mix_string = [&](std::string_view s) {
    mix(s.size());
    mix(fnv1a64(std::as_bytes(std::span(s.data(), s.size()))));
  };
  const io::ModelConfig& c = w.config;
  mix_string(c.model_type);
  for (const std::int64_t v : {c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim,
                               c.intermediate_size, c.vocab_size, c.max_position_embeddings})
    mix(static_cast<std::uint64_t>(v));
  for (const double v : {c.rms_norm_eps, c.rope_theta, c.partial_rotary_factor}) mix(std::bit_cast<std::uint64_t>(v));
  mix(c.tie_word_embeddings);
  for (const auto& [name, t] : w.tensors) {
    mix_string(name);
    mix(t.shape.size());
    for (const index_t s : t.shape) mix(static_cast<std::uint64_t>(s));
    mix(t.values.size());
    const std::size_t n = t.values.size();
    std::size_t i = 0;
    for (; i + 1 < n; i += 2) {
      std::uint64_t word;
      std::memcpy(&word, t.values.data() + i, 8);
      mix(word);
    }
    if (i < n) mix(std::bit_cast<std::uint32_t>(t.values[i]));
  }
  return fmt::format("{} {:016x}", w.source, h);
}

std::string tokenizer_fingerprint(const io::Tokenizer& tokenizer) {
  const io::TokenizerSpec& s = tokenizer.spec();
  std::uint64_t h = kFnv1a64Basis;
  const auto add = [&](const void* p, std::size_t n) { h = fnv1a64(std::span(static_cast<const std::byte*>(p), n), h); };
  for (std::size_t i = 0; i < s.tokens.size(); ++i) {
    const auto len = static_cast<std::uint64_t>(s.tokens[i].size());
    add(&len, sizeof len);
    add(s.tokens[i].data(), s.tokens[i].size());
    add(&s.types[i], sizeof s.types[i]);
  }
  for (const std::int32_t v : {s.bos_id, s.eos_id, static_cast<std::int32_t>(s.add_bos)}) add(&v, sizeof v);
  return hex64(h);
}

}  // namespace bitrank::train
