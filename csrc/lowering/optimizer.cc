// Fused optimizer steps: _fused_adam_ and _fused_adamw_ (torch.optim.Adam/AdamW with
// fused=True, TorchTitan's default), _fused_sgd_ (torch.optim.SGD with fused=True), their
// functional forms for graphs, and _fused_adagrad_ (torch.optim.Adagrad with fused=True).
//
// One module updates every parameter of the call, like the _foreach_ ops: per item i it
// reads param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad) and the
// item's step tensor, and returns the new values. Arithmetic follows ATen's CPU kernel
// (cpu/FusedAdamKernel.cpp): the bias corrections and the step size in double from the
// step's value, the element math in the parameter's opmath type (float32 for bf16/f16)
// with exp_avg updated as PyTorch's lerp, and the parameter updated from the unrounded
// moments. grad_scale divides the gradients (which are then written back unscaled); a
// found_inf equal to 1 leaves everything unchanged (the kernel returns early).
//
// `lr`, `beta1` and `beta2` are runtime scalars (floats the aten layer passes as data; lr
// may also be the tensor_lr overload's tensor), so schedules of the learning rate and of
// the momentum (OneCycleLR cycles beta1) never recompile; eps, the weight decay and the
// flags are structure.
//
// Results, in-place forms: the new params, then grads (only with grad_scale), exp_avgs,
// exp_avg_sqs, then max_exp_avg_sqs (only with amsgrad), each one per item: the lists the
// aten layer writes (written_list_args in op_special_cases). Functional forms
// (_fused_adam, _fused_adamw) return all five lists, grads and max_exp_avg_sqs included.
#include <optional>
#include <string>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// Argument positions (both overloads, both forms).
constexpr size_t kParams = 0, kGrads = 1, kExpAvgs = 2, kExpAvgSqs = 3, kMaxExpAvgSqs = 4,
                 kSteps = 5, kLr = 6, kBeta1 = 7, kBeta2 = 8, kWeightDecay = 9, kEps = 10,
                 kAmsgrad = 11, kMaximize = 12, kGradScale = 13, kFoundInf = 14;

// A 0-d value of `t` from a runtime scalar, a one-element tensor, or a 0-dim CPU tensor.
Value single_value(LoweringContext& c, size_t i, DType t) {
  if (c.arg(i).kind == ArgKind::kScalar) return c.scalar(i, t);
  return c.b().reshape(c.b().convert(c.tensor(i), t), {});
}

// The kernels return early when *found_inf == 1.0 (exactly): the flag that keeps every
// value unchanged, when found_inf is given.
std::optional<Value> skip_flag(LoweringContext& c, size_t found_inf) {
  if (c.is_none(found_inf)) return std::nullopt;
  Value found = single_value(c, found_inf, DType::kF32);
  return c.b().compare(found, c.b().constant(1.0, DType::kF32), "EQ");
}

// An item's gradient in opmath type `t`: divided by grad_scale when given (the unscaled
// value, in the item's dtype, is what the kernel writes back: `written`), negated with
// maximize.
struct ItemGrad {
  Value g;
  Value written;
};
ItemGrad item_grad(Builder& b, Value grad, const std::optional<Value>& grad_scale,
                   const TensorType& type, DType t, bool maximize) {
  Value g = b.convert(grad, t);
  Value written = grad;
  if (grad_scale) {
    g = b.div(g, b.broadcast_to(b.convert(*grad_scale, t), type.dims));
    written = b.convert(g, type.dtype);
  }
  if (maximize) g = b.unary("negate", g);
  return {g, written};
}

// The results: the new values of the lists numbered in `lists` (indices into `updated`,
// list after list), each item its old value where `skip` holds.
std::vector<Value> list_results(Builder& b, const std::vector<size_t>& lists,
                                const std::vector<std::vector<Value>>& updated,
                                const std::vector<std::vector<Value>>& originals,
                                const std::optional<Value>& skip) {
  std::vector<Value> results;
  for (size_t list : lists) {
    for (size_t i = 0; i < updated[list].size(); ++i) {
      Value r = updated[list][i];
      if (skip) r = b.select(b.broadcast_to(*skip, r.dims()), originals[list][i], r);
      results.push_back(r);
    }
  }
  return results;
}

// The op's result types must be one per item of the written `lists`.
base::Status check_result_count(LoweringContext& c, const std::vector<size_t>& lists) {
  size_t expected = 0;
  for (size_t list : lists) expected += c.arg(list).list_types.size();
  if (c.out_types().size() == expected) return base::Status::ok_status();
  return base::internal_error("lowering: " + c.op_name() + " has " +
                              std::to_string(c.out_types().size()) + " result types, expected " +
                              std::to_string(expected));
}

// The params (list `params`) are floating; every list in `same` holds one item per param of
// the param's dtype and shape (PyTorch's kernels read them so), every list in `steps` one
// single value per param.
base::Status check_lists(LoweringContext& c, size_t params, const std::vector<size_t>& same,
                         const std::vector<size_t>& steps) {
  const size_t n = c.arg(params).list_types.size();
  for (const std::vector<size_t>* group : {&same, &steps}) {
    for (size_t list : *group) {
      if (c.arg(list).list_types.size() != n) {
        return base::invalid_argument("lowering: " + c.op_name() + ": every list must have " +
                                      std::to_string(n) + " items (the params')");
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const TensorType& p = c.arg(params).list_types[i];
    if (!base::is_floating(p.dtype)) {
      return base::invalid_argument("lowering: " + c.op_name() + ": params must be floating");
    }
    for (size_t list : same) {
      if (!(c.arg(list).list_types[i] == p)) {
        return base::invalid_argument("lowering: " + c.op_name() + ": item " +
                                      std::to_string(i) + " differs in dtype or shape from "
                                      "its param");
      }
    }
    for (size_t list : steps) {
      if (c.arg(list).list_types[i].num_elements() != 1) {
        return base::invalid_argument("lowering: " + c.op_name() + ": a step must be one value");
      }
    }
  }
  return base::Status::ok_status();
}

// The lists an in-place call writes, in result order (see the file comment).
std::vector<size_t> written_lists(LoweringContext& c, bool functional) {
  std::vector<size_t> lists = {kParams};
  if (functional || !c.is_none(kGradScale)) lists.push_back(kGrads);
  lists.push_back(kExpAvgs);
  lists.push_back(kExpAvgSqs);
  if (functional || c.bool_arg(kAmsgrad)) lists.push_back(kMaxExpAvgSqs);
  return lists;
}

LoweringFn fused_adam(bool adamw, bool functional) {
  return [adamw, functional](LoweringContext& c) -> Result {
    Builder& b = c.b();
    size_t n = c.arg(kParams).list_types.size();
    std::vector<size_t> same = {kGrads, kExpAvgs, kExpAvgSqs};
    if (c.bool_arg(kAmsgrad)) same.push_back(kMaxExpAvgSqs);
    TORCHTPU_RETURN_IF_ERROR(check_lists(c, kParams, same, {kSteps}));
    std::vector<size_t> lists = written_lists(c, functional);
    TORCHTPU_RETURN_IF_ERROR(check_result_count(c, lists));
    const bool amsgrad = c.bool_arg(kAmsgrad), maximize = c.bool_arg(kMaximize);
    const double weight_decay = c.double_arg(kWeightDecay), eps = c.double_arg(kEps);

    std::vector<Value> params = c.tensor_list(kParams), grads = c.tensor_list(kGrads);
    std::vector<Value> exp_avgs = c.tensor_list(kExpAvgs);
    std::vector<Value> exp_avg_sqs = c.tensor_list(kExpAvgSqs);
    std::vector<Value> steps = c.tensor_list(kSteps);
    std::vector<Value> maxes;
    if (!c.arg(kMaxExpAvgSqs).list_types.empty()) maxes = c.tensor_list(kMaxExpAvgSqs);
    Value lr = single_value(c, kLr, DType::kF64);
    Value beta1 = c.scalar(kBeta1, DType::kF64), beta2 = c.scalar(kBeta2, DType::kF64);
    std::optional<Value> grad_scale;
    if (!c.is_none(kGradScale)) grad_scale = single_value(c, kGradScale, DType::kF32);
    // Per call, in double: 1 - lr * weight_decay (AdamW's decay factor).
    Value one64 = b.constant(1.0, DType::kF64);
    Value decay = b.sub(one64, b.mul(lr, b.constant(weight_decay, DType::kF64)));
    Value one_minus_beta1 = b.sub(one64, beta1), one_minus_beta2 = b.sub(one64, beta2);

    // Per list, the new value of each item (in `lists` order below).
    std::vector<std::vector<Value>> out(5);
    for (size_t i = 0; i < n; ++i) {
      const TensorType& type = c.arg(kParams).list_types[i];
      DType t = opmath(type.dtype);
      const Dims& dims = type.dims;
      auto splat = [&](Value scalar64) { return b.broadcast_to(b.convert(scalar64, t), dims); };
      auto splat_t = [&](Value scalar) { return b.broadcast_to(scalar, dims); };
      auto constant = [&](double v) { return b.broadcast_to(b.constant(v, t), dims); };

      Value step = b.convert(b.reshape(steps[i], {}), DType::kF64);
      Value bc1 = b.sub(one64, b.binary("power", beta1, step));
      Value bc2 = b.sub(one64, b.binary("power", beta2, step));
      Value neg_step_size = b.unary("negate", b.div(lr, bc1));
      Value bc2_sqrt = b.unary("sqrt", bc2);

      Value p = b.convert(params[i], t);
      auto [g, grad_out] = item_grad(b, grads[i], grad_scale, type, t, maximize);
      if (weight_decay != 0) {
        if (adamw) {
          p = b.mul(p, splat(decay));
        } else {
          g = b.add(g, b.mul(p, constant(weight_decay)));
        }
      }
      // exp_avg.lerp_(grad, w = 1 - beta1), as PyTorch's lerp: from the nearer end,
      // base + coeff * (grad - exp_avg) with (base, coeff) = (exp_avg, w) or (grad, w - 1).
      Value m = b.convert(exp_avgs[i], t);
      Value w = b.convert(one_minus_beta1, t);
      Value near_start = b.compare(b.unary("abs", w), b.constant(0.5, t), "LT");
      Value coeff = b.select(near_start, w, b.sub(w, b.constant(1, t)));
      Value base = b.select(splat_t(near_start), m, g);
      m = b.add(base, b.mul(splat_t(coeff), b.sub(g, m)));
      Value v = b.convert(exp_avg_sqs[i], t);
      v = b.add(b.mul(v, splat(beta2)), b.mul(b.mul(splat(one_minus_beta2), g), g));
      Value vmax = v;
      if (amsgrad) vmax = b.max(b.convert(maxes[i], t), v);
      Value denom = b.add(b.div(b.unary("sqrt", vmax), splat(bc2_sqrt)), constant(eps));
      p = b.add(p, b.div(b.mul(splat(neg_step_size), m), denom));

      out[0].push_back(b.convert(p, type.dtype));
      out[1].push_back(grad_out);
      out[2].push_back(b.convert(m, type.dtype));
      out[3].push_back(b.convert(v, type.dtype));
      if (amsgrad) out[4].push_back(b.convert(vmax, type.dtype));
    }
    if (!amsgrad) out[4] = maxes;  // unchanged (the functional form returns them)
    return list_results(b, lists, out, {params, grads, exp_avgs, exp_avg_sqs, maxes},
                        skip_flag(c, kFoundInf));
  };
}

// _fused_sgd_(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
// nesterov, maximize, is_first_step, grad_scale, found_inf), as ATen's CPU kernel
// (cpu/FusedSGDKernel.cpp) in the parameter's opmath type: the gradient unscaled (and
// written back) with grad_scale, negated with maximize, plus weight_decay * param; with
// momentum the buffer becomes the gradient on the first step, else momentum * buffer +
// (1 - dampening) * gradient, and the step takes the buffer (nesterov: gradient +
// momentum * buffer); param -= lr * step. found_inf == 1 leaves everything unchanged.
// Results: the params, then the grads (only with grad_scale) and the buffers (only with
// momentum: the list is empty without); the functional form returns all three lists.
constexpr size_t kSgdParams = 0, kSgdGrads = 1, kSgdBuffers = 2, kSgdWeightDecay = 3,
                 kSgdMomentum = 4, kSgdLr = 5, kSgdDampening = 6, kSgdNesterov = 7,
                 kSgdMaximize = 8, kSgdFirstStep = 9, kSgdGradScale = 10, kSgdFoundInf = 11;

LoweringFn fused_sgd(bool functional) {
  return [functional](LoweringContext& c) -> Result {
    Builder& b = c.b();
    const size_t n = c.arg(kSgdParams).list_types.size();
    const double momentum = c.double_arg(kSgdMomentum);
    const bool with_buffers = momentum != 0;
    std::vector<size_t> same = {kSgdGrads};
    if (with_buffers) same.push_back(kSgdBuffers);
    TORCHTPU_RETURN_IF_ERROR(check_lists(c, kSgdParams, same, {}));
    const bool scaled = !c.is_none(kSgdGradScale);
    std::vector<size_t> lists = {kSgdParams};
    if (functional || scaled) lists.push_back(kSgdGrads);
    if (functional || with_buffers) lists.push_back(kSgdBuffers);
    TORCHTPU_RETURN_IF_ERROR(check_result_count(c, lists));
    const double weight_decay = c.double_arg(kSgdWeightDecay);
    const double dampening = c.double_arg(kSgdDampening);
    const bool nesterov = c.bool_arg(kSgdNesterov), maximize = c.bool_arg(kSgdMaximize);
    const bool first = c.bool_arg(kSgdFirstStep);

    std::vector<Value> params = c.tensor_list(kSgdParams), grads = c.tensor_list(kSgdGrads);
    std::vector<Value> buffers;
    if (!c.arg(kSgdBuffers).list_types.empty()) buffers = c.tensor_list(kSgdBuffers);
    Value lr = single_value(c, kSgdLr, DType::kF64);
    std::optional<Value> grad_scale;
    if (scaled) grad_scale = single_value(c, kSgdGradScale, DType::kF32);
    std::vector<std::vector<Value>> out(3);
    for (size_t i = 0; i < n; ++i) {
      const TensorType& type = c.arg(kSgdParams).list_types[i];
      DType t = opmath(type.dtype);
      const Dims& dims = type.dims;
      auto constant = [&](double v) { return b.broadcast_to(b.constant(v, t), dims); };
      Value p = b.convert(params[i], t);
      auto [g, grad_out] = item_grad(b, grads[i], grad_scale, type, t, maximize);
      if (weight_decay != 0) g = b.add(g, b.mul(p, constant(weight_decay)));
      if (with_buffers) {
        Value buf = first ? g
                          : b.add(b.mul(b.convert(buffers[i], t), constant(momentum)),
                                  b.mul(g, constant(1 - dampening)));
        g = nesterov ? b.add(g, b.mul(buf, constant(momentum))) : buf;
        out[2].push_back(b.convert(buf, type.dtype));
      }
      p = b.sub(p, b.mul(g, b.broadcast_to(b.convert(lr, t), dims)));
      out[0].push_back(b.convert(p, type.dtype));
      out[1].push_back(grad_out);
    }
    if (!with_buffers) out[2] = buffers;  // unchanged (the functional form returns them)
    return list_results(b, lists, out, {params, grads, buffers}, skip_flag(c, kSgdFoundInf));
  };
}

// _fused_adagrad_(self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
// maximize, grad_scale, found_inf), as ATen's CPU kernel (cpu/FusedAdagradKernel.cpp): per
// item the learning rate lr / (1 + (step - 1) * lr_decay) in double from the item's step
// (already incremented), then in the opmath type: the gradient unscaled (written back) and
// negated with maximize, plus weight_decay * param; state_sum += grad * grad; param -=
// clr * grad / (sqrt(state_sum) + eps). The steps are read, not written. Results: the
// params, the grads (only with grad_scale), the state sums.
constexpr size_t kAgParams = 0, kAgGrads = 1, kAgSums = 2, kAgSteps = 3, kAgLr = 4,
                 kAgLrDecay = 5, kAgWeightDecay = 6, kAgEps = 7, kAgMaximize = 8,
                 kAgGradScale = 9, kAgFoundInf = 10;

Result fused_adagrad(LoweringContext& c) {
  Builder& b = c.b();
  const size_t n = c.arg(kAgParams).list_types.size();
  TORCHTPU_RETURN_IF_ERROR(check_lists(c, kAgParams, {kAgGrads, kAgSums}, {kAgSteps}));
  const bool scaled = !c.is_none(kAgGradScale);
  std::vector<size_t> lists = {kAgParams};
  if (scaled) lists.push_back(kAgGrads);
  lists.push_back(kAgSums);
  TORCHTPU_RETURN_IF_ERROR(check_result_count(c, lists));
  const double lr_decay = c.double_arg(kAgLrDecay), weight_decay = c.double_arg(kAgWeightDecay);
  const double eps = c.double_arg(kAgEps);
  const bool maximize = c.bool_arg(kAgMaximize);
  std::vector<Value> params = c.tensor_list(kAgParams), grads = c.tensor_list(kAgGrads);
  std::vector<Value> sums = c.tensor_list(kAgSums), steps = c.tensor_list(kAgSteps);
  Value lr = single_value(c, kAgLr, DType::kF64);
  std::optional<Value> grad_scale;
  if (scaled) grad_scale = single_value(c, kAgGradScale, DType::kF32);
  Value one64 = b.constant(1.0, DType::kF64);
  std::vector<std::vector<Value>> out(3);
  for (size_t i = 0; i < n; ++i) {
    const TensorType& type = c.arg(kAgParams).list_types[i];
    DType t = opmath(type.dtype);
    auto constant = [&](double v) { return b.broadcast_to(b.constant(v, t), type.dims); };
    Value step = b.convert(b.reshape(steps[i], {}), DType::kF64);
    Value clr = b.div(lr, b.add(one64, b.mul(b.sub(step, one64),
                                             b.constant(lr_decay, DType::kF64))));
    Value p = b.convert(params[i], t);
    auto [g, grad_out] = item_grad(b, grads[i], grad_scale, type, t, maximize);
    if (weight_decay != 0) g = b.add(g, b.mul(p, constant(weight_decay)));
    Value sum = b.add(b.convert(sums[i], t), b.mul(g, g));
    Value std_dev = b.add(b.unary("sqrt", sum), constant(eps));
    Value update = b.div(b.mul(b.broadcast_to(b.convert(clr, t), type.dims), g), std_dev);
    out[0].push_back(b.convert(b.sub(p, update), type.dtype));
    out[1].push_back(grad_out);
    out[2].push_back(b.convert(sum, type.dtype));
  }
  return list_results(b, lists, out, {params, grads, sums}, skip_flag(c, kAgFoundInf));
}

}  // namespace

void register_optimizer_lowerings() {
  register_lowering({"aten::_fused_adagrad_", "aten::_fused_adagrad_.tensor_lr"}, fused_adagrad);
  register_lowering({"aten::_fused_sgd_", "aten::_fused_sgd_.tensor_lr"},
                    fused_sgd(/*functional=*/false));
  register_lowering({"aten::_fused_sgd", "aten::_fused_sgd.tensor_lr"},
                    fused_sgd(/*functional=*/true));
  for (bool adamw : {false, true}) {
    std::string name = adamw ? "aten::_fused_adamw" : "aten::_fused_adam";
    register_lowering({(name + "_").c_str(), (name + "_.tensor_lr").c_str()},
                      fused_adam(adamw, /*functional=*/false));
    register_lowering({name.c_str(), (name + ".tensor_lr").c_str()},
                      fused_adam(adamw, /*functional=*/true));
  }
}

}  // namespace torchtpu::lowering
