// Convolution lowerings (1d/2d/3d, grouped, transposed); pooling is in pooling.cc.
//
// PyTorch routes convolutions of out-of-tree devices to convolution_overrideable and
// convolution_backward_overrideable. Every convolution here is one stablehlo.convolution:
// a transposed convolution is a forward one over the stride-dilated input with the
// kernel flipped and its in/out channels swapped per group, and the weight gradient is
// a convolution of the input with grad_output (batch_group_count splits the groups).
#include <cmath>
#include <optional>

#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

Dims range(int64_t begin, int64_t end) {
  Dims d;
  for (int64_t i = begin; i < end; ++i) d.push_back(i);
  return d;
}

// "[b, f, 0, 1]" with `first` and `second` naming dims 0 and 1.
std::string conv_spec(const char* first, const char* second, int64_t num_spatial) {
  std::string s = std::string("[") + first + ", " + second;
  for (int64_t i = 0; i < num_spatial; ++i) s += ", " + std::to_string(i);
  return s + "]";
}

struct ConvAttrs {
  std::string lhs, rhs, out;  // conv_spec strings
  Dims window_strides, lhs_dilation, rhs_dilation;
  Dims pad_lo, pad_hi;
  int64_t feature_groups = 1, batch_groups = 1;
};

Value convolution(Builder& b, Value lhs, Value rhs, const ConvAttrs& a, const TensorType& out) {
  std::string padding = "dense<[";
  for (size_t i = 0; i < a.pad_lo.size(); ++i) {
    padding += (i ? ", [" : "[") + std::to_string(a.pad_lo[i]) + ", " +
               std::to_string(a.pad_hi[i]) + "]";
  }
  padding += "]> : tensor<" + std::to_string(a.pad_lo.size()) + "x2xi64>";
  std::string attrs = "batch_group_count = " + std::to_string(a.batch_groups) +
                      " : i64, dimension_numbers = #stablehlo.conv<" + a.lhs + "x" + a.rhs +
                      "->" + a.out + ">, feature_group_count = " +
                      std::to_string(a.feature_groups) + " : i64, lhs_dilation = " +
                      i64_array(a.lhs_dilation) + ", padding = " + padding +
                      ", rhs_dilation = " + i64_array(a.rhs_dilation) +
                      ", window_strides = " + i64_array(a.window_strides);
  return b.op("stablehlo.convolution", {lhs, rhs}, out, attrs);
}

struct ConvParams {
  Dims stride, padding, dilation, output_padding;
  int64_t groups = 1;
};

// x [N, Cin, S...] (*) w [Cout, Cin/g, K...] -> [N, Cout, O...].
Value conv_forward(Builder& b, Value x, Value w, const ConvParams& p, DType out_dtype) {
  int64_t nsp = x.rank() - 2;
  ConvAttrs a{conv_spec("b", "f", nsp), conv_spec("o", "i", nsp), conv_spec("b", "f", nsp),
              p.stride, Dims(nsp, 1), p.dilation, p.padding, p.padding, p.groups, 1};
  Dims out{x.dims()[0], w.dims()[0]};
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t span = p.dilation[i] * (w.dims()[2 + i] - 1) + 1;
    out.push_back((x.dims()[2 + i] + 2 * p.padding[i] - span) / p.stride[i] + 1);
  }
  return convolution(b, x, w, a, TensorType{out_dtype, out});
}

// Transposed convolution: x [N, Cin, S...] with w [Cin, Cout/g, K...] -> [N, Cout, O...],
// O = (S - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1.
Value conv_transpose(Builder& b, Value x, Value w, const ConvParams& p, DType out_dtype) {
  int64_t nsp = x.rank() - 2, g = p.groups;
  const Dims& wd = w.dims();
  int64_t cin = wd[0], cout_g = wd[1];
  Dims grouped{g, cin / g, cout_g}, swapped{g * cout_g, cin / g};
  for (int64_t i = 0; i < nsp; ++i) {
    grouped.push_back(wd[2 + i]);
    swapped.push_back(wd[2 + i]);
  }
  Dims perm{0, 2, 1};
  for (int64_t i = 0; i < nsp; ++i) perm.push_back(3 + i);
  Value k = b.reshape(b.transpose(b.reshape(w, grouped), perm), swapped);
  k = b.op("stablehlo.reverse", {k}, k.type, "dimensions = " + i64_array(range(2, 2 + nsp)));
  ConvAttrs a{conv_spec("b", "f", nsp), conv_spec("o", "i", nsp), conv_spec("b", "f", nsp),
              Dims(nsp, 1), p.stride, p.dilation, {}, {}, g, 1};
  Dims out{x.dims()[0], g * cout_g};
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t edge = p.dilation[i] * (wd[2 + i] - 1);
    a.pad_lo.push_back(edge - p.padding[i]);
    a.pad_hi.push_back(edge - p.padding[i] + p.output_padding[i]);
    out.push_back((x.dims()[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] + edge +
                  p.output_padding[i] + 1);
  }
  return convolution(b, x, k, a, TensorType{out_dtype, out});
}

// Gradient of conv_forward(x, w) with respect to w [Cout, Cin/g, K...] given gy.
Value conv_weight_grad(Builder& b, Value x, Value gy, const Dims& kernel, const ConvParams& p,
                       DType out_dtype) {
  int64_t nsp = x.rank() - 2;
  ConvAttrs a{conv_spec("f", "b", nsp), conv_spec("i", "o", nsp), conv_spec("f", "b", nsp),
              p.dilation, Dims(nsp, 1), p.stride, p.padding, {}, 1, p.groups};
  Dims out{gy.dims()[1], x.dims()[1] / p.groups};
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t out_span = (gy.dims()[2 + i] - 1) * p.stride[i] + 1;
    int64_t kernel_span = p.dilation[i] * (kernel[i] - 1) + 1;
    // May be negative: input positions no window reaches are cut off.
    a.pad_hi.push_back(out_span - x.dims()[2 + i] + kernel_span - p.padding[i] - 1);
    out.push_back(kernel[i]);
  }
  return convolution(b, x, gy, a, TensorType{out_dtype, out});
}

ConvParams conv_params(LoweringContext& c, size_t first, int64_t nsp) {
  ConvParams p;
  p.stride = per_dim(c.int_list(first), nsp, 1);
  p.padding = per_dim(c.int_list(first + 1), nsp, 0);
  p.dilation = per_dim(c.int_list(first + 2), nsp, 1);
  p.output_padding = per_dim(c.int_list(first + 4), nsp, 0);
  p.groups = c.int_arg(first + 5);
  return p;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups).
Result lower_convolution(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0), w = c.tensor(1);
  // An empty result (no batch, or PyTorch's result for an input of 0 channels) is zeros:
  // a window XLA would build over 0 channels does not have the result's shape.
  if (c.out_type().num_elements() == 0) return std::vector<Value>{b.zeros(c.out_type())};
  ConvParams p = conv_params(c, 3, x.rank() - 2);
  DType t = c.out_type().dtype;
  Value y = c.bool_arg(6) ? conv_transpose(b, x, w, p, t) : conv_forward(b, x, w, p, t);
  if (!c.is_none(2)) y = b.add(y, b.broadcast_in_dim(b.convert(c.tensor(2), t), y.dims(), {1}));
  return std::vector<Value>{y};
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias).
// A transposed convolution is the adjoint of a forward one, so their roles swap.
Result lower_convolution_backward(LoweringContext& c) {
  Builder& b = c.b();
  const OpArg& mask_arg = c.arg(9);
  if (mask_arg.kind != ArgKind::kIntList || mask_arg.ints.size() != 3) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  ": output_mask must be a list of 3 bools");
  }
  Value gy = c.tensor(0), x = c.tensor(1), w = c.tensor(2);
  if (gy.type.num_elements() == 0 || x.type.num_elements() == 0 ||
      w.type.num_elements() == 0) {
    // A sum over no elements: every gradient is zeros (and those of empty tensors empty).
    std::vector<Value> out;
    for (const TensorType& t : c.out_types()) out.push_back(b.zeros(t));
    return out;
  }
  int64_t nsp = x.rank() - 2;
  ConvParams p = conv_params(c, 3, nsp);
  bool transposed = c.bool_arg(6);
  Dims kernel(w.dims().begin() + 2, w.dims().end());
  std::vector<std::optional<Value>> grads(3);
  if (mask_arg.ints[0]) {
    if (transposed) {
      // The forward's output_padding added trailing positions no input reaches: a forward
      // convolution of the gradient yields a window past the input there; cut it off.
      Value g = conv_forward(b, gy, w, p, x.dtype());
      if (g.dims() != x.dims()) {
        g = b.slice(g, Dims(g.rank(), 0), x.dims(), Dims(g.rank(), 1));
      }
      grads[0] = g;
    } else {
      // output_padding recovers the input positions the forward strides skipped.
      ConvParams q = p;
      for (int64_t i = 0; i < nsp; ++i) {
        int64_t span = (gy.dims()[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] +
                       p.dilation[i] * (kernel[i] - 1) + 1;
        q.output_padding[i] = x.dims()[2 + i] - span;
      }
      grads[0] = conv_transpose(b, gy, w, q, x.dtype());
    }
  }
  if (mask_arg.ints[1]) {
    grads[1] = transposed ? conv_weight_grad(b, gy, x, kernel, p, w.dtype())
                          : conv_weight_grad(b, x, gy, kernel, p, w.dtype());
  }
  if (mask_arg.ints[2]) {
    Dims red{0};
    for (int64_t i = 0; i < nsp; ++i) red.push_back(2 + i);
    grads[2] = b.reduce_sum(b.convert(gy, opmath(gy.dtype())), red);
  }
  // The caller lists either all three results or only the ones the mask asks for.
  std::vector<Value> out;
  bool all = c.out_types().size() == 3;
  for (size_t k = 0; k < 3; ++k) {
    if (!grads[k] && !all) continue;
    const TensorType& t = c.out_type(out.size());
    out.push_back(grads[k] ? b.convert(*grads[k], t.dtype) : b.zeros(t));
  }
  return out;
}

}  // namespace

void register_conv_lowerings() {
  register_lowering({"aten::convolution_overrideable", "aten::convolution_overrideable.out"},
                    lower_convolution);
  register_lowering({"aten::convolution_backward_overrideable",
                     "aten::convolution_backward_overrideable.out"},
                    lower_convolution_backward);
}

}  // namespace torchtpu::lowering
