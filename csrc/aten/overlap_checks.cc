#include "aten/overlap_checks.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/Tensor.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "aten/op_special_cases.h"
#include "aten/tpu_storage.h"

namespace torchtpu::aten {
namespace {

// Ops whose CPU out= kernels call at::assert_no_overlap(result, input): any overlap,
// even the whole tensor, is an error.
bool rejects_full_overlap(const std::string& name) {
  static const char* kOps[] = {"aten::index_select.out", "aten::gather.out", "aten::take.out",
                               "aten::masked_select.out", "aten::kthvalue.values",
                               "aten::cat.out", "aten::bernoulli.out", "aten::put_"};
  for (const char* op : kOps) if (name == op) return true;
  return false;
}

void collect(const c10::IValue& v, std::vector<at::Tensor>* out) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) out->push_back(v.toTensor());
  } else if (v.isTensorList() || is_optional_tensor_list(v)) {
    for (const at::Tensor& t : present_tensors(v)) out->push_back(t);
  }
}

// In-place list ops (_foreach_*, the fused optimizer steps): item i of each written list
// against item i of every other list (as PyTorch's per-item kernels check), not against
// every other item.
void check_list_overlap(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  std::vector<std::vector<at::Tensor>> written, all;
  for (size_t i = 0; i < args.size() && i < schema.arguments().size(); ++i) {
    if (!args[i].isTensorList()) continue;
    const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
    all.push_back(args[i].toTensorVector());
    if (ai && ai->isWrite()) written.push_back(all.back());
  }
  for (const std::vector<at::Tensor>& list : written) {
    for (size_t k = 0; k < list.size(); ++k) {
      at::assert_no_internal_overlap(list[k]);
      for (const std::vector<at::Tensor>& other : all) {
        if (k < other.size() && !other[k].is_same(list[k])) {
          at::assert_no_partial_overlap(list[k], other[k]);
        }
      }
    }
  }
}

// The bytes of its storage a tensor's elements lie within, and where it is in the lists.
// `storage` is the StorageState: two StorageImpls may share one (a DLPack import of a
// tpu tensor is made by from_blob on its data pointer).
struct Span {
  const void* storage;
  int64_t begin, end;
  size_t position;
  bool written;
};

Span span_of(const at::Tensor& t, size_t position, bool written) {
  int64_t extent = 1;
  for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * std::abs(t.stride(d));
  int64_t begin = t.storage_offset() * static_cast<int64_t>(t.element_size());
  const void* state = find_storage_state(t.storage().data_ptr());
  return {state != nullptr ? state : static_cast<const void*>(t.storage().unsafeGetStorageImpl()),
          begin,
          begin + extent * static_cast<int64_t>(t.element_size()), position, written};
}

}  // namespace

bool list_items_overlap_across_positions(const c10::FunctionSchema& schema,
                                         c10::ArrayRef<c10::IValue> args) {
  std::vector<Span> spans;
  for (size_t i = 0; i < args.size() && i < schema.arguments().size(); ++i) {
    if (!args[i].isTensorList()) continue;
    const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
    c10::List<at::Tensor> list = args[i].toTensorList();
    for (size_t k = 0; k < list.size(); ++k) {
      at::Tensor t = list.get(k);
      if (t.numel() > 0) spans.push_back(span_of(t, k, ai && ai->isWrite()));
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.storage, a.begin) < std::tie(b.storage, b.begin);
  });
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size() && spans[j].storage == spans[i].storage &&
                           spans[j].begin < spans[i].end;
         ++j) {
      if (spans[i].position != spans[j].position && (spans[i].written || spans[j].written)) {
        return true;
      }
    }
  }
  return false;
}

void check_written_overlap(const c10::FunctionSchema& schema, const std::string& name,
                           c10::ArrayRef<c10::IValue> args) {
  if (name.rfind("aten::_foreach_", 0) == 0 || name.rfind("aten::_fused_", 0) == 0) {
    check_list_overlap(schema, args);
    return;
  }
  std::vector<at::Tensor> written, read;
  for (size_t i = 0; i < args.size() && i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
    collect(args[i], ai && ai->isWrite() ? &written : &read);
  }
  if (written.empty()) return;
  bool full = rejects_full_overlap(name);
  // The CPU's fill kernels write one value wherever an element lies, so they take a
  // tensor whose elements share memory (an expanded view); other kernels refuse it.
  bool fills = name == "aten::fill_.Scalar" || name == "aten::zero_" ||
               name == "aten::masked_fill_.Scalar" || name == "aten::masked_fill_.Tensor";
  for (const at::Tensor& w : written) {
    if (!fills) at::assert_no_internal_overlap(w);
    for (const at::Tensor& r : read) {
      if (full) {
        at::assert_no_overlap(w, r);
      } else {
        at::assert_no_partial_overlap(w, r);
      }
    }
  }
}

void check_resized_out_overlap(const c10::FunctionSchema& schema, const std::string& name,
                               c10::ArrayRef<c10::IValue> args, const at::Tensor& out) {
  if (!rejects_full_overlap(name)) return;
  std::vector<at::Tensor> read;
  for (size_t i = 0; i < args.size() && i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
    if (!(ai && ai->isWrite())) collect(args[i], &read);
  }
  for (const at::Tensor& r : read) at::assert_no_overlap(out, r);
}

}  // namespace torchtpu::aten
