#include "distributed/in_plugin_transport.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <mutex>

#include "aten/device_runtime.h"
#include "aten/tpu_storage.h"
#include "base/metrics.h"
#include "lowering/collectives.h"
#include "lowering/storage_programs.h"
#include "runtime/device_queue.h"

namespace torchtpu::distributed {

namespace {

using lowering::ReduceKind;
using lowering::TensorType;

// Runs `fn`, turning a c10::Error from the aten layer (an unsupported dtype, a failed
// device read) into a Status.
base::Status guarded(const char* collective, const std::function<base::Status()>& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return base::invalid_argument(std::string("distributed: ") + collective + ": " +
                                  e.what_without_backtrace());
  }
}

TensorType type_of(const at::Tensor& t) {
  return TensorType{aten::to_dtype(t.scalar_type()), t.sizes().vec()};
}

// "float32[4, 4]"
std::string shape_of(const at::Tensor& t) {
  std::string dims;
  for (int64_t d : t.sizes()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return std::string(base::dtype_name(aten::to_dtype(t.scalar_type()))) + "[" + dims + "]";
}

std::string describe(const std::string& collective, const at::Tensor& t) {
  return collective + " " + shape_of(t);
}

base::StatusOr<ReduceKind> reduce_kind(const char* collective, const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceKind::kSum;
    case c10d::ReduceOp::AVG: return ReduceKind::kAvg;
    case c10d::ReduceOp::PRODUCT: return ReduceKind::kProduct;
    case c10d::ReduceOp::MIN: return ReduceKind::kMin;
    case c10d::ReduceOp::MAX: return ReduceKind::kMax;
    case c10d::ReduceOp::PREMUL_SUM: return ReduceKind::kPremulSum;
    case c10d::ReduceOp::BAND: return ReduceKind::kBand;
    case c10d::ReduceOp::BOR: return ReduceKind::kBor;
    case c10d::ReduceOp::BXOR: return ReduceKind::kBxor;
    default:
      return base::invalid_argument(std::string("distributed: in-plugin ") + collective +
                                    ": unknown reduce op " +
                                    std::to_string(static_cast<int>(op.op_)));
  }
}

// PREMUL_SUM's factor as a 0-d buffer of `dtype` on `device`. A tensor factor is read
// once on the host (one scalar).
base::StatusOr<runtime::BufferPtr> premul_factor(const c10d::ReduceOp& op,
                                                 c10::ScalarType dtype, int device) {
  auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (supplement == nullptr) {
    return base::invalid_argument(
        "distributed: PREMUL_SUM without its factor; make the op with "
        "torch.distributed._make_nccl_premul_sum(factor)");
  }
  double factor = supplement->tensor_factor.defined()
                      ? supplement->tensor_factor.item<double>()
                      : supplement->double_factor;
  at::Tensor host = at::scalar_tensor(factor, at::TensorOptions().dtype(dtype));
  return aten::client().buffer_from_host(host.data_ptr(), aten::to_dtype(dtype), {}, device);
}

std::string reduce_description(const char* collective, const c10d::ReduceOp& op) {
  static const char* names[] = {"sum", "avg", "product", "min", "max",
                                "band", "bor", "bxor", "premul_sum"};
  int i = static_cast<int>(op.op_);
  return std::string(collective) + "(" + (i < 9 ? names[i] : "?") + ")";
}

// The outputs of the collective program enqueued last in this process. A program is only
// enqueued once the previous one has finished: with several in flight, XLA's in-process
// rendezvous was seen (bench/collectives.py) to miss a replica and abort the process
// ("Termination timeout ... only 3 of them arrived"), probably because replicas waiting
// for their peers held the threads the missing replica needed.
struct InFlight {
  std::mutex mu;
  std::vector<runtime::BufferPtr> outputs;
};

InFlight& in_flight() {
  static auto* state = new InFlight();
  return *state;
}

// Whether `value` (what `t` reads as) may become a collective's result in place, the result
// then being t's value: t's storage's whole buffer, or a view's value materialized for the
// collective. run() decides at run time, when nothing else holds it.
Donor donor_of(const at::Tensor& t, const runtime::BufferPtr& value) {
  aten::StorageState& s = aten::storage_state(t);
  if (s.buffer().get() != value.get()) return Donor{Donor::Kind::kValue};
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  bool whole = lowering::is_whole_buffer_view(s.nbytes / static_cast<int64_t>(t.element_size()),
                                              sizes, strides, t.storage_offset());
  return whole ? Donor{Donor::Kind::kStorage, &s} : Donor{};
}

}  // namespace

base::StatusOr<std::unique_ptr<InPluginTransport>> InPluginTransport::create(
    const std::string& group_key, int rank, int size, int device_index,
    std::vector<int64_t> global_ranks, std::chrono::milliseconds timeout) {
  int num_devices = aten::device_count_or_zero();
  if (device_index < 0 || device_index >= num_devices) {
    return base::invalid_argument("distributed: in-plugin rank " + std::to_string(rank) +
                                  " names tpu:" + std::to_string(device_index) +
                                  ", but there are " +
                                  std::to_string(num_devices) +
                                  " tpu devices (TORCHTPU_NUM_DEVICES on the CPU plugin)");
  }
  TORCHTPU_ASSIGN_OR_RETURN(auto group,
                            Rendezvous::join(group_key, size, rank, global_ranks));
  return std::unique_ptr<InPluginTransport>(new InPluginTransport(
      std::move(group), group_key, rank, size, device_index, std::move(global_ranks), timeout));
}

InPluginTransport::InPluginTransport(std::shared_ptr<Rendezvous> group, std::string group_key,
                                     int rank, int size, int device_index,
                                     std::vector<int64_t> global_ranks,
                                     std::chrono::milliseconds timeout)
    : group_(std::move(group)),
      group_key_(std::move(group_key)),
      rank_(rank),
      size_(size),
      device_index_(device_index),
      global_ranks_(std::move(global_ranks)),
      timeout_ms_(timeout.count()) {}

InPluginTransport::~InPluginTransport() {
  group_->leave(rank_);
  for (auto& [key, channel] : channels_) channel.rendezvous->leave(channel.local_rank);
}

base::Status InPluginTransport::check_tensor(const char* collective, const char* what,
                                             const at::Tensor& t) const {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1 ||
      t.device().index() != device_index_ || !t.is_contiguous()) {
    return base::invalid_argument(
        std::string("distributed: in-plugin ") + collective + " on rank " +
        std::to_string(rank_) + ": the " + what + " must be a contiguous tensor on tpu:" +
        std::to_string(device_index_) + " (the rank's device), got " +
        (t.defined() ? t.device().str() + (t.is_contiguous() ? "" : ", not contiguous")
                     : std::string("an undefined tensor")));
  }
  return base::Status::ok_status();
}

base::StatusOr<std::vector<runtime::BufferPtr>> InPluginTransport::run(
    Rendezvous& group, int rank, uint64_t seq, const std::string& collective,
    const std::string& module, const std::string& description,
    std::vector<runtime::BufferPtr> args, Donor donor) {
  int64_t bytes = 0;
  for (const auto& a : args) bytes += a->size_bytes();
  Contribution mine{module, description, device_index_, std::move(args), {}, donor};
  Rendezvous::Runner runner = [&](const std::vector<Contribution>& all)
      -> base::StatusOr<std::vector<std::vector<runtime::BufferPtr>>> {
    std::vector<int> devices;
    for (size_t r = 0; r < all.size(); ++r) {
      for (size_t q = 0; q < r; ++q) {
        if (all[q].device_index == all[r].device_index) {
          return base::invalid_argument(
              "distributed: in-plugin " + collective + ": ranks " + std::to_string(q) + " and " +
              std::to_string(r) + " of group '" + group_key_ + "' both use tpu:" +
              std::to_string(all[r].device_index) +
              "; the in-plugin transport needs one device per rank");
        }
      }
      devices.push_back(all[r].device_index);
    }
    TORCHTPU_ASSIGN_OR_RETURN(runtime::ExecutablePtr exe,
                              aten::compile_cache().get_or_compile(module, devices));
    std::vector<std::vector<const runtime::Buffer*>> lists(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      for (const auto& a : all[r].args) lists[r].push_back(a.get());
    }
    InFlight& flight = in_flight();
    std::lock_guard<std::mutex> lock(flight.mu);
    for (const runtime::BufferPtr& previous : flight.outputs) {
      if (previous != nullptr) TORCHTPU_RETURN_IF_ERROR(previous->await_ready());
    }
    flight.outputs.clear();
    // Every rank's first argument is donated, or none is (one flag per parameter): each
    // must be held by nothing but its contribution and its tensor, which takes the result.
    // A storage's buffer stays locked from that check until the result is in, so a thread
    // reading the tensor meanwhile never takes a buffer being given up.
    std::vector<std::unique_lock<std::mutex>> locks(all.size());
    bool all_donate = true;
    for (size_t r = 0; r < all.size() && all_donate; ++r) {
      const Contribution& c = all[r];
      if (c.args.empty() || c.donor.kind == Donor::Kind::kNever) {
        all_donate = false;
      } else if (c.donor.kind == Donor::Kind::kValue) {
        all_donate = c.args[0].use_count() == 1;
      } else {
        locks[r] = c.donor.storage->lock_to_give_up(c.args[0]);  // never waits
        all_donate = locks[r].owns_lock();
      }
    }
    std::vector<bool> donate;
    if (all_donate) {
      donate.assign(all[0].args.size(), false);
      donate[0] = true;
      base::counter_add("num_in_plugin_donations", static_cast<int64_t>(all.size()));
    } else {
      for (auto& l : locks) {
        if (l.owns_lock()) l.unlock();
      }
    }
    TORCHTPU_ASSIGN_OR_RETURN(auto outputs, exe->execute_replicated(lists, donate));
    for (size_t r = 0; r < all.size(); ++r) {
      if (locks[r].owns_lock() && !outputs[r].empty()) {
        all[r].donor.storage->give_buffer_to(locks[r], outputs[r][0]);
      }
    }
    for (const auto& o : outputs) {
      if (!o.empty()) flight.outputs.push_back(o[0]);
    }
    return outputs;
  };
  TORCHTPU_ASSIGN_OR_RETURN(Exchanged got, group.exchange(rank, seq, collective, std::move(mine),
                                                          runner, timeout()));
  if (collective == "graph") {
    base::counter_add("num_replicated_graph_executions");
  } else {
    base::counter_add("num_in_plugin_collectives");
    base::counter_add("in_plugin_collective_bytes", bytes);
  }
  return std::move(got.outputs);
}

base::StatusOr<runtime::BufferPtr> InPluginTransport::run_one(
    Rendezvous& group, int rank, uint64_t seq, const std::string& collective,
    const std::string& module, const std::string& description,
    std::vector<runtime::BufferPtr> args, Donor donor) {
  TORCHTPU_ASSIGN_OR_RETURN(auto outputs, run(group, rank, seq, collective, module, description,
                                              std::move(args), donor));
  if (outputs.size() != 1) {
    return base::internal_error("distributed: in-plugin " + collective + " returned " +
                                std::to_string(outputs.size()) + " results, expected 1");
  }
  return outputs[0];
}

base::StatusOr<std::vector<runtime::BufferPtr>> InPluginTransport::run_program(
    const std::string& module, const std::string& description,
    std::vector<runtime::BufferPtr> args) {
  for (const auto& a : args) {
    if (a->device_index() != device_index_) {
      return base::invalid_argument(
          "distributed: in-plugin program on rank " + std::to_string(rank_) +
          ": an argument is on tpu:" + std::to_string(a->device_index()) +
          ", the rank's device is tpu:" + std::to_string(device_index_));
    }
  }
  return run(*group_, rank_, next_seq_++, "graph", module, description, std::move(args));
}

base::StatusOr<std::vector<std::vector<int64_t>>> InPluginTransport::exchange_meta(
    const std::string& what, std::vector<int64_t> meta) {
  Contribution mine{what, what, device_index_, {}, std::move(meta)};
  TORCHTPU_ASSIGN_OR_RETURN(Exchanged ex, group_->exchange(rank_, next_seq_++, what,
                                                           std::move(mine), nullptr, timeout()));
  return std::move(ex.metas);
}

base::Status InPluginTransport::all_reduce(at::Tensor& tensor, const c10d::ReduceOp& op) {
  return guarded("all_reduce", [&]() -> base::Status {
    TORCHTPU_RETURN_IF_ERROR(check_tensor("all_reduce", "tensor", tensor));
    TORCHTPU_ASSIGN_OR_RETURN(ReduceKind kind, reduce_kind("all_reduce", op));
    TORCHTPU_ASSIGN_OR_RETURN(std::string module,
                              lowering::all_reduce_module(type_of(tensor), kind,
                                                          lowering::whole_world(size_)));
    std::vector<runtime::BufferPtr> args{aten::read_tensor(tensor)};
    Donor donor = donor_of(tensor, args[0]);
    if (kind == ReduceKind::kPremulSum) {
      TORCHTPU_ASSIGN_OR_RETURN(auto factor,
                                premul_factor(op, tensor.scalar_type(), device_index_));
      args.push_back(std::move(factor));
    }
    TORCHTPU_ASSIGN_OR_RETURN(auto out, run_one(*group_, rank_, next_seq_++, "all_reduce", module,
                                            describe(reduce_description("all_reduce", op), tensor),
                                            std::move(args), donor));
    aten::write_tensor(tensor, out);
    return base::Status::ok_status();
  });
}

base::Status InPluginTransport::all_gather(at::Tensor& output, const at::Tensor& input) {
  return guarded("all_gather", [&]() -> base::Status {
    TORCHTPU_RETURN_IF_ERROR(check_tensor("all_gather", "input", input));
    TORCHTPU_RETURN_IF_ERROR(check_tensor("all_gather", "output", output));
    if (output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type()) {
      return base::invalid_argument("distributed: all_gather: the output (" +
                                    shape_of(output) + ") must hold " +
                                    std::to_string(size_) + " inputs (" + shape_of(input) +
                                    ") of the same dtype");
    }
    TORCHTPU_ASSIGN_OR_RETURN(std::string module,
                              lowering::all_gather_module(type_of(input),
                                                          lowering::whole_world(size_),
                                                          output.sizes().vec()));
    TORCHTPU_ASSIGN_OR_RETURN(auto out, run_one(*group_, rank_, next_seq_++, "all_gather", module,
                                            describe("all_gather", input),
                                            {aten::read_tensor(input)}));
    aten::write_tensor(output, out);
    return base::Status::ok_status();
  });
}

base::Status InPluginTransport::reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                               const c10d::ReduceOp& op) {
  return guarded("reduce_scatter", [&]() -> base::Status {
    TORCHTPU_RETURN_IF_ERROR(check_tensor("reduce_scatter", "input", input));
    TORCHTPU_RETURN_IF_ERROR(check_tensor("reduce_scatter", "output", output));
    if (input.numel() != output.numel() * size_ || output.scalar_type() != input.scalar_type()) {
      return base::invalid_argument("distributed: reduce_scatter: the input (" +
                                    shape_of(input) + ") must hold " +
                                    std::to_string(size_) + " outputs (" + shape_of(output) +
                                    ") of the same dtype");
    }
    TORCHTPU_ASSIGN_OR_RETURN(ReduceKind kind, reduce_kind("reduce_scatter", op));
    if (lowering::is_bitwise(kind)) {
      // A program reduces bitwise ops only as an all_reduce (collectives.h): the whole
      // input reduced, this rank's part kept.
      at::Tensor whole = input.clone();
      TORCHTPU_RETURN_IF_ERROR(all_reduce(whole, op));
      output.copy_(whole.view(-1).narrow(0, rank_ * output.numel(), output.numel())
                       .view(output.sizes()));
      return base::Status::ok_status();
    }
    TORCHTPU_ASSIGN_OR_RETURN(std::string module,
                              lowering::reduce_scatter_module(type_of(input), kind,
                                                              lowering::whole_world(size_),
                                                              output.sizes().vec()));
    std::vector<runtime::BufferPtr> args{aten::read_tensor(input)};
    if (kind == ReduceKind::kPremulSum) {
      TORCHTPU_ASSIGN_OR_RETURN(auto factor, premul_factor(op, input.scalar_type(), device_index_));
      args.push_back(std::move(factor));
    }
    TORCHTPU_ASSIGN_OR_RETURN(
        auto out, run_one(*group_, rank_, next_seq_++, "reduce_scatter", module,
                      describe(reduce_description("reduce_scatter", op), input), std::move(args)));
    aten::write_tensor(output, out);
    return base::Status::ok_status();
  });
}

base::Status InPluginTransport::even_all_to_all(at::Tensor& output, const at::Tensor& input) {
  TORCHTPU_ASSIGN_OR_RETURN(std::string module,
                            lowering::all_to_all_module(type_of(input),
                                                        lowering::whole_world(size_),
                                                        output.sizes().vec()));
  TORCHTPU_ASSIGN_OR_RETURN(auto out, run_one(*group_, rank_, next_seq_++, "all_to_all", module,
                                          describe("all_to_all", input),
                                          {aten::read_tensor(input)}));
  aten::write_tensor(output, out);
  return base::Status::ok_status();
}

base::Status InPluginTransport::all_to_all(at::Tensor& output, const at::Tensor& input,
                                           const std::vector<int64_t>& output_split_sizes,
                                           const std::vector<int64_t>& input_split_sizes) {
  return guarded("all_to_all", [&]() -> base::Status {
    TORCHTPU_RETURN_IF_ERROR(check_tensor("all_to_all", "input", input));
    TORCHTPU_RETURN_IF_ERROR(check_tensor("all_to_all", "output", output));
    if (input.dim() == 0 || output.dim() == 0 || output.scalar_type() != input.scalar_type()) {
      return base::invalid_argument("distributed: all_to_all: input " + shape_of(input) +
                                    " and output " + shape_of(output) +
                                    " need a dim 0 and the same dtype");
    }
    if (output_split_sizes.empty() && input_split_sizes.empty()) {
      if (input.size(0) % size_ != 0 || output.numel() != input.numel()) {
        return base::invalid_argument(
            "distributed: all_to_all: equal splits need dim 0 of the input " +
            shape_of(input) + " divisible by " + std::to_string(size_) +
            " and an output of as many elements, got " + shape_of(output));
      }
      return even_all_to_all(output, input);
    }
    // Uneven splits. First every rank learns every rank's splits, so all pad to one size.
    auto splits_or_equal = [&](const std::vector<int64_t>& s, const at::Tensor& t) {
      return s.empty() ? std::vector<int64_t>(size_, t.size(0) / size_) : s;
    };
    std::vector<int64_t> in = splits_or_equal(input_split_sizes, input);
    std::vector<int64_t> out = splits_or_equal(output_split_sizes, output);
    std::vector<int64_t> meta = in;
    meta.insert(meta.end(), out.begin(), out.end());
    Contribution splits{"all_to_all splits", "all_to_all splits", device_index_, {}, meta};
    TORCHTPU_ASSIGN_OR_RETURN(Exchanged ex,
                              group_->exchange(rank_, next_seq_++, "all_to_all",
                                               std::move(splits), nullptr, timeout()));
    int64_t max_rows = 1;
    for (int r = 0; r < size_; ++r) {
      const auto& m = ex.metas[r];
      if (static_cast<int>(m.size()) != 2 * size_) {
        return base::invalid_argument("distributed: all_to_all: rank " + std::to_string(r) +
                                      " gave " + std::to_string(m.size() / 2) +
                                      " splits for a group of " + std::to_string(size_));
      }
      for (int j = 0; j < size_; ++j) {
        if (m[j] != ex.metas[j][size_ + r]) {
          return base::invalid_argument(
              "distributed: all_to_all: rank " + std::to_string(r) + " sends " +
              std::to_string(m[j]) + " rows to rank " + std::to_string(j) +
              ", which expects " + std::to_string(ex.metas[j][size_ + r]) +
              "; input_split_sizes on one rank must match output_split_sizes on its peers");
        }
        max_rows = std::max(max_rows, m[j]);
      }
    }
    int64_t in_rows = 0, out_rows = 0;
    for (int j = 0; j < size_; ++j) {
      in_rows += in[j];
      out_rows += out[j];
    }
    if (in_rows != input.size(0) || out_rows != output.size(0)) {
      return base::invalid_argument("distributed: all_to_all: the splits add up to " +
                                    std::to_string(in_rows) + " input and " +
                                    std::to_string(out_rows) + " output rows, but the tensors "
                                    "have " + std::to_string(input.size(0)) + " and " +
                                    std::to_string(output.size(0)));
    }
    // Pad each chunk to max_rows (tpu ops on this rank's device), exchange evenly, keep
    // the true rows of what arrived.
    std::vector<int64_t> pad(2 * input.dim(), 0);  // the last pair pads dim 0 at its end
    std::vector<at::Tensor> chunks;
    int64_t offset = 0;
    for (int j = 0; j < size_; ++j) {
      pad.back() = max_rows - in[j];
      chunks.push_back(at::constant_pad_nd(input.narrow(0, offset, in[j]), pad, 0));
      offset += in[j];
    }
    at::Tensor padded = at::cat(chunks, 0);
    at::Tensor received = at::empty_like(padded);
    TORCHTPU_RETURN_IF_ERROR(even_all_to_all(received, padded));
    std::vector<at::Tensor> pieces;
    for (int j = 0; j < size_; ++j) pieces.push_back(received.narrow(0, j * max_rows, out[j]));
    output.copy_(at::cat(pieces, 0));
    return base::Status::ok_status();
  });
}

base::Status InPluginTransport::broadcast(at::Tensor& tensor, int root) {
  return guarded("broadcast", [&]() -> base::Status {
    TORCHTPU_RETURN_IF_ERROR(check_tensor("broadcast", "tensor", tensor));
    TORCHTPU_ASSIGN_OR_RETURN(std::string module,
                              lowering::broadcast_module(type_of(tensor), root,
                                                         lowering::whole_world(size_)));
    TORCHTPU_ASSIGN_OR_RETURN(
        auto out, run_one(*group_, rank_, next_seq_++, "broadcast", module,
                      describe("broadcast(root " + std::to_string(root) + ")", tensor),
                      {aten::read_tensor(tensor)}));
    aten::write_tensor(tensor, out);
    return base::Status::ok_status();
  });
}

base::Status InPluginTransport::point_to_point(at::Tensor& tensor, int peer, int tag,
                                               bool sending) {
  const char* what = sending ? "send" : "recv";
  TORCHTPU_RETURN_IF_ERROR(check_tensor(what, "tensor", tensor));
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return base::invalid_argument(std::string("distributed: ") + what + " on rank " +
                                  std::to_string(rank_) + ": peer " + std::to_string(peer) +
                                  " is not another rank of a group of " + std::to_string(size_));
  }
  int src = sending ? rank_ : peer;
  int dst = sending ? peer : rank_;
  auto key = std::make_tuple(src, dst, tag);
  std::unique_lock<std::mutex> lock(channels_mu_);  // each (peer, tag) has its own thread
  auto it = channels_.find(key);
  if (it == channels_.end()) {
    std::vector<int64_t> names{src, dst};
    if (!global_ranks_.empty()) names = {global_ranks_[src], global_ranks_[dst]};
    int local = sending ? 0 : 1;
    TORCHTPU_ASSIGN_OR_RETURN(
        auto rendezvous,
        Rendezvous::join(group_key_ + " p2p " + std::to_string(src) + "->" + std::to_string(dst) +
                             " tag " + std::to_string(tag),
                         2, local, names));
    it = channels_.emplace(key, Channel{std::move(rendezvous), local, 0}).first;
  }
  Channel& channel = it->second;  // a map's elements stay where they are
  lock.unlock();
  TORCHTPU_ASSIGN_OR_RETURN(std::string module,
                            lowering::collective_permute_module(type_of(tensor), 2, {{0, 1}}));
  TORCHTPU_ASSIGN_OR_RETURN(
      auto out, run_one(*channel.rendezvous, channel.local_rank, channel.next_seq++, what, module,
                    describe(std::string(what) + "(tag " + std::to_string(tag) + ")", tensor),
                    {aten::read_tensor(tensor)}));
  if (!sending) aten::write_tensor(tensor, out);
  return base::Status::ok_status();
}

base::Status InPluginTransport::send(const at::Tensor& tensor, int dst, int tag) {
  at::Tensor t = tensor;
  return guarded("send", [&] { return point_to_point(t, dst, tag, true); });
}

base::Status InPluginTransport::recv(at::Tensor& tensor, int src, int tag) {
  return guarded("recv", [&] { return point_to_point(tensor, src, tag, false); });
}

base::StatusOr<int> InPluginTransport::recv_any(at::Tensor& /*tensor*/, int tag) {
  return base::unimplemented(
      "tpu: recv without a source (tag " + std::to_string(tag) + ") on rank " +
      std::to_string(rank_) + ": ranks that are threads of one process meet each send at a "
      "recv that names its sender; pass src=");
}

base::Status InPluginTransport::barrier() {
  Contribution mine{"barrier", "barrier", device_index_, {}, {}};
  TORCHTPU_ASSIGN_OR_RETURN(
      Exchanged ignored,
      group_->exchange(rank_, next_seq_++, "barrier", std::move(mine), nullptr, timeout()));
  (void)ignored;
  // Work this rank enqueued before the barrier has finished when it returns.
  if (runtime::BufferPtr tail = runtime::queue_tail(device_index_)) {
    TORCHTPU_RETURN_IF_ERROR(tail->await_ready());
  }
  return base::Status::ok_status();
}

}  // namespace torchtpu::distributed
