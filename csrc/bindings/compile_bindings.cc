// Python glue for compiled graphs: the graph description types and CompiledGraph.
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <utility>

#include "aten/compiled_op.h"
#include "aten/op_special_cases.h"
#include "compile/bucket_io.h"
#include "compile/compiled_graph.h"
#include "lowering/collectives.h"
#include "lowering/graph.h"

namespace py = pybind11;
using namespace torchtpu;

void bind_compile(py::module& m) {
  // Why eager mode would refuse a compiled graph's call (aten/compiled_op.h): `name` and
  // `overload` of the op, its arguments as meta tensors and values.
  m.def("eager_refusal", [](const std::string& name, const std::string& overload,
                            const py::tuple& args, const py::dict& kwargs)
                             -> std::optional<std::string> {
    auto op = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!op) return std::nullopt;
    torch::jit::Stack stack;
    try {
      stack = torch::jit::createStackForSchema(op->schema(), torch::jit::tuple_slice(args),
                                               py::kwargs(kwargs), std::nullopt);
    } catch (const std::exception&) {
      return std::nullopt;  // arguments this check cannot stand in for: no verdict
    }
    // With the GIL: meta kernels in Python. A Python meta kernel's error reaches here as a
    // verdict; its exception must not stay set.
    auto verdict = aten::eager_refusal(*op, std::move(stack));
    if (PyErr_Occurred()) PyErr_Clear();
    return verdict;
  });
  py::enum_<base::DType>(m, "DType")
      .value("bool", base::DType::kBool)
      .value("int8", base::DType::kI8)
      .value("uint8", base::DType::kU8)
      .value("int16", base::DType::kI16)
      .value("uint16", base::DType::kU16)
      .value("int32", base::DType::kI32)
      .value("uint32", base::DType::kU32)
      .value("int64", base::DType::kI64)
      .value("uint64", base::DType::kU64)
      .value("float16", base::DType::kF16)
      .value("bfloat16", base::DType::kBF16)
      .value("float32", base::DType::kF32)
      .value("float64", base::DType::kF64)
      .value("complex64", base::DType::kC64)
      .value("complex128", base::DType::kC128);
  py::enum_<lowering::ArgKind>(m, "ArgKind")
      .value("tensor", lowering::ArgKind::kTensor)
      .value("tensor_list", lowering::ArgKind::kTensorList)
      .value("scalar", lowering::ArgKind::kScalar)
      .value("int", lowering::ArgKind::kInt)
      .value("double", lowering::ArgKind::kDouble)
      .value("bool", lowering::ArgKind::kBool)
      .value("int_list", lowering::ArgKind::kIntList)
      .value("none", lowering::ArgKind::kNone)
      .value("string", lowering::ArgKind::kString)
      .value("dtype", lowering::ArgKind::kDType);
  py::enum_<lowering::ScalarCategory>(m, "ScalarCategory")
      .value("bool", lowering::ScalarCategory::kBool)
      .value("int", lowering::ScalarCategory::kInt)
      .value("float", lowering::ScalarCategory::kFloat)
      .value("complex", lowering::ScalarCategory::kComplex);
  py::class_<lowering::TensorType>(m, "TensorType")
      .def(py::init([](base::DType d, std::vector<int64_t> dims) {
        return lowering::TensorType{d, std::move(dims)};
      }))
      .def("__repr__", &lowering::TensorType::str);
  py::class_<lowering::OpArg>(m, "OpArg")
      .def(py::init<>())
      .def_readwrite("kind", &lowering::OpArg::kind)
      .def_readwrite("type", &lowering::OpArg::type)
      .def_readwrite("list_types", &lowering::OpArg::list_types)
      .def_readwrite("scalar_category", &lowering::OpArg::scalar_category)
      .def_readwrite("int_value", &lowering::OpArg::int_value)
      .def_readwrite("double_value", &lowering::OpArg::double_value)
      .def_readwrite("ints", &lowering::OpArg::ints)
      .def_readwrite("string_value", &lowering::OpArg::string_value)
      .def_readwrite("dtype", &lowering::OpArg::dtype);
  py::class_<lowering::GraphScalar>(m, "GraphScalar")
      .def(py::init<>())
      .def_readwrite("category", &lowering::GraphScalar::category)
      .def_readwrite("float_value", &lowering::GraphScalar::float_value)
      .def_readwrite("imag_value", &lowering::GraphScalar::imag_value)
      .def_readwrite("int_value", &lowering::GraphScalar::int_value)
      .def_readwrite("is_unsigned", &lowering::GraphScalar::is_unsigned)
      .def_readwrite("symbol", &lowering::GraphScalar::symbol);
  py::class_<lowering::GraphNode>(m, "GraphNode")
      .def(py::init<>())
      .def_readwrite("op", &lowering::GraphNode::op)
      .def_readwrite("args", &lowering::GraphNode::args)
      .def_readwrite("tensor_refs", &lowering::GraphNode::tensor_refs)
      .def_readwrite("list_refs", &lowering::GraphNode::list_refs)
      .def_readwrite("scalars", &lowering::GraphNode::scalars)
      .def_readwrite("out_types", &lowering::GraphNode::out_types)
      .def_readwrite("out_ids", &lowering::GraphNode::out_ids)
      .def_readwrite("rng_ref", &lowering::GraphNode::rng_ref)
      .def_readwrite("regions", &lowering::GraphNode::regions);
  py::class_<lowering::GraphSpec>(m, "GraphSpec")
      .def(py::init<>())
      .def_readwrite("inputs", &lowering::GraphSpec::inputs)
      .def_readwrite("nodes", &lowering::GraphSpec::nodes)
      .def_readwrite("outputs", &lowering::GraphSpec::outputs)
      .def_readwrite("num_symbols", &lowering::GraphSpec::num_symbols)
      .def_readwrite("donations", &lowering::GraphSpec::donations)
      .def_readwrite("padded", &lowering::GraphSpec::padded)
      .def_readwrite("regions", &lowering::GraphSpec::regions);
  m.def("encode_replica_groups", &lowering::encode_replica_groups, py::arg("groups"),
        "The text a compiled graph's functional collective carries in place of its group "
        "name: the replica groups of the graph's program.");
  m.def("is_structural_scalar_arg", &aten::is_structural_scalar_arg, py::arg("op"),
        py::arg("arg_name"),
        "Whether Scalar argument `arg_name` of `op` (\"aten::norm.out\") is structure, a "
        "float argument, rather than runtime data (aten/op_special_cases.h).");
  m.def(
      "refused_node",
      [](const lowering::GraphSpec& spec) -> std::optional<std::pair<int, std::string>> {
        int node = -1;
        auto lowered = lowering::lower_graph(spec, "torchtpu_graph", &node);
        if (lowered.ok() || node < 0) return std::nullopt;
        return std::make_pair(node, lowered.status().message());
      },
      py::arg("spec"),
      "The node of `spec` whose lowering does not take its call (an unimplemented case, which "
      "eager mode runs on the CPU) and why, when lowering the graph fails there; else None.");
  py::class_<compile::CompiledGraph, std::shared_ptr<compile::CompiledGraph>>(m, "CompiledGraph")
      .def(py::init(&compile::CompiledGraph::create), py::arg("spec"), py::arg("device"))
      .def("run", &compile::CompiledGraph::run, py::arg("inputs"),
           py::arg("sizes") = std::vector<int64_t>{}, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("module_text", &compile::CompiledGraph::module_text);
  m.def("pad_to_bucket", &compile::pad_to_bucket, py::arg("tensor"), py::arg("padded"),
        py::arg("out"), "A graph input padded to its bucket shape (compile/bucket_io.h).");
}
