// The checkpoint of a `bitrank compress` run (DESIGN §7), layer-wise or end
// to end: what a resumed run needs to continue with a loss sequence
// bit-identical to the uninterrupted run's on the same backend.
//
// One safetensors file, `<out>.ckpt`, written atomically (temporary file,
// fsync, rename, directory fsync: io/safetensors_writer.hpp), so a kill at
// any moment leaves the previous checkpoint or the new one, never a mix.
//
// Tensors (the bitrank format's names, every value stored exactly):
//   N.p{p}.su, N.p{p}.sv   U32 [m|n][r/32]   a trained BLR matrix N (blocks < block)
//   N.p{p}.h, .l, .g       F32 [m], [r], [n]
//   blk.{b}.attn_norm.weight, blk.{b}.ffn_norm.weight   F32 [hidden]   trained gains (blocks < block;
//                          hybrid: attn_norm, post_attention_norm, and attn_q_norm, attn_k_norm [head_dim]
//                          in full-attention blocks; e2e: output_norm.weight too)
//   student.state          U8 [bytes]        layer-wise: the student block's download_state (StudentLlamaBlock
//                                            or StudentHybridBlock) of block `block`; e2e: the whole
//                                            student's (E2eTrainerOf::download_state) — after `trainer.step`
//                                            steps (absent when that is 0)
// Metadata (strings):
//   bitrank.format         "bitrank.compress_checkpoint"
//   bitrank.version        "2" (version 1, written before the e2e objective
//                          had checkpoints, reads as objective "layer")
//   bitrank.trainer_state  TrainerState JSON (state.hpp) of block `block`:
//                          step and applied_steps within the block, its grad
//                          scaler and schedule; tokens and seconds over the
//                          whole run; data = the training windows' position
//                          after drawing every step's windows (its seed, T,
//                          nb, window count and ids fingerprint identify the
//                          training data)
//   bitrank.compress       JSON: {"objective": "layer" | "sequential" | "e2e", "block": b, "options": {...},
//                          "blocks": [{"losses": [...], "flips": F, "skipped": S}, ...]
//                                   (blocks 0..b, block b's steps so far; a loss
//                                   that was not finite is null),
//                          "matrices": {"N": {"m", "n", "rank", "paths",
//                                   "init_rel_error", "init_fingerprint": "16 hex",
//                                   "init_output_error" (optional; null or absent: none)}, ...}
//                                   (every projection of the plan),
//                          "init_seconds": s,
//                          "perplexity": {"teacher": {...}, "init": {...}},
//                          "trained": ["N", ...] (the matrices stored)}
//
// The end-to-end objective trains every block at once, so its run counts as
// one block: `block` is 0 while it trains (one block log, its losses so
// far; student.state holds every block, the final gain and their optimizer
// state) and 1 once it is done (trainer.step 0, every matrix and gain
// stored as trained).
//
// `options` holds every option that shapes the training (compress_options_json);
// check_resume_options compares them with a resumed run's and names the first
// that differs. The Dual-SVID initialisation is not stored: it is recomputed
// (deterministic for a seed) and compared by its fingerprint, FNV-1a-64 over
// the matrix's bitmaps and scales in path order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/train/state.hpp"

namespace bitrank::train {

struct CompressOptions;

inline constexpr const char* kCompressCheckpointFormat = "bitrank.compress_checkpoint";
inline constexpr int kCompressCheckpointVersion = 2;  // reads 1 too (see above)

// One block's training so far.
struct CompressBlockLog {
  std::vector<double> losses;                                // one per step done (NaN when not finite)
  std::int64_t flips = 0;                                    // sign flips
  std::int64_t skipped = 0;                                  // steps skipped by the grad scaler
  bool operator==(const CompressBlockLog&) const = default;  // (NaN ≠ NaN: tests compare bits)
};

// A projection's plan and initialisation, as the summary reports it.
struct CompressMatrixInit {
  index_t m = 0, n = 0, rank = 0, paths = 0;
  double init_rel_error = 0;
  std::uint64_t init_fingerprint = 0;
  double init_output_error = std::numeric_limits<double>::quiet_NaN();  // NaN: no calibration statistics
};

struct CompressCheckpoint {
  std::string objective = "layer";       // CompressOptions::objective of the run
  std::int64_t block = 0;                // the block being trained; the number of blocks when training is done (e2e: 0, 1)
  TrainerState trainer;                  // of block `block` (see above)
  nlohmann::ordered_json options;        // compress_options_json of the run
  std::vector<CompressBlockLog> blocks;  // blocks 0..block (block `block` partial), at most
  std::map<std::string, CompressMatrixInit> matrices;  // every projection of the plan
  double init_seconds = 0;
  nlohmann::ordered_json perplexity;                        // {"teacher": ..., "init": ...}
  std::map<std::string, blr::HostBlrMatrix> trained;        // matrices of blocks < block
  std::map<std::string, std::vector<float>> trained_gains;  // norm gains of blocks < block, by tensor name
  std::vector<std::byte> student_state;                     // empty when trainer.step is 0
};

// `<out>.ckpt`
std::filesystem::path compress_checkpoint_path(const std::filesystem::path& out);

// Every option that shapes the run, as JSON keyed by CompressOptions field
// ("seq_len", "train.signs.lr", ...; paths made absolute): the one record of
// the options, stored in the checkpoint (a resumed run must share it) and
// in the summary ("options"). Not included: out (it names the checkpoint),
// device, checkpoint_every, resume and the test hooks.
nlohmann::ordered_json compress_options_json(const CompressOptions& options);

// Error naming the checkpoint and the first option whose value differs
// ("... was written with seq_len = 32, this run has seq_len = 64 ...").
void check_resume_options(const nlohmann::ordered_json& saved, const nlohmann::ordered_json& current,
                          const std::filesystem::path& checkpoint);

// FNV-1a-64 of a BLR matrix: dims, then per path S_U, S_V, h, ℓ, g bytes (host order).
std::uint64_t blr_fingerprint(const blr::HostBlrMatrix& w);

// Atomic write (see above); Error naming the file on failure.
void write_compress_checkpoint(const std::filesystem::path& path, const CompressCheckpoint& checkpoint);
// Reads and checks format, version, every key and every tensor's dtype and
// shape (Error naming the file and what is wrong).
CompressCheckpoint read_compress_checkpoint(const std::filesystem::path& path);

}  // namespace bitrank::train
