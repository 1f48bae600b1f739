// Small text helpers of the router: replica addresses, the few Prometheus samples it reads
// from a replica's /metrics, OpenAI-shaped error bodies. No I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace torchtpu::router {

struct Endpoint {
  std::string host;  // a name, an IPv4 address or an IPv6 address (without brackets)
  uint16_t port = 0;
  // host:port, an IPv6 address bracketed (as in a URL and a Host header).
  std::string str() const {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
};

// "http://host:port" or "host:port" (no path, no https); an IPv6 host in brackets.
base::StatusOr<Endpoint> parse_http_endpoint(std::string_view url);

// What the router reads from a replica's /metrics (vLLM's names); -1 where absent.
struct ScrapedMetrics {
  double num_waiting = -1;
  double num_running = -1;
  double kv_cache_usage = -1;
  int64_t block_size = -1;      // vllm:cache_config_info{block_size=...}
  int64_t num_gpu_blocks = -1;  // vllm:cache_config_info{num_gpu_blocks=...}
};
ScrapedMetrics parse_vllm_metrics(std::string_view text);

std::string json_escape(std::string_view s);
// {"error": {"message", "type", "param": null, "code"}} (OpenAI's shape, as the server's).
std::string error_body(int status, std::string_view message);

}  // namespace torchtpu::router
