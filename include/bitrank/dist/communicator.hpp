// Collective communication between the ranks of a compression job.
//
// Compressing over several GPUs runs one process per GPU; each owns a
// contiguous range of blocks (partition.hpp) and the ranks meet only in a
// few collectives: sums of statistics, the broadcast of a result, a barrier.
// Communicator is that meeting point. NCCL will implement it for the GPUs;
// the thread communicator below stands in for it in tests, with one
// std::thread per rank in one process.
//
// Rules every implementation keeps:
//  - Every rank calls the same collectives in the same order, with buffers
//    of the same size (and the same root). A mismatch that can be seen is an
//    Error on every rank, naming the ranks and sizes, never a hang: the ranks
//    first publish what they called, then each checks all of it.
//  - all_reduce_sum adds in a fixed order, rank 0's value + rank 1's + … in
//    f32, left to right, so every rank gets the same bits and the result
//    does not depend on timing or on which rank arrived first.
//  - A rank that fails calls abort(why): the ranks waiting in a collective
//    of the group, and every later collective, throw an Error that names
//    the failing rank. An aborted group stays aborted.
//  - A rank that never calls a collective the others wait in cannot be seen;
//    run_ranks turns a rank's exception into abort so that this is rare.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace bitrank::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank ends with the element-wise sum over ranks, added in rank
  // order in f32 (bit-identical on every rank).
  virtual void all_reduce_sum(std::span<float> data) = 0;
  // Every rank ends with root's bytes.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;
  // Fails the group: see the rules above.
  virtual void abort(std::string why) = 0;
};

// n communicators (ranks 0 … n-1) sharing one state, for n threads of one
// process; communicator r must be used by one thread at a time. n < 1: Error.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n);

// Runs fn(comm) for every communicator on its own thread and joins them. A
// rank whose fn throws aborts the group (so the others do not wait forever);
// the first exception thrown, the failing rank's own, is rethrown here.
void run_ranks(const std::vector<std::unique_ptr<Communicator>>& comms,
               const std::function<void(Communicator&)>& fn);

}  // namespace bitrank::dist
