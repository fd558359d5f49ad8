// Text generation with any decoder model (DESIGN §9, `bitrank generate`):
// prompt ids in, one new token per step, until max_tokens or the stop token.
//
// Decoding with the cache (the default, kv_cache.hpp): a prefill runs the
// prompt through the model once, filling a cache of prompt + max_tokens
// positions, and gives the first token's logits; each later step runs the
// last drawn token alone (DecoderModel::next_logits). Without it
// (use_cache false, `bitrank generate --no-cache`) each step runs the whole
// sequence (prompt + tokens so far) as one window through the model and
// applies the head to the last row only (DecoderModel::last_logits): step i
// costs a full forward of prompt + i tokens — the plain reference the cached
// path is tested against. Either way the first step is the prefill and
// the others the decoding steps, timed apart (GenerateResult).
//
// Sampling of one token from logits z [V] (f64, on the host):
//   temperature 0      greedy: argmax z, the lowest id on ties;
//   temperature t > 0  candidates ordered by z (descending, lower id first on
//                      ties); top_k > 0 keeps the first k; p_i ∝
//                      exp((z_i − z_max)/t) over them; top_p < 1 then keeps
//                      the shortest prefix whose mass reaches top_p of theirs
//                      (as transformers' TopK then TopP warpers); one draw
//                      u = hash_uniform_f64(seed, step) (rng.hpp) picks
//                      the token where the prefix sums of p pass u·Σp.
// The draw of step i depends on (seed, i) only: the same seed, prompt,
// model and backend give the same tokens. top_k 1 is greedy by construction.
//
// Prompts (encode_prompt): control tokens written in the text are matched
// (as transformers' tokenizers match added special tokens, so a chat
// template such as "<|im_start|>user\n…<|im_end|>\n<|im_start|>assistant\n"
// can be typed), and the BOS id is prepended when the tokenizer says so
// (add_bos: tokenizer.json's post-processor, a GGUF's add_bos_token;
// llama-bpe GGUFs default to it); the EOS is never appended. SmolLM2 has
// add_bos false, so its prompt ids are the plain text ids that `bitrank
// eval` and the golden logits (transformers' tokenizer) use.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/decoder.hpp"

namespace bitrank::model {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy; else finite and > 0
  index_t top_k = 0;       // keep the k most likely tokens; 0: all
  double top_p = 1;        // then the most likely tokens holding this share of the mass; in (0, 1]
  std::uint64_t seed = 0;  // of the counter-based draws
};

// Error naming the option and its value unless: temperature finite and
// ≥ 0, top_k ≥ 0, top_p in (0, 1].
void check_sampling_options(const SamplingOptions& options);

// The token drawn from logits [V] by draw number `step` (see above). Error
// on empty or non-finite logits, or options check_sampling_options refuses.
std::int32_t sample_token(std::span<const double> logits, const SamplingOptions& options, std::uint64_t step);

struct GenerateOptions {
  index_t max_tokens = 64;    // ≥ 1
  SamplingOptions sampling{};
  std::int32_t stop_id = -1;  // generation ends after this token (returned too); -1: never
  bool use_cache = true;      // false: a whole forward per step (see above)
};

// check_sampling_options, and max_tokens ≥ 1, stop_id ≥ −1.
void check_generate_options(const GenerateOptions& options);

struct GenerateResult {
  std::vector<std::int32_t> tokens;  // the generated ids, the stop token included
  bool stopped = false;              // ended at stop_id
  double seconds = 0;                // wall time of the steps
  index_t prompt_tokens = 0;
  double prefill_seconds = 0;        // the first step: the prompt through the model, the first token drawn
  double tokens_per_s() const { return seconds > 0 ? static_cast<double>(tokens.size()) / seconds : 0.0; }
  // Prompt tokens per second of the prefill.
  double prefill_tokens_per_s() const {
    return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
  }
  // Generated tokens after the first per second of the later steps (0 when there are none).
  double decode_tokens_per_s() const {
    const double s = seconds - prefill_seconds;
    return tokens.size() > 1 && s > 0 ? static_cast<double>(tokens.size() - 1) / s : 0.0;
  }
};

// Called with each new id as soon as it is drawn.
using TokenCallback = std::function<void(std::int32_t)>;

// Generates after `prompt` (see above). Error (before any step) on bad
// options, an empty prompt, ids or stop_id outside the vocabulary, or
// prompt + max_tokens beyond the model's context (max_position_embeddings,
// when the config has one).
template <class T>
GenerateResult generate(const DecoderModel<T>& model, std::span<const std::int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token = {});

// The prompt text as ids (see above).
std::vector<std::int32_t> encode_prompt(const io::Tokenizer& tokenizer, std::string_view text);

// Generated ids → text as it becomes complete: push(id) returns the bytes of
// decode(all ids so far) not yet returned, up to the last complete UTF-8
// character (a character split over tokens waits for its last byte);
// finish() returns the rest, an incomplete tail as its raw bytes.
class TextStream {
 public:
  explicit TextStream(const io::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(std::int32_t id);
  std::string finish();

 private:
  const io::Tokenizer& tokenizer_;
  std::vector<std::int32_t> ids_;
  std::size_t emitted_ = 0;  // bytes of decode(ids_) already returned
};

extern template GenerateResult generate(const DecoderModel<float>&, std::span<const std::int32_t>,
                                        const GenerateOptions&, const TokenCallback&);
extern template GenerateResult generate(const DecoderModel<double>&, std::span<const std::int32_t>,
                                        const GenerateOptions&, const TokenCallback&);

}  // namespace bitrank::model
