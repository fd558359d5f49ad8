// The bitrank model file; tensor names, metadata keys, numerics and checks
// are described in bitrank/store/bitrank_format.hpp.
//
// Loading reads in this order, so that each check can trust the ones before
// it: format and version, config, tokenizer, storage, the BLR index (sizes
// sane before any shape is computed from them), the path tensors the index
// names (present, dtype, shape), every other tensor as dense, the summary;
// then check_compressed_model (the same checks save makes) and last the
// stored accounting against one recomputed from what was read.
#include "bitrank/store/bitrank_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "bitrank/blr/accounting.hpp"
#include "bitrank/dtype.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/safetensors_writer.hpp"
#include "io/json_checked.hpp"

namespace bitrank::store {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kPathParts[] = {"su", "sv", "h", "l", "g"};
constexpr std::int64_t kMaxDim = INT32_MAX;

namespace key {
constexpr const char* format = "bitrank.format";
constexpr const char* version = "bitrank.version";
constexpr const char* config = "bitrank.config";
constexpr const char* tokenizer = "bitrank.tokenizer";
constexpr const char* storage = "bitrank.storage";
constexpr const char* blr = "bitrank.blr";
constexpr const char* accounting = "bitrank.accounting";
constexpr const char* summary = "bitrank.summary";
}  // namespace key

std::string path_tensor(const std::string& matrix, std::size_t p, std::string_view part) {
  return fmt::format("{}.p{}.{}", matrix, p, part);
}

std::int64_t value_bits(StoredFloat f) { return f == StoredFloat::f16 ? 16 : 32; }
io::StDType st_dtype(StoredFloat f) { return f == StoredFloat::f16 ? io::StDType::F16 : io::StDType::F32; }

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The BLR matrix whose tensor `name` would be (N.weight, or N.p{k}.{part}
// for any k), or nullptr.
const std::string* shadowed_matrix(const std::string& name, const std::map<std::string, blr::HostBlrMatrix>& blr) {
  auto matrix = [&](std::string_view n) -> const std::string* {
    const auto it = blr.find(std::string(n));
    return it == blr.end() ? nullptr : &it->first;
  };
  const std::string_view s(name);
  if (s.ends_with(".weight"))
    if (const auto* m = matrix(s.substr(0, s.size() - 7))) return m;
  const auto dot = s.rfind('.');
  if (dot == std::string_view::npos) return nullptr;
  const std::string_view part = s.substr(dot + 1);
  if (std::none_of(std::begin(kPathParts), std::end(kPathParts), [&](const char* p) { return part == p; }))
    return nullptr;
  const std::string_view rest = s.substr(0, dot);  // N.p{k}
  const auto pdot = rest.rfind(".p");
  if (pdot == std::string_view::npos) return nullptr;
  const std::string_view digits = rest.substr(pdot + 2);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return nullptr;
  return matrix(rest.substr(0, pdot));
}

void check_values(std::span<const float> v, StoredFloat storage, const std::string& where, const std::string& tensor) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) fail("{}: tensor '{}': value {} at index {} is not finite", where, tensor, v[i], i);
    if (storage == StoredFloat::f16 && !std::isfinite(round_f16(v[i])))
      fail("{}: tensor '{}': value {} at index {} overflows F16 storage", where, tensor, v[i], i);
  }
}

std::string dump_json(const json& j, const std::string& where, std::string_view what) {
  try {
    return j.dump();
  } catch (const json::exception& e) {
    fail("{}: {} cannot be written as JSON: {}", where, what, e.what());
  }
}

void check_matrix(const std::string& name, const blr::HostBlrMatrix& w, StoredFloat scales, const std::string& where) {
  if (name.empty()) fail("{}: a BLR matrix has an empty name", where);
  if (w.m < 1 || w.m > kMaxDim || w.n < 1 || w.n > kMaxDim)
    fail("{}: BLR matrix '{}': size {}×{} is outside 1..{}", where, name, w.m, w.n, kMaxDim);
  if (w.r < 32 || w.r % 32 != 0 || w.r > kMaxDim)
    fail("{}: BLR matrix '{}': rank {} is not a positive multiple of 32", where, name, w.r);
  const auto paths = static_cast<std::int64_t>(w.paths.size());
  if (paths < 1 || paths > kBitrankMaxPaths)
    fail("{}: BLR matrix '{}': {} paths, expected 1..{}", where, name, paths, kBitrankMaxPaths);
  const std::size_t words = static_cast<std::size_t>(w.r / 32);
  for (std::size_t p = 0; p < w.paths.size(); ++p) {
    const blr::HostBlrPath& path = w.paths[p];
    auto expect_size = [&](std::size_t got, std::size_t want, std::string_view part, std::string_view layout) {
      if (got != want)
        fail("{}: tensor '{}': {} elements, expected {} ({} of BLR matrix '{}', m={} n={} r={})", where,
             path_tensor(name, p, part), got, want, layout, name, w.m, w.n, w.r);
    };
    const auto m = static_cast<std::size_t>(w.m), n = static_cast<std::size_t>(w.n), r = static_cast<std::size_t>(w.r);
    expect_size(path.sign_u.size(), m * words, "su", "[m][r/32] u32 words");
    expect_size(path.sign_v.size(), n * words, "sv", "[n][r/32] u32 words");
    expect_size(path.h.size(), m, "h", "[m]");
    expect_size(path.l.size(), r, "l", "[r]");
    expect_size(path.g.size(), n, "g", "[n]");
    check_values(path.h, scales, where, path_tensor(name, p, "h"));
    check_values(path.l, scales, where, path_tensor(name, p, "l"));
    check_values(path.g, scales, where, path_tensor(name, p, "g"));
  }
}

// Tensors and metadata of a checked model, as the writer takes them.
struct Contents {
  std::vector<io::StTensorOut> tensors;
  std::map<std::string, std::string> metadata;
};

Contents contents_of(const CompressedModel& model, const std::string& where) {
  Contents c;
  const io::StDType scale_dtype = st_dtype(model.storage.scales), dense_dtype = st_dtype(model.storage.dense);
  json index = json::object();
  for (const auto& [name, w] : model.blr) {
    const std::int64_t words = w.r / 32;
    for (std::size_t p = 0; p < w.paths.size(); ++p) {
      const blr::HostBlrPath& path = w.paths[p];
      c.tensors.push_back(io::StTensorOut::u32(path_tensor(name, p, "su"), {w.m, words}, path.sign_u));
      c.tensors.push_back(io::StTensorOut::u32(path_tensor(name, p, "sv"), {w.n, words}, path.sign_v));
      c.tensors.push_back(io::StTensorOut::f32(path_tensor(name, p, "h"), scale_dtype, {w.m}, path.h));
      c.tensors.push_back(io::StTensorOut::f32(path_tensor(name, p, "l"), scale_dtype, {w.r}, path.l));
      c.tensors.push_back(io::StTensorOut::f32(path_tensor(name, p, "g"), scale_dtype, {w.n}, path.g));
    }
    index[name] = {{"m", w.m}, {"n", w.n}, {"rank", w.r}, {"paths", w.paths.size()}};
  }
  for (const auto& [name, t] : model.dense)
    c.tensors.push_back(
        io::StTensorOut::f32(name, dense_dtype, std::vector<std::int64_t>(t.shape.begin(), t.shape.end()), t.values));

  c.metadata[key::format] = kBitrankFormatName;
  c.metadata[key::version] = std::to_string(kBitrankFormatVersion);
  c.metadata[key::config] = io::hf_config_to_json(model.config, where + ": config");
  if (model.tokenizer) {
    try {
      c.metadata[key::tokenizer] = io::tokenizer_spec_to_json(*model.tokenizer);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  }
  c.metadata[key::storage] = dump_json(json{{"scales", std::string(stored_float_name(model.storage.scales))},
                                            {"dense", std::string(stored_float_name(model.storage.dense))}},
                                       where, "storage");
  c.metadata[key::blr] = dump_json(index, where, "the BLR index");
  c.metadata[key::accounting] = dump_json(bitrank_accounting(model), where, "the accounting");
  c.metadata[key::summary] = dump_json(model.summary, where, "the summary");
  return c;
}

// ---- loading --------------------------------------------------------------------

class Loader {
 public:
  Loader(const io::Safetensors& st, std::string file) : st_(st), file_(std::move(file)) {}

  // The format and version checks, then the architecture alone.
  io::ModelConfig config() const {
    const std::string& format = need(key::format, " (not a bitrank model file?)");
    if (format != kBitrankFormatName)
      fail("{}: metadata '{}' is \"{}\", expected \"{}\"", file_, key::format, format, kBitrankFormatName);
    const std::string& version = need(key::version);
    if (version != std::to_string(kBitrankFormatVersion))
      fail("{}: metadata '{}' is \"{}\": this build reads bitrank format version {}", file_, key::version, version,
           kBitrankFormatVersion);
    return io::parse_hf_config(need(key::config), meta_where(key::config));
  }

  CompressedModel load() {
    CompressedModel model;
    model.config = config();
    if (const std::string* t = find(key::tokenizer))
      model.tokenizer = io::parse_tokenizer_spec_json(*t, meta_where(key::tokenizer));
    model.storage = read_storage();
    read_blr(model);
    read_dense(model);
    model.summary = io::parse_json_checked(need(key::summary), file_, meta_name(key::summary), /*max_depth=*/64);
    if (!model.summary.is_object())
      fail("{}: metadata '{}' must be a JSON object, got {}", file_, key::summary, model.summary.type_name());

    check_compressed_model(model, file_);

    const json stored =
        io::parse_json_checked(need(key::accounting), file_, meta_name(key::accounting), /*max_depth=*/8);
    const json computed = bitrank_accounting(model);
    if (stored != computed) {
      const json patch = json::diff(stored, computed);
      const std::string at = patch.empty() ? "" : patch[0].value("path", "");
      const json::json_pointer ptr(at);
      fail("{}: metadata '{}' disagrees with the tensors at '{}': stored {}, computed {}", file_, key::accounting, at,
           stored.contains(ptr) ? io::json_excerpt(stored.at(ptr)) : "nothing",
           computed.contains(ptr) ? io::json_excerpt(computed.at(ptr)) : "nothing");
    }
    return model;
  }

 private:
  const std::string* find(const char* k) const {
    const auto it = st_.metadata().find(k);
    return it == st_.metadata().end() ? nullptr : &it->second;
  }
  const std::string& need(const char* k, std::string_view hint = "") const {
    const std::string* v = find(k);
    if (!v) fail("{}: metadata '{}' is missing{}", file_, k, hint);
    return *v;
  }
  static std::string meta_name(const char* k) { return fmt::format("metadata '{}'", k); }
  std::string meta_where(const char* k) const { return fmt::format("{}: metadata '{}'", file_, k); }

  Storage read_storage() const {
    const json j = io::parse_json_checked(need(key::storage), file_, meta_name(key::storage), /*max_depth=*/1);
    if (!j.is_object() || j.size() != 2)
      fail("{}: metadata '{}' must be {{\"scales\": ..., \"dense\": ...}}, got {}", file_, key::storage,
           io::json_excerpt(j));
    auto one = [&](const char* k) {
      const auto it = j.find(k);
      if (it != j.end() && *it == "F16") return StoredFloat::f16;
      if (it != j.end() && *it == "F32") return StoredFloat::f32;
      fail("{}: metadata '{}': '{}' must be \"F16\" or \"F32\", got {}", file_, key::storage, k,
           it == j.end() ? std::string("nothing") : io::json_excerpt(*it));
    };
    return Storage{.scales = one("scales"), .dense = one("dense")};
  }

  // The tensor `name` of BLR matrix `matrix`: present, of `dtype` and `shape`.
  void expect_tensor(const std::string& name, const std::string& matrix, io::StDType dtype,
                     const std::vector<std::int64_t>& shape) {
    if (!st_.contains(name)) fail("{}: tensor '{}' of BLR matrix '{}' is missing", file_, name, matrix);
    const io::TensorInfo& t = st_.info(name);
    if (t.dtype != dtype)
      fail("{}: tensor '{}': dtype {}, expected {}", file_, name, io::st_dtype_name(t.dtype), io::st_dtype_name(dtype));
    if (t.shape != shape)
      fail("{}: tensor '{}': shape {}, expected {} (BLR matrix '{}')", file_, name, shape_text(t.shape),
           shape_text(shape), matrix);
    consumed_.insert(name);
  }

  void read_blr(CompressedModel& model) {
    const json index = io::parse_json_checked(need(key::blr), file_, meta_name(key::blr), /*max_depth=*/2);
    if (!index.is_object()) fail("{}: metadata '{}' must be a JSON object, got {}", file_, key::blr, index.type_name());
    const io::StDType scale_dtype = st_dtype(model.storage.scales);
    for (const auto& item : index.items()) {
      const std::string& name = item.key();  // plain names: clang 14 lambdas cannot capture bindings
      const json& entry = item.value();
      auto bad = [&](std::string_view what) {
        fail("{}: metadata '{}': matrix '{}': {}", file_, key::blr, name, what);
      };
      if (!entry.is_object() || entry.size() != 4)
        bad(fmt::format("expected {{m, n, rank, paths}}, got {}", io::json_excerpt(entry)));
      auto size = [&](const char* k, std::int64_t hi) {
        const auto it = entry.find(k);
        if (it == entry.end() || !it->is_number_unsigned() || it->get<std::uint64_t>() < 1 ||
            it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
          bad(fmt::format("'{}' must be an integer in 1..{}, got {}", k, hi,
                          it == entry.end() ? std::string("nothing") : io::json_excerpt(*it)));
        return it->get<std::int64_t>();
      };
      blr::HostBlrMatrix w;
      w.m = size("m", kMaxDim);
      w.n = size("n", kMaxDim);
      w.r = size("rank", kMaxDim);
      const std::int64_t paths = size("paths", kBitrankMaxPaths);
      if (w.r % 32 != 0) bad(fmt::format("rank {} is not a multiple of 32", w.r));
      const std::int64_t words = w.r / 32;
      for (std::size_t p = 0; p < static_cast<std::size_t>(paths); ++p) {
        blr::HostBlrPath path;
        const std::string su = path_tensor(name, p, "su"), sv = path_tensor(name, p, "sv"),
                          h = path_tensor(name, p, "h"), l = path_tensor(name, p, "l"), g = path_tensor(name, p, "g");
        expect_tensor(su, name, io::StDType::U32, {w.m, words});
        expect_tensor(sv, name, io::StDType::U32, {w.n, words});
        expect_tensor(h, name, scale_dtype, {w.m});
        expect_tensor(l, name, scale_dtype, {w.r});
        expect_tensor(g, name, scale_dtype, {w.n});
        path.sign_u = st_.read_u32(su);
        path.sign_v = st_.read_u32(sv);
        path.h = st_.read_f32(h);
        path.l = st_.read_f32(l);
        path.g = st_.read_f32(g);
        w.paths.push_back(std::move(path));
      }
      model.blr.emplace(name, std::move(w));
    }
  }

  void read_dense(CompressedModel& model) {
    const io::StDType dtype = st_dtype(model.storage.dense);
    for (const io::TensorInfo& t : st_.tensors()) {
      if (consumed_.contains(t.name)) continue;
      if (const std::string* m = shadowed_matrix(t.name, model.blr))
        fail("{}: tensor '{}' is named as a part of BLR matrix '{}' but is not one of its {} paths' tensors", file_,
             t.name, *m, model.blr.at(*m).paths.size());
      if (t.dtype != dtype)
        fail("{}: dense tensor '{}': dtype {}, expected {} (metadata '{}')", file_, t.name, io::st_dtype_name(t.dtype),
             io::st_dtype_name(dtype), key::storage);
      if (t.shape.empty()) fail("{}: dense tensor '{}' has no dimensions", file_, t.name);
      HostTensor h;
      h.shape.assign(t.shape.begin(), t.shape.end());
      h.values = st_.read_f32(t.name);
      model.dense.emplace(t.name, std::move(h));
    }
  }

  const io::Safetensors& st_;
  std::string file_;
  std::set<std::string> consumed_;
};

}  // namespace

std::string_view stored_float_name(StoredFloat f) { return f == StoredFloat::f16 ? "F16" : "F32"; }

json bitrank_accounting(const CompressedModel& model) {
  auto bpw = [](std::uint64_t bits, std::uint64_t weights) {
    return weights ? json(static_cast<double>(bits) / static_cast<double>(weights)) : json(nullptr);
  };
  const auto scale_bits = static_cast<std::uint64_t>(value_bits(model.storage.scales));
  const auto dense_bits = static_cast<std::uint64_t>(value_bits(model.storage.dense));
  json matrices = json::object();
  std::uint64_t blr_weights = 0, blr_bits = 0;
  for (const auto& [name, w] : model.blr) {
    const std::uint64_t bits = blr::honest_bits(w.m, w.n, w.r, static_cast<std::int64_t>(w.paths.size()),
                                                static_cast<std::int64_t>(scale_bits));
    const std::uint64_t weights = static_cast<std::uint64_t>(w.m) * static_cast<std::uint64_t>(w.n);
    // Every count unsigned, as a parsed file's are, so that json::diff names
    // the first real difference.
    matrices[name] = {{"m", static_cast<std::uint64_t>(w.m)},
                      {"n", static_cast<std::uint64_t>(w.n)},
                      {"rank", static_cast<std::uint64_t>(w.r)},
                      {"paths", static_cast<std::uint64_t>(w.paths.size())},
                      {"bits", bits},
                      {"bpw", bpw(bits, weights)}};
    blr_weights += weights;
    blr_bits += bits;
  }
  std::uint64_t params = 0;
  for (const auto& [name, t] : model.dense) params += t.values.size();
  const std::uint64_t bits = params * dense_bits;
  return json{
      {"scale_bits", scale_bits},
      {"dense_value_bits", dense_bits},
      {"matrices", std::move(matrices)},
      {"blr",
       {{"matrices", static_cast<std::uint64_t>(model.blr.size())},
        {"weights", blr_weights},
        {"bits", blr_bits},
        {"bpw", bpw(blr_bits, blr_weights)}}},
      {"dense", {{"tensors", static_cast<std::uint64_t>(model.dense.size())}, {"params", params}, {"bits", bits}}},
      {"model",
       {{"params", blr_weights + params},
        {"bits", blr_bits + bits},
        {"bpw", bpw(blr_bits + bits, blr_weights + params)}}}};
}

void check_compressed_model(const CompressedModel& model, const std::string& where) {
  (void)io::hf_config_to_json(model.config, where + ": config");
  if (model.tokenizer) {
    const auto n = static_cast<std::int64_t>(model.tokenizer->tokens.size());
    if (n > model.config.vocab_size)
      fail("{}: tokenizer: {} tokens, more than the config's vocab_size {}", where, n, model.config.vocab_size);
    try {
      (void)io::Tokenizer(*model.tokenizer);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  }
  for (const auto& [name, w] : model.blr) check_matrix(name, w, model.storage.scales, where);
  for (const auto& [name, t] : model.dense) {
    if (name.empty()) fail("{}: a dense tensor has an empty name", where);
    if (const std::string* m = shadowed_matrix(name, model.blr))
      fail("{}: dense tensor '{}' has the name of a part of BLR matrix '{}'", where, name, *m);
    if (t.shape.empty()) fail("{}: dense tensor '{}' has no dimensions", where, name);
    std::uint64_t numel = 1;
    for (const index_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel))
        fail("{}: dense tensor '{}': shape {} is not a valid shape", where, name, shape_text(t.shape));
    }
    if (numel != t.values.size())
      fail("{}: dense tensor '{}': {} values for shape {}", where, name, t.values.size(), shape_text(t.shape));
    check_values(t.values, model.storage.dense, where, name);
  }
  if (!model.summary.is_object()) fail("{}: summary must be a JSON object, got {}", where, model.summary.type_name());
}

void save_bitrank(const std::filesystem::path& path, const CompressedModel& model) {
  const std::string where = path.string();
  check_compressed_model(model, where);
  const Contents c = contents_of(model, where);
  io::write_safetensors(path, c.tensors, c.metadata);
}

std::vector<std::byte> bitrank_image(const CompressedModel& model) {
  const std::string where = "bitrank image";
  check_compressed_model(model, where);
  const Contents c = contents_of(model, where);
  return io::safetensors_image(c.tensors, c.metadata);
}

namespace {
// A file that is not safetensors at all is named as such, not by the
// safetensors reader's first complaint ("header length 14064895815 exceeds …").
io::Safetensors open_bitrank_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    const std::string problem = io::safetensors_header_problem(path);
    if (!problem.empty()) fail("{}: not a bitrank model file (no safetensors header: {})", path.string(), problem);
  }
  return io::Safetensors::open(path);
}
}  // namespace

CompressedModel load_bitrank(const std::filesystem::path& path) {
  const io::Safetensors st = open_bitrank_file(path);
  return Loader(st, path.string()).load();
}

io::ModelConfig bitrank_config(const std::filesystem::path& path) {
  const io::Safetensors st = open_bitrank_file(path);
  return Loader(st, path.string()).config();
}

CompressedModel load_bitrank(std::span<const std::byte> image, const std::string& name) {
  const io::Safetensors st = io::Safetensors::from_memory(image, name);
  return Loader(st, name).load();
}

// ---- bitrank info ---------------------------------------------------------------

namespace {
struct Lines {
  std::string& out;
  template <class... Args>
  void operator()(fmt::format_string<Args...> f, Args&&... args) const {
    out += fmt::format(f, std::forward<Args>(args)...);
    out += '\n';
  }
};
}  // namespace

ordered_json describe_bitrank(const std::filesystem::path& path) {
  const CompressedModel model = load_bitrank(path);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) fail("{}: cannot stat: {}", path.string(), ec.message());
  ordered_json d;
  d["file"] = path.string();
  d["file_bytes"] = bytes;
  d["format"] = kBitrankFormatName;
  d["version"] = kBitrankFormatVersion;
  d["architecture"] = ordered_json::parse(io::hf_config_to_json(model.config, path.string()));
  d["tokenizer"] = model.tokenizer ? tokenizer_description(*model.tokenizer) : ordered_json(nullptr);
  d["storage"] = {{"scales", std::string(stored_float_name(model.storage.scales))},
                  {"dense", std::string(stored_float_name(model.storage.dense))}};
  d["accounting"] = ordered_json::parse(bitrank_accounting(model).dump());
  d["summary"] = ordered_json::parse(model.summary.dump());
  return d;
}

std::string architecture_text(const ordered_json& a) {
  std::string arch =
      fmt::format("{}: {} layers, hidden {}, {} heads / {} kv heads × {}, ffn {}, vocab {}, {} head",
                  a.at("model_type").get<std::string>(), a.at("num_hidden_layers").get<std::int64_t>(),
                  a.at("hidden_size").get<std::int64_t>(), a.at("num_attention_heads").get<std::int64_t>(),
                  a.at("num_key_value_heads").get<std::int64_t>(), a.at("head_dim").get<std::int64_t>(),
                  a.at("intermediate_size").get<std::int64_t>(), a.at("vocab_size").get<std::int64_t>(),
                  a.at("tie_word_embeddings").get<bool>() ? "tied" : "untied");
  if (a.contains("layer_types")) {
    std::size_t full = 0;
    for (const auto& t : a.at("layer_types")) full += t == "full_attention";
    arch += fmt::format(", {} linear + {} full attention blocks", a.at("layer_types").size() - full, full);
  }
  if (a.contains("num_experts")) arch += fmt::format(", {} experts", a.at("num_experts").get<std::int64_t>());
  const std::int64_t context = a.value("max_position_embeddings", std::int64_t{0});
  arch += context > 0 ? fmt::format(", context {}", context) : std::string(", context not given");
  return arch;
}

ordered_json tokenizer_description(const io::TokenizerSpec& t) {
  return {{"tokens", t.tokens.size()},
          {"merges", t.merges.size()},
          {"pre", std::string(io::pre_tokenizer_name(t.pre))},
          {"normalizer", t.normalizer == io::Normalizer::nfc ? "nfc" : "none"}};
}

std::string tokenizer_text(const ordered_json& tok) {
  if (tok.is_null()) return "none";
  return fmt::format("{}, {} tokens, {} merges, normalizer {}", tok.at("pre").get<std::string>(),
                     tok.at("tokens").get<std::uint64_t>(), tok.at("merges").get<std::uint64_t>(),
                     tok.at("normalizer").get<std::string>());
}

std::string describe_bitrank_text(const ordered_json& d) {
  std::string out;
  const Lines line{out};
  auto bpw_text = [](const ordered_json& v) {
    return v.is_null() ? std::string("-") : fmt::format("{:.4f}", v.get<double>());
  };
  const ordered_json& a = d.at("architecture");
  const ordered_json& acc = d.at("accounting");
  line("file          {} ({} bytes)", d.at("file").get<std::string>(), d.at("file_bytes").get<std::uint64_t>());
  line("format        {} v{}", d.at("format").get<std::string>(), d.at("version").get<int>());
  line("architecture  {}", architecture_text(a));
  line("tokenizer     {}", tokenizer_text(d.at("tokenizer")));
  line("storage       scales {}, dense {}", d.at("storage").at("scales").get<std::string>(),
       d.at("storage").at("dense").get<std::string>());
  line("");
  const ordered_json& mats = acc.at("matrices");
  std::size_t width = 4;
  for (const auto& [name, m] : mats.items()) width = std::max(width, name.size());
  line("BLR matrices ({})", mats.size());
  if (!mats.empty()) {
    line("  {:<{}}  {:>13}  {:>6}  {:>5}  {:>8}", "name", width, "m×n", "rank", "paths", "bpw");
    for (const auto& [name, m] : mats.items())
      line("  {:<{}}  {:>13}  {:>6}  {:>5}  {:>8}", name, width,
           fmt::format("{}×{}", m.at("m").get<std::int64_t>(), m.at("n").get<std::int64_t>()),
           m.at("rank").get<std::int64_t>(), m.at("paths").get<std::int64_t>(), bpw_text(m.at("bpw")));
  }
  line("");
  const ordered_json &blr = acc.at("blr"), &dense = acc.at("dense"), &model = acc.at("model");
  line("totals");
  line("  compressed projections  {} weights, {} bits, {} bpw", blr.at("weights").get<std::uint64_t>(),
       blr.at("bits").get<std::uint64_t>(), bpw_text(blr.at("bpw")));
  line("  dense tensors           {} tensors, {} params, {} bits ({}-bit values)",
       dense.at("tensors").get<std::uint64_t>(), dense.at("params").get<std::uint64_t>(),
       dense.at("bits").get<std::uint64_t>(), acc.at("dense_value_bits").get<std::uint64_t>());
  line("  whole model             {} params, {} bits, {} bpw", model.at("params").get<std::uint64_t>(),
       model.at("bits").get<std::uint64_t>(), bpw_text(model.at("bpw")));
  line("  file size               {} bytes", d.at("file_bytes").get<std::uint64_t>());
  line("");
  const ordered_json& summary = d.at("summary");
  if (summary.empty()) {
    line("training summary: none");
  } else {
    line("training summary");
    std::string text = summary.dump(2);
    std::size_t start = 0;
    while (start <= text.size()) {
      const auto end = std::min(text.find('\n', start), text.size());
      line("  {}", std::string_view(text).substr(start, end - start));
      start = end + 1;
    }
  }
  return out;
}

}  // namespace bitrank::store
