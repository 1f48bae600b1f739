// Inclusive scans along one dim (cumsum, cummax, a run's start, ...), shared by the
// reduction and sort families.
#pragma once

#include <functional>
#include <vector>

#include "lowering/hlo_builder.h"

namespace torchtpu::lowering {

// Inclusive scan along `dim` of same-shaped `operands` with a variadic body (operands'
// running values, then the next elements): a reduce_window whose window spans the whole
// dim, padded on the left with `inits`.
std::vector<Value> scan_all(Builder& b, const std::vector<Value>& operands,
                            const std::vector<Value>& inits, int64_t dim,
                            const Builder::RegionBody& body);

// Inclusive scan of `x` along `dim` with a binary body.
Value scan(Builder& b, Value x, int64_t dim, Value identity,
           const std::function<Value(Builder&, Value, Value)>& body);

}  // namespace torchtpu::lowering
