// CollectiveSignature: what every rank of a group must agree on before a collective
// moves data (which collective, dtype, shape, reduce op, root, all_to_all splits).
//
// A transport without its own checks exchanges the signatures of all ranks (a small
// fixed-size all_gather) and compares them, so a mismatch raises on every rank, naming the
// collective, the ranks and their shapes, where the data exchange itself would hang or
// fail on one side only.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace torchtpu::distributed {

enum class Collective : int64_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kBarrier,
  kSendRecv,
};

const char* collective_name(Collective c);
std::string reduce_op_name(const c10d::ReduceOp& op);

// The encoded form: kSignatureLength int64 values.
inline constexpr int64_t kSignatureLength = 32;

struct CollectiveSignature {
  Collective collective = Collective::kBarrier;
  // The tensor a rank contributes (the input; the in-place tensor of all_reduce and
  // broadcast). Undefined for a barrier.
  at::Tensor tensor;
  int64_t reduce_op = -1;  // c10d::ReduceOp::RedOpType, -1 where none
  int64_t root = -1;
  // all_to_all: rows sent to / received from each peer (empty: equal parts).
  std::vector<int64_t> input_splits;
  std::vector<int64_t> output_splits;
};

std::vector<int64_t> encode(const CollectiveSignature& s, int group_size);

// Compares the encoded signatures of every rank (`all` holds group_size rows of
// kSignatureLength). `global_ranks` names the ranks in messages.
base::Status compare_signatures(const std::vector<int64_t>& all, int group_size,
                                const std::vector<int64_t>& global_ranks);

// Point to point: the sender's encoded signature travels ahead of the data. Checks it
// against the tensor `receiving` on this rank; a mismatch names both sides.
base::Status compare_point_to_point(const std::vector<int64_t>& sent, const at::Tensor& receiving,
                                    int64_t src_rank, int64_t dst_rank);
// The dtype and element count the sender of `sent` sends (to take in its data anyway);
// sent_numel is -1 when `sent` is no signature.
c10::ScalarType sent_dtype(const std::vector<int64_t>& sent);
int64_t sent_numel(const std::vector<int64_t>& sent);

}  // namespace torchtpu::distributed
