#include "router/event_subscriber.h"

#include <zmq.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

namespace torchtpu::router {

namespace {

uint64_t be64(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* p = static_cast<const uint8_t*>(m.data());
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

bool recv_all(zmq::socket_t& s, std::vector<zmq::message_t>* frames) {
  frames->clear();
  while (true) {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) return !frames->empty();
    const bool more = m.more();
    frames->push_back(std::move(m));
    if (!more) return true;
  }
}

}  // namespace

void EventSubscriber::start() { thread_ = std::thread([this] { run(); }); }

void EventSubscriber::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void EventSubscriber::run() {
  zmq::context_t ctx(1);
  struct Sub {
    ReplicaId id;
    zmq::socket_t sub;
  };
  std::vector<Sub> subs;
  for (size_t i = 0; i < replicas_->size(); ++i) {
    const ReplicaConfig& c = replicas_->config(static_cast<ReplicaId>(i));
    if (c.events_endpoint.empty()) continue;
    zmq::socket_t s(ctx, zmq::socket_type::sub);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvhwm, 100000);
    try {
      s.connect(c.events_endpoint);
    } catch (const zmq::error_t& e) {
      std::fprintf(stderr, "torchtpu router: cannot subscribe to %s's KV events at %s: %s\n",
                   c.http.str().c_str(), c.events_endpoint.c_str(), e.what());
      continue;
    }
    s.set(zmq::sockopt::subscribe, "");
    subs.push_back({static_cast<ReplicaId>(i), std::move(s)});
  }
  if (subs.empty()) return;

  // Asks `id`'s replay socket for the batches from `from` on and feeds them in.
  auto replay = [&](ReplicaId id, uint64_t from) {
    const ReplicaConfig& c = replicas_->config(id);
    if (c.replay_endpoint.empty()) {
      replicas_->finish_replay(id);
      return;
    }
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    try {
      dealer.connect(c.replay_endpoint);
      uint8_t start[8];
      for (int i = 0; i < 8; ++i) start[i] = static_cast<uint8_t>(from >> (56 - 8 * i));
      dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
      dealer.send(zmq::buffer(start, 8), zmq::send_flags::none);
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(replay_timeout_ms_);
      std::vector<zmq::message_t> frames;
      while (!stop_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
          std::fprintf(stderr, "torchtpu router: replay from %s timed out\n",
                       c.replay_endpoint.c_str());
          break;
        }
        zmq::pollitem_t item{static_cast<void*>(dealer), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, left) == 0) continue;
        if (!recv_all(dealer, &frames)) continue;
        if (frames.size() != 3 || frames[1].size() != 8) continue;  // [b"", seq, payload]
        const uint64_t seq = be64(frames[1]);
        if (seq == ~uint64_t{0}) break;  // -1: the end of the replay
        auto batch = decode_kv_event_batch(
            std::string_view(static_cast<const char*>(frames[2].data()), frames[2].size()));
        if (!batch.ok()) {
          replicas_->on_undecodable_batch(id, seq, batch.status().message());
          continue;
        }
        replicas_->on_replayed_batch(id, seq, std::move(batch).value());
      }
    } catch (const zmq::error_t& e) {
      std::fprintf(stderr, "torchtpu router: replay from %s failed: %s\n",
                   c.replay_endpoint.c_str(), e.what());
    }
    replicas_->finish_replay(id);
  };

  std::vector<zmq::pollitem_t> items;
  for (auto& s : subs) items.push_back({static_cast<void*>(s.sub), 0, ZMQ_POLLIN, 0});
  std::vector<zmq::message_t> frames;
  while (!stop_) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      std::fprintf(stderr, "torchtpu router: KV event poll failed: %s\n", e.what());
      return;
    }
    for (size_t i = 0; i < subs.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      // Drain what is queued, a bounded number per turn so no replica starves the others.
      for (int n = 0; n < 64 && recv_all(subs[i].sub, &frames); ++n) {
        const ReplicaId id = subs[i].id;
        if (frames.size() != 3 || frames[1].size() != 8) {
          std::fprintf(stderr, "torchtpu router: ignoring a KV event message of %zu frames "
                       "from %s (expected topic, 8-byte sequence, payload)\n", frames.size(),
                       replicas_->config(id).http.str().c_str());
          continue;
        }
        const uint64_t seq = be64(frames[1]);
        auto batch = decode_kv_event_batch(
            std::string_view(static_cast<const char*>(frames[2].data()), frames[2].size()));
        if (!batch.ok()) {
          replicas_->on_undecodable_batch(id, seq, batch.status().message());
          continue;
        }
        if (auto missing = replicas_->on_live_batch(id, seq, std::move(batch).value())) {
          replay(id, *missing);
        }
      }
    }
  }
}

}  // namespace torchtpu::router
