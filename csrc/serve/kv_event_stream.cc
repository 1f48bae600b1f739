#include "serve/kv_event_stream.h"

namespace torchtpu::serve {

void KvEventStream::apply(uint64_t seq, double ts, const std::vector<KvEvent>& events) {
  for (const KvEvent& e : events) {
    switch (e.kind) {
      case KvEventKind::kBlockStored: index_->store(replica_, e.block_hashes); break;
      case KvEventKind::kBlockRemoved: index_->remove(replica_, e.block_hashes); break;
      case KvEventKind::kAllBlocksCleared: index_->clear(replica_); break;
    }
  }
  started_ = true;
  next_ = seq + 1;
  last_ts_ = ts;
  ++num_applied_;
}

std::optional<uint64_t> KvEventStream::on_live(uint64_t seq, double ts,
                                               std::vector<KvEvent> events) {
  if (!held_.empty()) {  // a replay is under way: finish_replay() decides
    held_.push_back({seq, ts, std::move(events)});
    return std::nullopt;
  }
  if (started_ && seq < next_ && ts > last_ts_) {  // the publisher restarted
    ++num_restarts_;
    index_->clear(replica_);
    started_ = false;
    next_ = 0;
  }
  if (seq == next_) {
    apply(seq, ts, events);
    return std::nullopt;
  }
  if (seq < next_) return std::nullopt;  // seen already
  ++num_gaps_;
  held_.push_back({seq, ts, std::move(events)});
  return next_;
}

void KvEventStream::on_replayed(uint64_t seq, double ts, std::vector<KvEvent> events) {
  if (seq != next_) return;
  ++num_replayed_;
  apply(seq, ts, events);
}

void KvEventStream::finish_replay() {
  std::vector<Held> held;
  held.swap(held_);
  for (const Held& h : held) {
    if (h.seq < next_) continue;  // the replay brought it already
    if (h.seq != next_) {
      ++num_resyncs_;
      index_->clear(replica_);
    }
    apply(h.seq, h.ts, h.events);
  }
}

void KvEventStream::skip_undecodable(uint64_t seq) {
  ++num_resyncs_;
  index_->clear(replica_);
  started_ = true;
  next_ = seq + 1;
}

void KvEventStream::reset() {
  index_->clear(replica_);
  started_ = false;
  next_ = 0;
  held_.clear();
}

}  // namespace torchtpu::serve
