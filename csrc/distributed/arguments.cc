#include "distributed/arguments.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <sstream>

#include "distributed/signature.h"

namespace torchtpu::distributed {

// The edge: a transport's Status becomes the exception torch.distributed users expect.
void ok_or_raise(const base::Status& s) {
  if (s.ok()) return;
  switch (s.code()) {
    case base::StatusCode::kInvalidArgument:
      C10_THROW_ERROR(ValueError, s.message());
    case base::StatusCode::kUnavailable:
      C10_THROW_ERROR(DistBackendError, s.message());
    default:
      TORCH_CHECK(false, s.message());
  }
}

[[noreturn]] void invalid(const std::string& coll, const std::string& what) {
  C10_THROW_ERROR(ValueError, "tpu: " + coll + ": " + what);
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream o;
  o << c10::toString(t.scalar_type()) << t.sizes();
  return o.str();
}

void check_tensor(const std::string& coll, const at::Tensor& t, const char* role) {
  if (!t.defined()) invalid(coll, std::string("the ") + role + " tensor is undefined");
  if (t.device().type() != c10::DeviceType::PrivateUse1) {
    std::ostringstream o;
    o << "the " << role << " tensor is on " << t.device()
      << "; the tpu backend takes tpu tensors (move it with .to('tpu'), or create the group "
         "with backend='cpu:gloo,tpu:tpu' to run CPU tensors through Gloo)";
    invalid(coll, o.str());
  }
  if (t.layout() != at::kStrided) {
    invalid(coll, std::string("the ") + role + " tensor is not dense; the tpu backend takes "
                  "strided tensors only");
  }
}

at::Tensor DenseArgs::written(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  if (at::has_internal_overlap(t) == at::MemOverlap::Yes) {
    invalid(coll_, "the tensor " + shape_text(t) + " it writes has elements that share "
                   "memory (an expanded tensor); pass a tensor of its own, e.g. .clone()");
  }
  at::Tensor copy = t.contiguous();
  back_.emplace_back(t, copy);
  return copy;
}

void DenseArgs::copy_back() {
  for (auto& [caller, copy] : back_) caller.copy_(copy);
}

void check_same_dtype(const std::string& coll, const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type()) {
    invalid(coll, "the output is " + shape_text(b) + " but the input is " + shape_text(a) +
                      "; both must have the same dtype");
  }
}

at::Tensor& single(const std::string& coll, std::vector<at::Tensor>& tensors, const char* role) {
  if (tensors.size() != 1) {
    invalid(coll, "takes one " + std::string(role) + " tensor per rank (got " +
                      std::to_string(tensors.size()) + "); the tpu backend drives one device "
                      "per rank");
  }
  check_tensor(coll, tensors[0], role);
  return tensors[0];
}

void check_reduce_op(const std::string& coll, const c10d::ReduceOp& op, const at::Tensor& t) {
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    if (s == nullptr) invalid(coll, "PREMUL_SUM needs a factor (use dist._make_nccl_premul_sum)");
    if (!at::isFloatingType(t.scalar_type())) {
      invalid(coll, "PREMUL_SUM takes floating-point tensors (got " + shape_text(t) + ")");
    }
  }
  if (op.op_ == c10d::ReduceOp::UNUSED) invalid(coll, "the reduce op is UNUSED");
  if (op.op_ == c10d::ReduceOp::AVG && t.scalar_type() == at::kBool) {
    // Every transport the same way (the host-staged one failed inside its division).
    invalid(coll, "AVG is not defined on bool tensors (got " + shape_text(t) + "); use SUM, "
                  "MIN, MAX or PRODUCT, or convert to an integer dtype");
  }
  bool bitwise = op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
                 op.op_ == c10d::ReduceOp::BXOR;
  if (bitwise && (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()))) {
    invalid(coll, reduce_op_name(op) + " takes integer or bool tensors (got " + shape_text(t) +
                      ")");
  }
  // Refused at the call, on every transport (the host-staged one failed in its reduction
  // at wait(), the in-plugin one inside the program at the first read of the result).
  if ((op.op_ == c10d::ReduceOp::MIN || op.op_ == c10d::ReduceOp::MAX) &&
      at::isComplexType(t.scalar_type())) {
    invalid(coll, reduce_op_name(op) + " is not defined on complex tensors (got " +
                      shape_text(t) + "); reduce their abs() or real parts instead");
  }
  // PyTorch has no CPU arithmetic for them, which the host-staged reduction runs (its
  // "add_stub not implemented for 'UInt16'" surfaced at wait()); Gloo refuses them too.
  at::ScalarType st = t.scalar_type();
  if (st == at::kUInt16 || st == at::kUInt32 || st == at::kUInt64) {
    invalid(coll, "reductions of " + std::string(c10::toString(st)) + " tensors are not "
                  "supported (got " + shape_text(t) + "); convert to a signed integer dtype "
                  "wide enough for the result (int32 or int64), or broadcast / gather them");
  }
}

void check_root(const std::string& coll, int64_t root, int size) {
  if (root < 0 || root >= size) {
    invalid(coll, "root " + std::to_string(root) + " is not a rank of the group of " +
                      std::to_string(size));
  }
}

at::Tensor flat_cat(const std::vector<at::Tensor>& tensors, const at::TensorOptions& options) {
  if (tensors.empty()) return at::empty({0}, options);
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void split_into(const at::Tensor& src, std::vector<at::Tensor>& dsts) {
  int64_t offset = 0;
  for (at::Tensor& d : dsts) {
    d.copy_(src.narrow(0, offset, d.numel()).view(d.sizes()));
    offset += d.numel();
  }
}

}  // namespace torchtpu::distributed
