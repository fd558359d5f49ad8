// Token id files: what `bitrank tokenize` writes and a trainer or an outside
// script (bench/anchors/littlebit.py) reads.
//
// Layout: no header; the ids one after another, each a little-endian
// two's-complement int32 (4 bytes), so the file size is 4·count and e.g.
// numpy.fromfile(path, "<i4") reads it. Ids are never negative.
//
// Writing goes to `path.tmp` first and is renamed over `path` once complete,
// so a reader never sees a half-written file under the final name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace bitrank::io {

// Error on a negative id or when the file cannot be written.
void write_token_file(const std::filesystem::path& path, std::span<const std::int32_t> ids);
// Error when the file cannot be read, its size is no multiple of 4, or an
// id is negative (naming the file and the index).
std::vector<std::int32_t> read_token_file(const std::filesystem::path& path);

}  // namespace bitrank::io
