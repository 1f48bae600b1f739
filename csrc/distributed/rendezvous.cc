#include "distributed/rendezvous.h"

#include <algorithm>

namespace torchtpu::distributed {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, std::weak_ptr<Rendezvous>>& registry() {
  static auto* groups = new std::map<std::string, std::weak_ptr<Rendezvous>>();
  return *groups;
}

}  // namespace

Rendezvous::Rendezvous(std::string key, int size, std::vector<int64_t> rank_names)
    : key_(std::move(key)), size_(size), rank_names_(std::move(rank_names)), joined_(size, false) {}

base::StatusOr<std::shared_ptr<Rendezvous>> Rendezvous::join(const std::string& key, int size,
                                                             int rank,
                                                             std::vector<int64_t> rank_names) {
  if (size < 1 || rank < 0 || rank >= size) {
    return base::invalid_argument("distributed: in-plugin group '" + key + "': rank " +
                                  std::to_string(rank) + " is not in a group of " +
                                  std::to_string(size));
  }
  if (rank_names.empty()) {
    for (int r = 0; r < size; ++r) rank_names.push_back(r);
  }
  if (static_cast<int>(rank_names.size()) != size) {
    return base::invalid_argument("distributed: in-plugin group '" + key + "': " +
                                  std::to_string(rank_names.size()) + " rank names for " +
                                  std::to_string(size) + " ranks");
  }
  std::lock_guard<std::mutex> registry_lock(registry_mutex());
  for (auto it = registry().begin(); it != registry().end();) {
    it = it->second.expired() ? registry().erase(it) : std::next(it);
  }
  std::shared_ptr<Rendezvous> group = registry()[key].lock();
  if (group == nullptr) {
    group.reset(new Rendezvous(key, size, rank_names));
    registry()[key] = group;
  }
  if (group->size_ != size) {
    return base::invalid_argument("distributed: in-plugin group '" + key + "' has " +
                                  std::to_string(group->size_) + " ranks, but rank " +
                                  std::to_string(rank) + " joins it as a group of " +
                                  std::to_string(size) +
                                  "; every rank must create the group with the same ranks");
  }
  std::lock_guard<std::mutex> lock(group->mu_);
  if (group->joined_[rank]) {
    return base::invalid_argument("distributed: in-plugin group '" + key + "': rank " +
                                  std::to_string(rank) +
                                  " joined twice; each rank is one thread with one transport");
  }
  if (std::none_of(group->joined_.begin(), group->joined_.end(), [](bool j) { return j; })) {
    // Everyone had left: a new group under the same name starts clean.
    group->rounds_.clear();
    group->broken_.clear();
  }
  group->joined_[rank] = true;
  return group;
}

void Rendezvous::leave(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank >= 0 && rank < size_) joined_[rank] = false;
}

std::string Rendezvous::rank_list(const std::vector<int>& ranks) const {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(rank_names_[ranks[i]]);
  }
  return s + "]";
}

base::Status Rendezvous::check_signatures(const std::string& collective, uint64_t seq,
                                          const Round& round) const {
  bool same = true;
  for (int r = 1; r < size_; ++r) {
    same &= round.contributions[r].signature == round.contributions[0].signature;
  }
  if (same) return base::Status::ok_status();
  std::string ranks;
  for (int r = 0; r < size_; ++r) {
    ranks += (r ? ", " : "") + std::string("rank ") + std::to_string(rank_names_[r]) + ": " +
             round.contributions[r].description;
  }
  return base::invalid_argument(
      "distributed: " + collective + " (collective #" + std::to_string(seq) + " of group '" +
      key_ + "'): the ranks disagree (" + ranks +
      "); every rank must make the same collectives in the same order, with the same "
      "dtypes and shapes");
}

base::StatusOr<Exchanged> Rendezvous::exchange(int rank, uint64_t seq,
                                               const std::string& collective,
                                               Contribution contribution, const Runner& run,
                                               std::chrono::milliseconds timeout) {
  if (rank < 0 || rank >= size_) {
    return base::internal_error("distributed: rank " + std::to_string(rank) +
                                " exchanges in group '" + key_ + "' of " + std::to_string(size_));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.empty()) return base::unavailable(broken_);
  Round& round = rounds_[seq];
  if (round.arrived.empty()) {
    round.arrived.assign(size_, false);
    round.contributions.resize(size_);
  }
  round.contributions[rank] = std::move(contribution);
  round.arrived[rank] = true;
  if (++round.num_arrived == size_) {
    round.status = check_signatures(collective, seq, round);
    if (round.status.ok() && run) {
      // The others only wait for `done`: nothing else touches this round meanwhile.
      lock.unlock();
      base::StatusOr<std::vector<std::vector<runtime::BufferPtr>>> outputs =
          run(round.contributions);
      lock.lock();
      if (outputs.ok()) {
        round.outputs = std::move(outputs).value();
      } else {
        round.status = outputs.status();
      }
    }
    round.done = true;
    cv_.notify_all();
  } else {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    bool woke = cv_.wait_until(lock, deadline, [&] {
      return round.done || round.num_arrived == size_ || !broken_.empty();
    });
    // Everyone arrived: the program is being compiled or enqueued, which the timeout does
    // not bound (a first compile may take long).
    if (woke && broken_.empty()) cv_.wait(lock, [&] { return round.done; });
    if (!woke) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r) {
        if (!round.arrived[r]) missing.push_back(r);
      }
      broken_ = "distributed: " + collective + " (collective #" + std::to_string(seq) +
                " of group '" + key_ + "') timed out after " +
                std::to_string(timeout.count()) + " ms: ranks " + rank_list(missing) +
                " did not arrive; the group is unusable from now on: check that every rank "
                "makes the same collectives, or raise the process group's timeout";
      cv_.notify_all();
      return base::unavailable(broken_);
    }
    if (!round.done) return base::unavailable(broken_);
  }
  base::Status status = round.status;
  Exchanged result;
  if (status.ok()) {
    if (rank < static_cast<int>(round.outputs.size())) {
      result.outputs = std::move(round.outputs[rank]);
    }
    for (const Contribution& c : round.contributions) result.metas.push_back(c.meta);
  }
  if (++round.num_taken == size_) rounds_.erase(seq);
  if (!status.ok()) return status;
  return result;
}

}  // namespace torchtpu::distributed
