#include "router/router_metrics.h"

#include <algorithm>
#include <sstream>

namespace torchtpu::router {

namespace {
constexpr size_t kMaxSamples = 8192;
}

void LatencySummary::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (samples_.size() < kMaxSamples) {
    samples_.push_back(seconds);
  } else {
    samples_[next_] = seconds;
  }
  next_ = (next_ + 1) % kMaxSamples;
  ++count_;
  sum_ += seconds;
}

double LatencySummary::quantile(double q) const {
  std::vector<double> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = samples_;
  }
  if (s.empty()) return 0;
  const size_t k = std::min(s.size() - 1, static_cast<size_t>(q * (s.size() - 1) + 0.5));
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
  return s[k];
}

void LatencySummary::render(std::string& out, const char* name, const char* help) const {
  std::ostringstream o;
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " summary\n";
  for (double q : {0.5, 0.9, 0.99}) {
    o << name << "{quantile=\"" << q << "\"} " << quantile(q) << "\n";
  }
  std::lock_guard<std::mutex> lock(mu_);
  o << name << "_sum " << sum_ << "\n" << name << "_count " << count_ << "\n";
  out += o.str();
}

std::string RouterMetrics::render(const ReplicaSet& replicas) const {
  std::ostringstream o;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
      << name << " " << v << "\n";
  };
  counter("torchtpu_router:requests_total", "Client requests handled.", num_requests.load());
  counter("torchtpu_router:routed_requests_total",
          "Completion and chat requests dispatched to a replica.", num_routed.load());
  counter("torchtpu_router:retries_total",
          "Attempts moved to another replica (the first failed before streaming).",
          num_retries.load());
  counter("torchtpu_router:stream_errors_total",
          "Streams a replica cut mid-way (ended with an error event).", num_stream_errors.load());
  counter("torchtpu_router:failed_requests_total", "Requests no replica could serve.",
          num_failed.load());
  counter("torchtpu_router:tokenize_failures_total",
          "Prompts the router could not tokenize (routed by load alone).",
          num_tokenize_failed.load());
  counter("torchtpu_router:load_spills_total",
          "Requests sent past the replica with the best score because its queue exceeded the "
          "least-loaded replica's by more than the spill threshold.",
          replicas.num_spills());
  counter("torchtpu_router:load_spills_withheld_total",
          "Requests whose best-scored replica was over the load bound but kept them because no "
          "replica within the bound had KV room for the prompt.",
          replicas.num_spills_withheld());
  counter("torchtpu_router:client_disconnects_total",
          "Clients that hung up while a replica worked on their request (its upstream "
          "connection was dropped, so the replica aborted it).",
          num_client_disconnects.load());
  const int64_t query = replicas.num_query_blocks();
  const int64_t hit = replicas.num_hit_blocks();
  counter("torchtpu_router:prefix_query_blocks_total",
          "Prompt blocks of the dispatched requests.", query);
  counter("torchtpu_router:prefix_hit_blocks_total",
          "Prompt blocks the chosen replica held (by the index) when dispatched.", hit);
  o << "# HELP torchtpu_router:prefix_hit_ratio prefix_hit_blocks / prefix_query_blocks.\n"
    << "# TYPE torchtpu_router:prefix_hit_ratio gauge\ntorchtpu_router:prefix_hit_ratio "
    << (query > 0 ? static_cast<double>(hit) / query : 0.0) << "\n";
  counter("torchtpu_router:upstream_connects_total",
          "Connections opened to replicas (the others were kept alive and reused).",
          num_upstream_connects.load());
  counter("torchtpu_router:stale_upstreams_total",
          "Kept-alive replica connections found closed by the replica when taken for a request "
          "(dropped, a fresh one used).",
          num_stale_upstreams.load());
  counter("torchtpu_router:connections_evicted_total",
          "Client connections waiting for a request that were shut down at the connection "
          "limit to let a new client in.",
          num_connections_evicted.load());
  counter("torchtpu_router:connections_refused_total",
          "New client connections closed at once: the connection limit was reached and no "
          "connection had waited 1 s for a request.",
          num_connections_refused.load());
  std::string latencies;
  routing_latency.render(latencies, "torchtpu_router:routing_latency_seconds",
                         "From a proxied request read to its upstream request written "
                         "(recent samples).");
  tokenize_latency.render(latencies, "torchtpu_router:tokenize_latency_seconds",
                          "The prompt tokenizer callback, GIL wait included (recent samples).");
  added_latency.render(latencies, "torchtpu_router:added_latency_seconds",
                       "What the router adds to a served request end to end: request read to "
                       "response written, less its replica's time from upstream request "
                       "written to response read (recent samples).");
  o << latencies;
  struct PerReplica {
    const char* name;
    const char* type;
    const char* help;
    int64_t (*get)(const ReplicaStatus&);
  };
  const PerReplica per_replica[] = {
      {"torchtpu_router:replica_requests_total", "counter", "Attempts dispatched to the replica.",
       [](const ReplicaStatus& r) { return r.num_requests; }},
      {"torchtpu_router:replica_upstream_errors_total", "counter",
       "Requests that could not reach the replica or that it failed.",
       [](const ReplicaStatus& r) { return r.num_upstream_errors; }},
      {"torchtpu_router:replica_healthy", "gauge", "1 when the replica takes requests.",
       [](const ReplicaStatus& r) { return static_cast<int64_t>(r.healthy); }},
      {"torchtpu_router:replica_in_flight", "gauge", "The router's requests in flight to it.",
       [](const ReplicaStatus& r) { return static_cast<int64_t>(r.num_in_flight); }},
      {"torchtpu_router:replica_confirmed_blocks", "gauge",
       "Blocks its KV events say it holds.",
       [](const ReplicaStatus& r) { return r.num_confirmed_blocks; }},
      {"torchtpu_router:replica_routed_blocks", "gauge",
       "Blocks of prompts recently routed to it.",
       [](const ReplicaStatus& r) { return r.num_routed_blocks; }},
      {"torchtpu_router:replica_kv_event_batches_total", "counter", "KV event batches applied.",
       [](const ReplicaStatus& r) { return r.num_event_batches; }},
      {"torchtpu_router:replica_kv_event_gaps_total", "counter", "Sequence gaps seen.",
       [](const ReplicaStatus& r) { return r.num_event_gaps; }},
      {"torchtpu_router:replica_kv_event_replayed_total", "counter",
       "Batches recovered by replay.",
       [](const ReplicaStatus& r) { return r.num_replayed_batches; }},
      {"torchtpu_router:replica_kv_event_resyncs_total", "counter",
       "Gaps replay could not fill (its index entries were cleared).",
       [](const ReplicaStatus& r) { return r.num_event_resyncs; }},
      {"torchtpu_router:replica_kv_event_decode_errors_total", "counter",
       "Event batches that did not decode.",
       [](const ReplicaStatus& r) { return r.num_event_decode_errors; }},
  };
  const std::vector<ReplicaStatus> status = replicas.status();
  for (const PerReplica& m : per_replica) {
    o << "# HELP " << m.name << " " << m.help << "\n# TYPE " << m.name << " " << m.type << "\n";
    for (const ReplicaStatus& r : status) {
      o << m.name << "{replica=\"" << r.name << "\"} " << m.get(r) << "\n";
    }
  }
  return o.str();
}

}  // namespace torchtpu::router
