#include "distributed/host_staged_transport.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <utility>
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
// bench/collectives.py's breakdown): the copy to the host, the exchange (with the
// reduction on the host), and the hand-off of the result to the device.
const base::Counter kD2hNs("host_staged_d2h_ns");
const base::Counter kExchangeNs("host_staged_exchange_ns");
const base::Counter kToDeviceNs("host_staged_to_device_ns");

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

// An all_reduce whose payload, times the peers it comes from, is at most this many bytes
// goes whole to every peer (one step: the latency of a small exchange) rather than being
// reduce-scattered and all-gathered (two steps, less data per rank).
constexpr int64_t kDirectBytes = int64_t{64} << 10;

TcpExchange::Send send_of(const at::Tensor& t) { return {t.data_ptr(), nbytes(t)}; }
TcpExchange::Recv recv_of(const at::Tensor& t) { return {t.data_ptr(), nbytes(t)}; }

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
      exchange_(store_, gloo_->getRank(), global_ranks_),
      pool_(std::make_shared<HostPool>()) {}

std::string HostStagedTransport::ranks_text() const {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < global_ranks_.size(); ++i) o << (i ? ", " : "") << global_ranks_[i];
  o << "]";
  return o.str();
}

std::string HostStagedTransport::failure(const char* what, const std::string& why,
                                         bool collective, bool ask_store) {
  std::ostringstream out;
  out << "tpu: " << what;
  if (collective) out << " (collective #" << seq_ << " of the group)";
  out << " on global ranks " << ranks_text() << " (this is rank " << global_ranks_[rank()]
      << (collective ? ", host-staged" : ", host-staged through Gloo") << ") failed: " << why;
  if (!ask_store) {
    out << "; the group is unusable since that failure: destroy it and create a new one";
    return out.str();
  }
  out << (collective ? missing_ranks() : "")
      << "; a peer rank exited or did not reach this collective within the group's timeout ("
      << timeout_.count() / 1000.0 << " s)";
  return out.str();
}

base::Status HostStagedTransport::run(const char* what,
                                      const std::function<c10::intrusive_ptr<c10d::Work>()>& op) {
  try {
    c10::intrusive_ptr<c10d::Work> work = op();
    // Gloo's worker finishes a small exchange in less time than a sleeping thread takes
    // to be scheduled again on a busy machine (poll_wait.h).
    poll_until([&] { return work->isCompleted(); });
    work->wait();
  } catch (const std::exception& e) {
    std::string msg = c10::GetExceptionString(e);
    if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) msg = ce->what_without_backtrace();
    return base::unavailable(failure(what, msg, false));
  }
  return base::Status::ok_status();
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

base::Status HostStagedTransport::step(const CollectiveSignature& s,
                                       const std::vector<TcpExchange::Send>& sends,
                                       const std::vector<TcpExchange::Recv>& recvs, bool first,
                                       const std::function<void(int64_t)>& landed) {
  const char* what = collective_name(s.collective);
  std::vector<int64_t> mine = encode(s, size());
  std::vector<TcpExchange::Received> got;
  // A group already broken fails at once: no wait for the other ranks' marks, which the
  // first failure already collected (a peer that exited would cost 5 s per collective).
  const bool broken = exchange_.broken();
  base::Status done = exchange_.step(seq_, mine, sends, recvs, timeout_, &got, landed);
  if (!done.ok()) return base::unavailable(failure(what, done.message(), true, !broken));
  if (!first) return base::Status::ok_status();
  if (check_signatures_) {
    std::vector<int64_t> rows(size() * kSignatureLength);
    for (int r = 0; r < size(); ++r) {
      const int64_t* row = r == rank() ? mine.data() : got[r].header.signature;
      std::copy_n(row, kSignatureLength, rows.begin() + r * kSignatureLength);
    }
    TORCHTPU_RETURN_IF_ERROR(compare_signatures(rows, size(), global_ranks_));
  }
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    std::ostringstream o;
    if (got[r].header.seq != seq_) {
      o << "tpu: " << what << ": global rank " << global_ranks_[r] << " sent collective #"
        << got[r].header.seq << " of the group where this rank (global "
        << global_ranks_[rank()] << ") runs #" << seq_
        << "; every rank of the group must make the same collectives in the same order";
      return base::invalid_argument(o.str());
    }
    if (!got[r].landed) {
      o << "tpu: " << what << ": global rank " << global_ranks_[r] << " sent "
        << got[r].header.bytes << " bytes where this rank (global " << global_ranks_[rank()]
        << ") expects " << recvs[r].bytes
        << "; every rank of the group must make the same collectives with the same dtypes "
           "and shapes"
        << (check_signatures_ ? "" : " (TORCHTPU_DIST_CHECK=0: the ranks' signatures were not "
                                     "compared)");
      return base::invalid_argument(o.str());
    }
  }
  return base::Status::ok_status();
}

base::Status HostStagedTransport::reduce_step(const CollectiveSignature& s,
                                              const std::vector<TcpExchange::Send>& sends,
                                              at::Tensor& out, const at::Tensor& own,
                                              const c10d::ReduceOp& op) {
  const int n = size(), me = rank();
  std::vector<TcpExchange::Recv> recvs(n);
  for (int p = 0; p < n; ++p) {
    if (p != me) recvs[p] = recv_of(part_slot(p, out));
  }
  // Reduces elements [done, upto) of every contribution (the parts are flat).
  int64_t done = 0;
  auto reduce_to = [&](int64_t upto) {
    if (upto <= done) return;
    at::Tensor o = out.narrow(0, done, upto - done);
    auto part = [&](int r) {
      return (r == me ? own : part_slot(r, out)).narrow(0, done, upto - done);
    };
    reduce_parts(o, n, part, gloo_op(op));
    average(o, op, n);
    done = upto;
  };
  const int64_t es = out.element_size();
  // A reduction of data that then turns out not to be the collective's is thrown away
  // with it (the step returns the mismatch).
  TORCHTPU_RETURN_IF_ERROR(step(s, sends, recvs, /*first=*/true,
                                [&](int64_t bytes) { reduce_to(bytes / es); }));
  reduce_to(out.numel());
  return base::Status::ok_status();
}

at::Tensor HostStagedTransport::part_slot(int r, const at::Tensor& out) {
  if (size() == 2) return out;
  int64_t bytes = nbytes(out);
  if (!scratch_slot_.defined() || scratch_slot_.numel() < size() * bytes) {
    scratch_slot_ = at::empty({size() * bytes}, at::TensorOptions().dtype(at::kByte));
  }
  return scratch_slot_.narrow(0, r * bytes, bytes).view(out.scalar_type()).view(out.sizes());
}

at::Tensor HostStagedTransport::receiving(const at::Tensor& like) {
  return pool_->take(nbytes(like)).view(like.scalar_type()).view(like.sizes());
}

std::optional<std::pair<const void*, runtime::BufferPtr>> HostStagedTransport::host_memory_of(
    const at::Tensor& t) {
  if (!host_memory_ || t.storage_offset() != 0 || !t.is_contiguous() || nbytes(t) == 0) {
    return std::nullopt;
  }
  runtime::BufferPtr b = aten::storage_buffer(t);
  if (!t.sizes().equals(b->dims()) || b->dtype() != aten::to_dtype(t.scalar_type()) ||
      !b->await_ready().ok()) {
    return std::nullopt;
  }
  auto addr = b->host_address();
  if (!addr.ok()) return std::nullopt;
  aten::flush_data_checks();  // as every host read does
  return std::make_pair(*addr, std::move(b));
}

void HostStagedTransport::copy_to_host(const at::Tensor& t, at::Tensor& host) {
  // Where the plugin's device memory is host memory, a whole-buffer tensor is read in
  // place: the plugin's own copy would wake its worker threads, which on a small machine
  // take the cores the peers' exchange needs.
  if (host.is_contiguous()) {
    if (auto mem = host_memory_of(t)) {
      std::memcpy(host.data_ptr(), mem->first, nbytes(t));
      return;
    }
  }
  host.copy_(t);
}

at::Tensor HostStagedTransport::host_view(const at::Tensor& t) {
  if (auto mem = host_memory_of(t)) {
    base::counter_add("host_staged_bytes", nbytes(t));
    // The view holds the buffer, so no program takes it by donation while the exchange
    // reads it.
    return at::from_blob(const_cast<void*>(mem->first), t.sizes(),
                         [b = std::move(mem->second)](void*) mutable { b.reset(); },
                         at::TensorOptions().dtype(t.scalar_type()));
  }
  return to_host(t);
}

at::Tensor HostStagedTransport::to_host(const at::Tensor& t) {
  base::counter_add("host_staged_bytes", nbytes(t));
  int64_t bytes = nbytes(t);
  if (!send_slot_.defined() || send_slot_.numel() < bytes) {
    send_slot_ = at::empty({std::max<int64_t>(bytes, 4096)}, at::TensorOptions().dtype(at::kByte));
  }
  at::Tensor host = send_slot_.narrow(0, 0, bytes).view(t.scalar_type()).view(t.sizes());
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
  const int n = size(), me = rank();
  Lap lap;
  // PREMUL_SUM scales a copy; the other ops send the tensor's memory as it is.
  const bool scaled = op.op_ == c10d::ReduceOp::PREMUL_SUM;
  at::Tensor in = (scaled ? to_host(tensor) : host_view(tensor)).view({-1});
  premultiply(in, op);
  lap.to(kD2hNs);
  at::Tensor result = receiving(tensor).view({-1});
  const int64_t numel = in.numel();
  const bool direct = nbytes(in) * (n - 1) <= kDirectBytes;
  // Rank r reduces part r of the elements (all of them when direct).
  auto part = [&](const at::Tensor& t, int r) {
    if (direct) return t;
    int64_t begin = numel * r / n, end = numel * (r + 1) / n;
    return t.narrow(0, begin, end - begin);
  };
  at::Tensor mine = part(result, me);
  std::vector<TcpExchange::Send> sends(n);
  std::vector<TcpExchange::Recv> recvs(n);
  for (int p = 0; p < n; ++p) {
    if (p != me) sends[p] = send_of(part(in, p));
  }
  TORCHTPU_RETURN_IF_ERROR(reduce_step(sig, sends, mine, part(in, me), op));
  base::counter_add("num_host_staged_collectives");
  if (!direct && n > 1) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      sends[p] = send_of(mine);
      recvs[p] = recv_of(part(result, p));
    }
    TORCHTPU_RETURN_IF_ERROR(step(sig, sends, recvs, /*first=*/false));
  }
  lap.to(kExchangeNs);
  base::Status s = to_device(tensor, result.view(tensor.sizes()));
  lap.to(kToDeviceNs);
  return s;
}

base::Status HostStagedTransport::all_gather(at::Tensor& output, const at::Tensor& input) {
  ++seq_;
  CollectiveSignature sig{Collective::kAllGather, input};
  const int n = size(), me = rank();
  const int64_t m = input.numel();
  at::Tensor result = receiving(output).view({-1});
  at::Tensor mine = result.narrow(0, me * m, m).view(input.sizes());
  base::counter_add("host_staged_bytes", nbytes(input));
  copy_to_host(input, mine);
  std::vector<TcpExchange::Send> sends(n);
  std::vector<TcpExchange::Recv> recvs(n);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    sends[p] = send_of(mine);
    recvs[p] = recv_of(result.narrow(0, p * m, m));
  }
  TORCHTPU_RETURN_IF_ERROR(step(sig, sends, recvs, /*first=*/true));
  base::counter_add("num_host_staged_collectives");
  return to_device(output, result.view(output.sizes()));
}

base::Status HostStagedTransport::reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                                 const c10d::ReduceOp& op) {
  ++seq_;
  CollectiveSignature sig{Collective::kReduceScatter, input, static_cast<int64_t>(op.op_)};
  const int n = size(), me = rank();
  const bool scaled = op.op_ == c10d::ReduceOp::PREMUL_SUM;
  at::Tensor in = (scaled ? to_host(input) : host_view(input)).view({-1});
  premultiply(in, op);
  at::Tensor out = receiving(output).view({-1});
  const int64_t m = out.numel();
  std::vector<TcpExchange::Send> sends(n);
  for (int p = 0; p < n; ++p) {
    if (p != me) sends[p] = send_of(in.narrow(0, p * m, m));
  }
  TORCHTPU_RETURN_IF_ERROR(reduce_step(sig, sends, out, in.narrow(0, me * m, m), op));
  base::counter_add("num_host_staged_collectives");
  return to_device(output, out.view(output.sizes()));
}

base::Status HostStagedTransport::all_to_all(at::Tensor& output, const at::Tensor& input,
                                             const std::vector<int64_t>& output_split_sizes,
                                             const std::vector<int64_t>& input_split_sizes) {
  ++seq_;
  CollectiveSignature sig{Collective::kAllToAll, input};
  const int n = size(), me = rank();
  auto equal = [&](const at::Tensor& t) {
    return std::vector<int64_t>(n, t.dim() > 0 ? t.size(0) / n : 0);
  };
  sig.input_splits = input_split_sizes.empty() ? equal(input) : input_split_sizes;
  sig.output_splits = output_split_sizes.empty() ? equal(output) : output_split_sizes;
  // Rows of dim 0, as flat ranges of bytes.
  auto row_bytes = [](const at::Tensor& t) {
    return t.dim() > 0 && t.size(0) > 0 ? nbytes(t) / t.size(0) : 0;
  };
  at::Tensor in = host_view(input).view({-1}).view(at::kByte);
  at::Tensor out = receiving(output);
  at::Tensor out_bytes = out.view({-1}).view(at::kByte);
  std::vector<int64_t> in_at(n + 1, 0), out_at(n + 1, 0);
  for (int p = 0; p < n; ++p) {
    in_at[p + 1] = in_at[p] + sig.input_splits[p] * row_bytes(input);
    out_at[p + 1] = out_at[p] + sig.output_splits[p] * row_bytes(output);
  }
  auto range = [](const at::Tensor& bytes, const std::vector<int64_t>& at, int p) {
    return bytes.narrow(0, at[p], at[p + 1] - at[p]);
  };
  std::vector<TcpExchange::Send> sends(n);
  std::vector<TcpExchange::Recv> recvs(n);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    sends[p] = send_of(range(in, in_at, p));
    recvs[p] = recv_of(range(out_bytes, out_at, p));
  }
  TORCHTPU_RETURN_IF_ERROR(step(sig, sends, recvs, /*first=*/true));
  at::Tensor own = range(out_bytes, out_at, me);
  if (own.numel() != in_at[me + 1] - in_at[me]) {
    return base::invalid_argument(
        "tpu: all_to_all: this rank sends itself " + std::to_string(in_at[me + 1] - in_at[me]) +
        " bytes but expects " + std::to_string(own.numel()) + " from itself");
  }
  own.copy_(range(in, in_at, me));
  base::counter_add("num_host_staged_collectives");
  return to_device(output, out);
}

base::Status HostStagedTransport::broadcast(at::Tensor& tensor, int root) {
  ++seq_;
  CollectiveSignature sig{Collective::kBroadcast, tensor, -1, root};
  const int n = size(), me = rank();
  std::vector<TcpExchange::Send> sends(n);
  std::vector<TcpExchange::Recv> recvs(n);
  // Only the root's data travels; the others receive into a pool chunk.
  at::Tensor host = me == root ? host_view(tensor) : receiving(tensor);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    if (me == root) sends[p] = send_of(host);
    if (p == root) recvs[p] = recv_of(host);
  }
  TORCHTPU_RETURN_IF_ERROR(step(sig, sends, recvs, /*first=*/true));
  base::counter_add("num_host_staged_collectives");
  return me == root ? base::Status::ok_status() : to_device(tensor, host);
}

// A send carries its signature ahead of the data (same tag, so Gloo keeps them in order):
// the receiver checks it and, on a mismatch, still takes the data in (so the pair stays in
// step) before raising. Gloo given a message of the wrong size aborts the process.
base::Status HostStagedTransport::send(const at::Tensor& tensor, int dst, int tag) {
  base::counter_add("num_host_staged_collectives");
  std::vector<int64_t> sig = encode({Collective::kSendRecv, tensor}, 1);
  std::vector<at::Tensor> header{
      at::from_blob(sig.data(), {kSignatureLength}, at::kLong).clone()};
  TORCHTPU_RETURN_IF_ERROR(run("send", [&] { return gloo_->send(header, dst, tag); }));
  // A host copy of its own, not the shared staging slot: sends run on their own queue,
  // beside the group's collectives (TpuBackend).
  base::counter_add("host_staged_bytes", nbytes(tensor));
  std::vector<at::Tensor> v{at::empty(tensor.sizes(), tensor.options().device(at::kCPU))};
  copy_to_host(tensor, v[0]);
  return run("send", [&] { return gloo_->send(v, dst, tag); });
}

base::Status HostStagedTransport::recv(at::Tensor& tensor, int src, int tag) {
  return receive(tensor, src, tag).status();
}

base::StatusOr<int> HostStagedTransport::recv_any(at::Tensor& tensor, int tag) {
  return receive(tensor, std::nullopt, tag);
}

// Without a source, the header comes from whichever sender Gloo matches first, and the data
// from that sender (it sends both with the same tag, in order).
base::StatusOr<int> HostStagedTransport::receive(at::Tensor& tensor, std::optional<int> from,
                                                 int tag) {
  base::counter_add("num_host_staged_collectives");
  std::vector<at::Tensor> header{at::empty({kSignatureLength}, at::kLong)};
  c10::intrusive_ptr<c10d::Work> header_work;
  TORCHTPU_RETURN_IF_ERROR(run("recv", [&] {
    header_work = from ? gloo_->recv(header, *from, tag) : gloo_->recvAnysource(header, tag);
    return header_work;
  }));
  int src = from ? *from : header_work->sourceRank();
  const int64_t* h = header[0].data_ptr<int64_t>();
  std::vector<int64_t> sent(h, h + kSignatureLength);
  base::Status match = compare_point_to_point(sent, tensor, global_ranks_[src],
                                              global_ranks_[rank()]);
  if (!match.ok()) {
    if (sent_numel(sent) < 0) return match;
    std::vector<at::Tensor> drain{at::empty({sent_numel(sent)}, sent_dtype(sent))};
    TORCHTPU_RETURN_IF_ERROR(run("recv", [&] { return gloo_->recv(drain, src, tag); }));
    return match;
  }
  std::vector<at::Tensor> v{receiving(tensor)};
  TORCHTPU_RETURN_IF_ERROR(run("recv", [&] { return gloo_->recv(v, src, tag); }));
  TORCHTPU_RETURN_IF_ERROR(to_device(tensor, v[0]));
  return src;
}

base::Status HostStagedTransport::barrier() {
  ++seq_;
  std::vector<TcpExchange::Send> sends(size());
  std::vector<TcpExchange::Recv> recvs(size());
  return step({Collective::kBarrier}, sends, recvs, /*first=*/true);
}

}  // namespace torchtpu::distributed
