#include "router/http_util.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace torchtpu::router {

base::StatusOr<Endpoint> parse_http_endpoint(std::string_view url) {
  std::string_view rest = url;
  if (rest.substr(0, 7) == "http://") rest.remove_prefix(7);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');  // the port's (an IPv6 host has its own)
  auto bad = [&](const std::string& why) {
    return base::invalid_argument("router: replica address '" + std::string(url) + "': " + why +
                                  " (expected http://HOST:PORT)");
  };
  const size_t scheme = rest.find("://");
  if (scheme != std::string_view::npos) {
    // https, ftp, ...: the router speaks plain HTTP to its replicas.
    return bad("scheme '" + std::string(rest.substr(0, scheme)) + "' is not http");
  }
  if (rest.find('/') != std::string_view::npos) return bad("has a path");
  // An IPv6 literal is bracketed (RFC 3986 3.2.2): [::1]:8001.
  std::string_view host = rest.substr(0, colon == std::string_view::npos ? 0 : colon);
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 != colon) return bad("bad IPv6 address");
    host = rest.substr(1, close - 1);
  } else if (rest.find(':') != colon) {
    return bad("an IPv6 address must be in brackets");
  }
  if (colon == std::string_view::npos || host.empty()) return bad("no host:port");
  unsigned port = 0;
  std::string_view p = rest.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535) {
    return bad("bad port");
  }
  Endpoint e;
  e.host = std::string(host);
  e.port = static_cast<uint16_t>(port);
  return e;
}

namespace {

// The value of `label` in a sample's {...}, or "".
std::string_view label_value(std::string_view labels, std::string_view label) {
  const std::string key = std::string(label) + "=\"";
  size_t at = labels.find(key);
  while (at != std::string_view::npos && at > 0 && labels[at - 1] != '{' && labels[at - 1] != ',') {
    at = labels.find(key, at + 1);
  }
  if (at == std::string_view::npos) return {};
  const size_t start = at + key.size();
  const size_t end = labels.find('"', start);
  return end == std::string_view::npos ? std::string_view{} : labels.substr(start, end - start);
}

double sample_value(std::string_view line) {
  const size_t space = line.rfind(' ');
  if (space == std::string_view::npos) return -1;
  const std::string v(line.substr(space + 1));
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  return end == v.c_str() ? -1 : d;
}

int64_t to_int(std::string_view s) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() ? v : -1;
}

}  // namespace

ScrapedMetrics parse_vllm_metrics(std::string_view text) {
  ScrapedMetrics m;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    auto starts = [&](std::string_view name) {
      return line.substr(0, name.size()) == name &&
             (line.size() > name.size() && (line[name.size()] == '{' || line[name.size()] == ' '));
    };
    if (starts("vllm:num_requests_waiting")) {
      m.num_waiting = sample_value(line);
    } else if (starts("vllm:num_requests_running")) {
      m.num_running = sample_value(line);
    } else if (starts("vllm:kv_cache_usage_perc")) {
      m.kv_cache_usage = sample_value(line);
    } else if (starts("vllm:cache_config_info")) {
      m.block_size = to_int(label_value(line, "block_size"));
      m.num_gpu_blocks = to_int(label_value(line, "num_gpu_blocks"));
    }
  }
  return m;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string error_body(int status, std::string_view message) {
  const char* type = status == 400   ? "BadRequestError"
                     : status == 404 ? "NotFoundError"
                     : status == 413 ? "RequestTooLargeError"
                     : status == 417 ? "ExpectationFailedError"
                     : status == 503 ? "ServiceUnavailableError"
                     : status == 502 ? "BadGatewayError"
                     // Other client errors (408, 431) as the server types them.
                     : status < 500 ? "BadRequestError"
                                    : "InternalServerError";
  return "{\"error\": {\"message\": \"" + json_escape(message) + "\", \"type\": \"" + type +
         "\", \"param\": null, \"code\": " + std::to_string(status) + "}}";
}

}  // namespace torchtpu::router
