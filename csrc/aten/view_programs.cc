#include "aten/view_programs.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "aten/device_runtime.h"
#include "aten/host_transfer.h"
#include "aten/status_error.h"
#include "base/lru_map.h"
#include "base/metrics.h"
#include "lowering/storage_programs.h"
#include "runtime/execution_trace.h"

namespace torchtpu::aten {
namespace {

enum class Kind : int64_t { kRead = 1, kReshape, kWrite, kReadMany, kWriteMany };

struct Entry {
  std::vector<int64_t> words;  // verified on a hash hit
  runtime::ExecutablePtr exe;
};

// Bounded like the executable cache it draws from. Guarded by g_mu.
std::mutex g_mu;
base::LruMap<uint64_t, Entry>* g_cache = nullptr;

thread_local std::vector<int64_t> t_words;  // the key being looked up, capacity kept

lowering::TensorType type_of(const runtime::Buffer& b) {
  return lowering::TensorType{b.dtype(), b.dims()};
}

uint64_t hash_words(const std::vector<int64_t>& words) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t w : words) {
    h ^= static_cast<uint64_t>(w);
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

void key_base(Kind kind, const runtime::Buffer& base, std::vector<int64_t>& w) {
  w.clear();
  w.push_back(static_cast<int64_t>(kind));
  w.push_back(base.device_index());
  w.push_back(static_cast<int64_t>(base.dtype()));
  w.push_back(static_cast<int64_t>(base.dims().size()));
  w.insert(w.end(), base.dims().begin(), base.dims().end());
}

void key_view(c10::IntArrayRef sizes, c10::IntArrayRef strides, std::vector<int64_t>& w) {
  w.push_back(static_cast<int64_t>(sizes.size()));
  w.insert(w.end(), sizes.begin(), sizes.end());
  w.insert(w.end(), strides.begin(), strides.end());
}

// The cached executable for the key in t_words, or null.
runtime::ExecutablePtr cached(uint64_t h) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_cache == nullptr) {
    g_cache = new base::LruMap<uint64_t, Entry>(compile_cache().capacity());
    compile_cache().add_holder([](size_t n) {
      std::lock_guard<std::mutex> lock(g_mu);
      g_cache->shrink_to(n);
    });
  }
  if (Entry* e = g_cache->find(h); e != nullptr && e->words == t_words) return e->exe;
  return nullptr;
}

runtime::ExecutablePtr compile_and_keep(const std::string& text, int device, uint64_t h) {
  auto exe = compile_cache().get_or_compile(text, device);
  TORCH_CHECK(exe.ok(), exe.status().message());
  std::lock_guard<std::mutex> lock(g_mu);
  Entry entry{t_words, *exe};
  if (Entry* e = g_cache->find(h)) {
    *e = std::move(entry);
  } else {
    g_cache->insert(h, std::move(entry));
  }
  return *exe;
}

// One program over many views: of `bases[base_of[i]]` for view i (kReadMany), of the one
// base (kWriteMany).
runtime::ExecutablePtr many_program(Kind kind, const std::vector<const runtime::Buffer*>& bases,
                                    c10::ArrayRef<at::Tensor> views,
                                    const std::vector<size_t>& base_of) {
  std::vector<int64_t>& w = t_words;
  key_base(kind, *bases[0], w);
  w.push_back(static_cast<int64_t>(bases.size()));
  for (size_t k = 1; k < bases.size(); ++k) {
    w.push_back(static_cast<int64_t>(bases[k]->dtype()));
    w.push_back(static_cast<int64_t>(bases[k]->dims().size()));
    w.insert(w.end(), bases[k]->dims().begin(), bases[k]->dims().end());
  }
  for (size_t i = 0; i < views.size(); ++i) {
    w.push_back(static_cast<int64_t>(base_of[i]));
    key_view(views[i].sizes(), views[i].strides(), w);
  }
  uint64_t h = hash_words(w);
  if (runtime::ExecutablePtr exe = cached(h)) return exe;
  std::vector<lowering::ViewShape> shapes;
  for (size_t i = 0; i < views.size(); ++i) {
    const at::Tensor& v = views[i];
    shapes.push_back({{v.sizes().begin(), v.sizes().end()},
                      {v.strides().begin(), v.strides().end()},
                      base_of[i]});
  }
  std::vector<lowering::TensorType> types;
  for (const runtime::Buffer* b : bases) types.push_back(type_of(*b));
  std::string text = kind == Kind::kReadMany
                         ? lowering::strided_multi_read_module(types, shapes)
                         : lowering::strided_multi_write_module(types[0], shapes);
  return compile_and_keep(text, bases[0]->device_index(), h);
}

runtime::ExecutablePtr program(Kind kind, const runtime::Buffer& base, c10::IntArrayRef sizes,
                               c10::IntArrayRef strides) {
  std::vector<int64_t>& w = t_words;
  key_base(kind, base, w);
  key_view(sizes, strides, w);
  uint64_t h = hash_words(w);
  if (runtime::ExecutablePtr exe = cached(h)) return exe;
  std::vector<int64_t> dims(sizes.begin(), sizes.end());
  std::string text;
  if (kind == Kind::kRead) {
    text = lowering::strided_read_module(type_of(base), dims, {strides.begin(), strides.end()});
  } else if (kind == Kind::kWrite) {
    text = lowering::strided_write_module(type_of(base), dims, {strides.begin(), strides.end()});
  } else {
    lowering::Builder b("torchtpu_reshape");
    auto v = b.param(type_of(base));
    text = b.finish({b.reshape(v, dims)});
  }
  return compile_and_keep(text, base.device_index(), h);
}

// Runs a storage program; its first argument (a write's base) donated when `donate_base`.
std::vector<runtime::BufferPtr> run_all(const runtime::Executable& exe,
                                        const runtime::Buffer* const* args, size_t n,
                                        bool donate_base = false) {
  // Inside an op the program carries the op's name; alone (a view copy, a read) its own.
  const char* outer = runtime::trace::current_label();
  runtime::trace::Label label(outer != nullptr ? outer : "tpu storage program");
  c10::SmallVector<bool, 8> donate(donate_base ? n : 0, false);
  if (donate_base) donate[0] = true;
  auto out = exe.execute(args, n, donate_base ? donate.data() : nullptr);
  if (!out.ok()) raise_status(out.status(), exe.device_index());
  if (donate_base) base::counter_add("num_donated_view_writes");
  return std::move(out).value();
}

runtime::BufferPtr run(const runtime::Executable& exe, const runtime::Buffer* const* args,
                       size_t n, bool donate_base = false) {
  return run_all(exe, args, n, donate_base)[0];
}

// Offset vectors on the device, cached by value like scalars (a call site reads its views
// at the same offsets every step): (device, offsets) verified on a hash hit. Guarded by
// g_offsets_mu.
struct OffsetsEntry {
  std::vector<int64_t> words;  // device, then the offsets
  runtime::BufferPtr buffer;
};
std::mutex g_offsets_mu;
base::LruMap<uint64_t, OffsetsEntry>* g_offsets = nullptr;
thread_local std::vector<int64_t> t_offsets;

// The views' storage offsets as one i64 vector on base's device.
runtime::BufferPtr offsets_buffer(c10::ArrayRef<at::Tensor> views, int device) {
  std::vector<int64_t>& w = t_offsets;
  w.clear();
  w.push_back(device);
  for (const at::Tensor& v : views) w.push_back(v.storage_offset());
  uint64_t h = hash_words(w);
  {
    std::lock_guard<std::mutex> lock(g_offsets_mu);
    if (g_offsets == nullptr) {
      g_offsets = new base::LruMap<uint64_t, OffsetsEntry>(compile_cache().capacity());
    }
    if (OffsetsEntry* e = g_offsets->find(h); e != nullptr && e->words == w) return e->buffer;
  }
  at::Tensor host = at::empty({static_cast<int64_t>(views.size())}, at::kLong);
  std::copy(w.begin() + 1, w.end(), host.data_ptr<int64_t>());
  runtime::BufferPtr buffer = cpu_to_buffer(host, device);
  std::lock_guard<std::mutex> lock(g_offsets_mu);
  OffsetsEntry entry{w, buffer};
  if (OffsetsEntry* e = g_offsets->find(h)) {
    *e = std::move(entry);
  } else {
    g_offsets->insert(h, std::move(entry));
  }
  return buffer;
}

}  // namespace

runtime::BufferPtr view_read(const runtime::Buffer& base, c10::IntArrayRef sizes,
                             c10::IntArrayRef strides, int64_t offset) {
  runtime::ExecutablePtr exe = program(Kind::kRead, base, sizes, strides);
  runtime::BufferPtr off = scalar_to_buffer(c10::Scalar(offset), base::DType::kI64,
                                            base.device_index());
  const runtime::Buffer* args[] = {&base, off.get()};
  return run(*exe, args, 2);
}

runtime::BufferPtr view_reshape(const runtime::Buffer& base, c10::IntArrayRef sizes) {
  runtime::ExecutablePtr exe = program(Kind::kReshape, base, sizes, {});
  const runtime::Buffer* args[] = {&base};
  return run(*exe, args, 1);
}

runtime::BufferPtr view_write(const runtime::Buffer& base, const runtime::Buffer& value,
                              c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset,
                              bool donate_base) {
  runtime::ExecutablePtr exe = program(Kind::kWrite, base, sizes, strides);
  runtime::BufferPtr off = scalar_to_buffer(c10::Scalar(offset), base::DType::kI64,
                                            base.device_index());
  const runtime::Buffer* args[] = {&base, &value, off.get()};
  bool empty = std::find(sizes.begin(), sizes.end(), 0) != sizes.end();  // nothing aliased
  return run(*exe, args, 3, donate_base && !empty && &value != &base);
}

std::vector<runtime::BufferPtr> views_read(const runtime::Buffer& base,
                                           c10::ArrayRef<at::Tensor> views) {
  return views_read({&base}, views, std::vector<size_t>(views.size(), 0));
}

std::vector<runtime::BufferPtr> views_read(const std::vector<const runtime::Buffer*>& bases,
                                           c10::ArrayRef<at::Tensor> views,
                                           const std::vector<size_t>& base_of) {
  TORCH_INTERNAL_ASSERT(!bases.empty() && base_of.size() == views.size(),
                        "tpu: views_read needs a base and one base index per view");
  runtime::ExecutablePtr exe = many_program(Kind::kReadMany, bases, views, base_of);
  runtime::BufferPtr off = offsets_buffer(views, bases[0]->device_index());
  std::vector<const runtime::Buffer*> args(bases.begin(), bases.end());
  args.push_back(off.get());
  return run_all(*exe, args.data(), args.size());
}

runtime::BufferPtr views_write(const runtime::Buffer& base,
                               const std::vector<runtime::BufferPtr>& values,
                               c10::ArrayRef<at::Tensor> views, bool donate_base) {
  runtime::ExecutablePtr exe =
      many_program(Kind::kWriteMany, {&base}, views, std::vector<size_t>(views.size(), 0));
  runtime::BufferPtr off = offsets_buffer(views, base.device_index());
  std::vector<const runtime::Buffer*> args{&base};
  bool shared = false;  // a value that is the base itself cannot be given up with it
  for (const runtime::BufferPtr& v : values) {
    args.push_back(v.get());
    shared |= v.get() == &base;
  }
  args.push_back(off.get());
  return run(*exe, args.data(), args.size(), donate_base && !shared);
}

}  // namespace torchtpu::aten
