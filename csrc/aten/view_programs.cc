#include "aten/view_programs.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <vector>

#include "aten/device_runtime.h"
#include "aten/host_transfer.h"
#include "base/lru_map.h"
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
  if (g_cache == nullptr) g_cache = new base::LruMap<uint64_t, Entry>(compile_cache().capacity());
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

// One program over many views of `base` (kReadMany, kWriteMany).
runtime::ExecutablePtr many_program(Kind kind, const runtime::Buffer& base,
                                    c10::ArrayRef<at::Tensor> views) {
  std::vector<int64_t>& w = t_words;
  key_base(kind, base, w);
  for (const at::Tensor& v : views) key_view(v.sizes(), v.strides(), w);
  uint64_t h = hash_words(w);
  if (runtime::ExecutablePtr exe = cached(h)) return exe;
  std::vector<lowering::ViewShape> shapes;
  for (const at::Tensor& v : views) {
    shapes.push_back({{v.sizes().begin(), v.sizes().end()}, {v.strides().begin(), v.strides().end()}});
  }
  std::string text = kind == Kind::kReadMany
                         ? lowering::strided_multi_read_module(type_of(base), shapes)
                         : lowering::strided_multi_write_module(type_of(base), shapes);
  return compile_and_keep(text, base.device_index(), h);
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

std::vector<runtime::BufferPtr> run_all(const runtime::Executable& exe,
                                        const runtime::Buffer* const* args, size_t n) {
  // Inside an op the program carries the op's name; alone (a view copy, a read) its own.
  const char* outer = runtime::trace::current_label();
  runtime::trace::Label label(outer != nullptr ? outer : "tpu storage program");
  auto out = exe.execute(args, n);
  TORCH_CHECK(out.ok(), out.status().message());
  return std::move(out).value();
}

runtime::BufferPtr run(const runtime::Executable& exe, const runtime::Buffer* const* args,
                       size_t n) {
  return run_all(exe, args, n)[0];
}

// The views' storage offsets as one i64 vector on base's device.
runtime::BufferPtr offsets_buffer(c10::ArrayRef<at::Tensor> views, int device) {
  at::Tensor host = at::empty({static_cast<int64_t>(views.size())}, at::kLong);
  int64_t* p = host.data_ptr<int64_t>();
  for (size_t i = 0; i < views.size(); ++i) p[i] = views[i].storage_offset();
  return cpu_to_buffer(host, device);
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
                              c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  runtime::ExecutablePtr exe = program(Kind::kWrite, base, sizes, strides);
  runtime::BufferPtr off = scalar_to_buffer(c10::Scalar(offset), base::DType::kI64,
                                            base.device_index());
  const runtime::Buffer* args[] = {&base, &value, off.get()};
  return run(*exe, args, 3);
}

std::vector<runtime::BufferPtr> views_read(const runtime::Buffer& base,
                                           c10::ArrayRef<at::Tensor> views) {
  runtime::ExecutablePtr exe = many_program(Kind::kReadMany, base, views);
  runtime::BufferPtr off = offsets_buffer(views, base.device_index());
  const runtime::Buffer* args[] = {&base, off.get()};
  return run_all(*exe, args, 2);
}

runtime::BufferPtr views_write(const runtime::Buffer& base,
                               const std::vector<runtime::BufferPtr>& values,
                               c10::ArrayRef<at::Tensor> views) {
  runtime::ExecutablePtr exe = many_program(Kind::kWriteMany, base, views);
  runtime::BufferPtr off = offsets_buffer(views, base.device_index());
  std::vector<const runtime::Buffer*> args{&base};
  for (const runtime::BufferPtr& v : values) args.push_back(v.get());
  args.push_back(off.get());
  return run(*exe, args.data(), args.size());
}

}  // namespace torchtpu::aten
