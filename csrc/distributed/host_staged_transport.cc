#include "distributed/host_staged_transport.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "aten/device_runtime.h"
#include "aten/deferred_checks.h"
#include "aten/tpu_storage.h"
#include "base/metrics.h"
#include "distributed/host_reduce.h"
#include "distributed/poll_wait.h"

namespace torchtpu::distributed {

namespace {

bool signature_checks_enabled() {
  const char* v = std::getenv("TORCHTPU_DIST_CHECK");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Where a host-staged collective's time goes, in nanoseconds summed over calls (read by
// bench/collectives.py's breakdown): the copy to the host, the wait for the signature
// exchange after it, the data exchange, and the hand-off of the result to the device.
const base::Counter kD2hNs("host_staged_d2h_ns");
const base::Counter kCheckWaitNs("host_staged_check_wait_ns");
const base::Counter kExchangeNs("host_staged_exchange_ns");
const base::Counter kToDeviceNs("host_staged_to_device_ns");
// Collectives whose data travelled with their signature exchange (one Gloo exchange).
const base::Counter kCarried("num_host_staged_carried");

// Adds the time from its construction (or the last lap) to a counter.
class Lap {
 public:
  Lap() : t_(base::monotonic_ns()) {}
  void to(const base::Counter& c) {
    int64_t t = base::monotonic_ns();
    c.add(t - t_);
    t_ = t;
  }

 private:
  int64_t t_;
};

int64_t nbytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// A header: the signature, padded so that the payload after it starts 64-byte aligned.
// Whether a payload follows needs no word of its own: it follows when the payload's size,
// which the signature holds, fits the room.
constexpr int64_t kHeaderBytes = (kSignatureLength * 8 + 63) / 64 * 64;
static_assert(kHeaderBytes % 64 == 0, "payloads start 64-byte aligned");

// The payload room of each rank's block in a group of `n`: kGatheredPayloadBytes shared
// by the n - 1 peers a rank receives from, at least kMinPayloadRoomBytes, 64-byte aligned.
// A function of the group's size alone, so every rank computes the same.
int64_t payload_room(int64_t n) {
  if (n <= 1) return 0;
  constexpr int64_t kGatheredPayloadBytes = int64_t{64} << 10;
  constexpr int64_t kMinPayloadRoomBytes = int64_t{4} << 10;
  return std::max(kMinPayloadRoomBytes, kGatheredPayloadBytes / (n - 1) / 64 * 64);
}

}  // namespace

HostStagedTransport::HostStagedTransport(c10::intrusive_ptr<c10d::Backend> gloo,
                                         c10::intrusive_ptr<c10d::Store> store,
                                         std::vector<int64_t> global_ranks,
                                         std::chrono::milliseconds timeout)
    : gloo_(std::move(gloo)),
      store_(std::move(store)),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout),
      check_signatures_(signature_checks_enabled()),
      host_memory_(aten::client().platform_name() == "cpu"),
      inline_capacity_(payload_room(static_cast<int64_t>(global_ranks_.size()))),
      pool_(std::make_shared<HostPool>()) {}

std::string HostStagedTransport::ranks_text() const {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < global_ranks_.size(); ++i) o << (i ? ", " : "") << global_ranks_[i];
  o << "]";
  return o.str();
}

std::string HostStagedTransport::failure(const char* what, const std::exception& e,
                                         bool collective) {
  std::string msg = c10::GetExceptionString(e);
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) msg = ce->what_without_backtrace();
  std::ostringstream out;
  out << "tpu: " << what;
  if (collective) out << " (collective #" << seq_ << " of the group)";
  out << " on global ranks " << ranks_text() << " (this is rank " << global_ranks_[rank()]
      << ", host-staged through Gloo) failed: " << msg << (collective ? missing_ranks() : "")
      << "; a peer rank exited or did not reach this collective within the group's timeout ("
      << timeout_.count() / 1000.0 << " s)";
  return out.str();
}

base::StatusOr<c10::intrusive_ptr<c10d::Work>> HostStagedTransport::start(
    const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& op,
    bool collective) {
  try {
    return op();
  } catch (const std::exception& e) {
    return base::unavailable(failure(what, e, collective));
  }
}

base::Status HostStagedTransport::finish(const char* what,
                                         const c10::intrusive_ptr<c10d::Work>& work,
                                         bool collective) {
  try {
    // Gloo's worker finishes a small exchange in less time than a sleeping thread takes
    // to be scheduled again on a busy machine (poll_wait.h).
    poll_until([&] { return work->isCompleted(); });
    work->wait();
  } catch (const std::exception& e) {
    return base::unavailable(failure(what, e, collective));
  }
  return base::Status::ok_status();
}

base::Status HostStagedTransport::run(const char* what,
                                      const std::function<c10::intrusive_ptr<c10d::Work>()>& op,
                                      bool collective) {
  TORCHTPU_ASSIGN_OR_RETURN(auto work, start(what, op, collective));
  return finish(what, work, collective);
}

std::string HostStagedTransport::missing_ranks() {
  if (store_ == nullptr || size() == 1) return "";
  const std::string prefix = "torchtpu_failed/" + std::to_string(seq_) + "/";
  try {
    store_->set(prefix + std::to_string(rank()), std::vector<uint8_t>{1});
    auto grace = std::min<std::chrono::milliseconds>(timeout_ / 2, std::chrono::seconds(5));
    auto deadline = std::chrono::steady_clock::now() + grace;
    std::vector<int64_t> missing;
    for (;;) {
      missing.clear();
      for (int r = 0; r < size(); ++r) {
        if (r != rank() && !store_->check({prefix + std::to_string(r)})) {
          missing.push_back(global_ranks_[r]);
        }
      }
      if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (missing.empty()) return "; every rank of the group reached this collective";
    std::ostringstream o;
    o << "; global ranks [";
    for (size_t i = 0; i < missing.size(); ++i) o << (i ? ", " : "") << missing[i];
    o << "] did not reach it (they exited, or are still busy elsewhere)";
    return o.str();
  } catch (const std::exception&) {
    return "; the group's store does not answer either, so which rank is missing is unknown";
  }
}

bool HostStagedTransport::fits(int64_t payload_bytes) const {
  return check_signatures_ && size() > 1 && payload_bytes <= inline_capacity_;
}

at::Tensor HostStagedTransport::header_slot() {
  int64_t block = kHeaderBytes + inline_capacity_;
  if (!header_slot_.defined() || header_slot_.numel() < block) {
    header_slot_ = at::zeros({block}, at::TensorOptions().dtype(at::kByte));
  }
  return header_slot_.narrow(0, 0, block);
}

at::Tensor HostStagedTransport::outgoing_payload(const at::Tensor& like) {
  base::counter_add("host_staged_bytes", nbytes(like));
  return header_slot().narrow(0, kHeaderBytes, nbytes(like)).view(like.scalar_type())
      .view(like.sizes());
}

at::Tensor HostStagedTransport::Exchange::payload(int r, const at::Tensor& like) const {
  return all.narrow(0, r * block + kHeaderBytes, nbytes(like)).view(like.scalar_type())
      .view(like.sizes());
}

base::StatusOr<HostStagedTransport::Exchange> HostStagedTransport::start_exchange(
    const CollectiveSignature& s, bool carried) {
  Exchange x;
  if (!check_signatures_ || size() == 1) return x;
  x.what = collective_name(s.collective);
  x.carried = carried;
  at::Tensor in = header_slot();
  x.block = in.numel();
  std::vector<int64_t> sig = encode(s, size());
  auto* h = reinterpret_cast<int64_t*>(in.data_ptr());
  std::memcpy(h, sig.data(), kSignatureLength * sizeof(int64_t));
  int64_t total = size() * x.block;
  if (!gathered_slot_.defined() || gathered_slot_.numel() < total) {
    gathered_slot_ = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  }
  x.all = gathered_slot_.narrow(0, 0, total);
  c10d::AllgatherOptions opts;
  opts.timeout = timeout_;
  TORCHTPU_ASSIGN_OR_RETURN(x.work,
                            start(x.what, [&] { return gloo_->_allgather_base(x.all, in, opts); }));
  return x;
}

base::Status HostStagedTransport::finish_exchange(const Exchange& x) {
  if (!x.work) return base::Status::ok_status();
  TORCHTPU_RETURN_IF_ERROR(finish(x.what, x.work));
  if (x.carried) kCarried.add();
  std::vector<int64_t> rows(size() * kSignatureLength);
  for (int r = 0; r < size(); ++r) {
    const auto* h = reinterpret_cast<const int64_t*>(x.all.data_ptr<uint8_t>() + r * x.block);
    std::memcpy(rows.data() + r * kSignatureLength, h, kSignatureLength * sizeof(int64_t));
  }
  return compare_signatures(rows, size(), global_ranks_);
}

base::Status HostStagedTransport::check(const CollectiveSignature& s) {
  TORCHTPU_ASSIGN_OR_RETURN(Exchange x, start_exchange(s, false));
  return finish_exchange(x);
}

at::Tensor HostStagedTransport::receiving(const at::Tensor& like) {
  return pool_->take(nbytes(like)).view(like.scalar_type()).view(like.sizes());
}

void HostStagedTransport::copy_to_host(const at::Tensor& t, at::Tensor& host) {
  // Where the plugin's device memory is host memory, a whole-buffer tensor is read in
  // place: the plugin's own copy would wake its worker threads, which on a small machine
  // take the cores the peers' exchange needs.
  if (host_memory_ && t.storage_offset() == 0 && t.is_contiguous() && host.is_contiguous()) {
    runtime::BufferPtr b = aten::storage_buffer(t);
    if (nbytes(t) > 0 && t.sizes().equals(b->dims()) &&
        b->dtype() == aten::to_dtype(t.scalar_type()) &&
        b->await_ready().ok()) {
      auto addr = b->host_address();
      if (addr.ok()) {
        aten::flush_data_checks();  // as every host read does
        std::memcpy(host.data_ptr(), *addr, nbytes(t));
        return;
      }
    }
  }
  host.copy_(t);
}

at::Tensor HostStagedTransport::to_host(const at::Tensor& t, bool as_result) {
  base::counter_add("host_staged_bytes", nbytes(t));
  at::Tensor host;
  if (as_result) {
    host = receiving(t);
  } else {
    int64_t bytes = nbytes(t);
    if (!send_slot_.defined() || send_slot_.numel() < bytes) {
      send_slot_ = at::empty({std::max<int64_t>(bytes, 4096)}, at::TensorOptions().dtype(at::kByte));
    }
    host = send_slot_.narrow(0, 0, bytes).view(t.scalar_type()).view(t.sizes());
  }
  copy_to_host(t, host);
  return host;
}

base::Status HostStagedTransport::to_device(at::Tensor& dst, const at::Tensor& host) {
  base::counter_add("host_staged_bytes", nbytes(host));
  std::vector<int64_t> dims(dst.sizes().begin(), dst.sizes().end());
  // The chunk goes back to the pool once the plugin no longer reads it.
  auto buffer = aten::client().buffer_from_host_zero_copy(
      host.data_ptr(), aten::to_dtype(dst.scalar_type()), dims, dst.device().index(),
      [pool = pool_, storage = host.storage()]() mutable { pool->give_back(std::move(storage)); });
  TORCHTPU_RETURN_IF_ERROR(buffer.status());
  aten::write_tensor(dst, *buffer);
  return base::Status::ok_status();
}

base::Status HostStagedTransport::all_reduce(at::Tensor& tensor, const c10d::ReduceOp& op) {
  ++seq_;
  CollectiveSignature sig{Collective::kAllReduce, tensor, static_cast<int64_t>(op.op_)};
  Lap lap;
  if (fits(nbytes(tensor))) {
    // The data travels with the signatures; every rank reduces the gathered payloads in
    // rank order, so all get the same bits.
    at::Tensor mine = outgoing_payload(tensor);
    copy_to_host(tensor, mine);
    premultiply(mine, op);
    lap.to(kD2hNs);
    TORCHTPU_ASSIGN_OR_RETURN(Exchange x, start_exchange(sig, true));
    lap.to(kCheckWaitNs);
    TORCHTPU_RETURN_IF_ERROR(finish_exchange(x));
    base::counter_add("num_host_staged_collectives");
    at::Tensor host = receiving(tensor);
    reduce_parts(host, size(), [&](int r) { return x.payload(r, tensor); }, gloo_op(op));
    average(host, op, size());
    lap.to(kExchangeNs);
    base::Status s = to_device(tensor, host);
    lap.to(kToDeviceNs);
    return s;
  }
  // The signature exchange runs while the data comes to the host; the result is reduced
  // in place in a pool chunk that becomes the tensor's new buffer.
  TORCHTPU_ASSIGN_OR_RETURN(Exchange pending, start_exchange(sig, false));
  lap.to(kCheckWaitNs);
  at::Tensor host = to_host(tensor, /*as_result=*/true);
  lap.to(kD2hNs);
  TORCHTPU_RETURN_IF_ERROR(finish_exchange(pending));
  lap.to(kCheckWaitNs);
  base::counter_add("num_host_staged_collectives");
  premultiply(host, op);
  std::vector<at::Tensor> v{host};
  c10d::AllreduceOptions opts;
  opts.reduceOp = gloo_op(op);
  opts.timeout = timeout_;
  TORCHTPU_RETURN_IF_ERROR(run("all_reduce", [&] { return gloo_->allreduce(v, opts); }));
  average(host, op, size());
  lap.to(kExchangeNs);
  base::Status s = to_device(tensor, host);
  lap.to(kToDeviceNs);
  return s;
}

base::Status HostStagedTransport::all_gather(at::Tensor& output, const at::Tensor& input) {
  ++seq_;
  CollectiveSignature sig{Collective::kAllGather, input};
  if (fits(nbytes(input))) {
    {
      at::Tensor mine = outgoing_payload(input);
      copy_to_host(input, mine);
    }
    TORCHTPU_ASSIGN_OR_RETURN(Exchange x, start_exchange(sig, true));
    TORCHTPU_RETURN_IF_ERROR(finish_exchange(x));
    base::counter_add("num_host_staged_collectives");
    at::Tensor out = receiving(output).view({-1});
    for (int r = 0; r < size(); ++r) {
      out.narrow(0, r * input.numel(), input.numel()).copy_(x.payload(r, input).view({-1}));
    }
    return to_device(output, out.view(output.sizes()));
  }
  TORCHTPU_ASSIGN_OR_RETURN(Exchange pending, start_exchange(sig, false));
  at::Tensor in = to_host(input).reshape({-1});
  TORCHTPU_RETURN_IF_ERROR(finish_exchange(pending));
  base::counter_add("num_host_staged_collectives");
  at::Tensor out = receiving(output).view({-1});
  c10d::AllgatherOptions opts;
  opts.timeout = timeout_;
  TORCHTPU_RETURN_IF_ERROR(
      run("all_gather", [&] { return gloo_->_allgather_base(out, in, opts); }));
  return to_device(output, out.view(output.sizes()));
}

base::Status HostStagedTransport::reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                 const c10d::ReduceOp& op) {
  ++seq_;
  CollectiveSignature sig{Collective::kReduceScatter, input, static_cast<int64_t>(op.op_)};
  if (fits(nbytes(input))) {
    // Every rank sends its whole input and reduces its own part of the gathered ones.
    at::Tensor mine = outgoing_payload(input);
    copy_to_host(input, mine);
    premultiply(mine, op);
    TORCHTPU_ASSIGN_OR_RETURN(Exchange x, start_exchange(sig, true));
    TORCHTPU_RETURN_IF_ERROR(finish_exchange(x));
    base::counter_add("num_host_staged_collectives");
    at::Tensor out = receiving(output).view({-1});
    int64_t m = output.numel();
    auto part = [&](int r) { return x.payload(r, input).view({-1}).narrow(0, rank() * m, m); };
    reduce_parts(out, size(), part, gloo_op(op));
    average(out, op, size());
    return to_device(output, out.view(output.sizes()));
  }
  TORCHTPU_ASSIGN_OR_RETURN(Exchange pending, start_exchange(sig, false));
  at::Tensor in = to_host(input).reshape({-1});
  TORCHTPU_RETURN_IF_ERROR(finish_exchange(pending));
  base::counter_add("num_host_staged_collectives");
  premultiply(in, op);
  at::Tensor out = receiving(output).view({-1});
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = gloo_op(op);
  opts.timeout = timeout_;
  TORCHTPU_RETURN_IF_ERROR(
      run("reduce_scatter", [&] { return gloo_->_reduce_scatter_base(out, in, opts); }));
  average(out, op, size());
  return to_device(output, out.view(output.sizes()));
}

base::Status HostStagedTransport::all_to_all(at::Tensor& output, const at::Tensor& input,
                                             const std::vector<int64_t>& output_split_sizes,
                                             const std::vector<int64_t>& input_split_sizes) {
  ++seq_;
  CollectiveSignature sig{Collective::kAllToAll, input};
  auto equal = [&](const at::Tensor& t) {
    return std::vector<int64_t>(size(), t.dim() > 0 ? t.size(0) / size() : 0);
  };
  sig.input_splits = input_split_sizes.empty() ? equal(input) : input_split_sizes;
  sig.output_splits = output_split_sizes.empty() ? equal(output) : output_split_sizes;
  TORCHTPU_ASSIGN_OR_RETURN(Exchange pending, start_exchange(sig, false));
  at::Tensor in = to_host(input);
  TORCHTPU_RETURN_IF_ERROR(finish_exchange(pending));
  base::counter_add("num_host_staged_collectives");
  at::Tensor out = receiving(output);
  std::vector<int64_t> out_splits = output_split_sizes, in_splits = input_split_sizes;
  c10d::AllToAllOptions opts;
  opts.timeout = timeout_;
  TORCHTPU_RETURN_IF_ERROR(run("all_to_all", [&] {
    return gloo_->alltoall_base(out, in, out_splits, in_splits, opts);
  }));
  return to_device(output, out);
}

base::Status HostStagedTransport::broadcast(at::Tensor& tensor, int root) {
  ++seq_;
  CollectiveSignature sig{Collective::kBroadcast, tensor, -1, root};
  if (fits(nbytes(tensor))) {
    if (rank() == root) {
      at::Tensor mine = outgoing_payload(tensor);
      copy_to_host(tensor, mine);
    }
    TORCHTPU_ASSIGN_OR_RETURN(Exchange x, start_exchange(sig, true));
    TORCHTPU_RETURN_IF_ERROR(finish_exchange(x));
    base::counter_add("num_host_staged_collectives");
    if (rank() == root) return base::Status::ok_status();
    at::Tensor host = receiving(tensor);
    host.copy_(x.payload(root, tensor));
    return to_device(tensor, host);
  }
  TORCHTPU_ASSIGN_OR_RETURN(Exchange pending, start_exchange(sig, false));
  // Only the root's data travels; the others receive into a pool chunk.
  at::Tensor host = rank() == root ? to_host(tensor) : receiving(tensor);
  TORCHTPU_RETURN_IF_ERROR(finish_exchange(pending));
  base::counter_add("num_host_staged_collectives");
  std::vector<at::Tensor> v{host};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  TORCHTPU_RETURN_IF_ERROR(run("broadcast", [&] { return gloo_->broadcast(v, opts); }));
  return rank() == root ? base::Status::ok_status() : to_device(tensor, host);
}

// A send carries its signature ahead of the data (same tag, so Gloo keeps them in order):
// the receiver checks it and, on a mismatch, still takes the data in (so the pair stays in
// step) before raising. Gloo given a message of the wrong size aborts the process.
base::Status HostStagedTransport::send(const at::Tensor& tensor, int dst, int tag) {
  base::counter_add("num_host_staged_collectives");
  std::vector<int64_t> sig = encode({Collective::kSendRecv, tensor}, 1);
  std::vector<at::Tensor> header{
      at::from_blob(sig.data(), {kSignatureLength}, at::kLong).clone()};
  TORCHTPU_RETURN_IF_ERROR(run("send", [&] { return gloo_->send(header, dst, tag); }, false));
  std::vector<at::Tensor> v{to_host(tensor)};
  return run("send", [&] { return gloo_->send(v, dst, tag); }, false);
}

base::Status HostStagedTransport::recv(at::Tensor& tensor, int src, int tag) {
  base::counter_add("num_host_staged_collectives");
  std::vector<at::Tensor> header{at::empty({kSignatureLength}, at::kLong)};
  TORCHTPU_RETURN_IF_ERROR(run("recv", [&] { return gloo_->recv(header, src, tag); }, false));
  const int64_t* h = header[0].data_ptr<int64_t>();
  std::vector<int64_t> sent(h, h + kSignatureLength);
  base::Status match = compare_point_to_point(sent, tensor, global_ranks_[src],
                                              global_ranks_[rank()]);
  if (!match.ok()) {
    if (sent_numel(sent) < 0) return match;
    std::vector<at::Tensor> drain{at::empty({sent_numel(sent)}, sent_dtype(sent))};
    TORCHTPU_RETURN_IF_ERROR(run("recv", [&] { return gloo_->recv(drain, src, tag); }, false));
    return match;
  }
  std::vector<at::Tensor> v{receiving(tensor)};
  TORCHTPU_RETURN_IF_ERROR(run("recv", [&] { return gloo_->recv(v, src, tag); }, false));
  return to_device(tensor, v[0]);
}

base::Status HostStagedTransport::barrier() {
  ++seq_;
  TORCHTPU_RETURN_IF_ERROR(check({Collective::kBarrier}));
  c10d::BarrierOptions opts;
  opts.timeout = timeout_;
  return run("barrier", [&] { return gloo_->barrier(opts); });
}

}  // namespace torchtpu::distributed
