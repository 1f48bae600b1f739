#include "aten/call_signature.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "aten/op_special_cases.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_storage.h"

namespace torchtpu::aten {
namespace {

using lowering::ArgKind;
using lowering::OpArg;
using lowering::ScalarCategory;

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().is_privateuseone(); }

ScalarCategory category_of(c10::ScalarType t) {
  if (t == c10::ScalarType::Bool) return ScalarCategory::kBool;
  if (c10::isIntegralType(t, /*includeBool=*/false)) return ScalarCategory::kInt;
  if (c10::isComplexType(t)) return ScalarCategory::kComplex;
  return ScalarCategory::kFloat;
}

// A Python int past int64's range (2**63 .. 2**64-1) arrives as an unsigned IValue: an
// int too, cast like any other (uint8 + 2**63 wraps to uint8 on the CPU).
bool is_int(const c10::IValue& v) { return v.isInt() || v.isSymInt() || v.isUnsigned(); }

ScalarCategory category_of(const c10::IValue& v) {
  return v.isBool()              ? ScalarCategory::kBool
         : is_int(v)             ? ScalarCategory::kInt
         : v.isComplexDouble()   ? ScalarCategory::kComplex
                                 : ScalarCategory::kFloat;
}

int64_t tag(ArgKind kind, int64_t extra = 0) {
  return (static_cast<int64_t>(kind) << 56) | extra;
}

// Writes one call's classification: the words always, the OpArg when asked.
class Classifier {
 public:
  Classifier(const OpInfo& info, c10::ArrayRef<c10::IValue> args, CallSignature* sig,
             std::vector<OpArg>* op_args)
      : info_(info), args_(args), sig_(sig), op_args_(op_args) {}

  void device_of(const at::Tensor& t) {
    int d = t.device().index();
    if (device_ < 0) device_ = d;
    TORCH_CHECK(device_ == d, "Expected all tensors to be on the same device, but found at "
                "least two devices, tpu:", device_, " and tpu:", d, "! (in ", info_.name, ")");
  }

  void tensor_type(const at::Tensor& t, lowering::TensorType* out) {
    c10::IntArrayRef sizes = t.sizes();
    base::DType dtype = to_dtype(t.scalar_type());
    put(static_cast<int64_t>(dtype) | (static_cast<int64_t>(sizes.size()) << 8));
    for (int64_t s : sizes) put(s);
    if (out != nullptr) *out = lowering::TensorType{dtype, std::vector<int64_t>(sizes.begin(), sizes.end())};
  }

  void tensor(const at::Tensor& t, OpArg* a) {
    if (!t.defined()) {
      put(tag(ArgKind::kNone));
      return;
    }
    if (!is_tpu(t)) {
      // PyTorch lets 0-dim CPU tensors mix with device tensors: they are scalars.
      if (!(t.device().is_cpu() && t.dim() == 0)) wrong_device(t);
      ScalarCategory c = category_of(t.scalar_type());
      put(tag(ArgKind::kScalar, static_cast<int64_t>(c)));
      // A 0-dim tensor the user made promotes by its dtype (int64 * a float64 one is
      // float64), a wrapped Python number by its category only (int64 * 0.1 is float32):
      // calls differing there have other result types.
      if (!t.unsafeGetTensorImpl()->is_wrapped_number()) {
        put(static_cast<int64_t>(t.scalar_type()) | (int64_t{1} << 20));
      }
      if (a != nullptr) {
        a->kind = ArgKind::kScalar;
        a->scalar_category = c;
      }
      return;
    }
    device_of(t);
    put(tag(ArgKind::kTensor));
    if (a != nullptr) a->kind = ArgKind::kTensor;
    tensor_type(t, a != nullptr ? &a->type : nullptr);
  }

  // A tensor of another device among a tpu op's arguments. The op may have come here for
  // a tpu generator alone (a generator takes part in choosing the kernel): then that is
  // the mismatch, named as PyTorch's own generator check names it.
  [[noreturn]] void wrong_device(const at::Tensor& t) {
    for (const c10::IValue& v : args_) {
      if (v.isGenerator() && v.toGenerator().defined() &&
          v.toGenerator().device().is_privateuseone()) {
        TORCH_CHECK(false, "Expected a '", c10::DeviceTypeName(t.device().type(), true),
                    "' device type for generator but found 'tpu' (in ", info_.name,
                    ": the tensors are on ", t.device(), ")");
      }
    }
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least "
                "two devices, tpu:", std::max(device_, 0), " and ", t.device(), "! (in ",
                info_.name, "; move the tensor with .to('tpu'))");
  }

  void list_item(const at::Tensor& t, const char* what, OpArg* a) {
    TORCH_CHECK(is_tpu(t), "Expected all tensors to be on the same device, but found a ",
                t.device(), " ", what, " of ", info_.name, " (move it with .to('tpu'))");
    device_of(t);
    lowering::TensorType type;
    tensor_type(t, a != nullptr ? &type : nullptr);
    if (a != nullptr) a->list_types.push_back(std::move(type));
  }

  void arg(size_t i, const c10::IValue& v) {
    OpArg* a = op_args_ != nullptr ? &op_args_->emplace_back() : nullptr;
    FormalKind formal = info_.formals[i];
    if (v.isNone()) {
      put(tag(ArgKind::kNone));
    } else if (v.isTensor()) {
      tensor(v.toTensor(), a);
      if (info_.shape_from_scalars && v.toTensor().defined() && !is_tpu(v.toTensor())) {
        scalar_value(v.toTensor().item());  // arange(0, n): the length follows the value
      }
    } else if (v.isTensorList()) {
      const c10::List<at::Tensor> list = v.toTensorList();
      put(tag(ArgKind::kTensorList, static_cast<int64_t>(list.size())));
      if (a != nullptr) a->kind = ArgKind::kTensorList;
      for (size_t k = 0; k < list.size(); ++k) list_item(list.get(k), "tensor in a list", a);
    } else if (info_.optional_tensor_lists && is_optional_tensor_list(v)) {
      // Tensor?[] (advanced indexing): the present items, with their positions.
      const c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
      put(tag(ArgKind::kTensorList, static_cast<int64_t>(list.size()) | (int64_t{1} << 32)));
      if (a != nullptr) a->kind = ArgKind::kTensorList;
      for (size_t k = 0; k < list.size(); ++k) {
        std::optional<at::Tensor> t = list.get(k);
        if (!t || !t->defined()) continue;
        put(static_cast<int64_t>(k));
        list_item(*t, "index tensor", a);
        if (a != nullptr) a->ints.push_back(static_cast<int64_t>(k));
      }
    } else if (formal == FormalKind::kScalarList) {
      // Scalar[] (foreach ops), float[]: every item is a runtime scalar, like a Scalar.
      c10::ArrayRef<c10::IValue> items = v.toListRef();
      put(tag(ArgKind::kScalarList, static_cast<int64_t>(items.size())));
      if (a != nullptr) a->kind = ArgKind::kScalarList;
      for (const c10::IValue& item : items) {
        if (item.isComplexDouble()) throw NeedsFallback{"complex scalars are not lowered"};
        ScalarCategory c = category_of(item);
        put(static_cast<int64_t>(c));
        if (a != nullptr) a->scalar_categories.push_back(c);
      }
    } else if (v.isGenerator()) {
      // Before the call runs anywhere: a fallback would take another device's generator.
      const at::Generator& g = v.toGenerator();
      if (g.defined()) check_tpu_generator(g, info_.name);
      put(tag(ArgKind::kNone, 1));
      sig_->generator = g;
    } else if (formal == FormalKind::kRuntimeFloat && v.isDouble()) {
      put(tag(ArgKind::kScalar, static_cast<int64_t>(ScalarCategory::kFloat)));
      if (a != nullptr) {
        a->kind = ArgKind::kScalar;
        a->scalar_category = ScalarCategory::kFloat;
      }
    } else if (formal == FormalKind::kStructuralNumber) {
      if (v.isComplexDouble()) throw NeedsFallback{"complex scalars are not lowered"};
      // The value keys as a double (p=2 as 2.0) and its category with it: x ** 2 and
      // x ** 2.0 of an int x differ in result type.
      put(static_cast<int64_t>(category_of(v)));
      double_arg(v.toScalar().toDouble(), a);
    } else if (formal == FormalKind::kNumber) {
      ScalarCategory c = category_of(v);
      put(tag(ArgKind::kScalar, static_cast<int64_t>(c)));
      if (a != nullptr) {
        a->kind = ArgKind::kScalar;
        a->scalar_category = c;
      }
      if (info_.shape_from_scalars) {
        // linspace(0, 1 + 2j): keyed by value below, which a complex number is not.
        if (v.isComplexDouble()) throw NeedsFallback{"complex scalars are not lowered"};
        scalar_value(v.toScalar());
      }
    } else if (formal == FormalKind::kDType) {
      base::DType d = to_dtype(static_cast<c10::ScalarType>(v.toInt()));
      put(tag(ArgKind::kDType, static_cast<int64_t>(d)));
      if (a != nullptr) {
        a->kind = ArgKind::kDType;
        a->dtype = d;
      }
    } else if (formal == FormalKind::kIgnored) {
      // Irrelevant to the computation: the result is always a dense tpu tensor.
      put(tag(ArgKind::kNone, 2));
    } else if (v.isBool()) {
      put(tag(ArgKind::kBool, v.toBool()));
      if (a != nullptr) {
        a->kind = ArgKind::kBool;
        a->int_value = v.toBool();
      }
    } else if (v.isInt() || v.isSymInt()) {
      int64_t n = v.isInt() ? v.toInt() : v.toSymInt().expect_int();
      put(tag(ArgKind::kInt));
      put(n);
      if (a != nullptr) {
        a->kind = ArgKind::kInt;
        a->int_value = n;
      }
    } else if (v.isDouble()) {
      double_arg(v.toDouble(), a);
    } else if (v.isIntList()) {
      const c10::List<int64_t> list = v.toIntList();
      put(tag(ArgKind::kIntList, static_cast<int64_t>(list.size())));
      if (a != nullptr) a->kind = ArgKind::kIntList;
      for (int64_t n : list) {
        put(n);
        if (a != nullptr) a->ints.push_back(n);
      }
    } else if (v.isSymIntList()) {
      put(tag(ArgKind::kIntList));
      if (a != nullptr) a->kind = ArgKind::kIntList;
      size_t count = 0;
      for (const c10::SymInt& s : v.toSymIntVector()) {
        put(s.expect_int());
        if (a != nullptr) a->ints.push_back(s.expect_int());
        ++count;
      }
      put(static_cast<int64_t>(count));
    } else if (v.isBoolList()) {
      const c10::List<bool> list = v.toBoolList();
      put(tag(ArgKind::kIntList, static_cast<int64_t>(list.size())));
      if (a != nullptr) a->kind = ArgKind::kIntList;
      for (bool b : list) {
        put(b);
        if (a != nullptr) a->ints.push_back(b);
      }
    } else if (v.isString()) {
      const std::string& s = v.toStringRef();
      put(tag(ArgKind::kString, static_cast<int64_t>(s.size())));
      for (size_t k = 0; k < s.size(); k += 8) {
        int64_t w = 0;
        std::memcpy(&w, s.data() + k, std::min<size_t>(8, s.size() - k));
        put(w);
      }
      if (a != nullptr) {
        a->kind = ArgKind::kString;
        a->string_value = s;
      }
    } else {
      throw NeedsFallback{"argument '" + std::to_string(i) + "' of " + info_.name +
                          " has a type that is not lowered (" + v.tagKind() + ")"};
    }
  }

  void finish() {
    sig_->device = device_ < 0 ? 0 : device_;
    put(sig_->device);
    // FNV-1a over whole words, then a final mix so nearby words spread over the table.
    uint64_t h = base_hash_;
    for (int64_t w : sig_->words) {
      h ^= static_cast<uint64_t>(w);
      h *= 1099511628211ull;
    }
    h ^= h >> 29;
    sig_->hash = h;
  }

  void start() {
    sig_->words.clear();
    sig_->generator.reset();
    put(info_.id);
    // The default dtype decides result types the arguments do not (int / int, an integer
    // tensor times a Python float): a program built under float32 must not serve a call
    // made under float64.
    put(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  }

 private:
  void put(int64_t w) { sig_->words.push_back(w); }

  // A float structural argument: its bits join the key.
  void double_arg(double d, OpArg* a) {
    int64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    put(tag(ArgKind::kDouble));
    put(bits);
    if (a != nullptr) {
      a->kind = ArgKind::kDouble;
      a->double_value = d;
    }
  }

  void scalar_value(const c10::Scalar& s) {
    double d = s.toDouble();
    int64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    put(bits);
  }

  const OpInfo& info_;
  c10::ArrayRef<c10::IValue> args_;
  CallSignature* sig_;
  std::vector<OpArg>* op_args_;
  int device_ = -1;
  uint64_t base_hash_ = 1469598103934665603ull;
};

}  // namespace

void classify_call(const OpInfo& info, c10::ArrayRef<c10::IValue> args, CallSignature* sig,
                   std::vector<lowering::OpArg>* op_args) {
  Classifier c(info, args, sig, op_args);
  if (op_args != nullptr) op_args->clear();
  c.start();
  for (size_t i = 0; i < args.size(); ++i) c.arg(i, args[i]);
  c.finish();
}

std::string describe_signature(const OpInfo& info, const std::vector<lowering::OpArg>& args,
                               int device) {
  std::string out = info.name + "(";
  for (const OpArg& a : args) a.append_key(&out);
  return out + ")@" + std::to_string(device);
}

}  // namespace torchtpu::aten
