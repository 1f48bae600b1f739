// Meta results for ops whose meta kernel is missing, fails, or differs from the CPU
// kernel's results (op_special_cases.h: meta_by_equivalent): computed from an equivalent
// op, from the real kernel's shapes, or from the meta kernel and then corrected, after the
// real kernel's argument checks where the meta kernel skips them.
#include <algorithm>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include "aten/op_special_cases.h"

namespace torchtpu::aten {

namespace {

// The fused RNN cells have CUDA kernels only. _thnn_fused_gru_cell has no meta kernel and
// PyTorch's meta kernel of _thnn_fused_lstm_cell fails on absent biases (it reads
// `.device` of None, an AttributeError): both are described here with RNN.cu's checks
// and CUDA's result shapes (states like hx/cx; workspace [B, 4H] for LSTM, [B, 5H] for
// GRU). `num_gates` is 4 (LSTM) or 3 (GRU).
void meta_rnn_cell(torch::jit::Stack& st, const char* op, int64_t num_gates) {
  // By value: the stack is cleared before the results are made.
  at::Tensor input_gates = st[0].toTensor();
  at::Tensor hidden_gates = st[1].toTensor();
  at::Tensor prev = st[2].toTensor();
  TORCH_CHECK(input_gates.dim() == 2, op, ": input_gates must be 2-d (got ", input_gates.dim(),
              "-d)");
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), op, ": input_gates ",
              input_gates.sizes(), " and hidden_gates ", hidden_gates.sizes(), " differ");
  int64_t batch = input_gates.size(0), gates = input_gates.size(1);
  TORCH_CHECK(prev.dim() == 2 && prev.size(0) == batch && gates == num_gates * prev.size(1), op,
              ": expected ", num_gates == 4 ? "cx" : "hx", " of shape [", batch, ", ",
              gates / num_gates, "] for gates ", input_gates.sizes(), " (got ", prev.sizes(),
              ")");
  for (size_t i : {3, 4}) {
    if (st[i].isNone() || !st[i].toTensor().defined()) continue;  // RNN.cpp passes undefined
    const at::Tensor& bias = st[i].toTensor();
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == gates, op, ": expected a bias of shape [",
                gates, "] (got ", bias.sizes(), ")");
  }
  at::Tensor state = at::empty(prev.sizes(), prev.options());
  at::Tensor workspace =
      at::empty({batch, (num_gates == 4 ? 4 : 5) * prev.size(1)}, input_gates.options());
  st.clear();
  st.emplace_back(state);
  if (num_gates == 4) st.emplace_back(at::empty(prev.sizes(), prev.options()));
  st.emplace_back(workspace);
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias): the gradients of the gates
// ([B, 3H] each), of hx, and of the biases ([3H], undefined without biases).
void meta_gru_cell_backward(torch::jit::Stack& st) {
  at::Tensor grad_hy = st[0].toTensor();
  at::Tensor workspace = st[1].toTensor();
  bool has_bias = st[2].toBool();
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 &&
                  workspace.size(0) == grad_hy.size(0) && workspace.size(1) == 5 * grad_hy.size(1),
              "_thnn_fused_gru_cell_backward: expected grad_hy [B, H] and a workspace of shape "
              "[B, 5H] (got grad_hy ", grad_hy.sizes(), " and workspace ", workspace.sizes(), ")");
  int64_t batch = grad_hy.size(0), hidden = grad_hy.size(1);
  auto opts = grad_hy.options();
  st.clear();
  st.emplace_back(at::empty({batch, 3 * hidden}, opts));
  st.emplace_back(at::empty({batch, 3 * hidden}, opts));
  st.emplace_back(at::empty({batch, hidden}, opts));
  st.emplace_back(has_bias ? at::empty({3 * hidden}, opts) : at::Tensor());
  st.emplace_back(has_bias ? at::empty({3 * hidden}, opts) : at::Tensor());
}

}  // namespace

// convolution_overrideable and its backward have no meta kernel (their default kernel
// only raises); their result types are those of aten::convolution on the same arguments.
// _logcumsumexp and cummax/cummin have none either.
// The fused RNN cells are described above; _fused_sgd_ and _fused_adagrad_ have none either.
bool meta_by_equivalent(const std::string& name, torch::jit::Stack* meta_stack) {
  auto& st = *meta_stack;
  if (name.rfind("aten::_fused_adam", 0) == 0 && name.size() > 10 &&
      name.compare(name.size() - 10, 10, ".tensor_lr") == 0) {
    // No meta kernel: the float-lr overload's, after the CPU kernel's check of lr (it reads
    // lr.item()). The meta arguments hold lr's meta copy at the position of the float.
    size_t lr = 6;
    int64_t numel = st[lr].toTensor().numel();
    TORCH_CHECK(numel == 1, "a Tensor with ", numel, " elements cannot be converted to Scalar");
    st[lr] = 1.0;
    c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
        name.substr(0, name.size() - 10).c_str(), "");
    op.callBoxed(&st);
    return true;
  }
  if (name == "aten::_fused_sgd_" || name == "aten::_fused_sgd_.tensor_lr" ||
      name == "aten::_fused_adagrad_" || name == "aten::_fused_adagrad_.tensor_lr") {
    // No meta kernel, and nothing returned (the lists it writes are its results): the CPU
    // kernel's check of a tensor lr (it reads lr.item()) is all there is.
    if (name.back() == 'r') {
      int64_t numel = st[name.find("sgd") != std::string::npos ? 5 : 4].toTensor().numel();
      TORCH_CHECK(numel == 1, "a Tensor with ", numel, " elements cannot be converted to Scalar");
    }
    st.clear();
    return true;
  }
  if (name == "aten::_thnn_fused_lstm_cell") {
    meta_rnn_cell(st, "_thnn_fused_lstm_cell", 4);
    return true;
  }
  if (name == "aten::_thnn_fused_gru_cell") {
    meta_rnn_cell(st, "_thnn_fused_gru_cell", 3);
    return true;
  }
  if (name == "aten::_thnn_fused_gru_cell_backward") {
    meta_gru_cell_backward(st);
    return true;
  }
  if (is_batch_norm(name) && !st[5].toBool()) {
    // In evaluation mode the CPU returns empty save_mean/save_invstd; the meta kernel [C].
    c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "").callBoxed(&st);
    for (size_t i : {1, 2}) st[i] = at::empty({0}, st[i].toTensor().options());
    return true;
  }
  if ((name == "aten::nansum" || name == "aten::nansum.out") && st[1].isIntList() &&
      st[1].toIntList().empty()) {
    // nansum(dim=()) reduces every dim on the CPU (as sum does); its meta kernel none.
    st[1] = c10::IValue();
    c10::Dispatcher::singleton()
        .findSchemaOrThrow("aten::nansum", name == "aten::nansum" ? "" : "out")
        .callBoxed(&st);
    return true;
  }
  if (name == "aten::multi_margin_loss" && st[1].toTensor().dim() == 0 && st[5].toInt() == 0) {
    // One sample with a 0-d target, no reduction: the CPU's loss is 0-d, the meta's [1].
    c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "").callBoxed(&st);
    st[0] = at::empty({}, st[0].toTensor().options());
    return true;
  }
  if (name == "aten::multi_margin_loss_backward" ||
      name == "aten::multi_margin_loss_backward.grad_input" ||
      name == "aten::fractional_max_pool3d_backward" ||
      name == "aten::fractional_max_pool3d_backward.grad_input" ||
      name == "aten::_ctc_loss_backward" || name == "aten::_ctc_loss_backward.out") {
    // No meta kernels (fractional_max_pool2d_backward has one): the gradient has self's
    // (argument 1's: log_probs for CTC) shape and dtype.
    at::Tensor self = st[1].toTensor();
    st.clear();
    st.emplace_back(at::empty_like(self, at::MemoryFormat::Contiguous));
    return true;
  }
  if (name == "aten::_batch_norm_with_update" ||
      name == "aten::_batch_norm_with_update_functional") {
    // The meta decomposition asks for a backend with its optional weight and bias and
    // fails without them: the CPU kernel's results instead. The statistics are float32
    // for a reduced-precision input with float32 running statistics, else of the input's
    // dtype; reserve is an empty uint8 tensor.
    at::Tensor input = st[0].toTensor();
    at::Tensor running_mean = st[3].toTensor(), running_var = st[4].toTensor();
    TORCH_CHECK(input.dim() >= 2 && running_mean.dim() == 1 &&
                    running_mean.size(0) == input.size(1) &&
                    running_var.sizes() == running_mean.sizes(),
                "_batch_norm_with_update: expected running statistics of shape [",
                input.dim() >= 2 ? input.size(1) : 0, "] for an input of shape ", input.sizes(),
                " (got ", running_mean.sizes(), " and ", running_var.sizes(), ")");
    bool mixed = at::isReducedFloatingType(input.scalar_type()) &&
                 running_mean.scalar_type() == at::kFloat;
    auto stat = input.options().dtype(mixed ? at::kFloat : input.scalar_type());
    bool functional = name.back() == 'l';
    st.clear();
    st.emplace_back(at::empty_like(input, at::MemoryFormat::Contiguous));
    st.emplace_back(at::empty({input.size(1)}, stat));
    st.emplace_back(at::empty({input.size(1)}, stat));
    st.emplace_back(at::empty({0}, input.options().dtype(at::kByte)));
    if (functional) {
      st.emplace_back(at::empty_like(running_mean));
      st.emplace_back(at::empty_like(running_var));
    }
    return true;
  }
  if (name == "aten::_histogramdd_bin_edges" || name == "aten::_histogramdd_from_bin_cts" ||
      name == "aten::_histogramdd_from_bin_tensors") {
    // No meta kernels: the edges per dim ([bins + 1] each) or the histogram (the bins'
    // shape), after the CPU kernel's checks (a call they refuse runs there and raises).
    at::Tensor self = st[0].toTensor();
    TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 "
                "dimensions, but got ", self.dim());
    const int64_t n = self.size(-1);
    std::vector<int64_t> bins;
    bool tensors = name == "aten::_histogramdd_from_bin_tensors";
    if (tensors) {
      for (const at::Tensor& e : st[1].toTensorVector()) {
        TORCH_CHECK(e.scalar_type() == self.scalar_type() && e.dim() == 1 && e.numel() > 0,
                    "torch.histogramdd: bins tensors should be 1-D, non-empty and of the "
                    "input's dtype ", self.dtype(), " (got ", e.dtype(), " of shape ",
                    e.sizes(), ")");
        bins.push_back(e.numel() - 1);
      }
    } else {
      bins = st[1].toIntVector();
      if (!st[2].isNone()) {
        size_t items = st[2].toListRef().size();
        TORCH_CHECK(static_cast<int64_t>(items) == 2 * n, "torch.histogramdd: for a ", n,
                    "-dimensional histogram range should have ", 2 * n, " elements, but got ",
                    items);
      }
    }
    TORCH_CHECK(static_cast<int64_t>(bins.size()) == n, "torch.histogramdd: expected ", n,
                " sequences of bin edges for a ", n, "-dimensional histogram but got ",
                bins.size());
    for (size_t d = 0; d < bins.size(); ++d) {
      TORCH_CHECK(bins[d] > 0, "torch.histogram(): bins must be > 0, but got ", bins[d],
                  " for dimension ", d);
    }
    const c10::IValue& weight = st[tensors ? 2 : 3];
    if (!weight.isNone()) {
      const at::Tensor& w = weight.toTensor();
      std::vector<int64_t> rows(self.sizes().begin(), self.sizes().end() - 1);
      TORCH_CHECK(w.scalar_type() == self.scalar_type() && w.sizes().vec() == rows,
                  "torch.histogramdd: if weight tensor is provided it should have the input's "
                  "dtype and shape excluding its innermost dimension (input ", self.sizes(),
                  ", weight ", w.sizes(), ")");
    }
    st.clear();
    if (name == "aten::_histogramdd_bin_edges") {
      std::vector<at::Tensor> edges;
      for (int64_t b : bins) edges.push_back(at::empty({b + 1}, self.options()));
      st.emplace_back(edges);
    } else {
      st.emplace_back(at::empty(bins, self.options()));
    }
    return true;
  }
  if (name.rfind("aten::histogram.", 0) == 0) {
    // No meta kernel: hist [bins] of self's dtype and the edges [bins + 1], after the CPU
    // kernel's checks of the bins, the range's length and the weight.
    at::Tensor self = st[0].toTensor();
    bool counted = name.find("bin_ct") != std::string::npos;
    int64_t bins = 0;
    if (counted) {
      bins = st[1].toInt();
      if (!st[2].isNone()) {
        size_t items = st[2].toListRef().size();
        TORCH_CHECK(items == 2, "torch.histogramdd: for a 1-dimensional histogram range should "
                    "have 2 elements, but got ", items);
      }
    } else {
      const at::Tensor& edges = st[1].toTensor();
      TORCH_CHECK(edges.scalar_type() == self.scalar_type(), "torch.histogramdd: input tensor "
                  "and bins tensors should have the same dtype, but got input with dtype ",
                  self.dtype(), " and bins for dimension 0 with dtype ", edges.dtype());
      TORCH_CHECK(edges.dim() == 1, "torch.histogramdd: bins tensor should have one dimension,",
                  " but got ", edges.dim(), " dimensions in the bins tensor for dimension 0");
      TORCH_CHECK(edges.numel() > 0, "torch.histogramdd: bins tensor should have at least 1 "
                  "element, but got 0 elements in the bins tensor for dimension 0");
      bins = edges.numel() - 1;
    }
    TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins,
                " for dimension 0");
    const c10::IValue& weight = st[counted ? 3 : 2];
    if (!weight.isNone()) {
      const at::Tensor& w = weight.toTensor();
      TORCH_CHECK(w.scalar_type() == self.scalar_type(), "torch.histogramdd: if weight tensor "
                  "is provided, input tensor and weight tensor should have the same dtype, but "
                  "got input(", self.dtype(), "), and weight(", w.dtype(), ")");
      TORCH_CHECK(w.numel() == self.numel(), "torch.histogramdd: if weight tensor is provided "
                  "it should have the same shape as the input tensor excluding its innermost "
                  "dimension, but got input with shape [", self.numel(), ", 1] and weight with "
                  "shape [", w.numel(), "]");
    }
    st.clear();
    st.emplace_back(at::empty({bins}, self.options()));
    st.emplace_back(at::empty({bins + 1}, self.options()));
    return true;
  }
  if (name == "aten::multilabel_margin_loss_forward") {
    // The CPU kernel's target dtype check; one sample ((C) or 0-d self) without reduction
    // has a 0-d loss on the CPU, [1] in the meta kernel.
    const at::Tensor& target = st[1].toTensor();
    TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ",
                target.scalar_type());
    bool one_sample = st[0].toTensor().dim() <= 1 && st[2].toInt() == 0;
    c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "").callBoxed(&st);
    if (one_sample) st[0] = at::empty({}, st[0].toTensor().options());
    return true;
  }
  if (name == "aten::multilabel_margin_loss_backward" ||
      name == "aten::multilabel_margin_loss_backward.grad_input") {
    // No meta kernel: the CPU kernel's checks of target and is_target; the gradient has
    // self's shape and dtype.
    at::Tensor self = st[1].toTensor();
    const at::Tensor& target = st[2].toTensor();
    TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ",
                target.scalar_type());
    TORCH_CHECK(target.sizes() == self.sizes() || (self.dim() == 0 && target.numel() == 1),
                "inconsistent target size: ", target.sizes(), " for input of size: ",
                self.sizes());
    at::checkSameSize("multilabel_margin_loss_backward_out_frame",
                      at::TensorArg(target, "target", 3), at::TensorArg(st[4].toTensor(),
                                                                        "is_target", 5));
    st.clear();
    st.emplace_back(at::empty_like(self, at::MemoryFormat::Contiguous));
    return true;
  }
  if (name == "aten::cummax" || name == "aten::cummax.out" || name == "aten::cummin" ||
      name == "aten::cummin.out") {
    // Their meta runs the composite, whose in-place helper has no meta kernel: (values,
    // indices) of the input's shape.
    at::Tensor self = st[0].toTensor();
    c10::maybe_wrap_dim(st[1].toInt(), self.dim());
    st.clear();
    st.emplace_back(at::empty_like(self));
    st.emplace_back(at::empty_like(self, self.options().dtype(at::kLong)));
    return true;
  }
  if (name == "aten::_logcumsumexp" || name == "aten::_logcumsumexp.out") {
    // No meta kernel; the result has the input's type (the CPU kernel's check of the dim).
    at::Tensor self = st[0].toTensor();
    c10::maybe_wrap_dim(st[1].toInt(), self.dim());
    st.clear();
    st.emplace_back(at::empty_like(self));
    return true;
  }
  if (name == "aten::convolution_overrideable") {
    std::optional<at::Tensor> bias;
    if (!st[2].isNone()) bias = st[2].toTensor();
    auto out = at::convolution(st[0].toTensor(), st[1].toTensor(), bias, st[3].toIntVector(),
                               st[4].toIntVector(), st[5].toIntVector(), st[6].toBool(),
                               st[7].toIntVector(), st[8].toInt());
    st.clear();
    st.emplace_back(out);
    return true;
  }
  if (name == "aten::geqrf" || name == "aten::geqrf.a") {
    // geqrf has no meta kernel: (a: the input's shape, tau: batch + [min(m, n)]).
    at::Tensor self = st[0].toTensor();
    TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
    std::vector<int64_t> tau_shape(self.sizes().begin(), self.sizes().end() - 2);
    tau_shape.push_back(std::min(self.size(-2), self.size(-1)));
    st.clear();
    st.emplace_back(at::empty_like(self));
    st.emplace_back(at::empty(tau_shape, self.options()));
    return true;
  }
  if (name == "aten::convolution_backward_overrideable") {
    at::Tensor grad = st[0].toTensor();
    at::Tensor input = st[1].toTensor();
    at::Tensor weight = st[2].toTensor();
    bool transposed = st[6].toBool();
    int64_t groups = st[8].toInt();
    std::vector<bool> mask;
    for (bool b : st[9].toBoolList()) mask.push_back(b);
    int64_t bias_size = transposed ? weight.size(1) * groups : weight.size(0);
    st.clear();
    st.emplace_back(mask[0] ? at::empty_like(input) : at::Tensor());
    st.emplace_back(mask[1] ? at::empty_like(weight) : at::Tensor());
    st.emplace_back(mask[2] ? at::empty({bias_size}, grad.options()) : at::Tensor());
    return true;
  }
  return false;
}

}  // namespace torchtpu::aten
