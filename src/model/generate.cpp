// Text generation: sampling, the decoding loop, prompt ids and streamed text
// (contract and numerics: include/bitrank/model/generate.hpp).
#include "bitrank/model/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include "bitrank/error.hpp"
#include "bitrank/rng.hpp"

namespace bitrank::model {
namespace {

// The length of the longest prefix of s that does not end inside a UTF-8
// character: a lead byte among the last four whose sequence needs more bytes
// than follow it starts the incomplete tail. Malformed bytes count as
// complete (they are passed on as they are, as decode gives them).
std::size_t complete_utf8_prefix(std::string_view s) {
  for (std::size_t k = 1; k <= 4 && k <= s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[s.size() - k]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const std::size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    return need > k ? s.size() - k : s.size();
  }
  return s.size();
}

}  // namespace

void check_sampling_options(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    fail("sampling: temperature must be a finite number ≥ 0 (0: greedy), got {}", o.temperature);
  if (o.top_k < 0) fail("sampling: top-k must be ≥ 0 (0: all tokens), got {}", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1)) fail("sampling: top-p must be in (0, 1], got {}", o.top_p);
}

void check_generate_options(const GenerateOptions& o) {
  check_sampling_options(o.sampling);
  if (o.max_tokens < 1) fail("generate: max-tokens must be at least 1, got {}", o.max_tokens);
  if (o.stop_id < -1) fail("generate: stop id must be a token id or -1 (none), got {}", o.stop_id);
}

std::int32_t sample_token(std::span<const double> z, const SamplingOptions& o, std::uint64_t step) {
  check_sampling_options(o);
  if (z.empty()) fail("sampling: no logits");
  const index_t V = static_cast<index_t>(z.size());
  for (index_t i = 0; i < V; ++i)
    if (!std::isfinite(z[i])) fail("sampling: the logit of token {} is {} (not finite)", i, z[i]);
  if (o.temperature == 0) return static_cast<std::int32_t>(std::max_element(z.begin(), z.end()) - z.begin());

  std::vector<std::int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const auto before = [&](std::int32_t a, std::int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  const index_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);

  std::vector<double> p(static_cast<std::size_t>(k));
  double mass = 0;
  for (index_t i = 0; i < k; ++i) mass += p[i] = std::exp((z[order[i]] - z[order[0]]) / o.temperature);
  index_t keep = k;
  if (o.top_p < 1) {
    double cum = 0;
    for (keep = 0; keep < k && cum < o.top_p * mass;) cum += p[keep++];
    mass = cum;
  }
  const double u = hash_uniform_f64(o.seed, step) * mass;
  double cum = 0;
  for (index_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return order[i];
  }
  return order[keep - 1];  // u·mass rounded up to the last prefix sum
}

template <class T>
GenerateResult generate(const DecoderModel<T>& model, std::span<const std::int32_t> prompt,
                        const GenerateOptions& o, const TokenCallback& on_token) {
  check_generate_options(o);
  const ModelConfig& c = model.config();
  if (prompt.empty()) fail("generate: the prompt has no tokens (empty text?)");
  check_tokens(prompt, static_cast<index_t>(prompt.size()), c.vocab_size, "generate: prompt");
  if (o.stop_id >= c.vocab_size)
    fail("generate: stop id {} is outside the vocabulary of {}", o.stop_id, c.vocab_size);
  const index_t total = static_cast<index_t>(prompt.size()) + o.max_tokens;
  if (c.max_position_embeddings > 0 && total > c.max_position_embeddings)
    fail("generate: the prompt's {} tokens and {} new ones exceed the model's context of {} positions",
         prompt.size(), o.max_tokens, c.max_position_embeddings);

  GenerateResult r;
  r.prompt_tokens = static_cast<index_t>(prompt.size());
  std::vector<std::int32_t> seq(prompt.begin(), prompt.end());
  seq.reserve(static_cast<std::size_t>(total));
  const auto t0 = std::chrono::steady_clock::now();
  const auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  // The last drawn token is never run through the model: total − 1 positions.
  const std::unique_ptr<KvCache<T>> cache = o.use_cache ? model.make_cache(total - 1) : nullptr;
  // Logits after seq: with the cache, only the tokens it has not seen yet go through the model.
  const auto next_logits = [&] {
    if (!cache) return model.last_logits(seq);
    return model.next_logits(std::span<const std::int32_t>(seq).subspan(static_cast<std::size_t>(cache->length)),
                             *cache);
  };
  for (index_t i = 0; i < o.max_tokens; ++i) {
    const std::int32_t id = sample_token(next_logits(), o.sampling, static_cast<std::uint64_t>(i));
    if (i == 0) r.prefill_seconds = since_start();
    seq.push_back(id);
    r.tokens.push_back(id);
    if (on_token) on_token(id);
    if (id == o.stop_id) {
      r.stopped = true;
      break;
    }
  }
  r.seconds = since_start();
  return r;
}

template GenerateResult generate(const DecoderModel<float>&, std::span<const std::int32_t>, const GenerateOptions&,
                                 const TokenCallback&);
template GenerateResult generate(const DecoderModel<double>&, std::span<const std::int32_t>, const GenerateOptions&,
                                 const TokenCallback&);

std::vector<std::int32_t> encode_prompt(const io::Tokenizer& tokenizer, std::string_view text) {
  std::vector<std::int32_t> ids;
  const io::TokenizerSpec& spec = tokenizer.spec();
  if (spec.add_bos) ids.push_back(spec.bos_id);
  const std::vector<std::int32_t> body = tokenizer.encode(text, {.parse_special = true});
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::string TextStream::push(std::int32_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_.decode(ids_);
  const std::size_t end = complete_utf8_prefix(text);
  if (end <= emitted_) return {};
  std::string piece = text.substr(emitted_, end - emitted_);
  emitted_ = end;
  return piece;
}

std::string TextStream::finish() {
  const std::string text = tokenizer_.decode(ids_);
  std::string rest = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  emitted_ = text.size();
  return rest;
}

}  // namespace bitrank::model
