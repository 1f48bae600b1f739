// The dtypes PyTorch's CPU kernels refuse, for ops whose lowering would compute anyway.
//
// A CPU kernel dispatches on its input's dtype over a fixed set (AT_DISPATCH_...) and
// raises NotImplementedError ("\"silu_cpu\" not implemented for 'Long'") outside it; the
// meta kernels do not check it. Our lowerings compute in any dtype, so without this table
// softmax of an int64 tensor returned zeros and var of one an int64, where the CPU (and
// CUDA) raise. Each op here names the dtypes its CPU kernel refuses and the kernel name of
// the CPU's error; the check runs at the call, before anything is recorded or run.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/operator_name.h>

#include <string>

namespace torchtpu::aten {

struct CpuDtypeRule;

// The rule of op `name` (aten::gelu_, aten::round.decimals), or null when its CPU kernel
// takes every dtype our lowering does (decided once per op).
const CpuDtypeRule* cpu_dtype_rule(const c10::OperatorName& name);

// Raises the CPU kernel's error when `args` (the call's arguments) have a dtype `rule`
// refuses.
void check_dtype_like_cpu(const CpuDtypeRule& rule, c10::ArrayRef<c10::IValue> args);

}  // namespace torchtpu::aten
