// Graph lowerings over inputs padded to a shape bucket (bounded dynamic sizes). Each case
// builds the same graph twice: once on the true inputs with static shapes, once with the
// dynamic dims padded from kTrue to kBucket, garbage in the padding (huge values, NaN, or
// in-range indices that would change the result if read) and the true size as a runtime
// symbol. The padded graph's valid region must equal the static graph's results, so any
// size a lowering bakes in as a constant (a mean's divisor, a norm's count, an index
// bound) shows up as a mismatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "lowering/graph.h"
#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::GraphParam;
using lowering::GraphScalar;
using lowering::GraphSpec;
using lowering::ScalarCategory;
using V = std::vector<double>;

constexpr int64_t kTrue = 5;
constexpr int64_t kBucket = 8;
constexpr double kHuge = 1e6;

// Row-major successor of `idx` within `dims`; false after the last one.
bool next_index(Dims& idx, const Dims& dims) {
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

int64_t flat_index(const Dims& idx, const Dims& dims) {
  int64_t f = 0;
  for (size_t d = 0; d < dims.size(); ++d) f = f * dims[d] + idx[d];
  return f;
}

// The valid region of a result whose true dims are `box`. PJRT returns a result with
// dynamic dims compacted: its bytes are the true-shaped tensor in row-major order (then
// zeros), although its dims report the bucket, so the region is a prefix.
V valid_region(const HostTensor& t, const Dims& box) {
  int64_t n = TensorType{t.type.dtype, box}.num_elements();
  EXPECT_LE(n, static_cast<int64_t>(t.values.size()));
  return V(t.values.begin(), t.values.begin() + std::min<int64_t>(n, t.values.size()));
}

// `valid` grown to `dims`, `pad` outside the leading box of valid's dims.
// A host tensor built field by field (GCC 12 warns on nested braced Dims here).
HostTensor host(DType t, Dims dims, V values) {
  HostTensor h;
  h.type.dtype = t;
  h.type.dims = std::move(dims);
  h.values = std::move(values);
  return h;
}

// One node argument: a plain OpArg, a tensor (value id), a tensor list or a runtime scalar.
struct Arg {
  Arg(OpArg a) : arg(std::move(a)) {}  // NOLINT: plain args read naturally in node lists
  static Arg tensor(int id) { Arg a(OpArg{}); a.ref = id; return a; }
  static Arg list(std::vector<int> ids, Dims positions = {}) {
    Arg a(OpArg{});
    a.items = std::move(ids);
    a.arg.ints = std::move(positions);
    return a;
  }
  static Arg scalar(double v, ScalarCategory cat = ScalarCategory::kFloat) {
    Arg a(scalar_arg(cat));
    a.value = GraphScalar{cat, v, static_cast<int64_t>(v)};
    a.is_scalar = true;
    return a;
  }
  OpArg arg;
  int ref = -1;
  std::vector<int> items;
  GraphScalar value;
  bool is_scalar = false;
};

Arg T(int id) { return Arg::tensor(id); }
Arg S(double v) { return Arg::scalar(v); }

OpArg dtype_arg(DType t) {
  OpArg a;
  a.kind = ArgKind::kDType;
  a.dtype = t;
  return a;
}

// Builds one graph; in padded mode the dims named dynamic grow to kBucket.
class Graph {
 public:
  explicit Graph(bool padded) : padded_(padded) {}

  // kTrue in the static graph, kBucket in the padded one: a structural size argument
  // (normalized_shape, N of group norm) that follows a dynamic dim.
  int64_t size() const { return padded_ ? kBucket : kTrue; }

  // A graph input holding `valid`; its dims in `dyn` (each of size kTrue) are dynamic.
  // A dynamic input travels compact (lowering/graph.h): `valid` flattened, then `pad`
  // up to the bucket's element count; symbol 0 is kTrue, and each dynamic input adds a
  // symbol holding its true element count.
  int input(const HostTensor& valid, const Dims& dyn = {}, double pad = kHuge) {
    HostTensor h = valid;
    int id = static_cast<int>(spec_.inputs.size());
    Dims dims = valid.type.dims;
    if (padded_ && !dyn.empty()) {
      if (symbol_values_.empty()) symbol_values_.push_back(kTrue);
      for (int64_t d : dyn) {
        EXPECT_EQ(dims[d], kTrue);
        dims[d] = kBucket;
        spec_.dynamic_dims.push_back({id, d, 0});
      }
      spec_.numel_symbols.resize(id + 1, -1);
      spec_.numel_symbols[id] = static_cast<int>(symbol_values_.size());
      symbol_values_.push_back(static_cast<int64_t>(valid.values.size()));
      spec_.num_symbols = static_cast<int>(symbol_values_.size());
      int64_t bound = 1;
      for (int64_t n : dims) bound *= n;
      h.values.resize(bound, pad);
      h.type.dims = {bound};
    }
    spec_.numel_symbols.resize(id + 1, -1);
    spec_.inputs.push_back(TensorType{valid.type.dtype, dims});
    inputs_.push_back(h);
    types_[id] = TensorType{valid.type.dtype, dims};
    return id;
  }

  // `dims` with the dims in `dyn` at the bucket size in the padded graph.
  TensorType type(DType t, Dims dims, const Dims& dyn = {}) const {
    if (padded_) {
      for (int64_t d : dyn) dims[d] = kBucket;
    }
    return TensorType{t, dims};
  }

  // Appends node `op`; returns the ids of its results, typed `outs`.
  std::vector<int> node(const std::string& op, const std::vector<Arg>& args,
                        const std::vector<TensorType>& outs) {
    lowering::GraphNode n;
    n.op = op;
    for (const Arg& a : args) {
      OpArg arg = a.arg;
      std::vector<int> items;
      if (a.ref >= 0) {
        arg.kind = ArgKind::kTensor;
        arg.type = types_.at(a.ref);
      } else if (!a.items.empty()) {
        arg.kind = ArgKind::kTensorList;
        for (int id : a.items) arg.list_types.push_back(types_.at(id));
        items = a.items;
      }
      n.args.push_back(arg);
      n.tensor_refs.push_back(a.ref);
      n.list_refs.push_back(items);
      n.scalars.push_back(a.value);
    }
    n.out_types = outs;
    std::vector<int> ids;
    for (const TensorType& t : outs) {
      types_[next_id_] = t;
      ids.push_back(next_id_++);
    }
    n.out_ids = ids;
    spec_.nodes.push_back(n);
    return ids;
  }
  int node1(const std::string& op, const std::vector<Arg>& args, const TensorType& out) {
    return node(op, args, {out})[0];
  }

  // In the padded graph: the last node's tensor argument `arg` is made static along
  // `dim` first, and its result 0 marked dynamic along `dim` again (symbol 0).
  void static_arg_then_result_size(int arg, int64_t dim) {
    if (!padded_) return;
    spec_.nodes.back().static_arg_dims.push_back({arg, dim, 0});
    spec_.nodes.back().result_sizes.push_back({0, dim, 0});
  }

  void output(int id) { spec_.outputs.push_back(id); }
  // An output the padded program returns compact itself (lowering::DynamicOutputDim):
  // a flat static buffer, its dims in `dyn` of true size kTrue (symbol 0).
  void compact_output(int id, const Dims& dyn) {
    if (padded_) {
      for (int64_t d : dyn) {
        spec_.output_dynamic_dims.push_back({static_cast<int>(spec_.outputs.size()), d, 0});
      }
    }
    output(id);
  }
  void outputs(const std::vector<int>& ids) {
    for (int id : ids) output(id);
  }

  struct Result {
    std::vector<HostTensor> outputs;
    std::vector<bool> checks;
  };

  Result run() const {
    Result r;
    auto lowered = lowering::lower_graph(spec_);
    EXPECT_TRUE(lowered.ok()) << lowered.status().to_string();
    if (!lowered.ok()) return r;
    std::vector<HostTensor> params;
    for (const GraphParam& p : lowered->params) {
      switch (p.source) {
        case GraphParam::Source::kInput:
          params.push_back(inputs_.at(p.input_index));
          break;
        case GraphParam::Source::kSymbol:
          params.push_back(host(DType::kI32, {},
                                {static_cast<double>(symbol_values_.at(p.input_index))}));
          break;
        case GraphParam::Source::kScalar:
          params.push_back(host(p.dtype, {}, {p.scalar.category == ScalarCategory::kFloat
                                           ? p.scalar.float_value
                                           : static_cast<double>(p.scalar.int_value)}));
          break;
        case GraphParam::Source::kRngState:
          ADD_FAILURE() << "no random ops in these graphs";
          return r;
      }
    }
    std::vector<HostTensor> results = run_module(lowered->text, params);
    for (size_t i = 0; i < results.size(); ++i) {
      if (i < spec_.outputs.size()) {
        r.outputs.push_back(results[i]);
      } else {
        r.checks.push_back(results[i].values.at(0) != 0);
      }
    }
    return r;
  }

 private:
  bool padded_;
  GraphSpec spec_;
  std::vector<HostTensor> inputs_;
  std::map<int, TensorType> types_;
  std::vector<int64_t> symbol_values_;
  // Node results are numbered apart from the inputs, which may be added between nodes.
  int next_id_ = 1000;
};

bool close(double a, double b, double tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= tol * (1 + std::fabs(b));
}

// Builds the graph with and without padding and compares every data check and, when they
// all hold (else the caller raises and discards the results), every output's valid region
// with the unpadded graph's. Returns the unpadded run so a test can also pin it against
// hand-computed values.
Graph::Result expect_padding_invisible(const std::function<void(Graph&)>& build,
                                       double tol = 1e-5) {
  Graph exact(false), padded(true);
  build(exact);
  build(padded);
  Graph::Result want = exact.run(), got = padded.run();
  EXPECT_EQ(got.outputs.size(), want.outputs.size());
  EXPECT_EQ(got.checks, want.checks);
  if (std::find(want.checks.begin(), want.checks.end(), false) != want.checks.end()) return want;
  for (size_t k = 0; k < want.outputs.size() && k < got.outputs.size(); ++k) {
    V region = valid_region(got.outputs[k], want.outputs[k].type.dims);
    const V& w = want.outputs[k].values;
    EXPECT_EQ(region.size(), w.size()) << "output " << k;
    for (size_t i = 0; i < region.size() && i < w.size(); ++i) {
      EXPECT_TRUE(close(region[i], w[i], tol))
          << "output " << k << " element " << i << ": padded " << region[i] << ", exact " << w[i];
    }
  }
  return want;
}

// A [rows, cols] f32 tensor of varied values (no two rows alike, signs mixed).
HostTensor sample(Dims dims, double scale = 1) {
  HostTensor h{{DType::kF32, dims}, {}};
  int64_t n = h.type.num_elements();
  for (int64_t i = 0; i < n; ++i) h.values.push_back(scale * std::sin(1.3 * i + 0.7) * (1 + i % 3));
  return h;
}

TEST(DynamicLowering, CompactOutputsAreFlatStaticAndHoldTheTrueTensor) {
  // A dynamic dim leading, in the middle, two of them, and an integer tensor: each
  // output comes back flat and static, its prefix the true tensor.
  Graph::Result want = expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 3}), {0});
    int y = g.input(sample({3, kTrue, 2}), {1});
    int m = g.input(sample({kTrue, kTrue}), {0, 1});
    g.compact_output(g.node1("aten::mul.Tensor", {T(x), T(x)}, g.type(DType::kF32, {kTrue, 3}, {0})),
                     {0});
    g.compact_output(g.node1("aten::neg", {T(y)}, g.type(DType::kF32, {3, kTrue, 2}, {1})), {1});
    int gt = g.node1("aten::gt.Scalar", {T(m), S(0)}, g.type(DType::kBool, {kTrue, kTrue}, {0, 1}));
    g.compact_output(g.node1("aten::_to_copy", {T(gt), dtype_arg(DType::kI32), none_arg(),
                                                 none_arg(), none_arg(), bool_arg(false),
                                                 none_arg()},
                             g.type(DType::kI32, {kTrue, kTrue}, {0, 1})),
                     {0, 1});
  });
  ASSERT_EQ(want.outputs.size(), 3u);
  Graph padded(true);
  int x = padded.input(sample({kTrue, 3}), {0});
  padded.compact_output(padded.node1("aten::neg", {T(x)}, padded.type(DType::kF32, {kTrue, 3}, {0})),
                        {0});
  Graph::Result got = padded.run();
  ASSERT_EQ(got.outputs.size(), 1u);
  EXPECT_EQ(got.outputs[0].type.dims, Dims{kBucket * 3});
}

TEST(DynamicLowering, ProductOverStaticRowsKeepsTheTrueRowCount) {
  // matmul_nd over [3, s, 4] rows with s dynamic, its rows made static first (XLA's dot
  // would merge 3 and s with a sort); the result's s is marked again, so a mean over it
  // divides by the true count.
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({3, kTrue, 4}), {1}, kHuge);
    int w = g.input(sample({4, 2}, 0.5));
    int y = g.node1("torchtpu::matmul_nd", {T(x), T(w)}, g.type(DType::kF32, {3, kTrue, 2}, {1}));
    g.static_arg_then_result_size(0, 1);
    g.compact_output(y, {1});
    g.output(g.node1("aten::mean.dim", {T(y), ints_arg({1}), bool_arg(false), none_arg()},
                     g.type(DType::kF32, {3, 2})));
  });
}

TEST(DynamicLowering, MeanDividesByTrueCount) {
  auto outs = expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 3}), {0});
    g.output(g.node1("aten::mean.dim", {T(x), ints_arg({0}), bool_arg(false), none_arg()},
                     g.type(DType::kF32, {3})));
    g.output(g.node1("aten::mean.dim", {T(x), ints_arg({1}), bool_arg(true), none_arg()},
                     g.type(DType::kF32, {kTrue, 1}, {0})));
    g.output(g.node1("aten::mean.dim", {T(x), ints_arg({}), bool_arg(false), none_arg()},
                     g.type(DType::kF32, {})));
  });
  ASSERT_EQ(outs.outputs.size(), 3u);
  HostTensor x = sample({kTrue, 3});
  double total = 0;
  for (int64_t i = 0; i < kTrue * 3; ++i) total += x.values[i];
  EXPECT_NEAR(outs.outputs[2].values[0], total / (kTrue * 3), 1e-5);
}

TEST(DynamicLowering, VarStdAndVarMeanUseTrueCount) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 3}), {0});
    g.output(g.node1("aten::var.correction", {T(x), ints_arg({0}), S(1), bool_arg(false)},
                     g.type(DType::kF32, {3})));
    g.output(g.node1("aten::std.correction", {T(x), ints_arg({1}), S(0), bool_arg(false)},
                     g.type(DType::kF32, {kTrue}, {0})));
    g.outputs(g.node("aten::var_mean.correction", {T(x), none_arg(), S(1), bool_arg(false)},
                     {g.type(DType::kF32, {}), g.type(DType::kF32, {})}));
  });
}

TEST(DynamicLowering, SumAndAmaxIgnoreNaNPadding) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 3}), {0}, kNaN);
    g.output(g.node1("aten::sum.dim_IntList", {T(x), ints_arg({0}), bool_arg(false), none_arg()},
                     g.type(DType::kF32, {3})));
    g.output(g.node1("aten::sum.dim_IntList", {T(x), ints_arg({}), bool_arg(false), none_arg()},
                     g.type(DType::kF32, {})));
    g.output(g.node1("aten::amax", {T(x), ints_arg({0}), bool_arg(false)}, g.type(DType::kF32, {3})));
    g.output(g.node1("aten::amin", {T(x), ints_arg({}), bool_arg(false)}, g.type(DType::kF32, {})));
  });
}

TEST(DynamicLowering, MaxDimAndArgmaxSkipPaddedRows) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 3}), {0}, kHuge);
    g.outputs(g.node("aten::max.dim", {T(x), int_arg(0), bool_arg(false)},
                     {g.type(DType::kF32, {3}), g.type(DType::kI64, {3})}));
    g.output(g.node1("aten::argmax", {T(x), int_arg(0), bool_arg(true)}, g.type(DType::kI64, {1, 3})));
    g.output(g.node1("aten::argmax", {T(x), none_arg(), bool_arg(false)}, g.type(DType::kI64, {})));
    int y = g.input(sample({3, kTrue}), {1}, kHuge);
    g.output(g.node1("aten::argmax", {T(y), none_arg(), bool_arg(false)}, g.type(DType::kI64, {})));
    int z = g.input(sample({kTrue}), {0}, -kHuge);
    g.outputs(g.node("aten::min.dim", {T(z), int_arg(0), bool_arg(false)},
                     {g.type(DType::kF32, {}), g.type(DType::kI64, {})}));
  });
}

TEST(DynamicLowering, MmOverDynamicContractingDim) {
  expect_padding_invisible([](Graph& g) {
    int a = g.input(sample({3, kTrue}), {1}, kHuge);
    int b = g.input(sample({kTrue, 2}, 0.5), {0}, kHuge);
    g.output(g.node1("aten::mm", {T(a), T(b)}, g.type(DType::kF32, {3, 2})));
  });
}

TEST(DynamicLowering, LayerNormOverDynamicDimForwardAndBackward) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({3, kTrue}), {1}, kHuge);
    int w = g.input(sample({kTrue}, 0.5), {0}, kHuge);
    int bias = g.input(sample({kTrue}, 0.25), {0}, kHuge);
    int64_t n = g.size();
    std::vector<int> fwd =
        g.node("aten::native_layer_norm", {T(x), ints_arg({n}), T(w), T(bias), double_arg(1e-5)},
               {g.type(DType::kF32, {3, kTrue}, {1}), g.type(DType::kF32, {3, 1}),
                g.type(DType::kF32, {3, 1})});
    g.outputs(fwd);
    int go = g.input(sample({3, kTrue}, 2), {1}, kHuge);
    g.outputs(g.node("aten::native_layer_norm_backward",
                     {T(go), T(x), ints_arg({n}), T(fwd[1]), T(fwd[2]), T(w), T(bias),
                      ints_arg({1, 1, 1})},
                     {g.type(DType::kF32, {3, kTrue}, {1}), g.type(DType::kF32, {kTrue}, {0}),
                      g.type(DType::kF32, {kTrue}, {0})}));
  }, 1e-4);
}

TEST(DynamicLowering, LayerNormOverDynamicBatchReducesWeightGradOverTrueRows) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 4}), {0}, kNaN);
    int w = g.input(sample({4}, 0.5));
    std::vector<int> fwd =
        g.node("aten::native_layer_norm", {T(x), ints_arg({4}), T(w), none_arg(), double_arg(1e-5)},
               {g.type(DType::kF32, {kTrue, 4}, {0}), g.type(DType::kF32, {kTrue, 1}, {0}),
                g.type(DType::kF32, {kTrue, 1}, {0})});
    g.output(fwd[0]);
    int go = g.input(sample({kTrue, 4}, 2), {0}, kNaN);
    g.outputs(g.node("aten::native_layer_norm_backward",
                     {T(go), T(x), ints_arg({4}), T(fwd[1]), T(fwd[2]), T(w), none_arg(),
                      ints_arg({1, 1, 0})},
                     {g.type(DType::kF32, {kTrue, 4}, {0}), g.type(DType::kF32, {4})}));
  }, 1e-4);
}

TEST(DynamicLowering, SoftmaxAndLogSoftmaxForwardAndBackward) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({3, kTrue}), {1}, kHuge);
    TensorType t = g.type(DType::kF32, {3, kTrue}, {1});
    int y = g.node1("aten::_softmax", {T(x), int_arg(1), bool_arg(false)}, t);
    int ly = g.node1("aten::_log_softmax", {T(x), int_arg(-1), bool_arg(false)}, t);
    int go = g.input(sample({3, kTrue}, 2), {1}, kHuge);
    g.outputs({y, ly});
    g.output(g.node1("aten::_softmax_backward_data", {T(go), T(y), int_arg(1), dtype_arg(DType::kF32)}, t));
    g.output(g.node1("aten::_log_softmax_backward_data",
                     {T(go), T(ly), int_arg(1), dtype_arg(DType::kF32)}, t));
  });
}

HostTensor targets(double ignore_at_2) {
  return host(DType::kI64, {kTrue}, {1, 3, ignore_at_2, 0, 3});
}

TEST(DynamicLowering, NllLossMeanDividesByTrueTotalWeight) {
  auto outs = expect_padding_invisible([](Graph& g) {
    int lp = g.input(sample({kTrue, 4}), {0}, kHuge);
    // Padded targets name a real class: read, they would change both sums.
    int t = g.input(targets(-100), {0}, 2);
    int w = g.input(host(DType::kF32, {4}, {0.5, 1, 2, 4}));
    g.outputs(g.node("aten::nll_loss_forward", {T(lp), T(t), T(w), int_arg(1), int_arg(-100)},
                     {g.type(DType::kF32, {}), g.type(DType::kF32, {})}));
    g.outputs(g.node("aten::nll_loss_forward", {T(lp), T(t), none_arg(), int_arg(1), int_arg(-100)},
                     {g.type(DType::kF32, {}), g.type(DType::kF32, {})}));
  });
  ASSERT_EQ(outs.outputs.size(), 4u);
  EXPECT_EQ(outs.outputs[1].values, (V{1 + 4 + 0.5 + 4}));
  EXPECT_EQ(outs.outputs[3].values, (V{4}));
}

TEST(DynamicLowering, NllLossChecksTargetsAgainstTrueClassCount) {
  // Target 5 is out of range for 5 classes; with the class dim padded to 8 a static bound
  // would accept it and read padding.
  auto run = expect_padding_invisible([](Graph& g) {
    int lp = g.input(sample({3, kTrue}), {1}, kHuge);
    int t = g.input(host(DType::kI64, {3}, {0, 5, 4}));
    g.outputs(g.node("aten::nll_loss_forward", {T(lp), T(t), none_arg(), int_arg(2), int_arg(-100)},
                     {g.type(DType::kF32, {}), g.type(DType::kF32, {})}));
  });
  EXPECT_EQ(run.checks, (std::vector<bool>{false}));
}

TEST(DynamicLowering, CrossEntropyForwardAndBackward) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 4}, 3), {0}, kHuge);
    int t = g.input(targets(2), {0}, 1);
    int one = g.input(host(DType::kF32, {}, {1}));
    TensorType xt = g.type(DType::kF32, {kTrue, 4}, {0}), scalar = g.type(DType::kF32, {});
    int lp = g.node1("aten::_log_softmax", {T(x), int_arg(1), bool_arg(false)}, xt);
    std::vector<int> loss = g.node("aten::nll_loss_forward",
                                   {T(lp), T(t), none_arg(), int_arg(1), int_arg(-100)},
                                   {scalar, scalar});
    int glp = g.node1("aten::nll_loss_backward",
                      {T(one), T(lp), T(t), none_arg(), int_arg(1), int_arg(-100), T(loss[1])}, xt);
    int gx = g.node1("aten::_log_softmax_backward_data",
                     {T(glp), T(lp), int_arg(1), dtype_arg(DType::kF32)}, xt);
    g.outputs({loss[0], loss[1], gx});
  });
}

TEST(DynamicLowering, PointwiseLossesMeanOverTrueElements) {
  expect_padding_invisible([](Graph& g) {
    int s = g.input(sample({kTrue}), {0}, kHuge);
    int t = g.input(sample({kTrue}, 0.3), {0}, -kHuge);
    TensorType scalar = g.type(DType::kF32, {}), vec = g.type(DType::kF32, {kTrue}, {0});
    g.output(g.node1("aten::mse_loss", {T(s), T(t), int_arg(1)}, scalar));
    g.output(g.node1("aten::smooth_l1_loss", {T(s), T(t), int_arg(1), double_arg(0.5)}, scalar));
    g.output(g.node1("aten::huber_loss", {T(s), T(t), int_arg(1), double_arg(0.5)}, scalar));
    int go = g.input(host(DType::kF32, {}, {1.5}));
    g.output(g.node1("aten::mse_loss_backward", {T(go), T(s), T(t), int_arg(1)}, vec));
    g.output(g.node1("aten::huber_loss_backward", {T(go), T(s), T(t), int_arg(1), double_arg(0.5)}, vec));
  });
}

TEST(DynamicLowering, BinaryCrossEntropyMeanAndRangeCheckSkipPadding) {
  // Padding 5 is outside [0, 1]: the range check must only see the true elements.
  expect_padding_invisible([](Graph& g) {
    int x = g.input(host(DType::kF32, {kTrue}, {0.1, 0.5, 0.9, 0.3, 0.7}), {0}, 5);
    int t = g.input(host(DType::kF32, {kTrue}, {0, 1, 1, 0, 0.5}), {0}, 5);
    g.output(g.node1("aten::binary_cross_entropy", {T(x), T(t), none_arg(), int_arg(1)},
                     g.type(DType::kF32, {})));
    int go = g.input(host(DType::kF32, {}, {1}));
    g.output(g.node1("aten::binary_cross_entropy_backward",
                     {T(go), T(x), T(t), none_arg(), int_arg(1)},
                     g.type(DType::kF32, {kTrue}, {0})));
  });
}

TEST(DynamicLowering, BatchNormTrainingOverDynamicBatch) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 3}), {0}, kHuge);
    int w = g.input(sample({3}, 0.5));
    int bias = g.input(sample({3}, 0.25));
    TensorType xt = g.type(DType::kF32, {kTrue, 3}, {0}), ct = g.type(DType::kF32, {3});
    std::vector<int> fwd = g.node("aten::native_batch_norm",
                                  {T(x), T(w), T(bias), none_arg(), none_arg(), bool_arg(true),
                                   double_arg(0.1), double_arg(1e-5)},
                                  {xt, ct, ct});
    g.outputs(fwd);
    int go = g.input(sample({kTrue, 3}, 2), {0}, kHuge);
    g.outputs(g.node("aten::native_batch_norm_backward",
                     {T(go), T(x), T(w), none_arg(), none_arg(), T(fwd[1]), T(fwd[2]),
                      bool_arg(true), double_arg(1e-5), ints_arg({1, 1, 1})},
                     {xt, ct, ct}));
  }, 1e-4);
}

TEST(DynamicLowering, GroupNormForwardAndBackwardOverDynamicSpatialDim) {
  expect_padding_invisible([](Graph& g) {
    // [N, C, HxW] with HxW dynamic: statistics divide by the true group size.
    int x = g.input(sample({2, 4, kTrue}), {2}, kHuge);
    TensorType stat = g.type(DType::kF32, {2, 2});
    g.outputs(g.node("aten::native_group_norm",
                     {T(x), none_arg(), none_arg(), int_arg(2), int_arg(4), int_arg(g.size()),
                      int_arg(2), double_arg(1e-5)},
                     {g.type(DType::kF32, {2, 4, kTrue}, {2}), stat, stat}));
    TensorType xt = g.type(DType::kF32, {2, 4, kTrue}, {2});
    int w = g.input(sample({4}, 0.5));
    std::vector<int> fwd = g.node("aten::native_group_norm",
                                  {T(x), T(w), none_arg(), int_arg(2), int_arg(4), int_arg(g.size()),
                                   int_arg(2), double_arg(1e-5)},
                                  {xt, stat, stat});
    int go = g.input(sample({2, 4, kTrue}, 2), {2}, kHuge);
    TensorType ct = g.type(DType::kF32, {4});
    g.outputs(g.node("aten::native_group_norm_backward",
                     {T(go), T(x), T(fwd[1]), T(fwd[2]), T(w), int_arg(2), int_arg(4),
                      int_arg(g.size()), int_arg(2), ints_arg({1, 1, 1})},
                     {xt, ct, ct}));
  }, 1e-4);
}

TEST(DynamicLowering, CumulativeScansAlongAndAcrossDynamicDim) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 3}), {0}, kHuge);
    TensorType t = g.type(DType::kF32, {kTrue, 3}, {0});
    int cs = g.node1("aten::cumsum", {T(x), int_arg(0), none_arg()}, t);
    g.output(cs);
    // The scan's result keeps x's true size: a later reduction must not see the padding.
    g.output(g.node1("aten::sum.dim_IntList", {T(cs), ints_arg({0}), bool_arg(false), none_arg()},
                     g.type(DType::kF32, {3})));
    g.output(g.node1("aten::cumsum", {T(x), int_arg(1), none_arg()}, t));
    g.output(g.node1("aten::cumprod", {T(x), int_arg(0), none_arg()}, t));
    g.output(g.node1("aten::_logcumsumexp", {T(x), int_arg(0)}, t));
  });
}

TEST(DynamicLowering, MaskedScatterCountsOnlyTrueElements) {
  expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({3, kTrue}), {1}, kHuge);
    // Padded mask entries are true: counted, they would shift every later source index.
    int mask = g.input(host(DType::kBool, {3, kTrue}, {1, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 1}),
                       {1}, 1);
    int src = g.input(arange(DType::kF32, {10}, 100));
    g.output(g.node1("aten::masked_scatter", {T(x), T(mask), T(src)},
                     g.type(DType::kF32, {3, kTrue}, {1})));
  });
}

TEST(DynamicLowering, NegativeIndicesWrapAtTrueSize) {
  auto run = expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 2}), {0}, kHuge);
    int idx = g.input(host(DType::kI64, {3}, {-1, 0, -5}));
    g.output(g.node1("aten::index.Tensor", {T(x), Arg::list({idx}, {0})},
                     g.type(DType::kF32, {3, 2})));
    g.output(g.node1("aten::take", {T(x), T(idx)}, g.type(DType::kF32, {3})));
  });
  EXPECT_EQ(run.checks, (std::vector<bool>{true, true}));
}

TEST(DynamicLowering, IndexIntoPaddingFailsTheBoundsCheck) {
  // Index 6 is in the bucket but past the true size 5: PyTorch raises.
  auto run = expect_padding_invisible([](Graph& g) {
    int x = g.input(sample({kTrue, 2}), {0}, kHuge);
    int idx = g.input(host(DType::kI64, {1}, {6}));
    g.output(g.node1("aten::index_select", {T(x), int_arg(0), T(idx)}, g.type(DType::kF32, {1, 2})));
    g.output(g.node1("aten::index.Tensor", {T(x), Arg::list({idx}, {0})}, g.type(DType::kF32, {1, 2})));
    int gi = g.input(host(DType::kI64, {1, 2}, {6, 0}));
    g.output(g.node1("aten::gather", {T(x), int_arg(0), T(gi), bool_arg(false)},
                     g.type(DType::kF32, {1, 2})));
  });
  EXPECT_EQ(run.checks, (std::vector<bool>{false, false, false}));
}

TEST(DynamicLowering, EmbeddingBackwardIgnoresPaddedIndices) {
  expect_padding_invisible([](Graph& g) {
    int go = g.input(sample({kTrue, 3}), {0}, kHuge);
    // Padded indices name a real row: scattered, they would add kHuge to it.
    int idx = g.input(host(DType::kI64, {kTrue}, {0, 2, 2, 3, 0}), {0}, 1);
    TensorType out = g.type(DType::kF32, {4, 3});
    g.output(g.node1("aten::embedding_dense_backward",
                     {T(go), T(idx), int_arg(4), int_arg(-1), bool_arg(false)}, out));
    g.output(g.node1("aten::embedding_dense_backward",
                     {T(go), T(idx), int_arg(4), int_arg(2), bool_arg(true)}, out));
  });
}

}  // namespace
}  // namespace torchtpu::testing
