// Fused RNN cell lowerings: the ops PyTorch's RNN.cpp calls on accelerator devices
// (`input.is_privateuseone()`) for every LSTM and GRU time step, nn.LSTMCell/GRUCell and
// packed sequences included, and their backward ops.
//
// The gate matmuls happen before these ops (RNN.cpp passes `input @ w_ih^T` and
// `hx @ w_hh^T`); a cell adds the optional biases, applies the gate nonlinearities and
// returns the new state plus a workspace that its backward op reads. The workspace is
// private to this pair of ops, but keeps CUDA's shapes and layout (RNN.cu) so PyTorch's
// meta kernels describe it: LSTM [B, 4H] = activated gates (i, f, g, o); GRU [B, 5H] =
// (r, z, n, hx, hn + b_hn). Reduced-precision floats compute in float32 (CUDA's
// accscalar_t) and round once per result.
#include <string>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// Columns [k * h, (k + 1) * h) of a [B, n * h] value.
Value chunk(Builder& b, Value v, int64_t k, int64_t h) {
  return b.slice(v, {0, k * h}, {v.dims()[0], (k + 1) * h}, {1, 1});
}

Value one_like(Builder& b, Value v) { return b.splat(1, v.type); }

// Tensor argument `i` converted to `t`; a 1-d bias is broadcast over the batch `dims`.
Value operand_as(LoweringContext& c, size_t i, DType t, const Dims& dims) {
  Value v = c.b().convert(c.tensor(i), t);
  if (v.rank() == 1 && dims.size() == 2) v = c.b().broadcast_in_dim(v, dims, {1});
  return v;
}

// gates = input_gates + hidden_gates (+ input_bias + hidden_bias), in `t`.
Value gate_sum(LoweringContext& c, DType t) {
  Builder& b = c.b();
  const Dims& dims = c.tensor_type(0).dims;
  Value g = b.add(operand_as(c, 0, t, dims), operand_as(c, 1, t, dims));
  if (!c.is_none(3)) g = b.add(g, operand_as(c, 3, t, dims));
  if (!c.is_none(4)) g = b.add(g, operand_as(c, 4, t, dims));
  return g;
}

base::Status check_rank2(LoweringContext& c, size_t i) {
  if (c.tensor_type(i).rank() == 2) return base::Status::ok_status();
  return base::invalid_argument("lowering: " + c.op_name() + " expects 2-d gates (got rank " +
                                std::to_string(c.tensor_type(i).rank()) + ")");
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)
//   -> (hy, cy, workspace)
Result lstm_cell(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(check_rank2(c, 0));
  Builder& b = c.b();
  DType t = opmath(c.out_type(0).dtype);
  int64_t h = c.tensor_type(2).dims.back();
  Value gates = gate_sum(c, t);
  Value i = b.unary("logistic", chunk(b, gates, 0, h));
  Value f = b.unary("logistic", chunk(b, gates, 1, h));
  Value g = b.unary("tanh", chunk(b, gates, 2, h));
  Value o = b.unary("logistic", chunk(b, gates, 3, h));
  Value cx = b.convert(c.tensor(2), t);
  Value cy = b.add(b.mul(f, cx), b.mul(i, g));
  Value hy = b.mul(o, b.unary("tanh", cy));
  Value workspace = b.concatenate({i, f, g, o}, 1);
  return std::vector<Value>{b.convert(hy, c.out_type(0).dtype), b.convert(cy, c.out_type(1).dtype),
                            b.convert(workspace, c.out_type(2).dtype)};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias?); an absent gradient is zero.
Result lstm_cell_backward(LoweringContext& c) {
  if (c.is_none(0) && c.is_none(1)) return std::vector<Value>{};  // all results undefined
  TORCHTPU_RETURN_IF_ERROR(check_rank2(c, 4));
  Builder& b = c.b();
  DType t = opmath(c.out_type(0).dtype);
  const Dims& state = c.tensor_type(2).dims;
  int64_t h = state.back();
  TensorType state_type{t, state};
  Value grad_hy = c.is_none(0) ? b.zeros(state_type) : b.convert(c.tensor(0), t);
  Value grad_cy = c.is_none(1) ? b.zeros(state_type) : b.convert(c.tensor(1), t);
  Value cx = b.convert(c.tensor(2), t);
  Value tanh_cy = b.unary("tanh", b.convert(c.tensor(3), t));
  Value ws = b.convert(c.tensor(4), t);
  Value i = chunk(b, ws, 0, h), f = chunk(b, ws, 1, h), g = chunk(b, ws, 2, h),
        o = chunk(b, ws, 3, h);
  Value one = one_like(b, i);
  // d cy = grad_cy + grad_hy * o * (1 - tanh(cy)^2)
  Value dcy = b.add(b.mul(b.mul(grad_hy, o), b.sub(one, b.mul(tanh_cy, tanh_cy))), grad_cy);
  Value di = b.mul(b.mul(dcy, g), b.mul(b.sub(one, i), i));
  Value df = b.mul(b.mul(dcy, cx), b.mul(b.sub(one, f), f));
  Value dg = b.mul(b.mul(dcy, i), b.sub(one, b.mul(g, g)));
  Value dout = b.mul(b.mul(grad_hy, tanh_cy), b.mul(b.sub(one, o), o));
  Value grad_gates = b.concatenate({di, df, dg, dout}, 1);
  std::vector<Value> out{b.convert(grad_gates, c.out_type(0).dtype),
                         b.convert(b.mul(dcy, f), c.out_type(1).dtype)};
  if (c.bool_arg(5)) out.push_back(b.convert(b.reduce_sum(grad_gates, {0}), c.out_type(2).dtype));
  return out;
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)
//   -> (hy, workspace). Gates are (r, z, n); n = tanh(i_n + b_in + r * (h_n + b_hn)).
Result gru_cell(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(check_rank2(c, 0));
  Builder& b = c.b();
  DType t = opmath(c.out_type(0).dtype);
  const Dims& dims = c.tensor_type(0).dims;
  int64_t h = c.tensor_type(2).dims.back();
  Value ig = operand_as(c, 0, t, dims);
  Value hg = operand_as(c, 1, t, dims);
  if (!c.is_none(3)) ig = b.add(ig, operand_as(c, 3, t, dims));
  if (!c.is_none(4)) hg = b.add(hg, operand_as(c, 4, t, dims));
  Value r = b.unary("logistic", b.add(chunk(b, ig, 0, h), chunk(b, hg, 0, h)));
  Value z = b.unary("logistic", b.add(chunk(b, ig, 1, h), chunk(b, hg, 1, h)));
  Value hn = chunk(b, hg, 2, h);
  Value n = b.unary("tanh", b.add(chunk(b, ig, 2, h), b.mul(r, hn)));
  Value hx = b.convert(c.tensor(2), t);
  Value hy = b.add(n, b.mul(z, b.sub(hx, n)));
  Value workspace = b.concatenate({r, z, n, hx, hn}, 1);
  return std::vector<Value>{b.convert(hy, c.out_type(0).dtype),
                            b.convert(workspace, c.out_type(1).dtype)};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias?).
// grad_hx is the direct term (z * grad_hy); autograd adds the path through hidden_gates.
Result gru_cell_backward(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(check_rank2(c, 1));
  Builder& b = c.b();
  DType t = opmath(c.out_type(0).dtype);
  int64_t h = c.tensor_type(0).dims.back();
  Value gy = b.convert(c.tensor(0), t);
  Value ws = b.convert(c.tensor(1), t);
  Value r = chunk(b, ws, 0, h), z = chunk(b, ws, 1, h), n = chunk(b, ws, 2, h),
        hx = chunk(b, ws, 3, h), hn = chunk(b, ws, 4, h);
  Value one = one_like(b, r);
  Value dz = b.mul(b.mul(gy, b.sub(hx, n)), b.mul(b.sub(one, z), z));
  Value dn = b.mul(b.mul(gy, b.sub(one, z)), b.sub(one, b.mul(n, n)));
  Value dhn = b.mul(dn, r);
  Value dr = b.mul(b.mul(dn, hn), b.mul(b.sub(one, r), r));
  Value grad_input = b.concatenate({dr, dz, dn}, 1);
  Value grad_hidden = b.concatenate({dr, dz, dhn}, 1);
  std::vector<Value> out{b.convert(grad_input, c.out_type(0).dtype),
                         b.convert(grad_hidden, c.out_type(1).dtype),
                         b.convert(b.mul(gy, z), c.out_type(2).dtype)};
  if (c.bool_arg(2)) {
    out.push_back(b.convert(b.reduce_sum(grad_input, {0}), c.out_type(3).dtype));
    out.push_back(b.convert(b.reduce_sum(grad_hidden, {0}), c.out_type(4).dtype));
  }
  return out;
}

}  // namespace

void register_rnn_lowerings() {
  register_lowering({"aten::_thnn_fused_lstm_cell"}, lstm_cell);
  register_lowering({"aten::_thnn_fused_lstm_cell_backward_impl"}, lstm_cell_backward);
  register_lowering({"aten::_thnn_fused_gru_cell"}, gru_cell);
  register_lowering({"aten::_thnn_fused_gru_cell_backward"}, gru_cell_backward);
}

}  // namespace torchtpu::lowering
