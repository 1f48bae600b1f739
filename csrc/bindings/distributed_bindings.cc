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
#include "distributed/backend.h"
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

}  // namespace

void bind_distributed(py::module& m) {
  py::module d = m.def_submodule("_distributed", "torch.distributed's tpu backend");
  py::class_<distributed::TpuBackend, c10d::Backend, c10::intrusive_ptr<distributed::TpuBackend>>(
      d, "TpuBackend")
      .def_static(
          "host_staged",
          [](const c10::intrusive_ptr<c10d::Backend>& gloo, std::vector<int64_t> global_ranks,
             double timeout_s) {
            auto transport = std::make_unique<distributed::HostStagedTransport>(
                gloo, global_ranks, to_ms(timeout_s));
            return c10::make_intrusive<distributed::TpuBackend>(
                std::move(transport), std::move(global_ranks), to_ms(timeout_s));
          },
          py::arg("gloo"), py::arg("global_ranks"), py::arg("timeout_s"),
          "A backend whose collectives stage through host memory and the given Gloo backend.")
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
      });
}
