// torchtpu._C: Python glue over the aten and runtime layers. No logic lives here.
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <mutex>

#include "aten/compiled_op.h"
#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/dispatch_profile.h"
#include "aten/fused_eager.h"
#include "aten/interrupts.h"
#include "aten/op_kernel.h"
#include "aten/program_executor.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_profiler.h"
#include "aten/tpu_guard.h"
#include "aten/tpu_storage.h"
#include "aten/tpu_streams.h"
#include "base/metrics.h"
#include "lowering/lowering.h"
#include "runtime/host_malloc.h"
#include "runtime/pjrt_api.h"

namespace torchtpu::aten {
void register_hooks();
void register_direct_lowerings();
}

void bind_compile(pybind11::module& m);
void bind_memory(pybind11::module& m);
void bind_distributed(pybind11::module& m);
void bind_module_calls(pybind11::module& m);

namespace {

// Dynamo's frame callback off for a scope, as torch._dynamo.disable does: a fused graph
// flushed inside a compiled function's eager part calls the hook, and Dynamo traced
// torchtpu's own code (graph breaks, "please file an issue" warnings, recompiles).
class DynamoOff {
 public:
  DynamoOff()
      : set_(py::module_::import("torch._C._dynamo.eval_frame").attr("set_eval_frame")),
        prior_(set_(py::none())) {}
  ~DynamoOff() {
    try {
      set_(prior_);
    } catch (const py::error_already_set&) {
      PyErr_Clear();  // restoring the callback it returned cannot fail
    }
  }
  DynamoOff(const DynamoOff&) = delete;
  DynamoOff& operator=(const DynamoOff&) = delete;

 private:
  py::object set_;
  py::object prior_;
};

// An op argument as Python would pass it: dtypes, layouts and memory formats (ints on the
// stack) as their torch objects.
py::object schema_arg_to_py(const c10::IValue& v, const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  if (v.isInt()) {
    switch (t->kind()) {
      case c10::TypeKind::ScalarTypeType:
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<at::ScalarType>(v.toInt()))));
      case c10::TypeKind::LayoutType:
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<at::Layout>(v.toInt()))));
      case c10::TypeKind::MemoryFormatType:
        return py::reinterpret_borrow<py::object>(torch::utils::getTHPMemoryFormat(
            static_cast<at::MemoryFormat>(v.toInt())));
      default:
        break;
    }
  }
  return torch::jit::toPyObject(v);
}


namespace py = pybind11;
using namespace torchtpu;

// A fused graph's nodes as the shape-class hook reads them (aten/fused_eager.h): a view
// read ("", base, sizes, strides, offset, first, num), an op (name, args, reads, first, num,
// the input holding its generator state or -1).
py::list exported_nodes(const aten::ExportedGraph& e) {
  py::list nodes;
  for (const aten::ExportedNode& n : e.nodes()) {
    if (n.op.empty()) {
      nodes.append(
          py::make_tuple("", n.base, n.sizes, n.strides, n.offset, n.first_out, n.num_out));
      continue;
    }
    size_t dot = n.op.find('.');
    std::string name = n.op.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : n.op.substr(dot + 1);
    const auto& schema =
        c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str()).schema();
    py::list args;
    for (size_t i = 0; i < n.args.size(); ++i) {
      args.append(schema_arg_to_py(n.args[i], schema.arguments().at(i).type()));
    }
    py::list reads;
    for (const auto& r : n.reads) reads.append(py::make_tuple(r[0], r[1], r[2]));
    nodes.append(py::make_tuple(n.op, args, reads, n.first_out, n.num_out, n.rng_input));
  }
  return nodes;
}

aten::TpuGeneratorImpl* generator_impl(int device) {
  const at::Generator& g = aten::default_generator(static_cast<c10::DeviceIndex>(device));
  return g.get<aten::TpuGeneratorImpl>();
}

py::dict plugin_info() {
  runtime::Client& c = aten::client();
  runtime::PluginChoice choice = aten::plugin_choice();
  py::dict d;
  d["name"] = choice.name;
  d["chosen_by"] = choice.how;
  d["path"] = c.plugin().path();
  d["platform"] = c.platform_name();
  d["platform_version"] = c.platform_version();
  d["api_version"] = std::to_string(c.plugin().api_major()) + "." + std::to_string(c.plugin().api_minor());
  d["device_kind"] = c.device_kind(0);
  d["ffi_extension"] = c.plugin().has_ffi_extension();
  d["host_malloc"] = runtime::host_malloc_policy_name();
  std::optional<bool> cpu_async = c.cpu_asynchronous();
  d["cpu_async"] = cpu_async.has_value() ? py::cast(*cpu_async) : py::none();
  py::dict attrs;
  for (const auto& [k, v] : c.plugin().attributes()) attrs[py::str(k)] = v;
  d["attributes"] = attrs;
  return d;
}

// Every known plugin, with where it is installed ("" when it is not); loads none.
py::list known_plugins() {
  std::vector<runtime::FoundPlugin> found = aten::installed_plugins();
  py::list out;
  for (const runtime::KnownPlugin& k : runtime::known_plugins()) {
    py::dict d;
    d["name"] = k.name;
    d["platform"] = k.platform;
    d["default_candidate"] = k.is_default;
    d["provenance"] = k.provenance;
    std::string path;
    for (const runtime::FoundPlugin& f : found) {
      if (f.known == &k) path = f.path;
    }
    d["path"] = path;
    out.append(d);
  }
  return out;
}

// Whether the interpreter may be entered (not before its start, not while it finalizes:
// taking the GIL then hangs or ends the thread).
bool python_usable() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

// aten/interrupts.h: a Python KeyboardInterrupt or SystemExit (a BaseException that is no
// Exception) raised in Python code an op ran, as pybind11 or PyTorch carries it.
bool python_interrupt(const std::exception& e) {
  const auto* pybind = dynamic_cast<const py::error_already_set*>(&e);
  const auto* torch_error = dynamic_cast<const python_error*>(&e);
  if ((pybind == nullptr && torch_error == nullptr) || !python_usable()) return false;
  py::gil_scoped_acquire gil;
  // A python_error not yet persisted leaves the error set on this thread.
  PyObject* type = pybind != nullptr ? pybind->type().ptr()
                   : torch_error->type != nullptr ? torch_error->type
                                                  : PyErr_Occurred();
  return type != nullptr && PyErr_GivenExceptionMatches(type, PyExc_BaseException) &&
         !PyErr_GivenExceptionMatches(type, PyExc_Exception);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu native module";
  m.def("_init", [](const std::vector<std::string>& plugin_search_path) {
    aten::set_plugin_search_path(plugin_search_path);
    aten::register_hooks();
    aten::register_direct_lowerings();
    aten::register_profiler();
    aten::fallback_is_error();  // a malformed TORCHTPU_FALLBACK fails the import, not a run
    aten::set_interrupt_classifier(&python_interrupt);
  });
  m.def("device_count", &aten::device_count_or_zero);
  m.def("in_forked_child", &aten::in_forked_child);
  m.def("current_device", &aten::current_device_index);
  m.def("set_device", &aten::set_current_device_index);
  // Calls that wait for or flush device work drop the GIL while they do: a flush runs the
  // fused graph hook, which takes the GIL, under the pending graph's lock, so a thread
  // holding the GIL while it waits for that lock would deadlock with it.
  using no_gil = py::call_guard<py::gil_scoped_release>;
  m.def("synchronize", &aten::synchronize_device, no_gil());
  auto stream_tuple = [](const c10::Stream& s) {
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()),
                          static_cast<int>(s.device_type()));
  };
  auto tpu = [](int device) {
    return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  };
  m.def("current_stream", [=](int d) { return stream_tuple(aten::current_stream(tpu(d))); });
  m.def("default_stream", [=](int d) { return stream_tuple(aten::default_stream(tpu(d))); });
  m.def("set_stream", [=](int64_t id, int d) {
    aten::exchange_stream(c10::Stream(c10::Stream::UNSAFE, tpu(d), id));
  });
  m.def("plugin_info", &plugin_info);
  m.def("known_plugins", &known_plugins);
  m.def("manual_seed", [](int device, uint64_t seed) { generator_impl(device)->set_current_seed(seed); });
  m.def("initial_seed", [](int device) { return generator_impl(device)->current_seed(); });
  m.def("seed", [](int device) { return generator_impl(device)->seed(); });
  m.def("get_rng_state", [](int device) {
    return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>(generator_impl(device)->get_state()));
  });
  m.def("set_rng_state", [](int device, const at::Tensor& state) {
    at::Generator gen = aten::default_generator(static_cast<c10::DeviceIndex>(device));
    std::lock_guard<std::mutex> lock(gen.mutex());  // as torch.Generator.set_state
    gen.set_state(state);
  });
  // Fused eager mode (aten/fused_eager.h).
  m.def("set_eager_mode", [](const std::string& mode) {
    TORCH_CHECK(mode == "op" || mode == "fused", "tpu: eager mode '", mode,
                "' is not one of 'op' (each op runs at its call) or 'fused' (ops are recorded "
                "and run as fused graphs)");
    aten::set_eager_mode(mode == "fused" ? aten::EagerMode::kFused : aten::EagerMode::kOpByOp);
  });
  m.def("eager_mode", [] {
    return std::string(aten::eager_mode() == aten::EagerMode::kFused ? "fused" : "op");
  });
  m.def("flush_pending", [](int device) {
    if (device < 0) {
      aten::flush_all_pending();
    } else {
      aten::flush_pending(device);
    }
  }, py::arg("device") = -1, no_gil());
  m.def("num_pending_ops", &aten::num_pending_ops);
  // fn(inputs, nodes, outputs, dims, key, dtypes) -> list of tensors or None
  // (aten/fused_eager.h): `nodes()` builds the node list, `key` is the graph's exact key as
  // bytes (or None).
  m.def("set_fused_graph_hook", [](py::object fn) {
    if (fn.is_none()) {
      aten::set_fused_graph_hook(nullptr);
      return;
    }
    // Dropped with the GIL held; leaked when the interpreter is already finalizing.
    std::shared_ptr<py::object> owned(new py::object(std::move(fn)), [](py::object* o) {
      if (!python_usable()) return;
      py::gil_scoped_acquire gil;
      delete o;
    });
    aten::set_fused_graph_hook(
        [owned](const aten::ExportedGraph& e) -> std::optional<std::vector<at::Tensor>> {
          py::gil_scoped_acquire gil;
          // The node list is built only when the hook asks for it, and only during the
          // call: `e` lives no longer (ExportedGraph::nodes).
          auto live = std::make_shared<bool>(true);
          py::cpp_function nodes([&e, live]() {
            TORCH_CHECK(*live, "tpu: a fused graph's nodes are readable only during its hook call");
            return exported_nodes(e);
          });
          py::object key = e.key.empty() ? py::object(py::none()) : py::object(py::bytes(e.key));
          py::list dtypes;
          for (c10::ScalarType t : e.dtypes) {
            dtypes.append(py::reinterpret_borrow<py::object>(
                reinterpret_cast<PyObject*>(torch::getTHPDtype(t))));
          }
          py::object out;
          try {
            DynamoOff off;
            out = (*owned)(e.inputs, nodes, e.outputs, e.dims, key, dtypes);
          } catch (...) {
            *live = false;
            throw;
          }
          *live = false;
          if (out.is_none()) return std::nullopt;
          return out.cast<std::vector<at::Tensor>>();
        });
  });
  m.def("block_until_ready", [](const at::Tensor& t) {
    auto status = aten::read_tensor(t)->await_ready();
    TORCH_CHECK(status.ok(), status.message());
    aten::flush_data_checks();
  }, no_gil());
  m.def("flush_data_checks", &aten::flush_data_checks, no_gil());
  m.def("num_pending_data_checks", &aten::num_pending_data_checks);
  m.def("counters", &base::counters_snapshot);
  // bench/eager_overhead.py's breakdown of an eager op's host time (aten/dispatch_profile.h).
  m.def("set_dispatch_profile", &aten::dispatch_profile::set_enabled);
  m.def("dispatch_profile", &aten::dispatch_profile::snapshot);
  m.def("reset_dispatch_profile", &aten::dispatch_profile::reset);
  // Work counted on the calling thread, for the dispatch budget test.
  m.def("pjrt_calls_on_this_thread", &runtime::pjrt_calls_on_this_thread);
  m.def("keyed_counters", &base::keyed_counters_snapshot);
  m.def("reset_metrics", &base::reset_metrics);
  m.def("lowered_ops", &lowering::registered_lowerings);
  m.def("has_lowering", [](const std::string& name) {
    return lowering::find_lowering(name) != nullptr;  // the table or a module call (jax_op)
  });
  m.def("accepts_complex", [](const std::string& name) {
    return lowering::accepts_complex(name);  // its lowering takes complex operands
  });
  m.def("host_kernels", &aten::registered_host_kernels);
  m.def("op_cache_size", &aten::op_cache_size);
  m.def("release_executables_past", &aten::release_executables_past, py::arg("map_limit"));
  m.def("executable_cache_size", [] { return aten::compile_cache().size(); });
  bind_compile(m);
  bind_memory(m);
  bind_distributed(m);
  bind_module_calls(m);
}
