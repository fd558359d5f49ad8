// `bitrank tokenize`: encodes the training or evaluation part of the default
// corpus (or a text file) with the model's own tokenizer, exactly as
// `bitrank eval` does before scoring (cli/inputs.hpp), and writes the ids as
// a raw little-endian int32 file (io/token_file.hpp) for programs outside
// bitrank, e.g. the LittleBit anchor. Prints one JSON line: model, text,
// bytes of text, token count, output path, seconds.
#include "cli/tokenize.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

#include "bitrank/error.hpp"
#include "bitrank/io/token_file.hpp"
#include "cli/inputs.hpp"

namespace bitrank::cli {

int run_tokenize(const TokenizeOptions& o) {
  if (o.out.empty()) fail("tokenize: no output file given (-o)");
  if (o.split != "train" && o.split != "eval") fail("tokenize: --split must be train or eval, got '{}'", o.split);
  check_output_path("tokenize", "-o", o.out);
  const std::string model_path = model_or_default(o.model, "tokenize");
  const auto t0 = std::chrono::steady_clock::now();
  const TextIds t = tokenize_text(model_path, o.text, o.split == "train" ? CorpusPart::train : CorpusPart::eval);
  io::write_token_file(o.out, t.ids);
  nlohmann::ordered_json j;
  j["model"] = model_path;
  j["text"] = t.name;
  j["text_bytes"] = t.text_bytes;
  j["tokens"] = t.ids.size();
  j["out"] = o.out;
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace bitrank::cli
