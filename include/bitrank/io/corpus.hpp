// The default English text (DESIGN §9) and its fixed training/evaluation split.
//
// Files: every regular `*.txt` under the python3.11-doc reST sources
// (/usr/share/doc/python3.11/html/_sources, recursively) and every regular
// file directly in the fortunes directory (/usr/share/games/fortunes) except
// the `.dat` indexes and the `.u8` links. All paths are sorted as strings
// (byte order) into one list; file i (0-based) is EVALUATION when
// i % 10 == 9 and TRAINING otherwise, so the two parts never share a file
// and the split does not depend on the order the file system lists them.
// Text of a part: the files' contents in that order, joined by a blank line.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace bitrank::io {

struct CorpusRoots {
  std::filesystem::path python_doc_sources = "/usr/share/doc/python3.11/html/_sources";
  std::filesystem::path fortunes = "/usr/share/games/fortunes";
};

struct CorpusSplit {
  std::vector<std::filesystem::path> train, eval;
};

constexpr int kEvalEvery = 10;  // file i is evaluation when i % kEvalEvery == kEvalEvery − 1

// The sorted file list (Error when neither root holds any file).
std::vector<std::filesystem::path> corpus_files(const CorpusRoots& roots = {});
// The split of a sorted file list (see above).
CorpusSplit split_corpus(const std::vector<std::filesystem::path>& sorted_files);
// The files' contents joined by "\n\n" (Error naming an unreadable file
// and why, or a directory).
std::string read_corpus_text(const std::vector<std::filesystem::path>& files);

}  // namespace bitrank::io
