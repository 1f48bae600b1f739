#include "aten/op_special_cases.h"

#include <optional>
#include <unordered_set>

#include <ATen/ATen.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include "aten/conv_arguments.h"
#include "aten/op_info.h"
#include "base/metrics.h"

namespace torchtpu::aten {

bool is_optional_tensor_list(const c10::IValue& v) {
  return v.isList() && !v.isTensorList() &&
         v.type()->castRaw<c10::ListType>() != nullptr &&
         v.type()->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::OptionalType;
}

// The defined tensors of a Tensor[] or Tensor?[] argument, in order.
std::vector<at::Tensor> present_tensors(const c10::IValue& v) {
  if (v.isTensorList()) return v.toTensorVector();
  std::vector<at::Tensor> out;
  for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
    if (t && t->defined()) out.push_back(*t);
  }
  return out;
}

// Ops whose output shape depends on the data: they run on the host by design (one
// round-trip, counted under host_roundtrip_ops, allowed in strict mode).
bool is_data_dependent(const std::string& name) {
  static const char* kOps[] = {"aten::nonzero", "aten::nonzero.out", "aten::masked_select",
                               "aten::masked_select.out", "aten::_unique2", "aten::unique_dim",
                               "aten::unique_consecutive", "aten::_unique"};
  for (const char* op : kOps) if (name == op) return true;
  return false;
}

void type_optional_tensor_lists(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  size_t n = schema.arguments().size();
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[stack->size() - n + i];
    if (!v.isList() || v.isOptionalTensorList() ||
        !is_optional_tensor_list_type(schema.arguments()[i])) {
      continue;
    }
    c10::List<std::optional<at::Tensor>> typed;
    for (const c10::IValue& item : v.toListRef()) {
      typed.push_back(item.isNone() ? std::nullopt : std::optional<at::Tensor>(item.toTensor()));
    }
    v = std::move(typed);
  }
}

// CPU index tensors move to the indexed tensor's device. Bool/uint8 masks become the
// integer index tensors they select, as PyTorch's own indexing does: the mask's nonzero
// positions are data, so this costs one host round-trip per mask (counted).
void expand_index_masks(const c10::FunctionSchema& schema, const std::string& name,
                        torch::jit::Stack* stack) {
  size_t n = schema.arguments().size();
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[stack->size() - n + i];
    if (!is_optional_tensor_list(v)) continue;
    c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
    const at::Tensor& self = (*stack)[stack->size() - n].toTensor();
    // CPU index tensors are accepted as on CUDA (x[cpu_indices], index_put_ with CPU
    // indices): they move to the indexed tensor's device, one transfer each.
    bool moved = false;
    for (size_t k = 0; k < list.size(); ++k) {
      std::optional<at::Tensor> t = list.get(k);
      if (!t || !t->defined() || !t->device().is_cpu() || !self.device().is_privateuseone()) {
        continue;
      }
      list.set(k, t->to(self.device()));
      moved = true;
    }
    if (moved) v = list;
    bool has_mask = false;
    for (const std::optional<at::Tensor>& t : list) {
      has_mask |= t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
    }
    if (!has_mask) continue;
    c10::List<std::optional<at::Tensor>> expanded;
    int64_t dim = 0;
    for (size_t k = 0; k < list.size(); ++k) {
      std::optional<at::Tensor> t = list.get(k);
      bool mask = t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
      if (!mask) {
        expanded.push_back(t);
        ++dim;
        continue;
      }
      // PyTorch's expandTensors warns the same way; for aten::index it already has (the
      // structured wrapper that calls index.Tensor_out runs its meta first).
      if (t->scalar_type() == at::kByte && name != "aten::index.Tensor_out") {
        TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype "
                   "torch.bool instead.");
      }
      for (int64_t j = 0; j < t->dim(); ++j) {
        TORCH_CHECK_INDEX(dim + j < self.dim() && t->size(j) == self.size(dim + j),
                          "The shape of the mask ", t->sizes(), " at index ", j,
                          " does not match the shape of the indexed tensor ", self.sizes(),
                          " at index ", dim + j);
      }
      at::Tensor positions = at::nonzero(t->cpu());
      base::keyed_counter_add("host_roundtrip_ops", name + " (bool mask)");
      base::counter_add("num_host_roundtrips");
      for (int64_t j = 0; j < t->dim(); ++j) {
        expanded.push_back(positions.select(1, j).to(t->device()));
      }
      dim += t->dim();
    }
    v = expanded;
  }
}

void check_index_put_values(const std::string& name, c10::ArrayRef<c10::IValue> args) {
  if (name.rfind("aten::index_put", 0) != 0 && name.rfind("aten::_index_put_impl", 0) != 0) {
    return;
  }
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& values = args[2].toTensor();
  // Integer indices that do not broadcast together: the CPU's IndexError (the meta index
  // kernel below raises a RuntimeError of its own wording).
  std::vector<at::IntArrayRef> shapes;
  bool integer = true;
  for (const std::optional<at::Tensor>& index : args[1].toOptionalTensorList()) {
    if (!index || !index->defined()) continue;
    integer &= at::isIntegralType(index->scalar_type(), /*includeBool=*/false);
    shapes.push_back(index->sizes());
  }
  if (integer && shapes.size() > 1) {
    std::vector<int64_t> common;
    bool ok = true;
    try {
      for (at::IntArrayRef shape : shapes) common = at::infer_size(common, shape);
    } catch (const c10::Error&) {
      ok = false;
    }
    if (!ok) {
      std::string listed;
      for (at::IntArrayRef shape : shapes) listed += (listed.empty() ? "" : ", ") + c10::str(shape);
      TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast "
                        "together with shapes ", listed);
    }
  }
  at::Tensor result = at::index(self, args[1].toOptionalTensorList());
  TORCH_CHECK(at::is_expandable_to(values.sizes(), result.sizes()),
              "shape mismatch: value tensor of shape ", values.sizes(),
              " cannot be broadcast to indexing result of shape ", result.sizes());
  // The CPU checks the dtype after the shape. A one-element value is let through: with a
  // single bool mask the CPU kernel takes its masked_fill path, which casts it, and the
  // masks are index tensors by now (expand_index_masks), so the two cannot be told apart.
  TORCH_CHECK(values.numel() == 1 || values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", values.scalar_type(),
              " for the source.");
}

void check_same_dtype_out(const std::string& name, c10::ArrayRef<c10::IValue> args) {
  // The structured CPU kernels of these build a unary TensorIterator that requires one
  // dtype; their Python meta kernels accept any safe cast instead.
  static const std::unordered_set<std::string> kSameDtype = {
      "aten::neg.out",  "aten::floor.out", "aten::ceil.out", "aten::trunc.out",
      "aten::frac.out", "aten::sgn.out",   "aten::round.out", "aten::round.decimals_out",
      "aten::bitwise_not.out"};
  if (kSameDtype.count(name) == 0) return;
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& out = args.back().toTensor();
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Found dtype ", out.scalar_type(),
              " but expected ", self.scalar_type());
}

bool writes_unreturned_args(const std::string& name) {
  return name == "aten::_amp_foreach_non_finite_check_and_unscale_" ||
         name == "aten::_amp_update_scale_" || name == "aten::_batch_norm_with_update" ||
         name == "aten::rrelu_with_noise" ||
         name == "aten::rrelu_with_noise.out" || name == "aten::rrelu_with_noise_";
}

namespace {

bool is_fused_adam(const std::string& name) {
  return name.rfind("aten::_fused_adam", 0) == 0;  // _fused_adam(w)(_)(.tensor_lr)
}

const c10::IValue& named_arg(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                             const char* arg_name) {
  std::optional<int> i = schema.argumentIndexWithName(arg_name);
  TORCH_INTERNAL_ASSERT(i.has_value() && static_cast<size_t>(*i) < args.size(), schema.name(),
                        " has no argument ", arg_name);
  return args[*i];
}

}  // namespace

bool is_runtime_float_arg(const std::string& name, const std::string& arg_name) {
  return (arg_name == "lr" || arg_name == "beta1" || arg_name == "beta2") &&
         name.rfind("aten::_fused_", 0) == 0;
}

bool is_structural_scalar_arg(const std::string& name, const std::string& arg_name) {
  if (arg_name == "p") {
    return name.rfind("aten::norm.", 0) == 0 || name.rfind("aten::renorm", 0) == 0 ||
           name.rfind("aten::multi_margin_loss", 0) == 0;
  }
  if (arg_name == "exponent") return name.rfind("aten::pow.Tensor_Scalar", 0) == 0;
  if (arg_name != "ord") return false;
  return name.rfind("aten::linalg_vector_norm", 0) == 0 ||
         name.rfind("aten::_foreach_norm", 0) == 0;
}

bool leaves_list_arg_unchanged(const std::string& name, const std::string& arg_name,
                               const c10::FunctionSchema& schema,
                               c10::ArrayRef<c10::IValue> args) {
  if (!is_fused_adam(name)) return false;
  if (arg_name == "grads") return named_arg(schema, args, "grad_scale").isNone();
  if (arg_name == "max_exp_avg_sqs") return !named_arg(schema, args, "amsgrad").toBool();
  return false;
}

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
// The fused RNN cells are described above.
bool meta_by_equivalent(const std::string& name, torch::jit::Stack* meta_stack) {
  auto& st = *meta_stack;
  if (is_fused_adam(name) && name.size() > 10 &&
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
  if (name == "aten::multi_margin_loss" && st[1].toTensor().dim() == 0 && st[5].toInt() == 0) {
    // One sample with a 0-d target, no reduction: the CPU's loss is 0-d, the meta's [1].
    c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "").callBoxed(&st);
    st[0] = at::empty({}, st[0].toTensor().options());
    return true;
  }
  if (name == "aten::multi_margin_loss_backward" ||
      name == "aten::multi_margin_loss_backward.grad_input") {
    // No meta kernel: the gradient has self's shape and dtype.
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
  if (name == "aten::fractional_max_pool3d_backward" ||
      name == "aten::fractional_max_pool3d_backward.grad_input") {
    // No meta kernel (the 2-D one has one): the gradient has self's shape and dtype.
    at::Tensor self = st[1].toTensor();
    st.clear();
    st.emplace_back(at::empty_like(self, at::MemoryFormat::Contiguous));
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

// Batch norm in training mode also updates the running statistics in place, which the
// schema does not declare as results: running = (1 - momentum) * running + momentum *
// batch statistic, with the unbiased variance (PyTorch's CPU kernel does the same).
bool is_batch_norm(const std::string& name) {
  return name == "aten::native_batch_norm" || name == "aten::_native_batch_norm_legit";
}

void update_batch_norm_stats(c10::ArrayRef<c10::IValue> args, const torch::jit::Stack& results) {
  const at::Tensor& input = args[0].toTensor();
  if (!args[5].toBool() || args[3].isNone() || args[4].isNone()) return;
  const at::Tensor& running_mean = args[3].toTensor();
  const at::Tensor& running_var = args[4].toTensor();
  if (!running_mean.defined() || !running_var.defined()) return;
  double momentum = args[6].toDouble();
  double eps = args[7].toDouble();
  int64_t n = input.numel() / std::max<int64_t>(input.size(1), 1);
  at::Tensor save_mean = results[results.size() - 2].toTensor();
  at::Tensor save_invstd = results[results.size() - 1].toTensor();
  at::Tensor biased_var = save_invstd.pow(-2).sub_(eps);
  at::Tensor unbiased_var = biased_var.mul_(static_cast<double>(n) / std::max<int64_t>(n - 1, 1));
  running_mean.mul_(1 - momentum).add_(save_mean.to(running_mean.scalar_type()), momentum);
  running_var.mul_(1 - momentum).add_(unbiased_var.to(running_var.scalar_type()), momentum);
}

// The ops check_arguments_like_cpu below checks.
bool has_cpu_argument_checks(const std::string& name) {
  static const std::unordered_set<std::string> kChecked = {
      "aten::uniform_",     "aten::uniform",   "aten::uniform.out",
      "aten::complex",      "aten::complex.out", "aten::polar",
      "aten::polar.out",    "aten::_amp_update_scale_", "aten::multinomial",
      "aten::multinomial.out", "aten::max", "aten::max.unary_out", "aten::min",
      "aten::min.unary_out", "aten::median.dim", "aten::median.dim_values",
      "aten::nanmedian.dim", "aten::nanmedian.dim_values", "aten::kthvalue",
      "aten::kthvalue.values", "aten::convolution", "aten::convolution.out",
      "aten::aminmax.out", "aten::masked_scatter", "aten::masked_scatter_",
      "aten::masked_scatter.out", "aten::embedding", "aten::narrow_copy",
      "aten::narrow_copy.out", "aten::put_", "aten::put", "aten::put.out",
      "aten::rrelu_with_noise", "aten::rrelu_with_noise.out", "aten::rrelu_with_noise_",
      "aten::rrelu_with_noise_functional"};
  return kChecked.count(name) > 0;
}

// Argument checks the CPU kernels make and the meta kernels do not: multinomial's (its
// meta kernel checks only the rank), uniform's range, _amp_update_scale_'s dtypes and
// sizes, _assert_async's element count, and the reductions without an identity over
// nothing (max() / min() of an empty tensor, median / nanmedian / kthvalue along an
// empty dim), whose lowerings would otherwise return the fill value (+-inf, NaN) or
// another error; convolution's parameters and shapes (conv_arguments.h); aminmax's out
// dtypes, masked_scatter's mask dtype and embedding's weight rank (the meta kernels skip
// the first two and assert the third); narrow_copy's dim, which the CPU kernel checks
// before wrapping (a RuntimeError, where the meta kernel's wrap raises an IndexError);
// put_'s dtypes and element counts; rrelu_with_noise's noise (its shape always, its dtype
// in training, when the CPU kernel writes it). Same messages as the CPU.
void check_arguments_like_cpu(const std::string& name, c10::ArrayRef<c10::IValue> args) {
  if (name.rfind("aten::rrelu_with_noise", 0) == 0) {
    const at::Tensor& self = args[0].toTensor();
    const at::Tensor& noise = args[1].toTensor();
    TORCH_CHECK(self.sizes() == noise.sizes(),
                "noise tensor shape must match self tensor shape. Got self.shape = ",
                self.sizes(), " noise.shape = ", noise.sizes());
    TORCH_CHECK(!args[4].toBool() || !at::isFloatingType(self.scalar_type()) ||
                    noise.scalar_type() == self.scalar_type(),
                "expected scalar type ", self.scalar_type(), " but found ", noise.scalar_type());
    return;
  }
  if (name == "aten::put_" || name == "aten::put" || name == "aten::put.out") {
    const at::Tensor& self = args[0].toTensor();
    const at::Tensor& index = args[1].toTensor();
    const at::Tensor& source = args[2].toTensor();
    TORCH_CHECK(index.scalar_type() == at::kLong,
                "put_(): Expected a long tensor for index, but got ", index.scalar_type());
    TORCH_CHECK(self.scalar_type() == source.scalar_type(),
                "put_(): self and source expected to have the same dtype, but got self.dtype = ",
                self.scalar_type(), " and source.dtype = ", source.scalar_type());
    TORCH_CHECK_INDEX(source.numel() == index.numel(),
                      "put_(): Expected source and index to have the same number of elements, "
                      "but got source.numel() = ", source.numel(), ", index.numel() = ",
                      index.numel());
    TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0),
                      "put_(): Tried to put elements into an empty tensor");
    return;
  }
  if (name == "aten::narrow_copy" || name == "aten::narrow_copy.out") {
    const at::Tensor& self = args[0].toTensor();
    TORCH_CHECK(self.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
    int64_t dim = args[1].toInt();
    TORCH_CHECK(dim < 0 || dim < self.dim(),
                "Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got "
                "false.  (narrow_copy: dim ", dim, " of a tensor with ", self.dim(),
                " dimensions)");
    return;
  }
  if (name == "aten::convolution" || name == "aten::convolution.out") {
    check_convolution_like_cpu(args);
    return;
  }
  if (name == "aten::aminmax.out") {  // aminmax.out(self, *, dim, keepdim, min, max)
    const at::Tensor& self = args[0].toTensor();
    for (size_t i : {3, 4}) {
      const at::Tensor& out = args[i].toTensor();
      TORCH_CHECK(out.dtype() == self.dtype(), "Expected out tensor to have dtype ",
                  self.dtype(), ", but got ", out.dtype(), " instead");
    }
    return;
  }
  if (name.rfind("aten::masked_scatter", 0) == 0) {
    c10::ScalarType mask = args[1].toTensor().scalar_type();
    TORCH_CHECK(mask == at::kBool,
                "masked_scatter_ only supports boolean masks, but got mask with dtype ", mask);
    return;
  }
  if (name == "aten::embedding") {
    TORCH_CHECK(args[0].toTensor().dim() == 2, "'weight' must be 2-D");
    return;
  }
  if (name == "aten::max" || name == "aten::max.unary_out" || name == "aten::min" ||
      name == "aten::min.unary_out") {
    const char* fn = name.compare(6, 3, "max") == 0 ? "max()" : "min()";
    TORCH_CHECK(args[0].toTensor().numel() > 0, fn,
                ": Expected reduction dim to be specified for input.numel() == 0. Specify the "
                "reduction dim with the 'dim' argument.");
    return;
  }
  bool median = name == "aten::median.dim" || name == "aten::median.dim_values" ||
                name == "aten::nanmedian.dim" || name == "aten::nanmedian.dim_values";
  if (median || name == "aten::kthvalue" || name == "aten::kthvalue.values") {
    const at::Tensor& self = args[0].toTensor();
    if (self.dim() == 0) return;  // the meta kernel checks a 0-d tensor's dim
    int64_t dim = c10::maybe_wrap_dim(args[median ? 1 : 2].toInt(), self.dim());
    TORCH_CHECK_INDEX(self.size(dim) != 0, median ? "median()" : "kthvalue()",
                      ": Expected reduction dim ", dim, " to have non-zero size.");
    return;
  }
  if (name == "aten::uniform_" || name == "aten::uniform" || name == "aten::uniform.out") {
    double from = args[1].toDouble(), to = args[2].toDouble();
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=",
                from, " > to=", to);
    return;
  }
  if (name == "aten::complex" || name == "aten::complex.out" || name == "aten::polar" ||
      name == "aten::polar.out") {
    // complex_check_dtype of the CPU kernel (the Python meta asserts instead).
    c10::ScalarType a = args[0].toTensor().scalar_type(), b = args[1].toTensor().scalar_type();
    auto ok = [](c10::ScalarType t) {
      return t == at::kFloat || t == at::kDouble || t == at::kHalf;
    };
    TORCH_CHECK(ok(a) && ok(b), "Expected both inputs to be Half, Float or Double tensors but got ",
                a, " and ", b);
    TORCH_CHECK(a == b, "Expected object of scalar type ", a, " but got scalar type ", b,
                " for second argument");
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".out") == 0) {
      c10::ScalarType want = c10::toComplexType(a), got = args[2].toTensor().scalar_type();
      TORCH_CHECK(got == want, "Expected object of scalar type ", want, " but got scalar type ",
                  got, " for argument 'out'");
    }
    return;
  }
  if (name == "aten::_assert_async" || name == "aten::_assert_async.msg") {
    // is_nonzero's checks, which the meta kernels skip.
    int64_t n = args[0].toTensor().numel();
    TORCH_CHECK(n != 0, "Boolean value of Tensor with no values is ambiguous");
    TORCH_CHECK(n < 2, "Boolean value of Tensor with more than one value is ambiguous");
    return;
  }
  if (name == "aten::_amp_update_scale_") {  // the CPU kernel's checks; the meta has none
    const at::Tensor& scale = args[0].toTensor();
    const at::Tensor& tracker = args[1].toTensor();
    const at::Tensor& found_inf = args[2].toTensor();
    TORCH_CHECK(tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
    TORCH_CHECK(scale.numel() == 1, "current_scale must be a 1-element tensor.");
    TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
    TORCH_CHECK(tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
    TORCH_CHECK(scale.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
    TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
    return;
  }
  if (name != "aten::multinomial" && name != "aten::multinomial.out") return;
  const at::Tensor& self = args[0].toTensor();
  int64_t n_sample = args[1].isInt() ? args[1].toInt() : args[1].toSymInt().expect_int();
  bool with_replacement = args[2].toBool();
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  if (name == "aten::multinomial.out") {
    const at::Tensor& out = args[4].toTensor();
    TORCH_CHECK(out.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ",
                out.scalar_type());
  }
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  int64_t n_categories = self.size(-1);
  TORCH_CHECK(with_replacement || n_sample <= n_categories,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
}

}  // namespace torchtpu::aten
