// torchtpu._router: Python glue over the router service (csrc/router). No logic lives here,
// and no torch. Errors become Python exceptions (bad config -> ValueError, anything else
// -> RuntimeError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "router/router.h"

namespace {

namespace py = pybind11;
using namespace torchtpu;
using router::Router;

[[noreturn]] void raise(const base::Status& status) {
  if (status.code() == base::StatusCode::kInvalidArgument) throw py::value_error(status.message());
  throw std::runtime_error(status.message());
}

// The Python tokenizer, called from the router's connection threads: `fn(target, body)`
// returns a list of token ids or None. Any exception means "route by load" (counted).
router::Tokenizer wrap_tokenizer(py::object fn) {
  if (fn.is_none()) return nullptr;
  // Destroyed with the GIL held, whichever thread drops the last reference.
  std::shared_ptr<py::object> held(new py::object(std::move(fn)), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return [held](const std::string& target,
                const std::string& body) -> std::optional<std::vector<serve::TokenId>> {
    py::gil_scoped_acquire gil;
    try {
      py::object out = (*held)(target, py::bytes(body));
      if (out.is_none()) return std::nullopt;
      return out.cast<std::vector<serve::TokenId>>();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("torchtpu router tokenizer");
      return std::nullopt;
    } catch (const py::cast_error&) {
      return std::nullopt;
    }
  };
}

std::unique_ptr<Router> make_router(const std::string& host, int port,
                                    const std::vector<py::dict>& replicas,
                                    const std::string& mode, std::vector<double> weights,
                                    int spill_threshold, int block_size, double routed_ttl_s,
                                    int64_t routed_capacity_blocks, double health_interval_s,
                                    double health_timeout_s, int max_attempts,
                                    int64_t max_request_bytes, double request_timeout_s,
                                    int max_connections, py::object tokenizer) {
  // Seconds become int milliseconds: a day at most (a bound well inside int), above 0.
  auto ms = [](double seconds, const char* what) {
    if (!(seconds >= 0.001 && seconds <= 86400)) {
      raise(base::invalid_argument(std::string("router: ") + what + " " +
                                   std::to_string(seconds) +
                                   " s is out of range: expected from 0.001 to 86400"));
    }
    return static_cast<int>(seconds * 1000);
  };
  router::RouterConfig c;
  c.host = host;
  if (port < 0 || port > 65535) raise(base::invalid_argument("router: bad port"));
  c.port = static_cast<uint16_t>(port);
  for (const py::dict& d : replicas) {
    router::ReplicaConfig r;
    auto url = router::parse_http_endpoint(py::str(d["url"]).cast<std::string>());
    if (!url.ok()) raise(url.status());
    r.http = *url;
    if (d.contains("events") && !d["events"].is_none()) r.events_endpoint = py::str(d["events"]);
    if (d.contains("replay") && !d["replay"].is_none()) r.replay_endpoint = py::str(d["replay"]);
    c.replicas.push_back(r);
  }
  if (!serve::parse_routing_mode(mode, &c.routing.mode)) {
    raise(base::invalid_argument("router: unknown routing mode '" + mode +
                                 "' (expected one of: cache-aware, round-robin)"));
  }
  if (weights.size() != 3) raise(base::invalid_argument("router: weights are (prefix, queue, kv)"));
  c.routing.weights = {weights[0], weights[1], weights[2]};
  c.routing.filter.spill_threshold = spill_threshold;
  c.routing.block_size = block_size;
  if (!(routed_ttl_s > 0 && routed_ttl_s <= 1e12)) {
    raise(base::invalid_argument("router: routed TTL " + std::to_string(routed_ttl_s) +
                                 " s is out of range"));
  }
  c.routing.index.routed_ttl_ms = static_cast<int64_t>(routed_ttl_s * 1000);
  c.routing.index.routed_capacity_blocks = routed_capacity_blocks;
  c.health_interval_ms = ms(health_interval_s, "health check interval");
  c.health_timeout_ms = ms(health_timeout_s, "health check timeout");
  c.proxy.request_read_timeout_ms = ms(request_timeout_s, "request timeout");
  c.proxy.max_attempts = max_attempts;
  c.proxy.max_request_bytes = max_request_bytes;
  if (max_connections < 1) {
    raise(base::invalid_argument("router: --max-connections " + std::to_string(max_connections) +
                                 " must be at least 1"));
  }
  c.max_connections = max_connections;
  auto r = Router::create(std::move(c), wrap_tokenizer(std::move(tokenizer)));
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

}  // namespace

PYBIND11_MODULE(_router, m) {
  m.doc() = "torchtpu router: cache-aware HTTP routing across engine replicas";
  py::class_<Router>(m, "Router")
      .def(py::init(&make_router), py::kw_only(), py::arg("host") = "127.0.0.1",
           py::arg("port") = 8000, py::arg("replicas"), py::arg("mode") = "cache-aware",
           py::arg("weights") = std::vector<double>{3, 1, 1},
           py::arg("spill_threshold") = serve::LoadFilter{}.spill_threshold,
           py::arg("block_size") = 0,
           py::arg("routed_ttl_s") = 30.0, py::arg("routed_capacity_blocks") = 1 << 20,
           py::arg("health_interval_s") = 0.5, py::arg("health_timeout_s") = 2.0,
           py::arg("max_attempts") = 3, py::arg("max_request_bytes") = 4 << 20,
           py::arg("request_timeout_s") = 60.0,
           py::arg("max_connections") = router::RouterConfig{}.max_connections,
           py::arg("tokenizer") = py::none())
      .def("bind",
           [](Router& r) {
             base::Status s = r.bind();
             if (!s.ok()) raise(s);
             return r.port();
           })
      .def("run", &Router::run, py::arg("handle_signals") = true,
           py::call_guard<py::gil_scoped_release>())
      .def("stop", &Router::stop)
      .def_property_readonly("port", &Router::port)
      .def("metrics_text", [](const Router& r) { return r.metrics().render(r.replicas()); });
}
