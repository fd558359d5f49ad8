#include "support/model_files.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "bitrank/io/hf_config.hpp"
#include "bitrank/model/model.hpp"

namespace bitrank::test {

io::TokenizerSpec byte_tokenizer(index_t vocab, bool add_bos) {
  io::TokenizerSpec s;
  for (int b = 0; b < 256; ++b) {
    s.tokens.push_back(io::byte_to_unicode(static_cast<std::uint8_t>(b)));
    s.types.push_back(io::TokenType::normal);
  }
  s.tokens.push_back("<|eos|>");
  s.types.push_back(io::TokenType::control);
  for (index_t i = 257; i < vocab; ++i) {
    s.tokens.push_back(fmt::format("<x{}>", i));
    s.types.push_back(io::TokenType::user_defined);
  }
  s.eos_id = 256;
  s.bos_id = add_bos ? 256 : -1;
  s.add_bos = add_bos;
  return s;
}

namespace {

template <class T>
void put(std::vector<std::byte>& b, T v) {
  // resize + memcpy: GCC 12 takes an insert of sizeof(T) bytes here for an overflow (-Wstringop-overflow)
  const std::size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

void put_str(std::vector<std::byte>& b, const std::string& s) {
  put<std::uint64_t>(b, s.size());
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  b.insert(b.end(), p, p + s.size());
}

void pad(std::vector<std::byte>& b, std::size_t align) {
  while (b.size() % align) b.push_back(std::byte{0});
}

// GGUF metadata value types.
constexpr std::uint32_t kU32 = 4, kF32 = 6, kBool = 7, kString = 8, kArray = 9;

}  // namespace

std::vector<std::byte> safetensors_image(const std::vector<NamedTensor>& tensors) {
  std::string header = "{";
  std::uint64_t offset = 0;
  std::vector<std::byte> data;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& t = tensors[i];
    // Appended piece by piece: GCC 12 takes the temporaries of a chain of string + for overlapping copies (-Wrestrict).
    std::string shape;
    for (index_t d : t.shape) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    const std::uint64_t end = offset + t.values.size() * 4;
    if (i) header += ',';
    header.append("\"").append(t.name).append("\":{\"dtype\":\"F32\",\"shape\":[").append(shape);
    header.append("],\"data_offsets\":[").append(std::to_string(offset)).append(",").append(std::to_string(end));
    header.append("]}");
    const auto* p = reinterpret_cast<const std::byte*>(t.values.data());
    data.insert(data.end(), p, p + t.values.size() * 4);
    offset = end;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::vector<std::byte> out;
  put<std::uint64_t>(out, header.size());
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

GgufImage& GgufImage::string(const std::string& key, const std::string& value) {
  put_str(kv_, key);
  put(kv_, kString);
  put_str(kv_, value);
  ++n_kv_;
  return *this;
}

GgufImage& GgufImage::u32(const std::string& key, std::uint32_t value) {
  put_str(kv_, key);
  put(kv_, kU32);
  put(kv_, value);
  ++n_kv_;
  return *this;
}

GgufImage& GgufImage::f32(const std::string& key, float value) {
  put_str(kv_, key);
  put(kv_, kF32);
  put(kv_, value);
  ++n_kv_;
  return *this;
}

GgufImage& GgufImage::bool_array(const std::string& key, const std::vector<bool>& value) {
  put_str(kv_, key);
  put(kv_, kArray);
  put(kv_, kBool);
  put<std::uint64_t>(kv_, value.size());
  for (bool v : value) put<std::uint8_t>(kv_, v ? 1 : 0);
  ++n_kv_;
  return *this;
}

GgufImage& GgufImage::tensor(NamedTensor t) {
  tensors_.push_back(std::move(t));
  return *this;
}

std::vector<std::byte> GgufImage::bytes() const {
  std::vector<std::byte> b;
  put<std::uint32_t>(b, 0x46554747u);  // "GGUF"
  put<std::uint32_t>(b, 3);
  put<std::uint64_t>(b, tensors_.size());
  put<std::uint64_t>(b, n_kv_);
  b.insert(b.end(), kv_.begin(), kv_.end());
  std::uint64_t offset = 0;
  for (const NamedTensor& t : tensors_) {
    put_str(b, t.name);
    put<std::uint32_t>(b, static_cast<std::uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<std::uint64_t>(b, static_cast<std::uint64_t>(*it));
    put<std::uint32_t>(b, 0);  // F32
    put<std::uint64_t>(b, offset);
    offset += (t.values.size() * 4 + 31) / 32 * 32;
  }
  pad(b, 32);
  for (const NamedTensor& t : tensors_) {
    for (float v : t.values) put(b, v);
    pad(b, 32);
  }
  return b;
}

std::string llama_hf_name(const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  const std::size_t dot = g.find('.', 4);
  const std::string block = g.substr(4, dot - 4), rest = g.substr(dot + 1);
  const std::map<std::string, std::string> m{{"attn_norm.weight", "input_layernorm.weight"},
                                             {"attn_q.weight", "self_attn.q_proj.weight"},
                                             {"attn_k.weight", "self_attn.k_proj.weight"},
                                             {"attn_v.weight", "self_attn.v_proj.weight"},
                                             {"attn_output.weight", "self_attn.o_proj.weight"},
                                             {"ffn_norm.weight", "post_attention_layernorm.weight"},
                                             {"ffn_gate.weight", "mlp.gate_proj.weight"},
                                             {"ffn_up.weight", "mlp.up_proj.weight"},
                                             {"ffn_down.weight", "mlp.down_proj.weight"}};
  return "model.layers." + block + "." + m.at(rest);
}

std::filesystem::path random_llama_dir(const std::filesystem::path& dir, const std::string& config_json,
                                       std::uint64_t seed) {
  model::HostWeights w;
  w.config = io::parse_hf_config(config_json, "config.json");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const auto& [name, shape] : model::expected_tensors(w.config)) {
    model::HostTensor t{shape, {}};
    const bool gain = shape.size() == 1;
    const double scale = gain ? 0.1 : std::sqrt(3.0 / static_cast<double>(shape[1]));
    index_t numel = 1;
    for (index_t s : shape) numel *= s;
    for (index_t i = 0; i < numel; ++i) t.values.push_back(static_cast<float>((gain ? 1.0 : 0.0) + scale * u(rng)));
    w.tensors.emplace(name, std::move(t));
  }
  const auto bytes = llama_hf_safetensors(w);
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  std::ofstream(dir / "config.json", std::ios::binary) << config_json;
  std::filesystem::copy_file(std::filesystem::path(BITRANK_TEST_DATA_DIR) / "tokenizer" / "smollm.json",
                             dir / "tokenizer.json");
  return dir;
}

std::vector<std::byte> llama_hf_safetensors(const model::HostWeights& w) {
  std::vector<NamedTensor> tensors;
  for (const auto& [name, t] : w.tensors) tensors.push_back({llama_hf_name(name), t.shape, t.values});
  return safetensors_image(tensors);
}

std::string word_text(int seed, int paragraphs) {
  static const char* words[] = {"the", "module", "function", "returns", "a", "list", "of", "values", "when",
                                "called", "with", "arguments", "Python", "file", "object", "is", "used", "to"};
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::string s;
  for (int p = 0; p < paragraphs; ++p) {
    for (int i = 0; i < 60; ++i) s += std::string(words[rng() % std::size(words)]) + (i % 12 == 11 ? ".\n" : " ");
    s += "\n";
  }
  return s;
}

}  // namespace bitrank::test
