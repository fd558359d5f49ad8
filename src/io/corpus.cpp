// The default corpus and its split (contract: include/bitrank/io/corpus.hpp).
#include "bitrank/io/corpus.hpp"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "bitrank/error.hpp"

namespace bitrank::io {

namespace fs = std::filesystem;

std::vector<fs::path> corpus_files(const CorpusRoots& roots) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(roots.python_doc_sources, ec))
    for (const auto& e : fs::recursive_directory_iterator(roots.python_doc_sources))
      if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  if (fs::is_directory(roots.fortunes, ec))
    for (const auto& e : fs::directory_iterator(roots.fortunes)) {
      const auto ext = e.path().extension();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
    }
  if (files.empty())
    fail("corpus: no text files under {} or {} (install python3.11-doc and fortunes)",
         roots.python_doc_sources.string(), roots.fortunes.string());
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
  return files;
}

CorpusSplit split_corpus(const std::vector<fs::path>& sorted_files) {
  CorpusSplit s;
  for (std::size_t i = 0; i < sorted_files.size(); ++i)
    (i % kEvalEvery == kEvalEvery - 1 ? s.eval : s.train).push_back(sorted_files[i]);
  return s;
}

std::string read_corpus_text(const std::vector<fs::path>& files) {
  std::string text;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    if (fs::is_directory(files[i], ec)) fail("corpus: {} is a directory, not a text file", files[i].string());
    std::ifstream in(files[i], std::ios::binary);
    if (!in) fail("corpus: cannot read {}: {}", files[i].string(), std::generic_category().message(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("corpus: reading {} failed", files[i].string());
    if (i) text += "\n\n";
    text += ss.str();
  }
  return text;
}

}  // namespace bitrank::io
