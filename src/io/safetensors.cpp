// safetensors reader; the byte layout is at the top of bitrank/io/safetensors.hpp.
#include "bitrank/io/safetensors.hpp"


#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "bitrank/dtype.hpp"
#include "bitrank/error.hpp"
#include "json_checked.hpp"

namespace bitrank::io {

static_assert(std::endian::native == std::endian::little, "the safetensors reader assumes a little-endian host");

namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr std::uint64_t kMaxIndexBytes = 100ull << 20;

struct DTypeEntry {
  StDType type;
  std::string_view name;
  std::size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {StDType::BOOL, "BOOL", 1},       {StDType::U8, "U8", 1},           {StDType::I8, "I8", 1},
    {StDType::F8_E5M2, "F8_E5M2", 1}, {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E8M0, "F8_E8M0", 1},
    {StDType::I16, "I16", 2},         {StDType::U16, "U16", 2},         {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2},       {StDType::I32, "I32", 4},         {StDType::U32, "U32", 4},
    {StDType::F32, "F32", 4},         {StDType::I64, "I64", 8},         {StDType::U64, "U64", 8},
    {StDType::F64, "F64", 8},         {StDType::C64, "C64", 8},
};

std::optional<StDType> parse_dtype(std::string_view s) {
  for (const auto& e : kDTypes)
    if (e.name == s) return e.type;
  return std::nullopt;
}

std::uint64_t load_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

std::uint64_t unsigned_value(const json& v, const std::string& file, std::string_view tensor, std::string_view what) {
  if (!v.is_number_unsigned())
    fail("{}: tensor '{}': {} must be a non-negative integer, got {}", file, tensor, what, json_excerpt(v));
  return v.get<std::uint64_t>();
}

}  // namespace

std::string_view st_dtype_name(StDType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.name;
  return "?";
}

std::size_t st_dtype_size(StDType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.size;
  return 0;
}

// ---- one file ------------------------------------------------------------------

struct Safetensors::Shard {
  std::string file;                 // as named in errors
  std::optional<MappedFile> map;    // absent for a caller-held image
  std::span<const std::byte> data;  // the data buffer (after the header)
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
};

namespace {

// Parses and validates one file image; tensors come back sorted by name.
void parse_file(std::span<const std::byte> image, Safetensors::Shard& shard) {
  const std::string& file = shard.file;
  if (image.size() < 8) fail("{}: file is {} bytes, shorter than the 8-byte header length", file, image.size());
  const std::uint64_t header_len = load_u64_le(image.data());
  const std::uint64_t room = image.size() - 8;
  if (header_len > room)
    fail("{}: header length {} exceeds the {} bytes after the length field", file, header_len, room);
  if (header_len > kMaxHeaderBytes) fail("{}: header length {} exceeds the {}-byte limit", file, header_len, kMaxHeaderBytes);
  const std::string_view text(reinterpret_cast<const char*>(image.data() + 8), static_cast<std::size_t>(header_len));
  shard.data = image.subspan(8 + static_cast<std::size_t>(header_len));
  const std::uint64_t data_size = shard.data.size();

  // Containers sit at depth 0 (the header), 1 (an entry) and 2 (shape, data_offsets).
  const json header = parse_json_checked(text, file, "header", /*max_depth=*/3);
  if (!header.is_object()) fail("{}: header must be a JSON object, got {}", file, header.type_name());

  struct Range {
    std::uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("{}: __metadata__ must be an object, got {}", file, entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail("{}: __metadata__ key '{}' must be a string, got {}", file, key, value.type_name());
        shard.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    if (!entry.is_object()) fail("{}: tensor '{}': entry must be an object, got {}", file, name, entry.type_name());
    TensorInfo t;
    t.name = name;
    t.file = file;

    const auto dt = entry.find("dtype");
    if (dt == entry.end()) fail("{}: tensor '{}': missing 'dtype'", file, name);
    if (!dt->is_string()) fail("{}: tensor '{}': 'dtype' must be a string, got {}", file, name, dt->type_name());
    const auto parsed = parse_dtype(dt->get_ref<const std::string&>());
    if (!parsed) fail("{}: tensor '{}': unknown dtype {}", file, name, json_excerpt(*dt));
    t.dtype = *parsed;

    const auto sh = entry.find("shape");
    if (sh == entry.end()) fail("{}: tensor '{}': missing 'shape'", file, name);
    if (!sh->is_array()) fail("{}: tensor '{}': 'shape' must be an array, got {}", file, name, sh->type_name());
    std::uint64_t numel = 1;
    for (const auto& d : *sh) {
      const std::uint64_t dim = unsigned_value(d, file, name, "each shape dim");
      if (dim > static_cast<std::uint64_t>(INT64_MAX)) fail("{}: tensor '{}': shape dim {} is too large", file, name, dim);
      if (__builtin_mul_overflow(numel, dim, &numel))
        fail("{}: tensor '{}': the element count of shape {} overflows", file, name, json_excerpt(*sh));
      t.shape.push_back(static_cast<std::int64_t>(dim));
    }
    t.numel = numel;
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(st_dtype_size(t.dtype)), &nbytes))
      fail("{}: tensor '{}': the byte size of shape {} overflows", file, name, json_excerpt(*sh));

    const auto off = entry.find("data_offsets");
    if (off == entry.end()) fail("{}: tensor '{}': missing 'data_offsets'", file, name);
    if (!off->is_array() || off->size() != 2)
      fail("{}: tensor '{}': 'data_offsets' must be [begin, end], got {}", file, name, json_excerpt(*off));
    t.data_begin = unsigned_value((*off)[0], file, name, "data_offsets begin");
    t.data_end = unsigned_value((*off)[1], file, name, "data_offsets end");
    if (t.data_begin > t.data_end)
      fail("{}: tensor '{}': data_offsets begin {} > end {}", file, name, t.data_begin, t.data_end);
    if (t.data_end > data_size)
      fail("{}: tensor '{}': data_offsets end {} is past the {}-byte data buffer", file, name, t.data_end, data_size);
    if (t.data_end - t.data_begin != nbytes)
      fail("{}: tensor '{}': data_offsets span {} bytes, but {} {} needs {} bytes", file, name, t.data_end - t.data_begin,
           st_dtype_name(t.dtype), json_excerpt(*sh), nbytes);
    shard.tensors.push_back(std::move(t));
  }

  // The tensors tile the data buffer exactly: sorted by offset, each starts
  // where the previous ended, the last ends at the buffer's end (the format
  // forbids holes; this also exposes a header length that is off).
  for (const auto& t : shard.tensors) ranges.push_back({t.data_begin, t.data_end, &t.name});
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& r : ranges) {
    if (r.begin < covered)
      fail("{}: tensor '{}' (bytes {}..{}) overlaps tensor '{}' (ending at byte {})", file, *r.name, r.begin, r.end,
           previous ? *previous : std::string(), covered);
    if (r.begin > covered)
      fail("{}: tensor '{}' starts at byte {}, leaving a gap after byte {} of the data buffer", file, *r.name, r.begin,
           covered);
    covered = r.end;
    previous = r.name;
  }
  if (covered != data_size)
    fail("{}: the data buffer has {} bytes but its tensors cover {} (header length or offsets are off)", file, data_size,
         covered);
  // json objects iterate in key order, so the list is already sorted by name.
}

std::unique_ptr<Safetensors::Shard> open_file(const std::filesystem::path& path) {
  auto shard = std::make_unique<Safetensors::Shard>();
  shard->file = path.string();
  shard->map.emplace(path);
  parse_file(shard->map->bytes(), *shard);
  return shard;
}

std::string read_small_file(const std::filesystem::path& path, std::uint64_t limit) {
  const MappedFile m(path);
  if (m.bytes().size() > limit) fail("{}: {} bytes, more than the {}-byte limit", path.string(), m.bytes().size(), limit);
  return std::string(reinterpret_cast<const char*>(m.bytes().data()), m.bytes().size());
}

// A shard name from an index: a relative path without "..".
void check_shard_name(const std::string& index, const std::string& tensor, const std::string& shard) {
  const std::filesystem::path p(shard);
  bool ok = !shard.empty() && p.is_relative() && shard.find('\0') == std::string::npos;
  for (const auto& part : p)
    if (part == "..") ok = false;
  if (!ok) fail("{}: tensor '{}': shard file name '{}' must be a relative path inside the index's folder", index, tensor, shard);
}

}  // namespace

// ---- Safetensors -------------------------------------------------------------

Safetensors::Safetensors() = default;
Safetensors::Safetensors(Safetensors&&) noexcept = default;
Safetensors& Safetensors::operator=(Safetensors&&) noexcept = default;
Safetensors::~Safetensors() = default;

Safetensors Safetensors::from_memory(std::span<const std::byte> bytes, std::string name) {
  Safetensors st;
  auto shard = std::make_unique<Shard>();
  shard->file = std::move(name);
  parse_file(bytes, *shard);
  st.tensors_ = shard->tensors;
  st.shard_of_.assign(st.tensors_.size(), 0);
  st.metadata_ = shard->metadata;
  st.shards_.push_back(std::move(shard));
  return st;
}

Safetensors Safetensors::open(const std::filesystem::path& path) {
  std::filesystem::path target = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / "model.safetensors.index.json", ec))
      target = path / "model.safetensors.index.json";
    else if (std::filesystem::exists(path / "model.safetensors", ec))
      target = path / "model.safetensors";
    else
      fail("{}: directory holds neither model.safetensors.index.json nor model.safetensors", path.string());
  }
  Safetensors st;
  const std::string fname = target.filename().string();
  if (!fname.ends_with(".index.json")) {
    auto shard = open_file(target);
    st.tensors_ = shard->tensors;
    st.shard_of_.assign(st.tensors_.size(), 0);
    st.metadata_ = shard->metadata;
    st.shards_.push_back(std::move(shard));
    return st;
  }

  // Sharded: index → shards.
  const std::string index = target.string();
  const json j = parse_json_checked(read_small_file(target, kMaxIndexBytes), index, "index", /*max_depth=*/8);
  if (!j.is_object()) fail("{}: index must be a JSON object, got {}", index, j.type_name());
  const auto wm = j.find("weight_map");
  if (wm == j.end()) fail("{}: missing 'weight_map'", index);
  if (!wm->is_object()) fail("{}: 'weight_map' must be an object, got {}", index, wm->type_name());
  std::map<std::string, std::string> shard_of_tensor;       // from the index
  std::map<std::string, std::set<std::string>> listed;     // shard → tensors the index puts there
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) fail("{}: weight_map['{}'] must be a string, got {}", index, tensor, file.type_name());
    const std::string& f = file.get_ref<const std::string&>();
    check_shard_name(index, tensor, f);
    shard_of_tensor.emplace(tensor, f);
    listed[f].insert(tensor);
  }
  const std::filesystem::path dir = target.parent_path();
  for (const auto& [f, names] : listed) {
    const std::filesystem::path p = dir / f;
    if (!std::filesystem::exists(p, ec))
      fail("{}: shard '{}' (holding tensor '{}') does not exist", index, p.string(), *names.begin());
    st.shards_.push_back(open_file(p));
  }
  // Every tensor once across the shards, each where the index says.
  std::map<std::string, std::size_t> where;
  for (std::size_t s = 0; s < st.shards_.size(); ++s)
    for (const auto& t : st.shards_[s]->tensors) {
      const auto [it, fresh] = where.emplace(t.name, s);
      if (!fresh)
        fail("{}: tensor '{}' appears in two shards, {} and {}", index, t.name, st.shards_[it->second]->file,
             st.shards_[s]->file);
    }
  std::size_t s = 0;
  for (const auto& [f, names] : listed) {
    const Shard& sh = *st.shards_[s];
    for (const auto& t : sh.tensors)
      if (!names.contains(t.name)) {
        const auto it = shard_of_tensor.find(t.name);
        if (it == shard_of_tensor.end())
          fail("{}: shard {} holds tensor '{}', which the index does not list", index, sh.file, t.name);
        fail("{}: shard {} holds tensor '{}', which the index places in '{}'", index, sh.file, t.name, it->second);
      }
    for (const auto& name : names) {
      const auto it = where.find(name);
      if (it == where.end() || it->second != s)
        fail("{}: tensor '{}' is mapped to shard {}, which does not hold it", index, name, sh.file);
    }
    ++s;
  }
  for (const auto& [name, shard] : where) {
    const Shard& sh = *st.shards_[shard];
    const auto it = std::lower_bound(sh.tensors.begin(), sh.tensors.end(), name,
                                     [](const TensorInfo& t, const std::string& n) { return t.name < n; });
    st.tensors_.push_back(*it);
    st.shard_of_.push_back(shard);
  }
  if (!st.shards_.empty()) st.metadata_ = st.shards_.front()->metadata;
  return st;
}

const TensorInfo* Safetensors::find(std::string_view name) const {
  const auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                                   [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

bool Safetensors::contains(std::string_view name) const { return find(name) != nullptr; }

const TensorInfo& Safetensors::info(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) {
    const std::string where = shards_.size() == 1 ? shards_.front()->file : std::to_string(shards_.size()) + " shards";
    fail("{}: no tensor '{}'", where, name);
  }
  return *t;
}

std::span<const std::byte> Safetensors::bytes(std::string_view name) const {
  const TensorInfo& t = info(name);
  const Shard& sh = *shards_[shard_of_[static_cast<std::size_t>(&t - tensors_.data())]];
  return sh.data.subspan(static_cast<std::size_t>(t.data_begin), static_cast<std::size_t>(t.data_end - t.data_begin));
}

std::vector<float> Safetensors::read_f32(std::string_view name) const {
  const TensorInfo& t = info(name);
  const auto b = bytes(name);
  std::vector<float> out(static_cast<std::size_t>(t.numel));
  auto half = [&](std::size_t i) {
    return static_cast<std::uint16_t>(static_cast<unsigned>(b[2 * i]) | (static_cast<unsigned>(b[2 * i + 1]) << 8));
  };
  switch (t.dtype) {
    case StDType::F32:
      if (!out.empty()) std::memcpy(out.data(), b.data(), b.size());
      break;
    case StDType::F16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_f32(f16{half(i)});
      break;
    case StDType::BF16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_f32(bf16{half(i)});
      break;
    default:
      fail("{}: tensor '{}': dtype {} cannot be read as f32 (F32, F16 and BF16 can)", t.file, t.name,
           st_dtype_name(t.dtype));
  }
  return out;
}

std::vector<std::uint32_t> Safetensors::read_u32(std::string_view name) const {
  const TensorInfo& t = info(name);
  if (t.dtype != StDType::U32)
    fail("{}: tensor '{}': dtype {} where U32 is expected", t.file, t.name, st_dtype_name(t.dtype));
  const auto b = bytes(name);
  std::vector<std::uint32_t> out(static_cast<std::size_t>(t.numel));
  if (!out.empty()) std::memcpy(out.data(), b.data(), b.size());
  return out;
}

}  // namespace bitrank::io
