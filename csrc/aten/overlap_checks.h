// Memory-overlap checks for calls that write tensors (in-place and out= forms), as
// PyTorch's CPU kernels make them: the lowerings compute a functional result and the
// boxed kernel copies it into the written tensors, so without these checks a call whose
// output aliases its input would silently succeed where PyTorch raises.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <string>

namespace torchtpu::aten {

// Raises PyTorch's "unsupported operation: ..." RuntimeError when a written tensor
// overlaps itself (an expanded view) or partially overlaps a tensor the op reads; for
// ops whose CPU kernels reject any overlap with their inputs (index_select, gather,
// cat, ...), a full overlap raises too.
void check_written_overlap(const c10::FunctionSchema& schema, const std::string& name,
                           c10::ArrayRef<c10::IValue> args);

// For the ops above that reject any overlap: the same check for an out= tensor the call
// has just resized to its result's shape, against the tensors the call reads. PyTorch's
// CPU kernels resize first and check after, so an out= tensor that grows into an input
// (a slice next to it in one storage) is refused there even though it did not overlap
// when the call was made.
void check_resized_out_overlap(const c10::FunctionSchema& schema, const std::string& name,
                               c10::ArrayRef<c10::IValue> args, const at::Tensor& out);

// For an in-place list op: whether a written item shares memory with an item at another
// position of any list argument (the same tensor twice, overlapping views). PyTorch's
// per-item kernels then see each other's writes in list order; one program over the list
// reads every item before writing any. Conservative for interleaved strided views.
bool list_items_overlap_across_positions(const c10::FunctionSchema& schema,
                                         c10::ArrayRef<c10::IValue> args);

}  // namespace torchtpu::aten
