// KvEventStream: one replica's KV event batches, applied to the PrefixIndex in sequence
// order, with gaps repaired by replay or, failing that, by forgetting what the index knew.
//
// The publisher numbers its batches 0, 1, 2, ... (kv_events.py). The stream applies batch n
// only after batch n-1:
// - a live batch that is next is applied; an older one (already applied, e.g. the overlap
//   of a replay) is dropped, unless it is newer (by its batch timestamp) than the last one
//   applied: then the publisher restarted (a new process counts from 0 again), so the
//   replica's entries are cleared and the stream starts over from sequence 0;
// - a live batch past the next one is a gap (a dropped message, or a subscriber that joined
//   late): on_live holds it and returns the first missing sequence; the caller asks the
//   publisher's replay socket for the batches from there, feeds each to on_replayed (applied
//   when it is next), then calls finish_replay. Live batches that arrive meanwhile are held
//   too. finish_replay applies the held batches in order; where one is still not next,
//   the gap could not be filled (no replay socket, or the publisher's buffer no longer has
//   it), so the index's entries for this replica are cleared (they may be wrong) and the
//   stream resumes at that batch. Either way the index never keeps entries that depend on
//   a batch it did not see.
// reset() forgets the replica (disconnect, failed health check). Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "serve/kv_event.h"
#include "serve/prefix_index.h"

namespace torchtpu::serve {

class KvEventStream {
 public:
  KvEventStream(ReplicaId replica, PrefixIndex* index) : replica_(replica), index_(index) {}

  // A batch from the live subscription. nullopt: applied or dropped. A value: the first
  // missing sequence number; the batch is held until finish_replay().
  // `ts` is the batch's timestamp (seconds, the publisher's clock).
  std::optional<uint64_t> on_live(uint64_t seq, double ts, std::vector<KvEvent> events);
  // A batch from a replay: applied when it is the next one, dropped otherwise.
  void on_replayed(uint64_t seq, double ts, std::vector<KvEvent> events);
  // The replay is over (or was impossible): applies the held batch as described above.
  void finish_replay();
  bool replaying() const { return !held_.empty(); }
  // Forgets the replica: clears its index entries; the next batch starts a new stream.
  void reset();
  // Batch `seq` could not be decoded: what the index knew of the replica may be stale, so
  // it is cleared, and the stream goes on at seq + 1.
  void skip_undecodable(uint64_t seq);

  // The next sequence number expected (0 before any batch).
  uint64_t next_seq() const { return next_; }
  int64_t num_batches_applied() const { return num_applied_; }
  int64_t num_gaps() const { return num_gaps_; }
  int64_t num_replayed_batches() const { return num_replayed_; }
  int64_t num_resyncs() const { return num_resyncs_; }  // gaps replay could not fill
  int64_t num_restarts() const { return num_restarts_; }

 private:
  struct Held {
    uint64_t seq;
    double ts;
    std::vector<KvEvent> events;
  };
  void apply(uint64_t seq, double ts, const std::vector<KvEvent>& events);

  ReplicaId replica_;
  PrefixIndex* index_;
  bool started_ = false;
  uint64_t next_ = 0;
  double last_ts_ = 0;
  std::vector<Held> held_;  // live batches that arrived past a gap, in arrival order
  int64_t num_applied_ = 0;
  int64_t num_gaps_ = 0;
  int64_t num_replayed_ = 0;
  int64_t num_resyncs_ = 0;
  int64_t num_restarts_ = 0;
};

}  // namespace torchtpu::serve
