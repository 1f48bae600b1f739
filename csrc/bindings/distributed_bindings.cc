// Python glue for torch.distributed's "tpu" backend (torchtpu._C._distributed).
//
// TpuBackend derives from c10d::Backend, which torch._C registers with pybind11; this
// module shares torch's pybind11 internals, so torch.distributed takes the object as any
// other backend. The creator in python/torchtpu/distributed.py picks the transport.
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <unistd.h>

#include "aten/device_runtime.h"
#include "aten/tpu_guard.h"
#include "compile/compiled_graph.h"
#include "distributed/backend.h"
#include "distributed/collective_queue.h"
#include "distributed/host_staged_transport.h"
#include "distributed/in_plugin_transport.h"
#include "distributed/store_kv.h"

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

// Key-value store errors: a timeout is Python's TimeoutError.
void raise_kv_error(const base::Status& s) {
  if (s.ok()) return;
  if (s.code() == base::StatusCode::kDeadlineExceeded) {
    PyErr_SetString(PyExc_TimeoutError, s.message().c_str());
    throw py::error_already_set();
  }
  raise_if_error(s);
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
                std::move(transport), std::move(global_ranks), to_ms(timeout_s), store);
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
                std::move(transport).value(), std::move(global_ranks), to_ms(timeout_s), store);
          },
          py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("global_ranks"),
          py::arg("timeout_s"),
          "A backend for ranks that are threads of this process, each on its own tpu device: "
          "every collective is one StableHLO program over their devices.")
      .def_static(
          "set_group_factory",
          [](py::function make) {
            // Kept for the process's life (never destroyed without the GIL at exit).
            auto* held = new py::object(std::move(make));
            distributed::TpuBackend::set_group_factory(
                [held](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       const std::vector<int64_t>& global_ranks,
                       std::chrono::milliseconds timeout) {
                  py::gil_scoped_acquire gil;
                  py::object made = (*held)(store, rank, size, global_ranks,
                                            std::chrono::duration<double>(timeout).count());
                  return made.cast<c10::intrusive_ptr<c10d::Backend>>();
                });
          },
          py::arg("make"),
          "Sets how a split group is made: make(store, rank, size, global_ranks, timeout_s) "
          "returns its backend.")
      // new_group calls it on the ranks left out of a group when the default group can split
      // (NCCL splits its communicator on every rank); a tpu group is made by its members.
      .def("perform_nocolor_split", [](distributed::TpuBackend&, const py::object&) {},
           py::arg("device"))
      .def_property_readonly(
          "timeout_s",
          [](distributed::TpuBackend& b) {
            return std::chrono::duration<double>(b.getBackendOptions()->timeout).count();
          },
          "The group's timeout, in seconds.")
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
  py::class_<distributed::StoreKeyValueStore, std::shared_ptr<distributed::StoreKeyValueStore>>(
      d, "StoreKeyValueStore",
      "The key-value store a multi-process PJRT client is given, over a torch.distributed "
      "Store (keys under `prefix/`).")
      .def(py::init<c10::intrusive_ptr<c10d::Store>, std::string>(), py::arg("store"),
           py::arg("prefix"))
      .def_property_readonly("prefix", &distributed::StoreKeyValueStore::prefix)
      .def(
          "put",
          [](distributed::StoreKeyValueStore& kv, const std::string& key, py::bytes value) {
            std::string v = value;
            base::Status st;
            {
              py::gil_scoped_release release;
              st = kv.put(key, v);
            }
            raise_kv_error(st);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](distributed::StoreKeyValueStore& kv, const std::string& key, double timeout_s) {
            base::StatusOr<std::string> got = base::internal_error("unset");
            {
              py::gil_scoped_release release;
              got = kv.get(key, to_ms(timeout_s));
            }
            raise_kv_error(got.status());
            return py::bytes(got.value());
          },
          py::arg("key"), py::arg("timeout_s"),
          "The value, waiting up to timeout_s; TimeoutError when no process set it in time.")
      .def(
          "try_get",
          [](distributed::StoreKeyValueStore& kv, const std::string& key) -> py::object {
            base::StatusOr<std::optional<std::string>> got = base::internal_error("unset");
            {
              py::gil_scoped_release release;
              got = kv.try_get(key);
            }
            raise_kv_error(got.status());
            if (!got->has_value()) return py::none();
            return py::bytes(**got);
          },
          py::arg("key"));
  d.def(
      "set_multi_process_config",
      [](std::shared_ptr<distributed::StoreKeyValueStore> kv, int node_id, int num_nodes,
         std::vector<int64_t> local_device_ids) {
        runtime::MultiProcessConfig config;
        config.node_id = node_id;
        config.num_nodes = num_nodes;
        config.store = std::move(kv);
        config.local_device_ids = std::move(local_device_ids);
        raise_if_error(aten::set_multi_process_config(std::move(config)));
      },
      py::arg("store"), py::arg("node_id"), py::arg("num_nodes"), py::arg("local_device_ids"),
      "Makes the PJRT client, when the device starts, a multi-process one if its plugin "
      "takes a key-value store (runtime/kv_store.h). Raises once the device has started.");
  d.def(
      "multi_process_support",
      []() {
        return std::string(
            runtime::multi_process_support_name(aten::chosen_plugin_multi_process_support()));
      },
      "What the chosen plugin takes to form a multi-process client: 'none', 'store' or "
      "'store_and_node_options'. Starts no device.");
  d.def("device_started", &aten::device_started,
        "Whether the tpu device's PJRT client has been started.");
  d.def(
      "client_devices",
      []() {
        runtime::Client& c = aten::client();
        return py::make_tuple(c.multi_process(), c.num_devices(), c.num_global_devices());
      },
      "(multi_process, addressable devices, all devices) of the started client.");
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
