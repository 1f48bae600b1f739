#include "distributed/signature.h"

#include <c10/core/ScalarType.h>

#include <sstream>

namespace torchtpu::distributed {

namespace {

// Layout of an encoded signature.
constexpr int64_t kMagic = 0x7470754453;  // marks a row written by this code
constexpr int kSlotMagic = 0, kSlotCollective = 1, kSlotDtype = 2, kSlotOp = 3,
              kSlotRoot = 4, kSlotNdim = 5, kSlotNumel = 6, kSlotDims = 7;
constexpr int kMaxDims = 8;
constexpr int kSlotSplitsIn = kSlotDims + kMaxDims;          // 15
constexpr int kMaxSplitPeers = 8;
constexpr int kSlotSplitsOut = kSlotSplitsIn + kMaxSplitPeers;  // 23
constexpr int kSlotHasSplits = kSlotSplitsOut + kMaxSplitPeers;  // 31
static_assert(kSlotHasSplits + 1 == kSignatureLength);

const int64_t* row(const std::vector<int64_t>& all, int r) {
  return all.data() + r * kSignatureLength;
}

std::string describe(const int64_t* s) {
  std::ostringstream out;
  auto coll = static_cast<Collective>(s[kSlotCollective]);
  if (coll != Collective::kSendRecv) out << collective_name(coll) << " ";
  if (coll == Collective::kBarrier) return "barrier";
  out << c10::toString(static_cast<c10::ScalarType>(s[kSlotDtype])) << "[";
  int64_t ndim = s[kSlotNdim];
  for (int64_t d = 0; d < std::min<int64_t>(ndim, kMaxDims); ++d) {
    out << (d ? ", " : "") << s[kSlotDims + d];
  }
  if (ndim > kMaxDims) out << ", ...";
  out << "]";
  if (s[kSlotOp] >= 0) {
    out << " " << reduce_op_name(c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(s[kSlotOp])));
  }
  if (s[kSlotRoot] >= 0) out << " root " << s[kSlotRoot];
  return out.str();
}

// Effective splits of row r (equal parts when the rank gave none).
std::vector<int64_t> splits_of(const int64_t* s, int slot, int group_size) {
  std::vector<int64_t> v(group_size);
  bool has = s[kSlotHasSplits] & (slot == kSlotSplitsIn ? 1 : 2);
  int64_t rows = s[kSlotNdim] > 0 ? s[kSlotDims] : 1;
  for (int p = 0; p < group_size; ++p) v[p] = has ? s[slot + p] : rows / group_size;
  return v;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kBarrier: return "barrier";
    case Collective::kSendRecv: return "send/recv";
  }
  return "unknown collective";
}

std::string reduce_op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

std::vector<int64_t> encode(const CollectiveSignature& s, int group_size) {
  std::vector<int64_t> v(kSignatureLength, 0);
  v[kSlotMagic] = kMagic;
  v[kSlotCollective] = static_cast<int64_t>(s.collective);
  v[kSlotOp] = s.reduce_op;
  v[kSlotRoot] = s.root;
  if (s.tensor.defined()) {
    v[kSlotDtype] = static_cast<int64_t>(s.tensor.scalar_type());
    v[kSlotNdim] = s.tensor.dim();
    v[kSlotNumel] = s.tensor.numel();
    for (int64_t d = 0; d < std::min<int64_t>(s.tensor.dim(), kMaxDims); ++d) {
      v[kSlotDims + d] = s.tensor.size(d);
    }
  }
  if (group_size <= kMaxSplitPeers) {
    for (size_t p = 0; p < s.input_splits.size(); ++p) v[kSlotSplitsIn + p] = s.input_splits[p];
    for (size_t p = 0; p < s.output_splits.size(); ++p) {
      v[kSlotSplitsOut + p] = s.output_splits[p];
    }
    v[kSlotHasSplits] = (s.input_splits.empty() ? 0 : 1) | (s.output_splits.empty() ? 0 : 2);
  }
  return v;
}

base::Status compare_signatures(const std::vector<int64_t>& all, int group_size,
                                const std::vector<int64_t>& global_ranks) {
  auto rank_name = [&](int r) {
    std::ostringstream o;
    o << "rank " << r;
    if (r < static_cast<int>(global_ranks.size()) && global_ranks[r] != r) {
      o << " (global " << global_ranks[r] << ")";
    }
    return o.str();
  };
  auto mismatch = [&](const std::string& what) {
    std::ostringstream out;
    out << "tpu: " << collective_name(static_cast<Collective>(row(all, 0)[kSlotCollective]))
        << ": the ranks of the group disagree (" << what << "): ";
    for (int r = 0; r < group_size; ++r) {
      out << (r ? "; " : "") << rank_name(r) << ": " << describe(row(all, r));
    }
    out << "; every rank of the group must make the same collectives in the same order, "
           "with the same dtypes and shapes";
    return base::invalid_argument(out.str());
  };
  const int64_t* first = row(all, 0);
  for (int r = 0; r < group_size; ++r) {
    const int64_t* s = row(all, r);
    if (s[kSlotMagic] != kMagic) return mismatch("a rank sent no signature");
    if (s[kSlotCollective] != first[kSlotCollective]) return mismatch("different collectives");
    if (s[kSlotDtype] != first[kSlotDtype]) return mismatch("different dtypes");
    if (s[kSlotOp] != first[kSlotOp]) return mismatch("different reduce ops");
    if (s[kSlotRoot] != first[kSlotRoot]) return mismatch("different roots");
  }
  auto coll = static_cast<Collective>(first[kSlotCollective]);
  if (coll == Collective::kBarrier) return base::Status::ok_status();
  if (coll != Collective::kAllToAll) {
    for (int r = 1; r < group_size; ++r) {
      const int64_t* s = row(all, r);
      for (int slot = kSlotNdim; slot < kSlotDims + kMaxDims; ++slot) {
        if (s[slot] != first[slot]) return mismatch("different shapes");
      }
    }
    return base::Status::ok_status();
  }
  // all_to_all: rows may differ per rank, the row shape may not, and what rank i sends to
  // rank j must be what j expects from i.
  for (int r = 1; r < group_size; ++r) {
    const int64_t* s = row(all, r);
    if (s[kSlotNdim] != first[kSlotNdim]) return mismatch("different ranks of tensors");
    for (int d = 1; d < std::min<int64_t>(s[kSlotNdim], kMaxDims); ++d) {
      if (s[kSlotDims + d] != first[kSlotDims + d]) return mismatch("different row shapes");
    }
  }
  if (group_size > kMaxSplitPeers) return base::Status::ok_status();
  for (int i = 0; i < group_size; ++i) {
    std::vector<int64_t> sends = splits_of(row(all, i), kSlotSplitsIn, group_size);
    for (int j = 0; j < group_size; ++j) {
      std::vector<int64_t> expects = splits_of(row(all, j), kSlotSplitsOut, group_size);
      if (sends[j] != expects[i]) {
        std::ostringstream o;
        o << rank_name(i) << " sends " << sends[j] << " rows to " << rank_name(j)
          << ", which expects " << expects[i];
        return mismatch(o.str());
      }
    }
  }
  return base::Status::ok_status();
}

base::Status compare_point_to_point(const std::vector<int64_t>& sent, const at::Tensor& receiving,
                                    int64_t src_rank, int64_t dst_rank) {
  std::vector<int64_t> mine = encode({Collective::kSendRecv, receiving}, 1);
  bool same = sent.size() == mine.size() && sent[kSlotMagic] == kMagic &&
              sent[kSlotCollective] == mine[kSlotCollective];
  for (int slot = kSlotDtype; same && slot < kSlotDims + kMaxDims; ++slot) {
    same = slot == kSlotOp || slot == kSlotRoot || sent[slot] == mine[slot];
  }
  if (same) return base::Status::ok_status();
  if (sent.size() != mine.size() || sent[kSlotMagic] != kMagic) {
    return base::invalid_argument("tpu: recv: rank " + std::to_string(src_rank) +
                                  " sent something other than a tpu send to rank " +
                                  std::to_string(dst_rank) + " with this tag");
  }
  std::ostringstream out;
  out << "tpu: recv: rank " << src_rank << " sent " << describe(sent.data()) << " but rank "
      << dst_rank << " receives into " << describe(mine.data())
      << "; a send and its recv must have the same dtype and shape";
  return base::invalid_argument(out.str());
}

c10::ScalarType sent_dtype(const std::vector<int64_t>& sent) {
  return static_cast<c10::ScalarType>(sent[kSlotDtype]);
}

int64_t sent_numel(const std::vector<int64_t>& sent) {
  return sent.size() == kSignatureLength && sent[kSlotMagic] == kMagic ? sent[kSlotNumel] : -1;
}

}  // namespace torchtpu::distributed
