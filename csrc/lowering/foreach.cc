// List ("foreach") lowerings: _foreach_<op>(Tensor[] self, ...) applies <op> to every item.
//
// torch.optim's foreach implementations (SGD, Adam, AdamW, RMSprop, Adagrad) and
// clip_grad_norm_ call these on lists of every parameter. PyTorch's generic kernel loops
// over the items, which on tpu means one executable call per parameter per op; here one
// module takes every item as a parameter and returns every result, so a list op is one
// call whatever the number of parameters.
//
// Each item reuses the lowering of the per-tensor op (`_foreach_add_.List` item i is
// `aten::add.Tensor(self[i], other[i], alpha)`): a per-item LoweringContext shares this
// module's builder, its tensor arguments are bound to the list's parameters, and the
// runtime scalars it declares are re-recorded in the list op's context (a Scalar[] item
// becomes a kScalarListItem parameter). One lowering per op therefore serves both forms.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// Where a per-item argument comes from in the list op's arguments.
struct ItemSource {
  int arg = -1;   // list op argument index; -1: a constant argument
  OpArg constant; // used when arg < 0
};

// Per-item arguments: by default the list op's arguments in order. `_foreach_norm` maps
// (self, ord, dtype) onto linalg_vector_norm(self, ord, dim=None, keepdim=False, dtype).
using ArgMap = std::vector<ItemSource>;

ArgMap identity_map(size_t n) {
  ArgMap m(n);
  for (size_t i = 0; i < n; ++i) m[i].arg = static_cast<int>(i);
  return m;
}

ArgMap norm_map() {
  ArgMap m(5);
  m[0].arg = 0;
  m[1].arg = 1;
  m[2].constant.kind = ArgKind::kNone;
  m[3].constant.kind = ArgKind::kBool;
  m[3].constant.int_value = 0;
  m[4].arg = 2;
  return m;
}

// What item `item`'s context reads: the item of each list argument, the shared tensors, and
// the list op's own scalars (item `item` of a Scalar[]) and generator state.
class ItemValues : public ValueSource {
 public:
  ItemValues(LoweringContext& outer, const ArgMap& map, size_t item,
             const std::vector<std::vector<Value>>& lists,
             const std::vector<std::optional<Value>>& tensors)
      : outer_(outer), map_(map), item_(item), lists_(lists), tensors_(tensors) {}

  Value tensor(size_t arg, int) override {
    int k = map_.at(arg).arg;
    if (k >= 0 && !lists_[k].empty()) return lists_[k][item_];
    if (k >= 0 && tensors_[k]) return *tensors_[k];
    return outer_.b().report_misuse(outer_.op_name() + ": item argument " + std::to_string(arg) +
                                        " is not a tensor of the list op",
                                    TensorType{DType::kF32, {}});
  }
  Value scalar(size_t arg, int, DType t, ScalarCast cast) override {
    int k = map_.at(arg).arg;
    if (k < 0) {
      return outer_.b().report_misuse(outer_.op_name() + ": item argument " +
                                          std::to_string(arg) + " is a constant, not a scalar",
                                      TensorType{t, {}});
    }
    if (outer_.arg(k).kind == ArgKind::kScalarList) {
      return outer_.scalar_list_item(k, item_, t, cast);
    }
    return outer_.scalar(k, t, cast);
  }
  Value rng_state() override { return outer_.rng_state(); }

 private:
  LoweringContext& outer_;
  const ArgMap& map_;
  size_t item_;
  const std::vector<std::vector<Value>>& lists_;
  const std::vector<std::optional<Value>>& tensors_;
};

// The number of items: the length of the first Tensor[] argument (PyTorch's meta kernel
// has already checked that every list has the same length).
size_t item_count(LoweringContext& c) {
  for (size_t k = 0; k < c.num_args(); ++k) {
    if (c.arg(k).kind == ArgKind::kTensorList) return c.arg(k).list_types.size();
  }
  return 0;
}

LoweringFn foreach_of(std::string item_op, bool norm_args = false) {
  return [item_op, norm_args](LoweringContext& c) -> Result {
    const LoweringFn* fn = find_lowering(item_op);
    if (fn == nullptr) {
      return base::unimplemented("lowering: " + c.op_name() + " needs " + item_op +
                                 ", which has no lowering");
    }
    size_t n = item_count(c);
    if (c.out_types().size() != n) {
      return base::internal_error("lowering: " + c.op_name() + " has " + std::to_string(n) +
                                  " items but " + std::to_string(c.out_types().size()) +
                                  " result types");
    }
    // Every list item and shared tensor becomes a parameter first, so the parameters the
    // per-item contexts add (scalars) follow them in the builder's order.
    std::vector<std::vector<Value>> lists(c.num_args());
    std::vector<std::optional<Value>> tensors(c.num_args());
    for (size_t k = 0; k < c.num_args(); ++k) {
      if (c.arg(k).kind == ArgKind::kTensorList) lists[k] = c.tensor_list(k);
      if (c.arg(k).kind == ArgKind::kTensor) tensors[k] = c.tensor(k);
    }
    ArgMap map = norm_args ? norm_map() : identity_map(c.num_args());
    std::vector<Value> results;
    for (size_t i = 0; i < n; ++i) {
      std::vector<OpArg> args;
      for (const ItemSource& s : map) {
        if (s.arg < 0 || c.is_none(s.arg)) {
          args.push_back(s.arg < 0 ? s.constant : OpArg{});
          continue;
        }
        OpArg a = c.arg(s.arg);
        if (a.kind == ArgKind::kTensorList) {
          a = OpArg{};
          a.kind = ArgKind::kTensor;
          a.type = c.arg(s.arg).list_types.at(i);
        } else if (a.kind == ArgKind::kScalarList) {
          a = OpArg{};
          a.kind = ArgKind::kScalar;
          a.scalar_category = c.arg(s.arg).scalar_categories.at(i);
        }
        args.push_back(std::move(a));
      }
      ItemValues values(c, map, i, lists, tensors);
      LoweringContext item(c.b(), item_op, args, {c.out_type(i)}, values);
      TORCHTPU_ASSIGN_OR_RETURN(std::vector<Value> r, (*fn)(item));
      if (r.size() != 1 || !(r[0].type == c.out_type(i))) {
        return base::internal_error("lowering: " + item_op + " gave an unexpected result for " +
                                    "item " + std::to_string(i) + " of " + c.op_name());
      }
      for (const Check& check : item.checks()) {
        // Not guarded across items: item i's failed check leaves the other items' writes.
        c.require(check.ok, check.message, check.kind, /*guarded=*/false);
      }
      results.push_back(r[0]);
    }
    return results;
  };
}

// Registers _foreach_<name> and _foreach_<name>_ for each overload, item i lowered by
// aten::<item_ops[k]>.
void register_foreach(const std::string& name, const std::vector<std::string>& overloads,
                      const std::vector<std::string>& item_ops) {
  for (size_t k = 0; k < overloads.size(); ++k) {
    std::string suffix = overloads[k].empty() ? "" : "." + overloads[k];
    LoweringFn fn = foreach_of("aten::" + item_ops[k]);
    register_lowering({("aten::_foreach_" + name + suffix).c_str()}, fn);
    register_lowering({("aten::_foreach_" + name + "_" + suffix).c_str()}, fn);
  }
}

}  // namespace

void register_foreach_lowerings() {
  // Unary: one overload, the item op of the same name.
  for (const char* op : {"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc",
                         "exp", "expm1", "floor", "frac", "lgamma", "log", "log10", "log1p",
                         "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin",
                         "sinh", "sqrt", "tan", "tanh", "trunc"}) {
    register_foreach(op, {""}, {op});
  }
  // Binary with alpha (add, sub) or without (mul, div): List, Scalar, ScalarList, and a
  // shared Tensor (a 0-dim tensor such as a tensor learning rate).
  for (const char* op : {"add", "sub", "mul", "div"}) {
    std::string o = op;
    std::vector<std::string> overloads{"List", "Scalar", "ScalarList", "Tensor"};
    std::vector<std::string> items{o + ".Tensor", o + ".Scalar", o + ".Scalar", o + ".Tensor"};
    if (o == "sub") {  // there is no _foreach_sub.Tensor
      overloads.pop_back();
      items.pop_back();
    }
    register_foreach(op, overloads, items);
  }
  for (const char* op : {"clamp_min", "clamp_max"}) {
    std::string o = op;
    register_foreach(op, {"List", "Scalar", "ScalarList"}, {o + ".Tensor", o, o});
  }
  // maximum/minimum with a scalar are clamps (PyTorch's own kernels do the same).
  register_foreach("maximum", {"List", "Scalar", "ScalarList"},
                   {"maximum", "clamp_min", "clamp_min"});
  register_foreach("minimum", {"List", "Scalar", "ScalarList"},
                   {"minimum", "clamp_max", "clamp_max"});
  register_foreach("pow", {"List", "Scalar", "ScalarList"},
                   {"pow.Tensor_Tensor", "pow.Tensor_Scalar", "pow.Tensor_Scalar"});
  register_lowering({"aten::_foreach_pow.ScalarAndTensor"}, foreach_of("aten::pow.Scalar"));
  // addcmul/addcdiv: the .Tensor overloads take a CPU tensor of scalars and are left to
  // PyTorch's generic kernel.
  for (const char* op : {"addcmul", "addcdiv"}) {
    register_foreach(op, {"Scalar", "ScalarList"}, {op, op});
  }
  register_foreach("lerp", {"List", "Scalar", "ScalarList"},
                   {"lerp.Tensor", "lerp.Scalar", "lerp.Scalar"});
  register_foreach("zero", {""}, {"zero_"});
  register_foreach("copy", {""}, {"copy"});
  register_lowering({"aten::_foreach_max"}, foreach_of("aten::max"));
  // Compiled graphs only: eager mode keeps PyTorch's kernel for ops taking a MemoryFormat.
  register_lowering({"aten::_foreach_clone"}, foreach_of("aten::clone"));
  register_lowering({"aten::_foreach_norm.Scalar"},
                    foreach_of("aten::linalg_vector_norm", /*norm_args=*/true));
}

}  // namespace torchtpu::lowering
