// Gradient-scaler lowerings: the two ops torch.amp.GradScaler calls every step.
//
// _amp_foreach_non_finite_check_and_unscale_(grads[], found_inf, inv_scale) multiplies
// every gradient by inv_scale and sets found_inf to 1 when any of them holds an inf or a
// NaN (it never clears it); one module covers the whole list, like the _foreach_ ops.
// _amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval) backs
// the scale off after a step with non-finite gradients and grows it after `interval`
// clean steps. Both also write an argument that is not their return (found_inf,
// growth_tracker): the aten layer writes those from the results that follow the returns
// (writes_unreturned_args in op_special_cases.h). Arithmetic follows ATen's CPU and CUDA
// kernels (AmpGradScalerKernels.cpp, AmpKernels.cu).
#include <string>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// A single-element tensor (or a 0-dim CPU tensor, a runtime scalar) as a 0-d value of `t`.
Value single(LoweringContext& c, size_t i, DType t) {
  if (c.arg(i).kind == ArgKind::kScalar) return c.scalar(i, t);
  return c.b().reshape(c.b().convert(c.tensor(i), t), {});
}

base::Status check_floating(LoweringContext& c, const TensorType& t, const std::string& what) {
  if (base::is_floating(t.dtype)) return base::Status::ok_status();
  return base::invalid_argument("lowering: " + c.op_name() + ": " + what +
                                " must be a floating-point tensor");
}

// Results: every unscaled gradient, then found_inf's new value.
Result non_finite_check_and_unscale(LoweringContext& c) {
  Builder& b = c.b();
  const std::vector<TensorType>& items = c.arg(0).list_types;
  for (const TensorType& t : items) TORCHTPU_RETURN_IF_ERROR(check_floating(c, t, "a gradient"));
  std::vector<Value> grads = c.tensor_list(0);
  Value found_inf = c.tensor(1);
  Value inv_scale = single(c, 2, DType::kF32);
  TensorType flag{DType::kBool, {}};
  Value any_non_finite = b.splat(0, flag);
  std::vector<Value> out;
  for (size_t k = 0; k < grads.size(); ++k) {
    DType t = opmath(items[k].dtype);
    Value g = b.convert(grads[k], t);
    Value finite = b.op("stablehlo.is_finite", {g}, TensorType{DType::kBool, g.dims()});
    Value all_finite = b.all_of(finite);
    any_non_finite = b.binary("or", any_non_finite, b.unary("not", all_finite));
    Value scale = b.broadcast_to(b.convert(inv_scale, t), g.dims());
    out.push_back(b.convert(b.mul(g, scale), c.out_type(k).dtype));
  }
  const TensorType& found_type = found_inf.type;
  Value flag_b = b.broadcast_to(any_non_finite, found_type.dims);
  out.push_back(b.select(flag_b, b.splat(1, found_type), found_inf));
  return out;
}

// Results: the new scale (written into `self`), then growth_tracker's new value.
Result update_scale(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType scale_type = c.out_type(0);
  const TensorType tracker_type = c.out_type(1);
  Value scale = b.reshape(c.tensor(0), {});
  Value tracker = b.reshape(c.tensor(1), {});
  Value found = single(c, 2, DType::kF32);
  double growth = c.double_arg(3), backoff = c.double_arg(4);
  int64_t interval = c.int_arg(5);
  DType tt = tracker.dtype();
  if (base::is_floating(tt) || tt == DType::kBool || scale.dtype() != DType::kF32) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  " expects a float32 scale and an integer growth_tracker");
  }
  Value found_any = b.compare(found, b.constant(0, DType::kF32), "NE");
  Value successful = b.add(tracker, b.constant_i64(1, tt));
  Value grow = b.compare(successful, b.constant_i64(interval, tt), "EQ");
  // float * double in ATen: the product is a double, rounded once into the float scale.
  Value scale64 = b.convert(scale, DType::kF64);
  Value grown = b.convert(b.mul(scale64, b.constant(growth, DType::kF64)), scale.dtype());
  Value backed_off = b.convert(b.mul(scale64, b.constant(backoff, DType::kF64)), scale.dtype());
  Value grown_ok = b.op("stablehlo.is_finite", {grown}, TensorType{DType::kBool, {}});
  Value clean_scale = b.select(b.binary("and", grow, grown_ok), grown, scale);
  Value zero = b.constant_i64(0, tt);
  Value clean_tracker = b.select(grow, zero, successful);
  Value new_scale = b.select(found_any, backed_off, clean_scale);
  Value new_tracker = b.select(found_any, zero, clean_tracker);
  return std::vector<Value>{b.reshape(new_scale, scale_type.dims),
                            b.reshape(new_tracker, tracker_type.dims)};
}

}  // namespace

void register_amp_lowerings() {
  register_lowering({"aten::_amp_foreach_non_finite_check_and_unscale_"},
                    non_finite_check_and_unscale);
  register_lowering({"aten::_amp_update_scale_"}, update_scale);
}

}  // namespace torchtpu::lowering
