#include "compile/compiled_graph.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <mutex>

#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/host_transfer.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_storage.h"
#include "base/hash.h"
#include "base/metrics.h"
#include "lowering/storage_programs.h"
#include "runtime/execution_trace.h"

namespace torchtpu::compile {
namespace {

c10::Scalar to_scalar(const lowering::GraphScalar& s) {
  switch (s.category) {
    case lowering::ScalarCategory::kBool: return c10::Scalar(s.int_value != 0);
    case lowering::ScalarCategory::kInt: return c10::Scalar(s.int_value);
    case lowering::ScalarCategory::kFloat: return c10::Scalar(s.float_value);
    case lowering::ScalarCategory::kComplex:
      return c10::Scalar(c10::complex<double>(s.float_value, s.imag_value));
  }
  return c10::Scalar(s.float_value);
}


}  // namespace

std::shared_ptr<CompiledGraph> CompiledGraph::create(const lowering::GraphSpec& spec, int device) {
  auto lowered = lowering::lower_graph(spec);
  TORCH_CHECK_NOT_IMPLEMENTED(lowered.ok(), "tpu compile: ", lowered.status().message());
  auto exe = aten::compile_cache().get_or_compile(lowered->text, device);
  TORCH_CHECK(exe.ok(), "tpu compile: ", exe.status().message());
  auto g = std::shared_ptr<CompiledGraph>(new CompiledGraph());
  g->lowered_ = std::move(lowered).value();
  g->exe_ = *exe;
  g->device_ = device;
  g->num_inputs_ = spec.inputs.size();
  g->num_symbols_ = spec.num_symbols;
  g->donations_ = spec.donations;
  char name[48];
  std::snprintf(name, sizeof(name), "tpu graph %016llx",
                static_cast<unsigned long long>(base::fnv1a(g->lowered_.text)));
  g->trace_name_ = name;
  base::counter_add("num_graphs_compiled");
  return g;
}

std::vector<at::Tensor> CompiledGraph::run(const std::vector<at::Tensor>& inputs,
                                           const std::vector<int64_t>& sizes) const {
  TORCH_CHECK(inputs.size() == num_inputs_, "tpu compile: graph expects ", num_inputs_,
              " inputs, got ", inputs.size());
  TORCH_CHECK(static_cast<int>(sizes.size()) == num_symbols_, "tpu compile: graph expects ",
              num_symbols_, " size values, got ", sizes.size());
  runtime::trace::Label label(trace_name_.c_str());
  // Scalars the graph fixes (not sizes) get their buffers on the first run, not on every
  // run (not in create(): that runs while Dynamo traces, where tensors are fake).
  std::call_once(constants_once_, [this] {
    constant_params_.resize(lowered_.params.size());
    for (size_t i = 0; i < lowered_.params.size(); ++i) {
      const lowering::GraphParam& p = lowered_.params[i];
      if (p.source == lowering::GraphParam::Source::kScalar && p.scalar.symbol < 0) {
        constant_params_[i] = aten::scalar_to_buffer(to_scalar(p.scalar), p.dtype, device_);
      }
    }
  });
  std::vector<runtime::BufferPtr> buffers;
  buffers.reserve(lowered_.params.size());
  for (size_t i = 0; i < lowered_.params.size(); ++i) {
    const lowering::GraphParam& p = lowered_.params[i];
    if (constant_params_[i] != nullptr) {
      buffers.push_back(constant_params_[i]);
      continue;
    }
    switch (p.source) {
      case lowering::GraphParam::Source::kInput: {
        const at::Tensor& t = inputs[p.input_index];
        TORCH_CHECK(t.device().is_privateuseone() && t.device().index() == device_,
                    "tpu compile: graph input ", p.input_index, " is on ", t.device(),
                    " but the graph runs on tpu:", device_, "; move inputs with .to('tpu')");
        buffers.push_back(aten::read_tensor(t));
        break;
      }
      case lowering::GraphParam::Source::kScalar:
        buffers.push_back(aten::scalar_to_buffer(
            c10::Scalar(sizes.at(p.scalar.symbol)),
            p.dtype, device_));
        break;
      case lowering::GraphParam::Source::kRngState:
        buffers.push_back(aten::next_rng_state_buffer(
            aten::default_generator(static_cast<c10::DeviceIndex>(device_)), device_));
        break;
    }
  }
  // Donate a mutated input's buffer when this storage is its only holder: its output is
  // the input's new value, so the old one is dead once written back (below).
  std::vector<bool> donate(buffers.size(), false);
  std::vector<std::pair<int, int>> donated;
  for (const auto& [input, output] : donations_) {
    const at::Tensor& t = inputs[input];
    aten::StorageState& s = aten::storage_state(t);
    bool whole = lowering::is_whole_buffer_view(
        s.nbytes / static_cast<int64_t>(t.element_size()),
        std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
        std::vector<int64_t>(t.strides().begin(), t.strides().end()), t.storage_offset());
    // Held by the storage and by `buffers` only; any other holder still reads it.
    if (whole && s.buffer.get() == buffers[input].get() && s.buffer.use_count() == 2) {
      donate[input] = true;
      donated.emplace_back(input, output);
    }
  }
  std::vector<const runtime::Buffer*> raw;
  for (const auto& b : buffers) raw.push_back(b.get());
  auto outputs = exe_->execute(raw, donate);
  TORCH_CHECK(outputs.ok(), outputs.status().message());
  base::counter_add("num_graph_executions");
  for (const auto& [input, output] : donated) {
    aten::storage_state(inputs[input]).buffer = (*outputs)[output];
    base::counter_add("num_donated_inputs");
  }
  size_t n = lowered_.output_types.size();
  // Read at the next host read, not now: a graph call does not wait for its program.
  aten::defer_data_checks(*outputs, n, lowered_.check_kinds, lowered_.check_messages,
                          "a compiled graph run earlier");
  std::vector<at::Tensor> result;
  result.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    result.push_back(aten::wrap_buffer((*outputs)[k],
                                       aten::to_scalar_type(lowered_.output_types[k].dtype)));
  }
  return result;
}

}  // namespace torchtpu::compile
