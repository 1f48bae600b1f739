// Rendezvous: where the ranks of one group, threads of this process, meet for each
// collective (the in-plugin transport's meeting point).
//
// Every rank calls exchange() for its k-th collective with its Contribution. The last rank
// to arrive checks that every rank's `signature` is the same and runs `run` (the one
// program over all ranks' devices) with all contributions, in rank order; every rank then
// returns its own outputs and every rank's `meta`. The other ranks block meanwhile.
//   - Signatures differ: kInvalidArgument on every rank, listing each rank's description.
//   - A rank waits longer than its timeout (each call passes its own: the rank's process
//     group timeout, which setTimeout may change): kUnavailable naming the ranks that have
//     not arrived. The rendezvous is then broken: every later exchange (the late ranks
//     included) fails at once with the same message, as a NCCL communicator is aborted
//     after a timeout; the group has to be created again.
// Lifetime: shared by the ranks' transports (shared_ptr); get_or_create keeps a weak
// registry keyed by the group's identity, so ranks that join with the same key share one.
// Thread safety: all methods may be called from any thread; one thread per rank.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {
struct StorageState;  // aten/tpu_storage.h
}  // namespace torchtpu::aten

namespace torchtpu::distributed {

// Whether a contribution's first argument may be given to its program (donated; the
// result then takes its memory), decided when the program runs.
struct Donor {
  enum class Kind {
    kNever,
    kValue,    // a value made for this collective (a view's): when nothing else holds it
    kStorage,  // `storage`'s whole buffer: when nothing but the storage holds it; the storage
               // stays locked from that check until the result is its buffer
  } kind = Kind::kNever;
  aten::StorageState* storage = nullptr;
};

struct Contribution {
  // What the ranks must agree on, compared exactly (the program text, for instance).
  std::string signature;
  // For messages: "all_reduce(sum) float32[4, 4]".
  std::string description;
  int device_index = 0;
  std::vector<runtime::BufferPtr> args;
  // Small values every rank receives from every rank (all_to_all's splits).
  std::vector<int64_t> meta;
  Donor donor;  // of args[0]
};

struct Exchanged {
  std::vector<runtime::BufferPtr> outputs;  // this rank's results (empty when none)
  std::vector<std::vector<int64_t>> metas;  // every rank's meta, in rank order
};

class Rendezvous {
 public:
  // `contributions` in rank order -> every rank's outputs, in rank order.
  using Runner = std::function<base::StatusOr<std::vector<std::vector<runtime::BufferPtr>>>(
      const std::vector<Contribution>& contributions)>;

  // The rendezvous of group `key` with `size` ranks, shared with every rank that joined
  // with the same key and is still alive. `rank_names` (size entries) name the ranks in
  // messages (global ranks). Joining as a rank that is already joined is an error.
  static base::StatusOr<std::shared_ptr<Rendezvous>> join(const std::string& key, int size,
                                                          int rank,
                                                          std::vector<int64_t> rank_names);
  void leave(int rank);

  // Blocks until every rank has made its `seq`-th call (or `timeout` passed); `collective`
  // names it in messages. `run` may be empty (a pure exchange of metas, a barrier).
  base::StatusOr<Exchanged> exchange(int rank, uint64_t seq, const std::string& collective,
                                     Contribution contribution, const Runner& run,
                                     std::chrono::milliseconds timeout);

  int size() const { return size_; }

 private:
  struct Round {
    std::vector<Contribution> contributions;
    std::vector<bool> arrived;
    int num_arrived = 0;
    bool done = false;
    base::Status status;
    std::vector<std::vector<runtime::BufferPtr>> outputs;
    int num_taken = 0;
  };

  Rendezvous(std::string key, int size, std::vector<int64_t> rank_names);
  base::Status check_signatures(const std::string& collective, uint64_t seq,
                                const Round& round) const;
  std::string rank_list(const std::vector<int>& ranks) const;

  const std::string key_;
  const int size_;
  const std::vector<int64_t> rank_names_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Round> rounds_;
  std::vector<bool> joined_;
  std::string broken_;  // why the group is unusable; empty while it works
};

}  // namespace torchtpu::distributed
