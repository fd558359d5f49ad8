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
#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include "bitrank/blr/accounting.hpp"
#include "bitrank/dtype.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/model_file.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/io/safetensors_writer.hpp"
#include "bitrank/q8_0.hpp"
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

// The tensors of a dense matrix N stored as Q8_0 blocks: q [rows][cols] I8 and d [rows][cols/32] F16.
std::string q8_q_tensor(const std::string& name) { return name + ".q8_0"; }
std::string q8_d_tensor(const std::string& name) { return name + ".q8_0_scale"; }

// The Q8_0 blocks dense tensor `name` is stored as, or nullptr (stored as F32/F16).
const std::vector<q8_0>* stored_q8_0(const CompressedModel& model, const std::string& name) {
  if (!model.storage.q8_0) return nullptr;
  const auto it = model.q8_0_blocks.find(name);
  return it == model.q8_0_blocks.end() ? nullptr : &it->second;
}
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

// A Q8_0 entry names a 2-D dense tensor whose values are its blocks' d·q, bit for bit.
void check_q8_0(const CompressedModel& model, const std::string& name, const std::vector<q8_0>& blocks,
                const std::string& where) {
  const auto it = model.dense.find(name);
  if (it == model.dense.end()) fail("{}: Q8_0 blocks of '{}', which is no dense tensor", where, name);
  const HostTensor& t = it->second;
  if (t.shape.size() != 2 || t.shape[1] % kQ8Block != 0 || blocks.size() * kQ8Block != t.values.size())
    fail("{}: dense tensor '{}' {}: {} Q8_0 blocks do not tile it (a matrix of rows × a multiple of {})", where,
         name, shape_text(t.shape), blocks.size(), kQ8Block);
  std::vector<float> values(t.values.size());
  dequantize_q8_0(blocks, values);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const bool same = std::bit_cast<std::uint32_t>(values[i]) == std::bit_cast<std::uint32_t>(t.values[i]);
    if (!std::isfinite(values[i]) || !same)
      fail("{}: dense tensor '{}': value {} at index {} is not its Q8_0 blocks' {}", where, name, t.values[i], i,
           values[i]);
  }
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
  std::vector<std::vector<std::byte>> owned;  // bytes of the Q8_0 tensors (a moved vector keeps its buffer)
};

// Dense tensor `name` as Q8_0 blocks: its q and d tensors, their bytes kept in c.owned.
void add_q8_0(Contents& c, const std::string& name, const HostTensor& t, const std::vector<q8_0>& blocks) {
  std::vector<std::byte> q(blocks.size() * kQ8Block), d(blocks.size() * sizeof(f16));
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    std::memcpy(q.data() + b * kQ8Block, blocks[b].q, kQ8Block);
    std::memcpy(d.data() + b * sizeof(f16), &blocks[b].d.bits, sizeof(f16));
  }
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  c.owned.push_back(std::move(q));
  c.tensors.push_back(io::StTensorOut::raw(q8_q_tensor(name), io::StDType::I8, {rows, cols}, c.owned.back()));
  c.owned.push_back(std::move(d));
  c.tensors.push_back(
      io::StTensorOut::raw(q8_d_tensor(name), io::StDType::F16, {rows, cols / kQ8Block}, c.owned.back()));
}

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
  json q8_names = json::array();
  c.owned.reserve(2 * model.dense.size());
  for (const auto& [name, t] : model.dense) {
    if (const auto* blocks = stored_q8_0(model, name)) {
      add_q8_0(c, name, t, *blocks);
      q8_names.push_back(name);
      continue;
    }
    c.tensors.push_back(
        io::StTensorOut::f32(name, dense_dtype, std::vector<std::int64_t>(t.shape.begin(), t.shape.end()), t.values));
  }

  c.metadata[key::format] = kBitrankFormatName;
  c.metadata[key::version] = model.storage.q8_0 ? std::to_string(kBitrankFormatVersion) : "1";  // 1: as read
  c.metadata[key::config] = io::hf_config_to_json(model.config, where + ": config");
  if (model.tokenizer) {
    try {
      c.metadata[key::tokenizer] = io::tokenizer_spec_to_json(*model.tokenizer);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  }
  json storage{{"scales", std::string(stored_float_name(model.storage.scales))},
               {"dense", std::string(stored_float_name(model.storage.dense))}};
  if (model.storage.q8_0) storage["q8_0"] = std::move(q8_names);
  c.metadata[key::storage] = dump_json(storage, where, "storage");
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
    if (version != std::to_string(kBitrankFormatVersion) && version != "1")
      fail("{}: metadata '{}' is \"{}\": this build reads bitrank format versions 1 and {}", file_, key::version,
           version, kBitrankFormatVersion);
    version_ = version == "1" ? 1 : kBitrankFormatVersion;
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

  // Version 1: {"scales", "dense"}; from 2 also "q8_0", the dense tensors stored as Q8_0 blocks.
  Storage read_storage() {
    const json j = io::parse_json_checked(need(key::storage), file_, meta_name(key::storage), /*max_depth=*/2);
    const bool q8 = version_ > 1;
    if (!j.is_object() || j.size() > 3)
      fail("{}: metadata '{}' must be {{\"scales\": ..., \"dense\": ...{}}}, got {}", file_, key::storage,
           q8 ? ", \"q8_0\": [...]" : "", io::json_excerpt(j));
    for (const auto& [k, v] : j.items())
      if (k != "scales" && k != "dense" && (k != "q8_0" || !q8))
        fail("{}: metadata '{}': unknown key '{}' (version {})", file_, key::storage, k, version_);
    auto one = [&](const char* k) {
      const auto it = j.find(k);
      if (it != j.end() && *it == "F16") return StoredFloat::f16;
      if (it != j.end() && *it == "F32") return StoredFloat::f32;
      fail("{}: metadata '{}': '{}' must be \"F16\" or \"F32\", got {}", file_, key::storage, k,
           it == j.end() ? std::string("nothing") : io::json_excerpt(*it));
    };
    const StoredFloat scales = one("scales"), dense = one("dense");
    if (q8 && !j.contains("q8_0"))
      fail("{}: metadata '{}': 'q8_0' (the tensors stored as Q8_0 blocks) is missing", file_, key::storage);
    if (q8) {
      const json& names = j.at("q8_0");
      if (!names.is_array())
        fail("{}: metadata '{}': 'q8_0' must be a list of tensor names, got {}", file_, key::storage,
             io::json_excerpt(names));
      for (const json& n : names) {
        if (!n.is_string() || n.get<std::string>().empty())
          fail("{}: metadata '{}': 'q8_0' holds {}, not a tensor name", file_, key::storage, io::json_excerpt(n));
        if (!q8_names_.insert(n.get<std::string>()).second)
          fail("{}: metadata '{}': 'q8_0' names '{}' twice", file_, key::storage, n.get<std::string>());
      }
    }
    return Storage{.scales = scales, .dense = dense, .q8_0 = q8};
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
    for (const std::string& name : q8_names_) {
      auto [values, blocks] = read_q8_0(name);
      model.dense.emplace(name, std::move(values));
      model.q8_0_blocks.emplace(name, std::move(blocks));
    }
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
      if (!model.dense.emplace(t.name, std::move(h)).second)
        fail("{}: dense tensor '{}' is stored both as itself and as Q8_0 blocks", file_, t.name);
    }
  }

  // Dense tensor `name` from its Q8_0 tensors (q [rows][cols] I8, d [rows][cols/32] F16): values d·q, and the blocks.
  std::pair<HostTensor, std::vector<q8_0>> read_q8_0(const std::string& name) {
    const std::string qn = q8_q_tensor(name), dn = q8_d_tensor(name);
    for (const std::string& part : {qn, dn})
      if (!st_.contains(part)) fail("{}: tensor '{}' of Q8_0 tensor '{}' is missing", file_, part, name);
    const io::TensorInfo &q = st_.info(qn), &d = st_.info(dn);
    if (q.dtype != io::StDType::I8 || q.shape.size() != 2 || q.shape[1] <= 0 || q.shape[1] % kQ8Block != 0)
      fail("{}: tensor '{}': dtype {}, shape {}; expected I8 [rows][cols] with cols a positive multiple of {}", file_,
           qn, io::st_dtype_name(q.dtype), shape_text(q.shape), kQ8Block);
    const std::vector<std::int64_t> d_shape{q.shape[0], q.shape[1] / kQ8Block};
    if (d.dtype != io::StDType::F16 || d.shape != d_shape)
      fail("{}: tensor '{}': dtype {}, shape {}; expected F16 {}", file_, dn, io::st_dtype_name(d.dtype),
           shape_text(d.shape), shape_text(d_shape));
    const std::span<const std::byte> qb = st_.bytes(qn), db = st_.bytes(dn);
    std::vector<q8_0> blocks(qb.size() / kQ8Block);
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      std::memcpy(blocks[b].q, qb.data() + b * kQ8Block, kQ8Block);
      std::memcpy(&blocks[b].d.bits, db.data() + b * sizeof(f16), sizeof(f16));
    }
    HostTensor h;
    h.shape = {q.shape[0], q.shape[1]};
    h.values.resize(qb.size());
    dequantize_q8_0(blocks, h.values);
    consumed_.insert(qn);
    consumed_.insert(dn);
    return {std::move(h), std::move(blocks)};
  }

  const io::Safetensors& st_;
  std::string file_;
  std::set<std::string> consumed_;
  mutable int version_ = kBitrankFormatVersion;  // set by config(), which every read starts with
  std::set<std::string> q8_names_;  // dense tensors stored as Q8_0 blocks (metadata 'bitrank.storage')
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
  std::uint64_t params = 0, bits = 0, q8_params = 0;
  for (const auto& [name, t] : model.dense) {
    params += t.values.size();
    if (stored_q8_0(model, name)) {  // 8 bits a value and an f16 scale a block of 32
      q8_params += t.values.size();
      bits += t.values.size() * 8 + t.values.size() / kQ8Block * 16;
    } else {
      bits += t.values.size() * dense_bits;
    }
  }
  json dense{{"tensors", static_cast<std::uint64_t>(model.dense.size())}, {"params", params}, {"bits", bits}};
  if (model.storage.q8_0) dense["q8_0_params"] = q8_params;
  return json{
      {"scale_bits", scale_bits},
      {"dense_value_bits", dense_bits},
      {"matrices", std::move(matrices)},
      {"blr",
       {{"matrices", static_cast<std::uint64_t>(model.blr.size())},
        {"weights", blr_weights},
        {"bits", blr_bits},
        {"bpw", bpw(blr_bits, blr_weights)}}},
      {"dense", std::move(dense)},
      {"model",
       {{"params", blr_weights + params},
        {"bits", blr_bits + bits},
        {"bpw", bpw(blr_bits + bits, blr_weights + params)}}}};
}

void record_exact_q8_0(CompressedModel& model) {
  if (!model.storage.q8_0) return;
  for (const auto& [name, t] : model.dense) {
    if (t.shape.size() != 2 || model.q8_0_blocks.contains(name)) continue;
    if (auto blocks = exact_q8_0(t.values, t.shape[1])) model.q8_0_blocks.emplace(name, std::move(*blocks));
  }
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
    if (!stored_q8_0(model, name)) check_values(t.values, model.storage.dense, where, name);
  }
  for (const auto& [name, blocks] : model.q8_0_blocks) check_q8_0(model, name, blocks, where);
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
  d["version"] = model.storage.q8_0 ? kBitrankFormatVersion : 1;
  d["architecture"] = ordered_json::parse(io::hf_config_to_json(model.config, path.string()));
  d["tokenizer"] = model.tokenizer ? tokenizer_description(*model.tokenizer) : ordered_json(nullptr);
  d["storage"] = {{"scales", std::string(stored_float_name(model.storage.scales))},
                  {"dense", std::string(stored_float_name(model.storage.dense))}};
  if (model.storage.q8_0) {
    ordered_json q8 = ordered_json::array();
    for (const auto& [name, t] : model.dense)
      if (stored_q8_0(model, name)) q8.push_back(name);
    d["storage"]["q8_0"] = std::move(q8);
  }
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
  std::string q8;
  for (const auto& name : d.at("storage").value("q8_0", ordered_json::array()))
    q8 += (q8.empty() ? ", Q8_0: " : ", ") + name.get<std::string>();
  line("storage       scales {}, dense {}{}", d.at("storage").at("scales").get<std::string>(),
       d.at("storage").at("dense").get<std::string>(), q8);
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
  const std::uint64_t q8_params = dense.value("q8_0_params", std::uint64_t{0});
  line("  dense tensors           {} tensors, {} params, {} bits ({}-bit values{})",
       dense.at("tensors").get<std::uint64_t>(), dense.at("params").get<std::uint64_t>(),
       dense.at("bits").get<std::uint64_t>(), acc.at("dense_value_bits").get<std::uint64_t>(),
       q8_params ? fmt::format("; {} params as Q8_0, 8.5 bits", q8_params) : std::string());
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
