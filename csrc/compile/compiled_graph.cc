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
    case lowering::ScalarCategory::kInt:
      // A Python int in [2**63, 2**64) is a uint64 Scalar in PyTorch, as in eager calls.
      return s.is_unsigned ? c10::Scalar(static_cast<uint64_t>(s.int_value))
                           : c10::Scalar(s.int_value);
    case lowering::ScalarCategory::kFloat: return c10::Scalar(s.float_value);
    case lowering::ScalarCategory::kComplex:
      return c10::Scalar(c10::complex<double>(s.float_value, s.imag_value));
  }
  return c10::Scalar(s.float_value);
}


}  // namespace

// A graph call's parameter values: the caller's tensors, the graph's fixed scalars (0-d
// buffers made on the first run and kept), the runtime size values its scalars read.
class CompiledGraph::Args : public aten::ProgramArgs {
 public:
  Args(const CompiledGraph& g, const std::vector<at::Tensor>& inputs,
       const std::vector<int64_t>& sizes)
      : g_(g), inputs_(inputs), sizes_(sizes) {}

  // Reads every input the program takes before it runs, together: inputs that are views
  // (FSDP2's parameters are reshapes of their all-gathered storages) cost one program for
  // all of them, not one each (aten::read_tensors).
  void read_inputs(const std::vector<lowering::GraphParam>& params) {
    uses_.assign(inputs_.size(), 0);
    std::vector<int> used;
    for (const lowering::GraphParam& p : params) {
      if (p.source != lowering::GraphParam::Source::kInput) continue;
      if (uses_.at(p.input_index)++ > 0) continue;
      const at::Tensor& t = inputs_[p.input_index];
      TORCH_CHECK(t.device().is_privateuseone() && t.device().index() == g_.device_,
                  "tpu compile: graph input ", p.input_index, " is on ", t.device(),
                  " but the graph runs on tpu:", g_.device_, "; move inputs with .to('tpu')");
      used.push_back(p.input_index);
    }
    std::vector<at::Tensor> ts;
    for (int i : used) ts.push_back(inputs_[i]);
    std::vector<runtime::BufferPtr> values = aten::read_tensors(ts);
    read_.assign(inputs_.size(), nullptr);
    for (size_t k = 0; k < used.size(); ++k) read_[used[k]] = std::move(values[k]);
  }

  // The last use takes the buffer, so a donatable input is held by its storage and the run
  // only.
  runtime::BufferPtr input(size_t, int index) override {
    TORCH_INTERNAL_ASSERT(read_.at(index) != nullptr, "tpu compile: input ", index, " not read");
    return --uses_[index] == 0 ? std::move(read_[index]) : read_[index];
  }
  runtime::BufferPtr scalar(size_t param, const lowering::GraphParam& p) override {
    if (p.scalar.symbol >= 0) {
      return aten::scalar_to_buffer(c10::Scalar(sizes_.at(p.scalar.symbol)), p.dtype,
                                    g_.device_);
    }
    return g_.constant_params_.at(param);
  }
  runtime::BufferPtr rng_state(size_t, const lowering::GraphParam&) override {
    return aten::next_rng_state_buffer(
        aten::default_generator(static_cast<c10::DeviceIndex>(g_.device_)), g_.device_);
  }
  // Held by the input's storage and by the run only, as the whole storage (locked until
  // the storage takes the output: no reader takes the buffer given up).
  bool donatable(int index, const runtime::BufferPtr& b) override {
    return donations_.give_up(index, inputs_[index], b);
  }
  void donated(int index, const runtime::BufferPtr& output) override {
    donations_.take(index, output);
    base::counter_add("num_donated_inputs");
  }

 private:
  const CompiledGraph& g_;
  const std::vector<at::Tensor>& inputs_;
  const std::vector<int64_t>& sizes_;
  std::vector<runtime::BufferPtr> read_;
  std::vector<int> uses_;
  aten::StorageDonations donations_;
};

std::shared_ptr<CompiledGraph> CompiledGraph::make(const lowering::GraphSpec& spec, int device,
                                                   std::shared_ptr<const aten::CompiledProgram> p) {
  auto g = std::shared_ptr<CompiledGraph>(new CompiledGraph());
  g->program_ = std::move(p);
  g->device_ = device;
  g->num_inputs_ = spec.inputs.size();
  g->num_symbols_ = spec.num_symbols;
  g->donations_ = spec.donations;
  g->check_origin_ = spec.padded ? "a compiled graph run earlier, padded to shape buckets (a "
                                   "size named here is a bucket's, not the tensor's),"
                                 : "a compiled graph run earlier";
  char name[48];
  std::snprintf(name, sizeof(name), "tpu graph %016llx",
                static_cast<unsigned long long>(base::fnv1a(g->program_->lowered.text)));
  g->trace_name_ = name;
  base::counter_add("num_graphs_compiled");
  return g;
}

std::shared_ptr<CompiledGraph> CompiledGraph::create(const lowering::GraphSpec& spec, int device) {
  auto lowered = lowering::lower_graph(spec);
  TORCH_CHECK_NOT_IMPLEMENTED(lowered.ok(), "tpu compile: ", lowered.status().message());
  auto program = aten::compile_program(std::move(lowered).value(), device);
  TORCH_CHECK(program.ok(), "tpu compile: ", program.status().message());
  return make(spec, device, *program);
}

std::shared_ptr<CompiledGraph> CompiledGraph::create_replicated(const lowering::GraphSpec& spec,
                                                               int device,
                                                               ReplicatedRunner runner) {
  auto lowered = lowering::lower_graph(spec);
  TORCH_CHECK_NOT_IMPLEMENTED(lowered.ok(), "tpu compile: ", lowered.status().message());
  auto p = std::make_shared<aten::CompiledProgram>();
  p->lowered = std::move(lowered).value();
  p->output_bytes = aten::output_bytes_of(p->lowered);  // checked against the whole memory
  p->device = device;
  p->replicated = std::move(runner);
  return make(spec, device, std::move(p));
}

std::vector<at::Tensor> CompiledGraph::run(const std::vector<at::Tensor>& inputs,
                                           const std::vector<int64_t>& sizes) const {
  TORCH_CHECK(inputs.size() == num_inputs_, "tpu compile: graph expects ", num_inputs_,
              " inputs, got ", inputs.size());
  TORCH_CHECK(static_cast<int>(sizes.size()) == num_symbols_, "tpu compile: graph expects ",
              num_symbols_, " size values, got ", sizes.size());
  runtime::trace::Label label(trace_name_.c_str());
  const lowering::LoweredGraph& lowered = program_->lowered;
  // Scalars the graph fixes (not sizes) get their buffers on the first run, not on every
  // run (not in create(): that runs while Dynamo traces, where tensors are fake).
  std::call_once(constants_once_, [this, &lowered] {
    constant_params_.resize(lowered.params.size());
    for (size_t i = 0; i < lowered.params.size(); ++i) {
      const lowering::GraphParam& p = lowered.params[i];
      if (p.source == lowering::GraphParam::Source::kScalar && p.scalar.symbol < 0) {
        constant_params_[i] = aten::scalar_to_buffer(
            to_scalar(p.scalar), p.dtype, device_, p.cast == lowering::ScalarCast::kChecked);
      }
    }
  });
  Args args(*this, inputs, sizes);
  args.read_inputs(lowered.params);
  // Read at the next host read, not now: a graph call does not wait for its program.
  std::vector<runtime::BufferPtr> outputs =
      aten::run_program(*program_, args, aten::CheckMode::kDeferred, donations_, check_origin_);
  base::counter_add("num_graph_executions");
  std::vector<at::Tensor> result;
  result.reserve(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    result.push_back(
        aten::wrap_buffer(outputs[k], aten::to_scalar_type(lowered.output_types[k].dtype)));
  }
  return result;
}

}  // namespace torchtpu::compile
