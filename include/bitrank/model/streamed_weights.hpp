// Streamed blocks (DESIGN §7 "Streaming"): a model's per-block tensors live
// in host memory and move to the device one block at a time, so a model
// whose weights do not fit in device memory still runs.
//
// BlockSlots holds, per block, one image: the block's tensors carved from
// one allocation (memory.hpp's Carver) in the backend's staging memory
// (page-locked on cuda, plain host memory on cpu: Memory::staging_memory),
// and `slots` device buffers (2 by default) of the largest image. A block
// is used by rebasing its views from its image to the slot holding it
// (Projection::rebased, train::StudentArena::rebind): one copy per block.
//
// acquire(b, next): block b in a slot — a hit when it is there already,
// else uploaded into the least recently used slot other than the one
// acquired last — with the compute queue ordered after its upload; then the
// upload of `next` into another slot starts on the copy queue
// (Memory::copy_queue: cuda's copy stream), so it overlaps block b's compute.
// A slot is overwritten only after the compute queued before the copy
// (CopyQueue::after_compute): its last reader is done. With 2 slots,
// acquire(b, b+1) in a sweep holds b and b+1 and uploads each block once.
//
// Blocks that train (e2e streaming of the student, train/streaming.hpp)
// call modified(b) after writing their slot: when the slot is given to
// another block, its bytes are first copied back to b's image (download on
// the copy queue, after the compute that wrote them); flush() copies back
// every modified slot and waits. Nothing is lost or reordered: an image is
// only read by the copy queue, in the order copies were queued.
//
// On host backends the copies are plain memcpy at the call (CopyQueue's
// default): the same slots and the same bytes, so a streamed run equals
// the resident one bit for bit on any backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "bitrank/memory.hpp"

namespace bitrank::model {

class BlockSlots {
 public:
  // One image of image_bytes[b] bytes per block in device.staging_memory(),
  // zeroed; `slots` (≥ 2) device buffers of the largest.
  BlockSlots(Memory& device, std::vector<std::size_t> image_bytes, int slots = 2);
  ~BlockSlots();  // waits for the copy queue (copies still target the slots and images)
  BlockSlots(const BlockSlots&) = delete;
  BlockSlots& operator=(const BlockSlots&) = delete;

  index_t blocks() const { return static_cast<index_t>(images_.size()); }
  // Block b's image (host memory); write a block's tensors there before its first acquire.
  std::byte* image(index_t b) const;
  std::size_t image_bytes(index_t b) const;
  std::size_t slot_bytes() const { return slot_bytes_; }
  // Every image and slot: what the streamed blocks hold.
  std::size_t total_bytes() const;
  Memory& device() const { return dev_; }

  // The slot holding block b (see above); next < 0: no prefetch.
  std::byte* acquire(index_t b, index_t next = -1);
  // Block b (in a slot, acquired) was written there: copied back before its slot is reused.
  void modified(index_t b);
  // Every modified slot copied back to its image; waits until the images hold them.
  void flush();

 private:
  struct Slot {
    Buffer<std::byte> bytes;
    index_t block = -1;
    bool modified = false;
    std::uint64_t used = 0;  // acquire clock
  };
  int slot_of(index_t b) const;  // -1 when not in a slot
  // Puts b into a slot other than `keep` (the LRU one), writing back its occupant if modified.
  int load(index_t b, int keep);
  void check(index_t b, const char* what) const;

  Memory& dev_;
  CopyQueue& queue_;
  std::vector<Buffer<std::byte>> images_;
  std::vector<std::size_t> bytes_;
  std::size_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  std::uint64_t clock_ = 0;
  bool uploads_pending_ = false;  // copies queued since the compute queue last waited for them
};

// The bytes of blocks that carve_blocks laid out: the resident allocations
// in `storage`, or `slots`' images and slots when streamed.
std::size_t carved_bytes(const std::vector<Buffer<std::byte>>& storage, const BlockSlots* slots);

// A model's blocks, carved: place(b, Memory&, Carver&) → Block lays block
// b's tensors out from a Carver (writing through the Memory; nothing when
// the Carver only measures). Each block is measured first; then, streamed,
// the blocks live in `slots`' host images (written through the staging
// memory), else in one device allocation each, appended to `storage`.
template <class Block, class Place>
std::vector<Block> carve_blocks(Memory& memory, index_t blocks, bool stream, const Place& place,
                                std::unique_ptr<BlockSlots>& slots, std::vector<Buffer<std::byte>>& storage) {
  std::vector<std::size_t> bytes;
  for (index_t b = 0; b < blocks; ++b) {
    Carver measure;
    place(b, memory, measure);
    bytes.push_back(measure.size());
  }
  if (stream) slots = std::make_unique<BlockSlots>(memory, bytes);
  std::vector<Block> out;
  for (index_t b = 0; b < blocks; ++b) {
    std::byte* base;
    if (stream) {
      base = slots->image(b);
    } else {
      storage.emplace_back(memory, bytes[static_cast<std::size_t>(b)]);
      base = storage.back().data();
    }
    Carver at(base);
    out.push_back(place(b, stream ? memory.staging_memory() : memory, at));
  }
  return out;
}

}  // namespace bitrank::model
