// Kernels of the ops nn.SyncBatchNorm calls (torch/nn/modules/_functions.py), which PyTorch
// implements for CUDA only: per-channel statistics of the local batch, their combination
// over the ranks' counts (with the running statistics' update), the normalization, and the
// two backward steps around the all-reduce of the gradient sums. Each is a composition of
// lowered ops (one graph in fused eager mode), with the CUDA kernels' formulas and dtypes:
// statistics in float for half-precision inputs, outputs in the input's dtype. Channels are
// dim 1; every other dim is reduced.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

namespace torchtpu::aten {
namespace {

c10::ScalarType stats_dtype(const at::Tensor& input) {
  c10::ScalarType t = input.scalar_type();
  return (t == at::kHalf || t == at::kBFloat16) ? at::kFloat : t;
}

std::vector<int64_t> reduced_dims(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "tpu: sync batch norm expects an input of at least 2 dims "
              "(N, C, ...), got ", input.sizes());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector [C] as [1, C, 1, ...], broadcasting against `input`.
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = -1;
  return v.reshape(shape);
}

// 1 / sqrt(var + eps), 0 where both are 0 (CUDA's InvStd).
at::Tensor inv_std(const at::Tensor& var, double eps) {
  at::Tensor invstd = (var + eps).rsqrt();
  if (eps != 0) return invstd;
  return at::where(var == 0, at::zeros_like(invstd), invstd);
}

std::tuple<at::Tensor, at::Tensor> stats(const at::Tensor& input, double eps) {
  std::vector<int64_t> dims = reduced_dims(input);
  at::Tensor x = input.to(stats_dtype(input));
  at::Tensor mean = x.mean(dims);
  at::Tensor var = (x - per_channel(mean, x)).square().mean(dims);  // biased
  return {mean, inv_std(var, eps)};
}

// The ranks' (mean, invstd) rows [W, C] and element counts [W] combined: the mean of all
// elements and the invstd of their biased variance; the running statistics (the variance
// unbiased) move by `momentum`.
std::tuple<at::Tensor, at::Tensor> combine_stats(
    const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, const at::Tensor& counts) {
  TORCH_CHECK(mean.dim() == 2 && invstd.sizes() == mean.sizes(), "tpu: sync batch norm: "
              "expected (world, channels) statistics, got mean ", mean.sizes(), " and invstd ",
              invstd.sizes());
  at::Tensor n = counts.to(mean.scalar_type()).reshape({-1, 1});
  TORCH_CHECK(n.size(0) == mean.size(0), "tpu: sync batch norm: ", n.size(0),
              " counts for the statistics of ", mean.size(0), " ranks");
  at::Tensor total = n.sum(0);
  at::Tensor mean_all = (mean * n).sum(0) / total;
  at::Tensor var_i = invstd.square().reciprocal() - eps;
  at::Tensor var_n = (n * (var_i + (mean - mean_all).square())).sum(0);  // total * variance
  if (running_mean && running_mean->defined()) {
    at::Tensor& rm = const_cast<at::Tensor&>(*running_mean);
    rm.copy_(rm.to(mean.scalar_type()) * (1 - momentum) + mean_all * momentum);
  }
  if (running_var && running_var->defined()) {
    at::Tensor& rv = const_cast<at::Tensor&>(*running_var);
    rv.copy_(rv.to(mean.scalar_type()) * (1 - momentum) + var_n / (total - 1) * momentum);
  }
  return {mean_all, inv_std(var_n / total, eps)};
}

std::tuple<at::Tensor, at::Tensor> gather_stats_with_counts(
    const at::Tensor& /*input*/, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, const at::Tensor& counts) {
  return combine_stats(mean, invstd, running_mean, running_var, momentum, eps, counts);
}

std::tuple<at::Tensor, at::Tensor> gather_stats_with_count(
    const at::Tensor& /*input*/, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, int64_t count) {
  at::Tensor counts = at::full({mean.size(0)}, count, mean.options());
  return combine_stats(mean, invstd, running_mean, running_var, momentum, eps, counts);
}

at::Tensor elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                            const at::Tensor& invstd, double /*eps*/) {
  reduced_dims(input);
  at::Tensor x = input.to(stats_dtype(input));
  at::Tensor y = (x - per_channel(mean, x)) * per_channel(invstd, x);
  if (weight && weight->defined()) y = y * per_channel(weight->to(y.scalar_type()), x);
  if (bias && bias->defined()) y = y + per_channel(bias->to(y.scalar_type()), x);
  return y.to(input.scalar_type());
}

at::Tensor& elemt_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                                 const at::Tensor& invstd, double eps, at::Tensor& out) {
  at::Tensor y = elemt(input, weight, bias, mean, invstd, eps);
  at::native::resize_output(out, y.sizes());
  return out.copy_(y);
}

// Per channel: the sums of dy and of dy * (x - mean), the weight's and the bias's gradients.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& invstd, const std::optional<at::Tensor>& weight, bool input_g,
    bool weight_g, bool bias_g) {
  std::vector<int64_t> dims = reduced_dims(input);
  at::Tensor dy = grad_out.to(mean.scalar_type());
  at::Tensor xmu = input.to(mean.scalar_type()) - per_channel(mean, dy);
  at::Tensor sum_dy = dy.sum(dims);
  at::Tensor sum_dy_xmu = (dy * xmu).sum(dims);
  c10::ScalarType param = weight && weight->defined() ? weight->scalar_type() : mean.scalar_type();
  return {input_g ? sum_dy : at::Tensor(), input_g ? sum_dy_xmu : at::Tensor(),
          weight_g ? (sum_dy_xmu * invstd).to(param) : at::Tensor(),
          bias_g ? sum_dy.to(param) : at::Tensor()};
}

// The input's gradient from the all-reduced sums and the ranks' element counts.
at::Tensor backward_elemt(const at::Tensor& grad_out, const at::Tensor& input,
                                     const at::Tensor& mean, const at::Tensor& invstd,
                                     const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu,
                                     const at::Tensor& count) {
  reduced_dims(input);
  at::Tensor total = count.to(mean.scalar_type()).sum();
  at::Tensor dy = grad_out.to(mean.scalar_type());
  at::Tensor xmu = input.to(mean.scalar_type()) - per_channel(mean, dy);
  at::Tensor mean_dy = sum_dy / total;
  at::Tensor factor = invstd.square() * (sum_dy_xmu / total);
  at::Tensor scale =
      weight && weight->defined() ? invstd * weight->to(mean.scalar_type()) : invstd;
  at::Tensor grad =
      (dy - per_channel(mean_dy, dy) - xmu * per_channel(factor, dy)) * per_channel(scale, dy);
  return grad.to(input.scalar_type());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("batch_norm_stats", stats);
  m.impl("batch_norm_gather_stats_with_counts", gather_stats_with_counts);
  m.impl("batch_norm_gather_stats", gather_stats_with_count);
  m.impl("batch_norm_elemt", elemt);
  m.impl("batch_norm_elemt.out", elemt_out);
  m.impl("batch_norm_backward_reduce", backward_reduce);
  m.impl("batch_norm_backward_elemt", backward_elemt);
}

}  // namespace
}  // namespace torchtpu::aten
