// Python glue for torch.distributed's "tpu" backend (torchtpu._C._distributed).
//
// TpuBackend derives from c10d::Backend, which torch._C registers with pybind11; this
// module shares torch's pybind11 internals, so torch.distributed takes the object as any
// other backend. The creator in python/torchtpu/distributed.py picks the transport.
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/backend.h"
#include "distributed/host_staged_transport.h"

namespace py = pybind11;
using namespace torchtpu;

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
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
      .def_property_readonly("transport", [](const distributed::TpuBackend& b) {
        return b.transport_kind() == distributed::TransportKind::kInPlugin ? "in_plugin"
                                                                           : "host_staged";
      });
}
