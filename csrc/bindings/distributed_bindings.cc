// Python glue for torch.distributed's "tpu" backend (torchtpu._C._distributed).
//
// TpuBackend derives from c10d::Backend, which torch._C registers with pybind11; this
// module shares torch's pybind11 internals, so torch.distributed takes the object as any
// other backend. The creator in python/torchtpu/distributed.py picks the transport.
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <unistd.h>

#include "aten/tpu_guard.h"
#include "compile/compiled_graph.h"
#include "distributed/backend.h"
#include "distributed/collective_queue.h"
#include "distributed/host_staged_transport.h"
#include "distributed/in_plugin_transport.h"

namespace py = pybind11;
using namespace torchtpu;

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// The in-plugin rendezvous key of a new group: rank 0 makes one unique in this process and
// the others read it from the group's store.
std::string in_plugin_group_key(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
  static std::atomic<int64_t> next_group{0};
  const std::string name = "torchtpu_in_plugin_group";
  if (rank == 0) {
    std::string key =
        "pid " + std::to_string(::getpid()) + " group " + std::to_string(next_group++);
    store->set(name, std::vector<uint8_t>(key.begin(), key.end()));
  }
  std::vector<uint8_t> key = store->get(name);
  return std::string(key.begin(), key.end());
}

distributed::InPluginTransport* in_plugin_or_raise(distributed::TpuBackend& b, const char* what) {
  distributed::InPluginTransport* t = b.in_plugin();
  if (t == nullptr) {
    throw std::invalid_argument(std::string("tpu: ") + what +
                                " needs an in-plugin group (ranks that are threads of this "
                                "process); this group stages through the host");
  }
  return t;
}

void raise_if_error(const base::Status& s) {
  if (s.ok()) return;
  if (s.code() == base::StatusCode::kInvalidArgument) C10_THROW_ERROR(ValueError, s.message());
  if (s.code() == base::StatusCode::kUnavailable) C10_THROW_ERROR(DistBackendError, s.message());
  throw std::runtime_error(s.message());
}

}  // namespace

void bind_distributed(py::module& m) {
  py::module d = m.def_submodule("_distributed", "torch.distributed's tpu backend");
  py::class_<distributed::TpuBackend, c10d::Backend, c10::intrusive_ptr<distributed::TpuBackend>>(
      d, "TpuBackend")
      .def_static(
          "host_staged",
          [](const c10::intrusive_ptr<c10d::Backend>& gloo,
             const c10::intrusive_ptr<c10d::Store>& store, std::vector<int64_t> global_ranks,
             double timeout_s) {
            auto transport = std::make_unique<distributed::HostStagedTransport>(
                gloo, store, global_ranks, to_ms(timeout_s));
            return c10::make_intrusive<distributed::TpuBackend>(
                std::move(transport), std::move(global_ranks), to_ms(timeout_s));
          },
          py::arg("gloo"), py::arg("store"), py::arg("global_ranks"), py::arg("timeout_s"),
          "A backend whose collectives stage through host memory and the given Gloo backend; "
          "`store` (the group's) names the ranks missing from a failed collective.")
      .def_static(
          "in_plugin",
          [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
             std::vector<int64_t> global_ranks, double timeout_s) {
            std::string key;
            {
              py::gil_scoped_release no_gil;  // the other ranks' threads need it to get here
              key = in_plugin_group_key(store, rank);
            }
            auto transport = distributed::InPluginTransport::create(
                key, rank, size, aten::current_device_index(), global_ranks, to_ms(timeout_s));
            if (!transport.ok()) throw std::invalid_argument(transport.status().message());
            return c10::make_intrusive<distributed::TpuBackend>(
                std::move(transport).value(), std::move(global_ranks), to_ms(timeout_s));
          },
          py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("global_ranks"),
          py::arg("timeout_s"),
          "A backend for ranks that are threads of this process, each on its own tpu device: "
          "every collective is one StableHLO program over their devices.")
      .def_property_readonly("transport", [](const distributed::TpuBackend& b) {
        return b.transport_kind() == distributed::TransportKind::kInPlugin ? "in_plugin"
                                                                           : "host_staged";
      })
      .def(
          "exchange_meta",
          [](distributed::TpuBackend& b, const std::string& what, std::vector<int64_t> meta) {
            distributed::InPluginTransport* t = in_plugin_or_raise(b, "exchange_meta");
            base::StatusOr<std::vector<std::vector<int64_t>>> all =
                base::internal_error("tpu: exchange_meta did not run");
            {
              py::gil_scoped_release no_gil;  // the other ranks' threads need it to get here
              all = t->exchange_meta(what, std::move(meta));
            }
            raise_if_error(all.status());
            return std::move(all).value();
          },
          py::arg("what"), py::arg("meta"),
          "Every rank's list of ints, in rank order (in-plugin groups; every rank calls it as "
          "its next collective).");
  d.def("detached_queue_threads", &distributed::CollectiveQueue::detached_threads,
        "Collective threads of destroyed host-staged groups still finishing their work.");
  d.def(
      "replicated_graph",
      [](const lowering::GraphSpec& spec, int device,
         const c10::intrusive_ptr<distributed::TpuBackend>& backend) {
        in_plugin_or_raise(*backend, "a compiled graph with collectives");
        return compile::CompiledGraph::create_replicated(
            spec, device,
            [backend](const std::string& module, std::vector<runtime::BufferPtr> args) {
              return backend->in_plugin()->run_program(module, "graph", std::move(args));
            });
      },
      py::arg("spec"), py::arg("device"), py::arg("backend"),
      "A compiled graph whose program spans the ranks of `backend`'s in-plugin group: every "
      "rank runs it as its next collective and gets its own results.");
}
