// Matrix-product lowerings: mm, bmm, dot/vdot, the scaled-accumulate forms addmm,
// baddbmm, addbmm, addmv and _addmm_activation.
//
// Every product is one stablehlo.dot_general, or a call of the host GEMM kernel where the
// plugin runs one (host_gemm.h). 16-bit floats produce an f32 result that is
// rounded once at the end (PyTorch's CPU kernels accumulate them in f32; on a CPU plugin
// their operands widen to f32 first, host_gemm.h), and floats ask
// for HIGHEST precision so that a TPU does not split f32 products into bf16 passes.
// beta and alpha are runtime scalars; beta == 0 drops `self` entirely (NaN and inf in it
// included), as BLAS and PyTorch do. alpha == 0 drops the product the same way for the
// forms PyTorch's CPU runs as one GEMM/GEMV call (addmm, addmv, addbmm,
// _addmm_activation); baddbmm keeps it, as the CPU's small-batch loop does.
#include <cmath>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/host_gemm.h"

namespace torchtpu::lowering {

namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

bool contains(const Dims& d, int64_t x) {
  for (int64_t y : d) {
    if (y == x) return true;
  }
  return false;
}

// dot_general in the accumulation type of the operands' dtype. Result dims are batch dims,
// then lhs free dims, then rhs free dims (StableHLO's order).
Value product(Builder& b, Value lhs, Value rhs, const Dims& lhs_batch, const Dims& rhs_batch,
              const Dims& lhs_contract, const Dims& rhs_contract) {
  if (widen_half_products() && (lhs.dtype() == DType::kBF16 || lhs.dtype() == DType::kF16)) {
    lhs = b.convert(lhs, DType::kF32);
    rhs = b.convert(rhs, DType::kF32);
  }
  if (auto gemm = host_gemm_product(b, lhs, rhs, lhs_batch, rhs_batch, lhs_contract,
                                    rhs_contract)) {
    return *gemm;
  }
  DType out = opmath(lhs.dtype());
  Dims out_dims;
  for (int64_t d : lhs_batch) out_dims.push_back(lhs.dims()[d]);
  for (int64_t i = 0; i < lhs.rank(); ++i) {
    if (!contains(lhs_batch, i) && !contains(lhs_contract, i)) out_dims.push_back(lhs.dims()[i]);
  }
  for (int64_t i = 0; i < rhs.rank(); ++i) {
    if (!contains(rhs_batch, i) && !contains(rhs_contract, i)) out_dims.push_back(rhs.dims()[i]);
  }
  std::string attrs = "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " +
                      i64_list(lhs_batch) + ", rhs_batching_dimensions = " + i64_list(rhs_batch) +
                      ", lhs_contracting_dimensions = " + i64_list(lhs_contract) +
                      ", rhs_contracting_dimensions = " + i64_list(rhs_contract) + ">";
  if (base::is_floating(lhs.dtype()) || base::is_complex(lhs.dtype())) {
    attrs += ", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]";
  }
  return b.op("stablehlo.dot_general", {lhs, rhs}, TensorType{out, out_dims}, attrs);
}

struct DotSpec {
  Dims lhs_batch, rhs_batch, lhs_contract, rhs_contract;
};

// Operands at `lhs` and `rhs` multiplied per `spec`, in the shared dtype of both (meta
// rejects mixed dtypes, but the out= variant may carry any dtype, so compute from inputs).
Value product_of_args(LoweringContext& c, size_t lhs, size_t rhs, const DotSpec& spec) {
  DType t = promote_types(c.tensor_type(lhs).dtype, c.tensor_type(rhs).dtype);
  Builder& b = c.b();
  return product(b, b.convert(c.tensor(lhs), t), b.convert(c.tensor(rhs), t), spec.lhs_batch,
                 spec.rhs_batch, spec.lhs_contract, spec.rhs_contract);
}

// mm / bmm / dot / vdot(self, other).
LoweringFn plain_product(DotSpec spec) {
  return [spec](LoweringContext& c) -> Lowered {
    return std::vector<Value>{to_out(c, product_of_args(c, 0, 1, spec))};
  };
}

// A scalar argument as a runtime value of dtype `t`, or `fallback` when it is None.
Value scalar_or(LoweringContext& c, size_t i, DType t, double fallback) {
  return c.arg(i).kind == ArgKind::kScalar ? c.scalar(i, t) : c.b().constant(fallback, t);
}

// Zero where `scalar` (a runtime scalar) is zero, else scalar * term: the BLAS rule that a
// zero coefficient drops its term, NaN and inf in it included.
Value scaled_or_dropped(Builder& b, Value scalar, Value term, const Dims& dims) {
  Value scaled = b.mul(b.broadcast_to(scalar, dims), term);
  Value is_zero = b.compare(scalar, b.zeros(scalar.type), "EQ");
  return b.select(is_zero, b.zeros(scaled.type), scaled);
}

enum class Alpha { kDropsProduct, kKeepsProduct };

// beta * self + alpha * prod, with self (arg 0) broadcast to the output; beta at arg 3,
// alpha at arg 4. Computed in prod's (accumulation) dtype and rounded once.
Value scaled_accumulate(LoweringContext& c, Value prod, Alpha alpha_rule) {
  Builder& b = c.b();
  DType t = prod.dtype();
  const Dims& dims = c.out_type().dims;
  prod = b.reshape(prod, dims);
  Value beta = scalar_or(c, 3, t, 1);
  Value alpha = scalar_or(c, 4, t, 1);
  Value scaled_self = scaled_or_dropped(b, beta, c.operand(0, t, dims), dims);
  Value scaled_prod = alpha_rule == Alpha::kDropsProduct
                          ? scaled_or_dropped(b, alpha, prod, dims)
                          : b.mul(b.broadcast_to(alpha, dims), prod);
  return b.add(scaled_prod, scaled_self);
}

// addmm / baddbmm / addbmm / addmv(self, a, b, *, beta, alpha).
LoweringFn scaled_product(DotSpec spec, Alpha alpha_rule) {
  return [spec, alpha_rule](LoweringContext& c) -> Lowered {
    Value prod = product_of_args(c, 1, 2, spec);
    return std::vector<Value>{to_out(c, scaled_accumulate(c, prod, alpha_rule))};
  };
}

// _addmm_activation(self, mat1, mat2, *, beta, alpha, use_gelu): addmm then relu, or the
// erf form of gelu (PyTorch's CPU kernel; CUDA uses the tanh form).
Lowered lower_addmm_activation(LoweringContext& c) {
  Builder& b = c.b();
  Value r = scaled_accumulate(c, product_of_args(c, 1, 2, {{}, {}, {1}, {0}}),
                              Alpha::kDropsProduct);
  if (!c.is_none(5) && c.bool_arg(5)) {
    Value half = b.splat(0.5, r.type);
    Value cdf = b.unary("chlo.erf", b.mul(r, b.splat(M_SQRT1_2, r.type)));
    r = b.mul(b.mul(half, r), b.add(b.splat(1, r.type), cdf));
  } else {
    // Written as a select so NaN passes through, as in relu (XLA's CPU maximum may drop it).
    Value zero = b.zeros(r.type);
    r = b.select(b.compare(r, zero, "LT"), zero, r);
  }
  return std::vector<Value>{to_out(c, r)};
}

}  // namespace

void register_matmul_lowerings() {
  const DotSpec mat_mat{{}, {}, {1}, {0}};
  const DotSpec batched{{0}, {0}, {2}, {1}};
  const DotSpec vec_vec{{}, {}, {0}, {0}};
  register_lowering({"aten::mm", "aten::mm.out"}, plain_product(mat_mat));
  register_lowering({"aten::bmm", "aten::bmm.out"}, plain_product(batched));
  register_lowering({"aten::dot"}, plain_product(vec_vec));
  // vdot conjugates its first argument (on real dtypes it is dot).
  register_lowering({"aten::vdot"}, [](LoweringContext& c) -> Lowered {
    DType t = promote_types(c.tensor_type(0).dtype, c.tensor_type(1).dtype);
    Builder& b = c.b();
    Value lhs = b.conj(b.convert(c.tensor(0), t)), rhs = b.convert(c.tensor(1), t);
    return std::vector<Value>{to_out(c, product(b, lhs, rhs, {}, {}, {0}, {0}))};
  });
  register_with_variants("addmm", {""}, scaled_product(mat_mat, Alpha::kDropsProduct));
  register_with_variants("baddbmm", {""}, scaled_product(batched, Alpha::kKeepsProduct));
  // addbmm sums the batch of products: contract over the batch dim as well.
  register_with_variants("addbmm", {""},
                         scaled_product({{}, {}, {0, 2}, {0, 1}}, Alpha::kDropsProduct));
  register_with_variants("addmv", {""}, scaled_product({{}, {}, {1}, {0}}, Alpha::kDropsProduct));
  register_lowering({"aten::_addmm_activation", "aten::_addmm_activation.out"},
                    lower_addmm_activation);
}

}  // namespace torchtpu::lowering
