// stablehlo.gather / stablehlo.scatter with explicit dimension numbers (defined in
// indexing.cc), shared by the lowering families that index by tensors.
#pragma once

#include <string>

#include "lowering/hlo_builder.h"

namespace torchtpu::lowering {

// Result type: `operand`'s dtype with `out_dims`. Indices are not bounds-checked (XLA
// clamps): callers check them with LoweringContext::require first.
Value gather(Builder& b, Value operand, Value indices, const Dims& offset_dims,
             const Dims& collapsed, const Dims& start_index_map, int64_t index_vector_dim,
             const Dims& slice_sizes, const Dims& out_dims);

// For every v of `values` ([rows, k]), the insertion position in its row of `seq`
// ([rows, n]): the first position whose element is >= v (or > v when `right`). A binary
// search of ceil(log2(n + 1)) gathers (defined in search.cc).
Value binary_search(Builder& b, Value seq, Value values, bool right);

// `combiner` is "" (replace) or a binary stablehlo op name ("add", "maximum", ...);
// "maximum" and "minimum" propagate NaN as torch does.
Value scatter(Builder& b, Value operand, Value indices, Value updates,
              const Dims& update_window_dims, const Dims& inserted_window_dims,
              const Dims& scatter_dims_to_operand_dims, int64_t index_vector_dim,
              const std::string& combiner);

}  // namespace torchtpu::lowering
