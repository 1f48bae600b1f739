// One lowered module compiled for one device, and the one way such a program runs: an
// eager op (a graph of one node), a compiled FX graph and a fused eager graph alike.
//
// The caller says where each @main parameter's value comes from (ProgramArgs, asked per
// parameter in order), and how data checks report: at once (an eager op: read before
// anything is written, so a failed call changes nothing), queued for the next host read
// (a graph: the call never waits for its program), or returned to the caller (a fused eager
// graph, which maps a failed check to the op that recorded it). Donation: an input the program aliases
// to an output is given up when the caller says its buffer has no other holder.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lowering/lowering.h"
#include "runtime/buffer.h"
#include "runtime/executable.h"

namespace torchtpu::aten {

// Runs one replica of a program that spans several ranks' devices (the distributed
// layer's in-plugin transport): given the module text and this rank's arguments, it meets
// the other ranks, runs the program over their devices and returns this rank's outputs.
// Its error codes: kInvalidArgument when the ranks disagree, kUnavailable when a peer is
// gone.
using ReplicatedRunner = std::function<base::StatusOr<std::vector<runtime::BufferPtr>>(
    const std::string& module, std::vector<runtime::BufferPtr> args)>;

struct CompiledProgram {
  lowering::LoweredGraph lowered;
  runtime::ExecutablePtr exe;  // null when `replicated` runs it
  int device = 0;
  ReplicatedRunner replicated;  // set for a program run by several ranks (never donates)
  // Its outputs' bytes. A run whose new results (those not taking a donated input's
  // place) exceed the device's free memory is refused: the CPU plugin ran a program with no
  // inputs into a buffer of garbage, and one that fit the machine but not its free memory
  // was ended by the OS's out-of-memory killer.
  int64_t output_bytes = 0;  // output_bytes_of(lowered)
};

// The bytes of `lowered`'s outputs (CompiledProgram::output_bytes).
int64_t output_bytes_of(const lowering::LoweredGraph& lowered);

// Executables keep their JIT code mapped, so a process holding thousands (the caches keep
// 4096, a program per shape) ran out of the kernel's memory maps (vm.max_map_count) and
// the plugin's next compile crashed. Past `map_limit` maps, the executable caches (compiled
// ops, fused programs, the compile cache) drop their least recently used half.
// compile_program checks every 32nd program against half the kernel's limit.
void release_executables_past(int64_t map_limit);

// Compiles `lowered` for `device` through the executable cache (memory, then disk).
base::StatusOr<std::shared_ptr<const CompiledProgram>> compile_program(
    lowering::LoweredGraph lowered, int device);

// One run's parameter values. `param` is the @main parameter's index.
class ProgramArgs {
 public:
  virtual ~ProgramArgs() = default;
  virtual runtime::BufferPtr input(size_t param, int index) = 0;
  virtual runtime::BufferPtr scalar(size_t param, const lowering::GraphParam& p) = 0;
  virtual runtime::BufferPtr rng_state(size_t param, const lowering::GraphParam& p) = 0;
  // Whether input `index` (its buffer `b`, held by the run) may be donated this run: its
  // only other holder is the caller's storage, which takes the output instead (donated()).
  virtual bool donatable(int index, const runtime::BufferPtr& b) { return false; }
  virtual void donated(int index, const runtime::BufferPtr& output) {}
};

enum class CheckMode { kNow, kDeferred, kReturned };

// Runs `program` with `args`; returns its outputs (data check results excluded, but for
// kReturned: then the check vector follows the outputs, when the program has checks).
// `donations`: (input, output) pairs the program aliases (GraphSpec::donations).
// `origin` names what ran in the error of a deferred check ("a compiled graph run earlier").
std::vector<runtime::BufferPtr> run_program(
    const CompiledProgram& program, ProgramArgs& args, CheckMode checks,
    const std::vector<std::pair<int, int>>& donations = {}, const std::string& origin = {});

// Reads the check vector outputs[first] (one flag per message) and raises the error a
// failed check stands for (IndexError, LinAlgError or RuntimeError). Blocks on it.
void run_data_checks(const std::vector<runtime::BufferPtr>& outputs, size_t first,
                     const std::vector<lowering::CheckKind>& kinds,
                     const std::vector<std::string>& messages);
// The index of the first failed check among the n flags of the check vector
// outputs[first] (none when n is 0), or -1: one transfer, which blocks on the program.
int first_failed_check(const std::vector<runtime::BufferPtr>& outputs, size_t first, size_t n);

}  // namespace torchtpu::aten
