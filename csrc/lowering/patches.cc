// Sliding-window patches over [N, C, H, W] (or [C, H, W]): im2col (F.unfold, nn.Unfold)
// and col2im (F.fold, nn.Fold, and im2col's gradient).
//
// im2col takes one strided slice of the padded input per kernel offset (i, j): kh * kw
// blocks of [N, C, oh, ow], stacked after the channel dim, which is PyTorch's column
// layout (row c * kh * kw + i * kw + j, column y * ow + x). col2im is its adjoint: each
// offset's block goes back to its positions by stablehlo.pad (low padding the offset,
// interior padding stride - 1), the blocks are summed and the padding cropped. Patches
// that tile the input (stride equal to the kernel, no dilation; a ViT's patchify) are a
// reshape and a transpose instead.
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

struct Window {
  int64_t kh, kw, dh, dw, ph, pw, sh, sw;
  int64_t oh, ow;  // output positions along H and W
  bool tiles() const { return sh == kh && sw == kw && dh == 1 && dw == 1; }
};

Window window(const Dims& kernel, const Dims& dilation, const Dims& padding, const Dims& stride,
              int64_t h, int64_t w) {
  Window win{kernel[0], kernel[1], dilation[0], dilation[1],
             padding[0], padding[1], stride[0], stride[1], 0, 0};
  win.oh = (h + 2 * win.ph - (win.dh * (win.kh - 1) + 1)) / win.sh + 1;
  win.ow = (w + 2 * win.pw - (win.dw * (win.kw - 1) + 1)) / win.sw + 1;
  return win;
}

base::Status check_pairs(const LoweringContext& c, size_t first, size_t count) {
  for (size_t i = first; i < first + count; ++i) {
    if (c.int_list(i).size() != 2) {
      return base::invalid_argument("lowering: " + c.op_name() +
                                    ": expected 2-element kernel, dilation, padding and "
                                    "stride lists");
    }
  }
  return base::Status::ok_status();
}

Value pad_spatial(Builder& b, Value x, const Dims& low, const Dims& high, const Dims& interior) {
  auto full = [](const Dims& v) { return Dims{0, 0, v[0], v[1]}; };
  return b.pad(x, b.zeros(TensorType{x.dtype(), {}}), full(low), full(high), full(interior));
}

// im2col(self, kernel_size, dilation, padding, stride)
Result lower_im2col(LoweringContext& c) {
  Builder& b = c.b();
  TORCHTPU_RETURN_IF_ERROR(check_pairs(c, 1, 4));
  Value x = c.tensor(0);
  if (x.rank() == 3) x = b.reshape(x, {1, x.dims()[0], x.dims()[1], x.dims()[2]});
  int64_t n = x.dims()[0], ch = x.dims()[1];
  Window w = window(c.int_list(1), c.int_list(2), c.int_list(3), c.int_list(4), x.dims()[2],
                    x.dims()[3]);
  Value p = pad_spatial(b, x, {w.ph, w.pw}, {w.ph, w.pw}, {0, 0});
  Value cols;
  if (w.tiles()) {
    Value t = b.slice(p, {0, 0, 0, 0}, {n, ch, w.oh * w.kh, w.ow * w.kw}, {1, 1, 1, 1});
    t = b.reshape(t, {n, ch, w.oh, w.kh, w.ow, w.kw});
    cols = b.transpose(t, {0, 1, 3, 5, 2, 4});
  } else {
    std::vector<Value> blocks;
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j) {
        Dims start{0, 0, i * w.dh, j * w.dw};
        Dims limit{n, ch, start[2] + (w.oh - 1) * w.sh + 1, start[3] + (w.ow - 1) * w.sw + 1};
        Value s = b.slice(p, start, limit, {1, 1, w.sh, w.sw});
        blocks.push_back(b.reshape(s, {n, ch, 1, w.oh, w.ow}));
      }
    }
    cols = b.concatenate(blocks, 2);
  }
  return std::vector<Value>{b.reshape(cols, c.out_type().dims)};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride)
Result lower_col2im(LoweringContext& c) {
  Builder& b = c.b();
  TORCHTPU_RETURN_IF_ERROR(check_pairs(c, 1, 5));
  Value cols = c.tensor(0);
  bool batched = cols.rank() == 3;
  int64_t n = batched ? cols.dims()[0] : 1;
  const Dims& size = c.int_list(1);
  Window w = window(c.int_list(2), c.int_list(3), c.int_list(4), c.int_list(5), size[0],
                    size[1]);
  int64_t k = w.kh * w.kw;
  int64_t ch = cols.dims()[batched ? 1 : 0] / k;
  int64_t hp = size[0] + 2 * w.ph, wp = size[1] + 2 * w.pw;
  Value sum;
  if (w.tiles()) {
    Value t = b.reshape(cols, {n, ch, w.kh, w.kw, w.oh, w.ow});
    t = b.reshape(b.transpose(t, {0, 1, 4, 2, 5, 3}), {n, ch, w.oh * w.kh, w.ow * w.kw});
    sum = pad_spatial(b, t, {0, 0}, {hp - w.oh * w.kh, wp - w.ow * w.kw}, {0, 0});
  } else {
    Value blocks = b.reshape(cols, {n, ch, k, w.oh, w.ow});
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j) {
        int64_t o = i * w.kw + j;
        Value s = b.reshape(b.slice(blocks, {0, 0, o, 0, 0}, {n, ch, o + 1, w.oh, w.ow},
                                    {1, 1, 1, 1, 1}),
                            {n, ch, w.oh, w.ow});
        Dims low{i * w.dh, j * w.dw};
        Dims high{hp - low[0] - (w.oh - 1) * w.sh - 1, wp - low[1] - (w.ow - 1) * w.sw - 1};
        Value placed = pad_spatial(b, s, low, high, {w.sh - 1, w.sw - 1});
        sum = o == 0 ? placed : b.add(sum, placed);
      }
    }
  }
  Value out = b.slice(sum, {0, 0, w.ph, w.pw}, {n, ch, w.ph + size[0], w.pw + size[1]},
                      {1, 1, 1, 1});
  return std::vector<Value>{b.reshape(out, c.out_type().dims)};
}

}  // namespace

void register_patch_lowerings() {
  register_lowering({"aten::im2col", "aten::im2col.out"}, lower_im2col);
  register_lowering({"aten::col2im", "aten::col2im.out"}, lower_col2im);
}

}  // namespace torchtpu::lowering
