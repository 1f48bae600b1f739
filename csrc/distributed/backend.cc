#include "distributed/backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <numeric>
#include <sstream>

#include "distributed/signature.h"
#include "distributed/work.h"

namespace torchtpu::distributed {

namespace {

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
  if (!t.is_contiguous()) {
    invalid(coll, std::string("the ") + role + " tensor " + shape_text(t) +
                      " is not contiguous; call .contiguous() first");
  }
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
    auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    if (s == nullptr) invalid(coll, "PREMUL_SUM needs a factor (use dist._make_nccl_premul_sum)");
    if (!at::isFloatingType(t.scalar_type())) {
      invalid(coll, "PREMUL_SUM takes floating-point tensors (got " + shape_text(t) + ")");
    }
  }
  if (op.op_ == c10d::ReduceOp::UNUSED) invalid(coll, "the reduce op is UNUSED");
  bool bitwise = op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
                 op.op_ == c10d::ReduceOp::BXOR;
  if (bitwise && at::isFloatingType(t.scalar_type())) {
    invalid(coll, reduce_op_name(op) + " takes integer or bool tensors (got " + shape_text(t) +
                      ")");
  }
}

c10::intrusive_ptr<c10d::Work> done(int rank, c10d::OpType type, const char* title,
                                    std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<TpuWork>(rank, type, title, std::move(outputs));
}

at::Tensor flat_cat(const std::vector<at::Tensor>& tensors, const at::TensorOptions& options) {
  if (tensors.empty()) return at::empty({0}, options);
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of the flat `src` into `dsts`.
void split_into(const at::Tensor& src, std::vector<at::Tensor>& dsts) {
  int64_t offset = 0;
  for (at::Tensor& d : dsts) {
    d.copy_(src.narrow(0, offset, d.numel()).view(d.sizes()));
    offset += d.numel();
  }
}

}  // namespace

TpuBackend::TpuBackend(std::unique_ptr<Transport> transport, std::vector<int64_t> global_ranks,
                       std::chrono::milliseconds timeout)
    : c10d::Backend(transport->rank(), transport->size()),
      transport_(std::move(transport)),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout) {}

c10::intrusive_ptr<c10d::Work> TpuBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  at::Tensor& t = single("broadcast", tensors, "input");
  if (opts.rootRank < 0 || opts.rootRank >= size_) {
    invalid("broadcast", "root " + std::to_string(opts.rootRank) + " is not a rank of the "
                         "group of " + std::to_string(size_));
  }
  ok_or_raise(transport_->broadcast(t, static_cast<int>(opts.rootRank)));
  return done(rank_, c10d::OpType::BROADCAST, "tpu:broadcast", tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  at::Tensor& t = single("all_reduce", tensors, "input");
  check_reduce_op("all_reduce", opts.reduceOp, t);
  ok_or_raise(transport_->all_reduce(t, opts.reduceOp));
  return done(rank_, c10d::OpType::ALLREDUCE, "tpu:all_reduce", tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  for (const at::Tensor& t : tensors) {
    check_tensor("all_reduce_coalesced", t, "input");
    check_reduce_op("all_reduce_coalesced", opts.reduceOp, t);
  }
  for (at::Tensor& t : tensors) ok_or_raise(transport_->all_reduce(t, opts.reduceOp));
  return done(rank_, c10d::OpType::ALLREDUCE_COALESCED, "tpu:all_reduce_coalesced", tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOptions& opts) {
  at::Tensor& t = single("reduce", tensors, "input");
  check_reduce_op("reduce", opts.reduceOp, t);
  if (opts.rootRank < 0 || opts.rootRank >= size_) {
    invalid("reduce", "root " + std::to_string(opts.rootRank) + " is not a rank of the group");
  }
  // Every rank computes the reduction; only the root's tensor receives it.
  at::Tensor work_tensor = rank_ == opts.rootRank ? t : t.clone();
  ok_or_raise(transport_->all_reduce(work_tensor, opts.reduceOp));
  return done(rank_, c10d::OpType::REDUCE, "tpu:reduce", tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  at::Tensor& in = single("all_gather", inputs, "input");
  if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
    invalid("all_gather", "takes one list of " + std::to_string(size_) +
                              " output tensors (one per rank)");
  }
  for (const at::Tensor& o : outputs[0]) {
    check_tensor("all_gather", o, "output");
    check_same_dtype("all_gather", in, o);
    if (o.sizes() != in.sizes()) {
      invalid("all_gather", "an output is " + shape_text(o) + " but the input is " +
                                shape_text(in) + "; each output must have the input's shape");
    }
  }
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  ok_or_raise(transport_->all_gather(flat, in));
  split_into(flat, outputs[0]);
  return done(rank_, c10d::OpType::ALLGATHER, "tpu:all_gather", outputs[0]);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& /*opts*/) {
  const std::string coll = "all_gather_into_tensor";
  check_tensor(coll, input, "input");
  check_tensor(coll, output, "output");
  check_same_dtype(coll, input, output);
  if (output.numel() != size_ * input.numel()) {
    invalid(coll, "the output " + shape_text(output) + " must have " + std::to_string(size_) +
                      " times the elements of the input " + shape_text(input));
  }
  ok_or_raise(transport_->all_gather(output, input));
  return done(rank_, c10d::OpType::_ALLGATHER_BASE, "tpu:all_gather_into_tensor", {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (outputs.size() != inputs.size()) {
    invalid("all_gather_coalesced", "got " + std::to_string(outputs.size()) +
                                        " output lists for " + std::to_string(inputs.size()) +
                                        " inputs");
  }
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> o{outputs[i]};
    std::vector<at::Tensor> in{inputs[i]};
    allgather(o, in, opts);
    all.insert(all.end(), outputs[i].begin(), outputs[i].end());
  }
  return done(rank_, c10d::OpType::ALLGATHER_COALESCED, "tpu:all_gather_coalesced", all);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (outputs.size() != inputs.size()) {
    invalid("all_gather_into_tensor_coalesced", "got " + std::to_string(outputs.size()) +
                                                    " outputs for " +
                                                    std::to_string(inputs.size()) + " inputs");
  }
  for (size_t i = 0; i < inputs.size(); ++i) _allgather_base(outputs[i], inputs[i], opts);
  return done(rank_, c10d::OpType::COALESCED, "tpu:all_gather_into_tensor_coalesced", outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::GatherOptions& opts) {
  at::Tensor& in = single("gather", inputs, "input");
  bool is_root = rank_ == opts.rootRank;
  if (is_root) {
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
      invalid("gather", "the root takes one list of " + std::to_string(size_) + " outputs");
    }
    for (const at::Tensor& o : outputs[0]) {
      check_tensor("gather", o, "output");
      check_same_dtype("gather", in, o);
      if (o.sizes() != in.sizes()) {
        invalid("gather", "an output is " + shape_text(o) + " but the input is " +
                              shape_text(in));
      }
    }
  } else if (!outputs.empty() && !outputs[0].empty()) {
    invalid("gather", "only the root (rank " + std::to_string(opts.rootRank) +
                          ") takes output tensors");
  }
  // Gathered everywhere (one primitive), kept at the root.
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  ok_or_raise(transport_->all_gather(flat, in));
  if (!is_root) return done(rank_, c10d::OpType::GATHER, "tpu:gather", {});
  split_into(flat, outputs[0]);
  return done(rank_, c10d::OpType::GATHER, "tpu:gather", outputs[0]);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  at::Tensor& out = single("scatter", outputs, "output");
  bool is_root = rank_ == opts.rootRank;
  int64_t n = out.numel();
  at::Tensor send;
  if (is_root) {
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
      invalid("scatter", "the root takes one list of " + std::to_string(size_) + " inputs");
    }
    for (const at::Tensor& i : inputs[0]) {
      check_tensor("scatter", i, "input");
      check_same_dtype("scatter", i, out);
      if (i.numel() != n) {
        invalid("scatter", "an input is " + shape_text(i) + " but the output is " +
                               shape_text(out));
      }
    }
    send = flat_cat(inputs[0], out.options());
  } else {
    if (!inputs.empty() && !inputs[0].empty()) {
      invalid("scatter", "only the root (rank " + std::to_string(opts.rootRank) +
                             ") takes input tensors");
    }
    send = at::empty({0}, out.options());
  }
  // One all_to_all where only the root sends: n elements to every rank.
  std::vector<int64_t> in_splits(size_, is_root ? n : 0), out_splits(size_, 0);
  out_splits[opts.rootRank] = n;
  at::Tensor recv = at::empty({n}, out.options());
  ok_or_raise(transport_->all_to_all(recv, send, out_splits, in_splits));
  out.copy_(recv.view(out.sizes()));
  return done(rank_, c10d::OpType::SCATTER, "tpu:scatter", outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor& out = single("reduce_scatter", outputs, "output");
  check_reduce_op("reduce_scatter", opts.reduceOp, out);
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
    invalid("reduce_scatter", "takes one list of " + std::to_string(size_) + " inputs");
  }
  for (const at::Tensor& i : inputs[0]) {
    check_tensor("reduce_scatter", i, "input");
    check_same_dtype("reduce_scatter", i, out);
    if (i.sizes() != out.sizes()) {
      invalid("reduce_scatter", "an input is " + shape_text(i) + " but the output is " +
                                    shape_text(out) + "; each input must have its shape");
    }
  }
  at::Tensor flat_in = flat_cat(inputs[0], out.options());
  ok_or_raise(transport_->reduce_scatter(out, flat_in, opts.reduceOp));
  return done(rank_, c10d::OpType::REDUCE_SCATTER, "tpu:reduce_scatter", outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const std::string coll = "reduce_scatter_tensor";
  check_tensor(coll, input, "input");
  check_tensor(coll, output, "output");
  check_same_dtype(coll, input, output);
  check_reduce_op(coll, opts.reduceOp, input);
  if (input.numel() != size_ * output.numel()) {
    invalid(coll, "the input " + shape_text(input) + " must have " + std::to_string(size_) +
                      " times the elements of the output " + shape_text(output));
  }
  ok_or_raise(transport_->reduce_scatter(output, input, opts.reduceOp));
  return done(rank_, c10d::OpType::_REDUCE_SCATTER_BASE, "tpu:reduce_scatter_tensor", {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() != inputs.size()) {
    invalid("reduce_scatter_tensor_coalesced", "got " + std::to_string(outputs.size()) +
                                                   " outputs for " +
                                                   std::to_string(inputs.size()) + " inputs");
  }
  for (size_t i = 0; i < inputs.size(); ++i) _reduce_scatter_base(outputs[i], inputs[i], opts);
  return done(rank_, c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
              "tpu:reduce_scatter_tensor_coalesced", outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_split_sizes,
                                                         std::vector<int64_t>& input_split_sizes,
                                                         const c10d::AllToAllOptions& /*opts*/) {
  const std::string coll = "all_to_all_single";
  check_tensor(coll, input, "input");
  check_tensor(coll, output, "output");
  check_same_dtype(coll, input, output);
  auto check_splits = [&](const std::vector<int64_t>& splits, const at::Tensor& t,
                          const char* role) {
    int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    if (splits.empty()) {
      if (rows % size_ != 0) {
        invalid(coll, std::string("the ") + role + " " + shape_text(t) + " has " +
                          std::to_string(rows) + " rows, which do not split evenly over " +
                          std::to_string(size_) + " ranks; pass split sizes");
      }
      return;
    }
    if (static_cast<int>(splits.size()) != size_) {
      invalid(coll, std::string("the ") + role + " split sizes have " +
                        std::to_string(splits.size()) + " entries for a group of " +
                        std::to_string(size_));
    }
    int64_t sum = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    if (sum != rows) {
      invalid(coll, std::string("the ") + role + " split sizes add up to " +
                        std::to_string(sum) + " rows but the " + role + " " + shape_text(t) +
                        " has " + std::to_string(rows));
    }
  };
  check_splits(input_split_sizes, input, "input");
  check_splits(output_split_sizes, output, "output");
  ok_or_raise(transport_->all_to_all(output, input, output_split_sizes, input_split_sizes));
  return done(rank_, c10d::OpType::ALLTOALL_BASE, "tpu:all_to_all_single", {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions& /*opts*/) {
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
    invalid("all_to_all", "takes " + std::to_string(size_) + " inputs and " +
                              std::to_string(size_) + " outputs (one per rank)");
  }
  std::vector<int64_t> in_splits, out_splits;
  for (int r = 0; r < size_; ++r) {
    check_tensor("all_to_all", inputs[r], "input");
    check_tensor("all_to_all", outputs[r], "output");
    check_same_dtype("all_to_all", inputs[0], inputs[r]);
    check_same_dtype("all_to_all", inputs[0], outputs[r]);
    in_splits.push_back(inputs[r].numel());
    out_splits.push_back(outputs[r].numel());
  }
  at::Tensor send = flat_cat(inputs, inputs[0].options());
  at::Tensor recv = at::empty(
      {std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})}, inputs[0].options());
  ok_or_raise(transport_->all_to_all(recv, send, out_splits, in_splits));
  split_into(recv, outputs);
  return done(rank_, c10d::OpType::ALLTOALL, "tpu:all_to_all", outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                int tag) {
  at::Tensor& t = single("send", tensors, "input");
  if (dst_rank < 0 || dst_rank >= size_ || dst_rank == rank_) {
    invalid("send", "destination " + std::to_string(dst_rank) + " is not another rank of the "
                    "group of " + std::to_string(size_));
  }
  ok_or_raise(transport_->send(t, dst_rank, tag));
  return done(rank_, c10d::OpType::SEND, "tpu:send", tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                int tag) {
  at::Tensor& t = single("recv", tensors, "output");
  if (src_rank < 0 || src_rank >= size_ || src_rank == rank_) {
    invalid("recv", "source " + std::to_string(src_rank) + " is not another rank of the "
                    "group of " + std::to_string(size_));
  }
  ok_or_raise(transport_->recv(t, src_rank, tag));
  return done(rank_, c10d::OpType::RECV, "tpu:recv", tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  ok_or_raise(transport_->barrier());
  return done(rank_, c10d::OpType::BARRIER, "tpu:barrier", {});
}

}  // namespace torchtpu::distributed
