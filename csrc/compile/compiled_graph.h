// A compiled FX graph: one StableHLO module lowered by lowering::lower_graph, compiled
// for one device, run on tpu tensors by the executor eager ops use
// (aten/program_executor.h).
//
// A graph whose program spans several devices (its functional collectives run among the
// ranks that run it, each a thread of this process) is created replicated: it is not
// compiled here; each run hands the module text and this rank's arguments to a
// ReplicatedRunner (the distributed layer's in-plugin transport), which meets the other
// ranks, compiles the program over their devices and returns this rank's results.
//
// run() is asynchronous like eager ops: outputs are new tpu tensors whose buffers are
// being computed. Data checks (index bounds) are queued and read at the next host read
// (aten/deferred_checks.h), so a call never waits for its program.
// Thread safety: run() may be called from any thread; one graph, one device.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aten/program_executor.h"
#include "lowering/graph.h"

namespace torchtpu::compile {

class CompiledGraph {
 public:
  using ReplicatedRunner = aten::ReplicatedRunner;

  // Lowers and compiles `spec` for `device` (memory and disk caches apply).
  static std::shared_ptr<CompiledGraph> create(const lowering::GraphSpec& spec, int device);
  // Lowers `spec`, one replica of a program run through `runner` (see above); this rank's
  // arguments live on `device`. Inputs are never donated.
  static std::shared_ptr<CompiledGraph> create_replicated(const lowering::GraphSpec& spec,
                                                          int device, ReplicatedRunner runner);

  // `inputs` have the graph's static (bucket) shapes; `sizes` holds each runtime size
  // value the graph reads (GraphSpec::num_symbols of them).
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs,
                              const std::vector<int64_t>& sizes = {}) const;
  const std::string& module_text() const { return program_->lowered.text; }
  size_t num_inputs() const { return num_inputs_; }

 private:
  class Args;
  static std::shared_ptr<CompiledGraph> make(const lowering::GraphSpec& spec, int device,
                                             std::shared_ptr<const aten::CompiledProgram> p);

  std::shared_ptr<const aten::CompiledProgram> program_;
  int device_ = 0;
  size_t num_inputs_ = 0;
  int num_symbols_ = 0;
  std::vector<std::pair<int, int>> donations_;  // (input, output): see GraphSpec
  std::string trace_name_;  // "tpu graph <hash of the module>", in profiler traces
  std::string check_origin_;  // what a failed data check says ran (GraphSpec::padded)
  // Per @main parameter: the buffer of a scalar the graph fixes, else null (set once).
  mutable std::once_flag constants_once_;
  mutable std::vector<runtime::BufferPtr> constant_params_;
};

}  // namespace torchtpu::compile
