#include "distributed/backend.h"

#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>

#include <cxxabi.h>

#include "base/metrics.h"
#include "distributed/arguments.h"
#include "distributed/in_plugin_transport.h"
#include "distributed/poll_wait.h"
#include "distributed/work.h"

namespace torchtpu::distributed {
namespace {

// The Work's op type for reduce_scatter_tensor_coalesced: torch 2.13 has its own; torch
// 2.11 (a GPU image's torch, which scripts/gpu_check.sh builds against) has none, and
// COALESCED is the nearest.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
constexpr c10d::OpType kReduceScatterTensorCoalesced =
    c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED;
#else
constexpr c10d::OpType kReduceScatterTensorCoalesced = c10d::OpType::COALESCED;
#endif

// Where a host-staged collective's time goes outside its transport (nanoseconds summed
// over calls): issuing it, waiting in the group's queue, completing its Work and future.
const base::Counter kIssueNs("host_staged_issue_ns");
const base::Counter kQueueWaitNs("host_staged_queue_wait_ns");
const base::Counter kCompleteNs("host_staged_complete_ns");

}  // namespace

TpuBackend::TpuBackend(std::unique_ptr<Transport> transport, std::vector<int64_t> global_ranks,
                       std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store)
    : c10d::Backend(transport->rank(), transport->size()),
      transport_(std::move(transport)),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout),
      store_(std::move(store)) {
  if (transport_->kind() == TransportKind::kHostStaged) {
    ok_or_raise(check_poll_budget());
    queue_ = std::make_unique<CollectiveQueue>("pt_tpu_staging");
  }
}

// The recvs of one tag in posting order: each takes a ticket when posted; a recv from a
// named source waits for the earlier recvs from any source, one from any source for every
// earlier recv (its header recv, posted while a named recv had posted its data's recv, would
// match that data, and Gloo abort on the size). Recvs from different named sources do not
// wait for each other.
struct TpuBackend::RecvOrder {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next = 0;
  std::set<uint64_t> pending, pending_any;

  uint64_t post(bool any) {
    std::lock_guard<std::mutex> lock(mu);
    pending.insert(next);
    if (any) pending_any.insert(next);
    return next++;
  }
  void wait_turn(uint64_t ticket, bool any) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] {
      const std::set<uint64_t>& before = any ? pending : pending_any;
      return before.empty() || *before.begin() >= ticket;
    });
  }
  void done(uint64_t ticket) {
    {
      std::lock_guard<std::mutex> lock(mu);
      pending.erase(ticket);
      pending_any.erase(ticket);
    }
    cv.notify_all();
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mu);
    return pending.empty();
  }
};

namespace {

// A transport's refusal names the primitive that ran ("tpu: all_gather: the ranks
// disagree ..." for a gather); the user called `title` ("tpu:gather"): named first.
base::Status called_as(const char* title, base::Status s) {
  if (s.ok() || s.code() != base::StatusCode::kInvalidArgument) return s;
  const std::string& m = s.message();
  std::string called = std::string(title).substr(4);
  size_t colon = m.find(':', 5);
  if (m.rfind("tpu: ", 0) != 0 || colon == std::string::npos) return s;
  std::string ran = m.substr(5, colon - 5);
  if (ran == called) return s;
  return base::invalid_argument("tpu: " + called + " (run as " + ran + ")" + m.substr(colon));
}

// One recv's place in its tag's RecvOrder, given up when the recv ends or its task is
// dropped unrun (a destroyed group's queue cancels it): later recvs never wait for it.
class RecvTicket {
 public:
  RecvTicket(std::shared_ptr<TpuBackend::RecvOrder> order, bool any)
      : order_(std::move(order)), any_(any), ticket_(order_->post(any)) {}
  ~RecvTicket() { order_->done(ticket_); }
  RecvTicket(const RecvTicket&) = delete;
  RecvTicket& operator=(const RecvTicket&) = delete;
  void wait_turn() { order_->wait_turn(ticket_, any_); }

 private:
  std::shared_ptr<TpuBackend::RecvOrder> order_;
  bool any_;
  uint64_t ticket_;
};

}  // namespace

void TpuBackend::trim_p2p_locked() {
  if (p2p_queues_.size() < kMaxP2pQueues) return;
  for (auto q = p2p_queues_.begin(); q != p2p_queues_.end();) {
    q = q->second.use_count() == 1 && q->second->idle() ? p2p_queues_.erase(q) : std::next(q);
  }
  for (auto o = recv_orders_.begin(); o != recv_orders_.end();) {
    o = o->second.use_count() == 1 && o->second->idle() ? recv_orders_.erase(o) : std::next(o);
  }
}

std::shared_ptr<CollectiveQueue> TpuBackend::p2p_queue(bool send, int peer, int tag) {
  std::lock_guard<std::mutex> lock(p2p_mu_);
  auto key = std::make_tuple(send, peer, tag);
  auto it = p2p_queues_.find(key);
  if (it != p2p_queues_.end()) return it->second;
  trim_p2p_locked();
  return p2p_queues_
      .emplace(key, std::make_shared<CollectiveQueue>(send ? "pt_tpu_send" : "pt_tpu_recv"))
      .first->second;
}

std::shared_ptr<TpuBackend::RecvOrder> TpuBackend::recv_order(int tag) {
  std::lock_guard<std::mutex> lock(p2p_mu_);
  auto& o = recv_orders_[tag];
  if (!o) o = std::make_shared<RecvOrder>();
  return o;
}

TpuBackend::~TpuBackend() = default;

void TpuBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  if (queue_ == nullptr) {
    transport_->set_timeout(timeout);
    return;
  }
  // In order with the collectives already queued: those keep the timeout they were
  // issued under.
  queue_->enqueue([transport = transport_, timeout](bool cancelled) {
    if (!cancelled) transport->set_timeout(timeout);
  });
}

namespace {

std::mutex g_factory_mu;
TpuBackend::GroupFactory* g_factory = nullptr;  // leaked: it may hold a Python callable

}  // namespace

void TpuBackend::set_group_factory(GroupFactory factory) {
  std::lock_guard<std::mutex> lock(g_factory_mu);
  g_factory = new GroupFactory(std::move(factory));
}

bool TpuBackend::supportsSplitting() const {
  std::lock_guard<std::mutex> lock(g_factory_mu);
  return g_factory != nullptr;
}

c10::intrusive_ptr<c10d::Backend> TpuBackend::split(const c10::intrusive_ptr<c10d::Store>&,
                                                    const std::vector<int>& ranks,
                                                    const c10::intrusive_ptr<Options>& opts) {
  const int64_t number = splits_++;
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return nullptr;
  std::vector<int64_t> global;
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < size_, "tpu: cannot split rank ", r, " out of a group of ", size_,
                " ranks");
    global.push_back(static_cast<size_t>(r) < global_ranks_.size() ? global_ranks_[r] : r);
  }
  GroupFactory factory;
  {
    std::lock_guard<std::mutex> lock(g_factory_mu);
    TORCH_CHECK(g_factory != nullptr, "tpu: splitting a group needs torchtpu.distributed, "
                "which sets how groups are made; import torchtpu first");
    factory = *g_factory;
  }
  std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_;
  auto store = c10::make_intrusive<c10d::PrefixStore>("split/" + std::to_string(number) + "/",
                                                      store_);
  return factory(store, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()),
                 global, timeout);
}

c10::intrusive_ptr<c10d::Backend::Options> TpuBackend::getBackendOptions() {
  return c10::make_intrusive<Options>(getBackendName(), timeout_);
}

InPluginTransport* TpuBackend::in_plugin() {
  return transport_->kind() == TransportKind::kInPlugin
             ? static_cast<InPluginTransport*>(transport_.get())
             : nullptr;
}

c10::intrusive_ptr<TpuWork> TpuBackend::launch(c10d::OpType type, const char* title,
                                                  std::vector<at::Tensor> outputs,
                                                  DenseArgs dense, Body inner,
                                                  CollectiveQueue* queue) {
  Body body = [inner = std::move(inner), dense = std::move(dense),
               title](Transport& tr) mutable {
    TORCHTPU_RETURN_IF_ERROR(called_as(title, inner(tr)));
    dense.copy_back();
    return base::Status::ok_status();
  };
  if (queue == nullptr) queue = queue_.get();
  if (queue == nullptr) {  // an in-plugin collective: on the calling thread
    ok_or_raise(body(*transport_));
    return c10::make_intrusive<TpuWork>(rank_, type, title, std::move(outputs), true);
  }
  int64_t issued = base::monotonic_ns();
  auto work = c10::make_intrusive<TpuWork>(rank_, type, title, std::move(outputs), false);
  std::optional<c10::Device> device;
  for (const at::Tensor& t : work->result()) {
    if (t.defined()) device = t.device();
  }
  std::vector<int64_t> ranks = global_ranks_;
  // The issuer's grad and inference modes (and the rest of its thread-local state) hold
  // for the task's writes into the outputs: all_gather into tensors made under
  // inference_mode, or into leaves that require grad under no_grad.
  at::ThreadLocalState issuer;
  int64_t enqueued = base::monotonic_ns();
  CollectiveQueue::Task task([work, body = std::move(body), transport = transport_, title,
                              device, ranks, enqueued, issuer](bool cancelled) mutable {
    at::ThreadLocalStateGuard issuer_state(issuer);
    kQueueWaitNs.add(base::monotonic_ns() - enqueued);
    std::exception_ptr error;
    try {
      if (cancelled) {
        std::string names;
        for (int64_t r : ranks) names += (names.empty() ? "" : ", ") + std::to_string(r);
        C10_THROW_ERROR(DistBackendError,
                        std::string(title) + " on global ranks [" + names +
                            "] did not run: its process group was destroyed first; wait for "
                            "a collective's work before destroying its group");
      }
      c10::OptionalDeviceGuard guard(device);
      ok_or_raise(body(*transport));
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is being cancelled (Python finalizing): let it unwind
    } catch (...) {
      error = std::current_exception();
    }
    // What the task holds goes before the issuer resumes: once the work completes, the
    // issuer may destroy the group and exit, and a transport freed here then (its Gloo
    // backend) would run during Python's finalization, inside a destructor a thread
    // cancelled by it cannot unwind through.
    body = nullptr;
    transport.reset();
    int64_t completing = base::monotonic_ns();
    work->complete(error);
    kCompleteNs.add(base::monotonic_ns() - completing);
  });
  kIssueNs.add(base::monotonic_ns() - issued);
  // Always on the queue's thread, whatever the size: c10d hands the backend no async_op, and a
  // collective run here would block an `async_op=True` caller until every peer joined, which
  // deadlocks programs that signal a peer (a store key, another group) before waiting.
  queue->enqueue(std::move(task));
  return work;
}

c10::intrusive_ptr<c10d::Work> TpuBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  at::Tensor t = single("broadcast", tensors, "input");
  check_root("broadcast", opts.rootRank, size_);
  int root = static_cast<int>(opts.rootRank);
  DenseArgs dense("broadcast");
  at::Tensor d = dense.written(t);
  return launch(c10d::OpType::BROADCAST, "tpu:broadcast", tensors, std::move(dense),
                [d, root](Transport& tr) mutable { return tr.broadcast(d, root); });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  at::Tensor t = single("all_reduce", tensors, "input");
  check_reduce_op("all_reduce", opts.reduceOp, t);
  c10d::ReduceOp op = opts.reduceOp;
  DenseArgs dense("all_reduce");
  at::Tensor d = dense.written(t);
  return launch(c10d::OpType::ALLREDUCE, "tpu:all_reduce", tensors, std::move(dense),
                [d, op](Transport& tr) mutable { return tr.all_reduce(d, op); });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  for (const at::Tensor& t : tensors) {
    check_tensor("all_reduce_coalesced", t, "input");
    check_reduce_op("all_reduce_coalesced", opts.reduceOp, t);
  }
  c10d::ReduceOp op = opts.reduceOp;
  DenseArgs dense("all_reduce_coalesced");
  std::vector<at::Tensor> ds;
  for (const at::Tensor& t : tensors) ds.push_back(dense.written(t));
  return launch(c10d::OpType::ALLREDUCE_COALESCED, "tpu:all_reduce_coalesced", tensors,
                std::move(dense), [ts = ds, op](Transport& tr) mutable -> base::Status {
                  for (at::Tensor& t : ts) TORCHTPU_RETURN_IF_ERROR(tr.all_reduce(t, op));
                  return base::Status::ok_status();
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOptions& opts) {
  at::Tensor t = single("reduce", tensors, "input");
  check_reduce_op("reduce", opts.reduceOp, t);
  check_root("reduce", opts.rootRank, size_);
  // Every rank computes the reduction; only the root's tensor receives it.
  DenseArgs dense("reduce");
  at::Tensor work_tensor = rank_ == opts.rootRank ? dense.written(t) : t.contiguous().clone();
  c10d::ReduceOp op = opts.reduceOp;
  return launch(c10d::OpType::REDUCE, "tpu:reduce", tensors, std::move(dense),
                [work_tensor, op](Transport& tr) mutable {
                  return tr.all_reduce(work_tensor, op);
                });
}

void TpuBackend::check_all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& in) {
  if (static_cast<int>(outputs.size()) != size_) {
    invalid("all_gather", "takes one list of " + std::to_string(size_) +
                              " output tensors (one per rank)");
  }
  for (const at::Tensor& o : outputs) {
    check_tensor("all_gather", o, "output");
    check_same_dtype("all_gather", in, o);
    if (o.sizes() != in.sizes()) {
      invalid("all_gather", "an output is " + shape_text(o) + " but the input is " +
                                shape_text(in) + "; each output must have the input's shape");
    }
  }
}

base::Status TpuBackend::all_gather_list(Transport& tr, std::vector<at::Tensor>& outputs,
                                         const at::Tensor& in) {
  at::Tensor flat = at::empty({tr.size() * in.numel()}, in.options());
  TORCHTPU_RETURN_IF_ERROR(tr.all_gather(flat, in.contiguous()));
  split_into(flat, outputs);
  return base::Status::ok_status();
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  at::Tensor in = single("all_gather", inputs, "input");
  if (outputs.size() != 1) invalid("all_gather", "takes one list of output tensors");
  check_all_gather(outputs[0], in);
  return launch(c10d::OpType::ALLGATHER, "tpu:all_gather", outputs[0], DenseArgs("all_gather"),
                [outs = outputs[0], in](Transport& tr) mutable { return all_gather_list(tr, outs, in); });
}

void TpuBackend::check_all_gather_base(const at::Tensor& output, const at::Tensor& input) {
  const std::string coll = "all_gather_into_tensor";
  check_tensor(coll, input, "input");
  check_tensor(coll, output, "output");
  check_same_dtype(coll, input, output);
  if (output.numel() != size_ * input.numel()) {
    invalid(coll, "the output " + shape_text(output) + " must have " + std::to_string(size_) +
                      " times the elements of the input " + shape_text(input));
  }
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& /*opts*/) {
  check_all_gather_base(output, input);
  DenseArgs dense("all_gather_into_tensor");
  at::Tensor out = dense.written(output);
  at::Tensor in = input.contiguous();
  return launch(c10d::OpType::_ALLGATHER_BASE, "tpu:all_gather_into_tensor", {output},
                std::move(dense),
                [out, in](Transport& tr) mutable { return tr.all_gather(out, in); });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  if (outputs.size() != inputs.size()) {
    invalid("all_gather_coalesced", "got " + std::to_string(outputs.size()) +
                                        " output lists for " + std::to_string(inputs.size()) +
                                        " inputs");
  }
  std::vector<at::Tensor> all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor("all_gather_coalesced", inputs[i], "input");
    check_all_gather(outputs[i], inputs[i]);
    all.insert(all.end(), outputs[i].begin(), outputs[i].end());
  }
  return launch(c10d::OpType::ALLGATHER_COALESCED, "tpu:all_gather_coalesced", all,
                DenseArgs("all_gather_coalesced"),
                [outs = outputs, ins = inputs](Transport& tr) mutable -> base::Status {
                  for (size_t i = 0; i < ins.size(); ++i) {
                    TORCHTPU_RETURN_IF_ERROR(all_gather_list(tr, outs[i], ins[i]));
                  }
                  return base::Status::ok_status();
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  if (outputs.size() != inputs.size()) {
    invalid("all_gather_into_tensor_coalesced", "got " + std::to_string(outputs.size()) +
                                                    " outputs for " +
                                                    std::to_string(inputs.size()) + " inputs");
  }
  DenseArgs dense("all_gather_into_tensor_coalesced");
  std::vector<at::Tensor> outs, ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_all_gather_base(outputs[i], inputs[i]);
    outs.push_back(dense.written(outputs[i]));
    ins.push_back(inputs[i].contiguous());
  }
  return launch(c10d::OpType::COALESCED, "tpu:all_gather_into_tensor_coalesced", outputs,
                std::move(dense), [outs, ins](Transport& tr) mutable -> base::Status {
                  for (size_t i = 0; i < ins.size(); ++i) {
                    TORCHTPU_RETURN_IF_ERROR(tr.all_gather(outs[i], ins[i]));
                  }
                  return base::Status::ok_status();
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::GatherOptions& opts) {
  at::Tensor in = single("gather", inputs, "input");
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
  std::vector<at::Tensor> outs = is_root ? outputs[0] : std::vector<at::Tensor>{};
  return launch(c10d::OpType::GATHER, "tpu:gather", outs, DenseArgs("gather"),
                [outs, in = in.contiguous(), is_root](Transport& tr) mutable -> base::Status {
                  at::Tensor flat = at::empty({tr.size() * in.numel()}, in.options());
                  TORCHTPU_RETURN_IF_ERROR(tr.all_gather(flat, in));
                  if (is_root) split_into(flat, outs);
                  return base::Status::ok_status();
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  at::Tensor out = single("scatter", outputs, "output");
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
  return launch(c10d::OpType::SCATTER, "tpu:scatter", outputs, DenseArgs("scatter"),
                [out, send, n, in_splits, out_splits](Transport& tr) mutable -> base::Status {
                  at::Tensor recv = at::empty({n}, out.options());
                  TORCHTPU_RETURN_IF_ERROR(
                      tr.all_to_all(recv, send, out_splits, in_splits));
                  out.copy_(recv.view(out.sizes()));
                  return base::Status::ok_status();
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = single("reduce_scatter", outputs, "output");
  check_reduce_op("reduce_scatter", opts.reduceOp, out);
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
    invalid("reduce_scatter", "takes one list of " + std::to_string(size_) + " inputs");
  }
  bool even = true;
  int64_t offset = 0;  // of this rank's part in the concatenated inputs
  for (int r = 0; r < size_; ++r) {
    const at::Tensor& i = inputs[0][r];
    check_tensor("reduce_scatter", i, "input");
    check_same_dtype("reduce_scatter", i, out);
    even = even && i.sizes() == out.sizes();
    if (r < rank_) offset += i.numel();
  }
  if (inputs[0][rank_].sizes() != out.sizes()) {
    invalid("reduce_scatter", "the input for this rank (" + std::to_string(rank_) + ") is " +
                                  shape_text(inputs[0][rank_]) + " but the output is " +
                                  shape_text(out) + "; they must have the same shape");
  }
  at::Tensor flat_in = flat_cat(inputs[0], out.options());
  c10d::ReduceOp op = opts.reduceOp;
  DenseArgs dense("reduce_scatter");
  at::Tensor d = dense.written(out);
  if (!even) {
    // Parts of different sizes (Gloo takes them): the whole list reduced, this rank's part
    // kept. Every rank must pass the same part sizes; only their total is compared (Gloo
    // checks none).
    return launch(c10d::OpType::REDUCE_SCATTER, "tpu:reduce_scatter", outputs, std::move(dense),
                  [d, flat_in, op, offset](Transport& tr) mutable -> base::Status {
                    TORCHTPU_RETURN_IF_ERROR(tr.all_reduce(flat_in, op));
                    d.view(-1).copy_(flat_in.narrow(0, offset, d.numel()));
                    return base::Status::ok_status();
                  });
  }
  return launch(c10d::OpType::REDUCE_SCATTER, "tpu:reduce_scatter", outputs, std::move(dense),
                [d, flat_in, op](Transport& tr) mutable {
                  return tr.reduce_scatter(d, flat_in, op);
                });
}

void TpuBackend::check_reduce_scatter_base(const at::Tensor& output, const at::Tensor& input,
                                           const c10d::ReduceOp& op) {
  const std::string coll = "reduce_scatter_tensor";
  check_tensor(coll, input, "input");
  check_tensor(coll, output, "output");
  check_same_dtype(coll, input, output);
  check_reduce_op(coll, op, input);
  if (input.numel() != size_ * output.numel()) {
    invalid(coll, "the input " + shape_text(input) + " must have " + std::to_string(size_) +
                      " times the elements of the output " + shape_text(output));
  }
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_reduce_scatter_base(output, input, opts.reduceOp);
  c10d::ReduceOp op = opts.reduceOp;
  DenseArgs dense("reduce_scatter_tensor");
  at::Tensor out = dense.written(output);
  at::Tensor in = input.contiguous();
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, "tpu:reduce_scatter_tensor", {output},
                std::move(dense), [out, in, op](Transport& tr) mutable {
                  return tr.reduce_scatter(out, in, op);
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() != inputs.size()) {
    invalid("reduce_scatter_tensor_coalesced", "got " + std::to_string(outputs.size()) +
                                                   " outputs for " +
                                                   std::to_string(inputs.size()) + " inputs");
  }
  DenseArgs dense("reduce_scatter_tensor_coalesced");
  std::vector<at::Tensor> outs, ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_reduce_scatter_base(outputs[i], inputs[i], opts.reduceOp);
    outs.push_back(dense.written(outputs[i]));
    ins.push_back(inputs[i].contiguous());
  }
  c10d::ReduceOp op = opts.reduceOp;
  return launch(kReduceScatterTensorCoalesced,
                "tpu:reduce_scatter_tensor_coalesced", outputs, std::move(dense),
                [outs, ins, op](Transport& tr) mutable -> base::Status {
                  for (size_t i = 0; i < ins.size(); ++i) {
                    TORCHTPU_RETURN_IF_ERROR(tr.reduce_scatter(outs[i], ins[i], op));
                  }
                  return base::Status::ok_status();
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_split_sizes,
                                                         std::vector<int64_t>& input_split_sizes,
                                                         const c10d::AllToAllOptions& /*opts*/) {
  const std::string coll = "all_to_all_single";
  check_tensor(coll, input, "input");
  check_tensor(coll, output, "output");
  check_same_dtype(coll, input, output);
  const bool equal_split = output_split_sizes.empty() && input_split_sizes.empty();
  if (equal_split) {
    // As Gloo and NCCL: each rank sends numel / world elements to each, whatever the two
    // tensors' shapes (a [2, 3] input into a [6] output).
    for (const at::Tensor* t : {&input, &output}) {
      if (t->numel() % size_ != 0) {
        invalid(coll, std::string(t == &input ? "the input " : "the output ") + shape_text(*t) +
                          " has " + std::to_string(t->numel()) + " elements, which do not "
                          "split evenly over " + std::to_string(size_) + " ranks; pass split "
                          "sizes");
      }
    }
    if (input.numel() != output.numel()) {
      invalid(coll, "the input " + shape_text(input) + " has " + std::to_string(input.numel()) +
                        " elements but the output " + shape_text(output) + " has " +
                        std::to_string(output.numel()) + "; without split sizes every rank "
                        "sends and receives the same number");
    }
  }
  auto check_splits = [&](const std::vector<int64_t>& splits, const at::Tensor& t,
                          const char* role) {
    int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    if (splits.empty()) {
      if (equal_split) return;  // checked above, by elements
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
  DenseArgs dense(coll);
  at::Tensor out = dense.written(output);
  at::Tensor in = input.contiguous();
  if (equal_split) {
    out = out.view(-1);
    in = in.view(-1);
  }
  return launch(c10d::OpType::ALLTOALL_BASE, "tpu:all_to_all_single", {output}, std::move(dense),
                [out, in, out_splits = output_split_sizes,
                 in_splits = input_split_sizes](Transport& tr) mutable {
                  return tr.all_to_all(out, in, out_splits, in_splits);
                });
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
  return launch(c10d::OpType::ALLTOALL, "tpu:all_to_all", outputs, DenseArgs("all_to_all"),
                [outs = outputs, send, in_splits, out_splits](Transport& tr) mutable -> base::Status {
                  at::Tensor recv = at::empty(
                      {std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})},
                      send.options());
                  TORCHTPU_RETURN_IF_ERROR(
                      tr.all_to_all(recv, send, out_splits, in_splits));
                  split_into(recv, outs);
                  return base::Status::ok_status();
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                int tag) {
  at::Tensor t = single("send", tensors, "input");
  if (dst_rank < 0 || dst_rank >= size_ || dst_rank == rank_) {
    invalid("send", "destination " + std::to_string(dst_rank) + " is not another rank of the "
                    "group of " + std::to_string(size_));
  }
  // Held until the task is enqueued: a queue in use is never ended meanwhile.
  std::shared_ptr<CollectiveQueue> queue = p2p_queue(true, dst_rank, tag);
  return launch(c10d::OpType::SEND, "tpu:send", tensors, DenseArgs("send"),
                [t = t.contiguous(), dst_rank, tag](Transport& tr) {
                  return tr.send(t, dst_rank, tag);
                },
                queue.get());
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                int tag) {
  at::Tensor t = single("recv", tensors, "output");
  if (src_rank < 0 || src_rank >= size_ || src_rank == rank_) {
    invalid("recv", "source " + std::to_string(src_rank) + " is not another rank of the "
                    "group of " + std::to_string(size_));
  }
  DenseArgs dense("recv");
  at::Tensor d = dense.written(t);
  std::shared_ptr<CollectiveQueue> queue = p2p_queue(false, src_rank, tag);
  auto ticket = std::make_shared<RecvTicket>(recv_order(tag), false);
  return launch(c10d::OpType::RECV, "tpu:recv", tensors, std::move(dense),
                [d, src_rank, tag, ticket](Transport& tr) mutable {
                  ticket->wait_turn();
                  return tr.recv(d, src_rank, tag);
                },
                queue.get());
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                         int tag) {
  at::Tensor t = single("recv", tensors, "output");
  DenseArgs dense("recv");
  at::Tensor d = dense.written(t);
  auto source = std::make_shared<std::atomic<int>>(-1);
  std::shared_ptr<CollectiveQueue> queue = p2p_queue(false, -1, tag);
  auto ticket = std::make_shared<RecvTicket>(recv_order(tag), true);
  c10::intrusive_ptr<TpuWork> work = launch(
      c10d::OpType::RECVANYSOURCE, "tpu:recv_anysource", tensors, std::move(dense),
      [d, tag, source, ticket](Transport& tr) mutable -> base::Status {
        ticket->wait_turn();
        TORCHTPU_ASSIGN_OR_RETURN(int src, tr.recv_any(d, tag));
        source->store(src);
        return base::Status::ok_status();
      },
      queue.get());
  work->set_source(source);
  return work;
}

c10::intrusive_ptr<c10d::Work> TpuBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  return launch(c10d::OpType::BARRIER, "tpu:barrier", {}, DenseArgs("barrier"),
                [](Transport& tr) { return tr.barrier(); });
}

}  // namespace torchtpu::distributed
