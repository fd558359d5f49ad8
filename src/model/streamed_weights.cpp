// Streamed blocks: images in staging memory, device slots, the copies
// between them (contract: include/bitrank/model/streamed_weights.hpp).
#include "bitrank/model/streamed_weights.hpp"

#include <algorithm>

#include "bitrank/error.hpp"
#include "bitrank/log.hpp"

namespace bitrank::model {

BlockSlots::BlockSlots(Memory& device, std::vector<std::size_t> image_bytes, int slots)
    : dev_(device), queue_(device.copy_queue()), bytes_(std::move(image_bytes)) {
  if (slots < 2) fail("BlockSlots: {} slots, at least 2 are needed (one computes while the next uploads)", slots);
  if (bytes_.empty()) fail("BlockSlots: no blocks");
  Memory& host = dev_.staging_memory();
  for (std::size_t n : bytes_) {
    images_.emplace_back(host, n);
    images_.back().zero();
    slot_bytes_ = std::max(slot_bytes_, n);
  }
  slots_.resize(static_cast<std::size_t>(std::min<index_t>(slots, blocks())));
  if (slots_.size() < 2) slots_.resize(2);
  for (Slot& s : slots_) s.bytes = Buffer<std::byte>(dev_, slot_bytes_);
}

BlockSlots::~BlockSlots() {
  try {
    queue_.synchronize();
  } catch (const std::exception& e) {
    BR_LOG_WARN("BlockSlots: waiting for the copy queue failed: {}", e.what());
  }
}

void BlockSlots::check(index_t b, const char* what) const {
  if (b < 0 || b >= blocks()) fail("BlockSlots {}: block {} of {}", what, b, blocks());
}

std::byte* BlockSlots::image(index_t b) const {
  check(b, "image");
  return images_[static_cast<std::size_t>(b)].data();
}

std::size_t BlockSlots::total_bytes() const {
  std::size_t sum = slot_bytes_ * slots_.size();
  for (std::size_t b : bytes_) sum += b;
  return sum;
}

std::size_t carved_bytes(const std::vector<Buffer<std::byte>>& storage, const BlockSlots* slots) {
  std::size_t sum = slots ? slots->total_bytes() : 0;
  for (const Buffer<std::byte>& b : storage) sum += b.size();
  return sum;
}

std::size_t BlockSlots::image_bytes(index_t b) const {
  check(b, "image_bytes");
  return bytes_[static_cast<std::size_t>(b)];
}

int BlockSlots::slot_of(index_t b) const {
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].block == b) return static_cast<int>(i);
  return -1;
}

int BlockSlots::load(index_t b, int keep) {
  int victim = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    if (i == keep) continue;
    if (victim < 0 || slots_[static_cast<std::size_t>(i)].used < slots_[static_cast<std::size_t>(victim)].used)
      victim = i;
  }
  Slot& s = slots_[static_cast<std::size_t>(victim)];
  queue_.after_compute();  // the slot's last reader (and writer) is done
  if (s.block >= 0 && s.modified)
    queue_.download(image(s.block), s.bytes.data(), bytes_[static_cast<std::size_t>(s.block)]);
  queue_.upload(s.bytes.data(), image(b), bytes_[static_cast<std::size_t>(b)]);
  s.block = b;
  s.modified = false;
  s.used = 0;
  uploads_pending_ = true;
  return victim;
}

std::byte* BlockSlots::acquire(index_t b, index_t next) {
  check(b, "acquire");
  int s = slot_of(b);
  if (s < 0) {
    int last = 0;  // the slot acquired last stays: its block may be the one in use
    for (int i = 1; i < static_cast<int>(slots_.size()); ++i)
      if (slots_[static_cast<std::size_t>(i)].used > slots_[static_cast<std::size_t>(last)].used) last = i;
    s = load(b, slots_[static_cast<std::size_t>(last)].used > 0 ? last : -1);
  }
  if (uploads_pending_) {
    queue_.before_compute();  // b's bytes are in the slot before its compute runs
    uploads_pending_ = false;
  }
  slots_[static_cast<std::size_t>(s)].used = ++clock_;
  if (next >= 0 && next != b) {
    check(next, "acquire (next)");
    if (slot_of(next) < 0) load(next, s);
  }
  return slots_[static_cast<std::size_t>(s)].bytes.data();
}

void BlockSlots::modified(index_t b) {
  const int s = slot_of(b);
  if (s < 0) fail("BlockSlots modified: block {} is in no slot", b);
  slots_[static_cast<std::size_t>(s)].modified = true;
}

void BlockSlots::flush() {
  bool fenced = false;
  for (Slot& s : slots_) {
    if (s.block < 0 || !s.modified) continue;
    if (!fenced) queue_.after_compute();
    fenced = true;
    queue_.download(image(s.block), s.bytes.data(), bytes_[static_cast<std::size_t>(s.block)]);
    s.modified = false;
  }
  queue_.synchronize();
}

}  // namespace bitrank::model
