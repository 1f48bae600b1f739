// Python glue for module calls (lowering/module_call.h): ops whose lowering is a function
// a Python provider exports per signature (torchtpu.kernels: JAX and Pallas kernels).
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <mutex>

#include "aten/interrupts.h"
#include "lowering/module_call.h"

namespace py = pybind11;
using namespace torchtpu;

namespace {

py::tuple type_tuple(const lowering::TensorType& t) { return py::make_tuple(t.dtype, t.dims); }

// One argument as the provider reads it: (kind, value), the value being a (dtype, dims)
// tuple for a tensor, a list of them for a tensor list, else the structural value.
py::tuple describe(const lowering::OpArg& a) {
  using lowering::ArgKind;
  py::object value = py::none();
  switch (a.kind) {
    case ArgKind::kTensor: value = type_tuple(a.type); break;
    case ArgKind::kTensorList: {
      py::list items;
      for (const auto& t : a.list_types) items.append(type_tuple(t));
      value = items;
      break;
    }
    case ArgKind::kInt: case ArgKind::kBool: value = py::int_(a.int_value); break;
    case ArgKind::kDouble: value = py::float_(a.double_value); break;
    case ArgKind::kIntList: value = py::cast(a.ints); break;
    case ArgKind::kString: value = py::str(a.string_value); break;
    default: break;
  }
  return py::make_tuple(a.kind, value);
}

// Asks torchtpu.kernels for the functions of one call. Holds no Python object between
// calls (the provider outlives the interpreter), so it imports the module each time; the
// import is a dictionary lookup once loaded.
base::StatusOr<lowering::ModuleFunctions> python_provider(
    const std::string& op_name, const std::vector<lowering::OpArg>& args,
    const std::vector<lowering::TensorType>& out_types) {
  py::gil_scoped_acquire gil;
  try {
    py::object fn = py::module_::import("torchtpu.kernels.lowering").attr("module_for");
    py::list described, outs;
    for (const auto& a : args) described.append(describe(a));
    for (const auto& t : out_types) outs.append(type_tuple(t));
    py::tuple r = fn(op_name, described, outs);
    return lowering::ModuleFunctions{r[0].cast<std::string>(), r[1].cast<std::string>()};
  } catch (py::error_already_set& e) {
    if (aten::is_interrupt(e)) throw;  // Ctrl-C during the first call's import: the caller's
    // Export errors surface earlier, in the op's fake implementation; one here means the
    // provider broke its contract.
    return base::internal_error("lowering: the module of " + op_name +
                                " could not be prepared: " + std::string(py::str(e.value())));
  } catch (const std::exception& e) {
    return base::internal_error("lowering: the module of " + op_name +
                                " could not be prepared: " + e.what());
  }
}

}  // namespace

void bind_module_calls(py::module& m) {
  m.def("register_module_call", [](const std::string& op_name) {
    static std::once_flag once;
    std::call_once(once, [] { lowering::set_module_provider(python_provider); });
    base::Status s = lowering::register_module_call(op_name);
    if (!s.ok()) throw py::value_error(s.message());
  });
  m.def("module_calls", &lowering::module_calls);
}
