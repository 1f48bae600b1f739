// Argument checks of the tpu backend's collectives, and the flat-buffer helpers its list
// forms use. Every check raises c10::ValueError starting "tpu: <collective>: " with the
// facts (tensor roles, dtypes and shapes) on the calling thread, before any data moves.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace torchtpu::distributed {

// The edge: a transport's Status becomes the exception torch.distributed users expect
// (kInvalidArgument: ValueError; kUnavailable: DistBackendError; else RuntimeError).
void ok_or_raise(const base::Status& s);

[[noreturn]] void invalid(const std::string& coll, const std::string& what);
// "float32[4, 4]"
std::string shape_text(const at::Tensor& t);
// A strided tpu tensor; `role` names it ("input", "output").
void check_tensor(const std::string& coll, const at::Tensor& t, const char* role);
void check_same_dtype(const std::string& coll, const at::Tensor& a, const at::Tensor& b);
// The one tensor of `tensors` (the tpu backend drives one device per rank), checked.
at::Tensor& single(const std::string& coll, std::vector<at::Tensor>& tensors, const char* role);
void check_reduce_op(const std::string& coll, const c10d::ReduceOp& op, const at::Tensor& t);
void check_root(const std::string& coll, int64_t root, int size);

// Transports move contiguous buffers. A strided argument (transposed, sliced,
// channels_last) goes through a contiguous copy, as Gloo's collectives take it: its
// logical values are sent (an input: `.contiguous()`), and what a collective writes is
// copied back into it once the transport has run (copy_back(), which the backend's launch
// calls).
class DenseArgs {
 public:
  explicit DenseArgs(std::string coll) : coll_(std::move(coll)) {}
  // What the transport writes (and reads, for in-place collectives): `t`, or a contiguous
  // copy of it that copy_back() writes into `t`. Raises for a tensor whose elements share
  // memory (an expanded one), which no collective can write.
  at::Tensor written(const at::Tensor& t);
  void copy_back();

 private:
  std::string coll_;
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;  // (caller's tensor, its copy)
};

// `tensors` flattened and concatenated (a tpu op, enqueued).
at::Tensor flat_cat(const std::vector<at::Tensor>& tensors, const at::TensorOptions& options);
// Copies consecutive pieces of the flat `src` into `dsts`.
void split_into(const at::Tensor& src, std::vector<at::Tensor>& dsts);

}  // namespace torchtpu::distributed
