// The one classifier of an eager call's arguments: what of a call decides its program.
//
// Tensors count by dtype and shape, `Scalar`s and 0-dim CPU tensors as runtime scalars (by
// category only: a new value never means a new program), ints/lists/bools/strings/dtypes
// as structure, plus the device and the default dtype (torch.set_default_dtype). The
// classification is written as signature words (plain integers, hashed) on every call,
// into a per-thread buffer that keeps its capacity, so a cache hit allocates nothing;
// only a miss also builds the OpArgs the lowering reads.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "aten/op_info.h"
#include "lowering/lowering.h"

namespace torchtpu::aten {

// Thrown when a call cannot run on tpu and must fall back to the CPU.
struct NeedsFallback {
  std::string reason;
};

struct CallSignature {
  std::vector<int64_t> words;  // the call's identity; equal words <=> same program
  uint64_t hash = 0;
  int device = 0;              // the device of its tpu tensors (0 when it has none)
  std::optional<at::Generator> generator;  // a Generator argument, if any
};

// Classifies `args` (the call's arguments in schema order) into `sig`, and into `op_args`
// when it is not null. Raises for tensors on two devices; throws NeedsFallback for an
// argument form that is not lowered.
void classify_call(const OpInfo& info, c10::ArrayRef<c10::IValue> args, CallSignature* sig,
                   std::vector<lowering::OpArg>* op_args);

// The readable form of a call's classification ("aten::add.Tensor(T tensor<2x3xf32>; ...)"),
// for error messages.
std::string describe_signature(const OpInfo& info, const std::vector<lowering::OpArg>& args,
                               int device);

}  // namespace torchtpu::aten
