// Inputs of compiled graphs padded to shape buckets (python/torchtpu/dynamo/buckets).
//
// A padded graph takes each input at its bucket shape, true elements first in every dim
// and zeros after. pad_to_bucket builds that value without compiling anything per true
// size: a view of a storage the size of no particular length (a graph's compact output, an
// expanded scalar) is read by one program keyed by the storage's and the bucket's shapes,
// with the view's offset, sizes and strides as runtime operands; a storage that holds just
// this tensor (fresh from the host, or an eager op's result at its true size, whose shape
// any program would be keyed by) is padded on the host instead (one read and one write of
// its bytes, waiting for that buffer only).
// Thread safety: as tpu tensors (one writer per storage).
#pragma once

#include <ATen/Tensor.h>

#include <vector>

namespace torchtpu::compile {

// `t` (a tpu tensor of rank padded.size(), each size <= its padded size) padded with zeros
// to `padded`, as a new contiguous tensor of shape `out` (padded's element count).
at::Tensor pad_to_bucket(const at::Tensor& t, const std::vector<int64_t>& padded,
                         const std::vector<int64_t>& out);

}  // namespace torchtpu::compile
