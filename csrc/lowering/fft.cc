// The fft family as stablehlo.fft: aten::_fft_c2c, _fft_r2c and _fft_c2r, which every
// torch.fft function (fft, ifft, rfft, irfft, hfft, the n-d forms, stft/istft) and their
// derivative formulas call.
//
// stablehlo.fft transforms the innermost 1 to 3 dims. PyTorch names any dims, so each
// group of up to three is moved innermost (transpose), transformed and moved back. XLA's
// inverse transforms (IFFT, IRFFT) divide by the signal size; PyTorch's `normalization`
// (0: none, 1: 1/sqrt(n), 2: 1/n, applied whatever the direction) is applied on top of
// the unnormalized forward or the 1/n-scaled inverse.
#include <cmath>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// `dims` in the argument order, wrapped; invalid_argument on a repeated or bad dim.
base::StatusOr<Dims> fft_dims(const Dims& given, int64_t rank, const std::string& op) {
  Dims out;
  for (int64_t d : given) {
    int64_t w = wrap_dim(d, rank);
    if (w < 0 || w >= rank) return base::invalid_argument("lowering: " + op + " dim out of range");
    for (int64_t e : out) {
      if (e == w) {
        return base::invalid_argument("lowering: " + op + " repeats dim " + std::to_string(d));
      }
    }
    out.push_back(w);
  }
  return out;
}

// The permutation that moves `group` (in order) to the end, and its inverse.
std::pair<Dims, Dims> moving_innermost(int64_t rank, const Dims& group) {
  Dims perm;
  for (int64_t i = 0; i < rank; ++i) {
    bool in_group = false;
    for (int64_t g : group) in_group |= g == i;
    if (!in_group) perm.push_back(i);
  }
  for (int64_t g : group) perm.push_back(g);
  Dims inverse(rank);
  for (int64_t i = 0; i < rank; ++i) inverse[perm[i]] = i;
  return {perm, inverse};
}

// One stablehlo.fft over `group` (up to three dims of `x`). `lengths` are the signal
// sizes (for IRFFT the last is the real output size); `out_last` is the size of the
// group's last dim in the result.
Value fft_group(Builder& b, Value x, const Dims& group, const char* type, const Dims& lengths,
                DType out_dtype, int64_t out_last) {
  auto [perm, inverse] = moving_innermost(x.rank(), group);
  Value t = b.transpose(x, perm);
  Dims out_dims = t.dims();
  out_dims.back() = out_last;
  Value r = b.op("stablehlo.fft", {t}, TensorType{out_dtype, out_dims},
                 "fft_type = #stablehlo<fft_type " + std::string(type) +
                     ">, fft_length = " + i64_array(lengths));
  return b.transpose(r, inverse);
}

// Complex-to-complex over any number of dims, groups of three from the last.
Value c2c_over(Builder& b, Value x, const Dims& dims, bool forward) {
  for (size_t end = dims.size(); end > 0;) {
    size_t begin = end >= 3 ? end - 3 : 0;
    Dims group(dims.begin() + begin, dims.begin() + end);
    Dims lengths;
    for (int64_t g : group) lengths.push_back(x.dims()[g]);
    x = fft_group(b, x, group, forward ? "FFT" : "IFFT", lengths, x.dtype(),
                  x.dims()[group.back()]);
    end = begin;
  }
  return x;
}

// Scales `v` for PyTorch's normalization mode given the signal size `n`; `inverse_scaled`
// when v already carries XLA's 1/n.
Value normalize(Builder& b, Value v, int64_t mode, double n, bool inverse_scaled) {
  double factor = mode == 0 ? 1.0 : mode == 1 ? 1.0 / std::sqrt(n) : 1.0 / n;
  if (inverse_scaled) factor *= n;
  if (factor == 1.0 || n == 0) return v;
  return b.mul(v, b.splat(factor, v.type));
}

bool supported_part(DType t) { return t == DType::kF32 || t == DType::kF64; }

// _fft_c2c(self, dim, normalization, forward)
Result lower_c2c(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  if (!base::is_complex(x.dtype())) {
    return base::unimplemented("lowering: _fft_c2c of a real input");
  }
  TORCHTPU_ASSIGN_OR_RETURN(Dims dims, fft_dims(c.int_list(1), x.rank(), c.op_name()));
  bool forward = c.bool_arg(3);
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x.dims()[d]);
  if (dims.empty() || n == 0) return std::vector<Value>{to_out(c, x)};
  Value r = c2c_over(b, x, dims, forward);
  return std::vector<Value>{to_out(c, normalize(b, r, c.int_arg(2), n, !forward))};
}

// _fft_r2c(self, dim, normalization, onesided): the last listed dim is halved when onesided.
Result lower_r2c(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  if (!supported_part(x.dtype())) {
    return base::unimplemented("lowering: _fft_r2c of " + std::string(base::dtype_name(x.dtype())));
  }
  TORCHTPU_ASSIGN_OR_RETURN(Dims dims, fft_dims(c.int_list(1), x.rank(), c.op_name()));
  if (dims.empty()) return base::unimplemented("lowering: _fft_r2c over no dims");
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x.dims()[d]);
  DType ct = base::complex_of(x.dtype());
  Value r;
  if (n == 0) {
    r = b.zeros(c.out_type());
  } else if (!c.bool_arg(3)) {
    r = c2c_over(b, b.convert(x, ct), dims, /*forward=*/true);
  } else {
    size_t begin = dims.size() >= 3 ? dims.size() - 3 : 0;
    Dims group(dims.begin() + begin, dims.end()), rest(dims.begin(), dims.begin() + begin);
    Dims lengths;
    for (int64_t g : group) lengths.push_back(x.dims()[g]);
    r = fft_group(b, x, group, "RFFT", lengths, ct, x.dims()[group.back()] / 2 + 1);
    r = c2c_over(b, r, rest, /*forward=*/true);
  }
  return std::vector<Value>{to_out(c, normalize(b, r, c.int_arg(2), n, false))};
}

// _fft_c2r(self, dim, normalization, last_dim_size): the inverse of a onesided r2c.
Result lower_c2r(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  if (!base::is_complex(x.dtype())) {
    return base::unimplemented("lowering: _fft_c2r of a real input");
  }
  TORCHTPU_ASSIGN_OR_RETURN(Dims dims, fft_dims(c.int_list(1), x.rank(), c.op_name()));
  if (dims.empty()) return base::unimplemented("lowering: _fft_c2r over no dims");
  int64_t last = c.int_arg(3);
  const TensorType& out = c.out_type();
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(out.dims[d]);
  if (n == 0) return std::vector<Value>{b.zeros(out)};
  size_t begin = dims.size() >= 3 ? dims.size() - 3 : 0;
  Dims group(dims.begin() + begin, dims.end()), rest(dims.begin(), dims.begin() + begin);
  Value r = c2c_over(b, x, rest, /*forward=*/false);
  // IRFFT takes exactly last / 2 + 1 elements along the halved dim: more are ignored (as
  // PyTorch's CPU kernel reads only those), fewer are zeros.
  int64_t h = group.back(), want = last / 2 + 1, have = r.dims()[h];
  if (have > want) {
    Dims start(r.rank(), 0), limit = r.dims(), strides(r.rank(), 1);
    limit[h] = want;
    r = b.slice(r, start, limit, strides);
  } else if (have < want) {
    Dims pad = r.dims();
    pad[h] = want - have;
    r = b.concatenate({r, b.zeros(TensorType{r.dtype(), pad})}, h);
  }
  Dims lengths;
  for (int64_t g : group) lengths.push_back(g == group.back() ? last : x.dims()[g]);
  r = fft_group(b, r, group, "IRFFT", lengths, base::complex_component(x.dtype()), last);
  return std::vector<Value>{to_out(c, normalize(b, r, c.int_arg(2), n, true))};
}

}  // namespace

void register_fft_lowerings() {
  register_lowering({"aten::_fft_c2c", "aten::_fft_c2c.out"}, lower_c2c);
  register_lowering({"aten::_fft_r2c", "aten::_fft_r2c.out"}, lower_r2c);
  register_lowering({"aten::_fft_c2r", "aten::_fft_c2r.out"}, lower_c2r);
}

}  // namespace torchtpu::lowering
