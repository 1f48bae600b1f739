#include "aten/view_programs.h"

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

enum class Kind : int64_t { kRead = 1, kReshape, kWrite };

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

runtime::ExecutablePtr program(Kind kind, const runtime::Buffer& base, c10::IntArrayRef sizes,
                               c10::IntArrayRef strides) {
  std::vector<int64_t>& w = t_words;
  w.clear();
  w.push_back(static_cast<int64_t>(kind));
  w.push_back(base.device_index());
  w.push_back(static_cast<int64_t>(base.dtype()));
  w.push_back(static_cast<int64_t>(base.dims().size()));
  w.insert(w.end(), base.dims().begin(), base.dims().end());
  w.push_back(static_cast<int64_t>(sizes.size()));
  w.insert(w.end(), sizes.begin(), sizes.end());
  w.insert(w.end(), strides.begin(), strides.end());
  uint64_t h = hash_words(w);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_cache == nullptr) g_cache = new base::LruMap<uint64_t, Entry>(compile_cache().capacity());
    if (Entry* e = g_cache->find(h); e != nullptr && e->words == w) return e->exe;
  }
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
  auto exe = compile_cache().get_or_compile(text, base.device_index());
  TORCH_CHECK(exe.ok(), exe.status().message());
  std::lock_guard<std::mutex> lock(g_mu);
  Entry entry{w, *exe};
  if (Entry* e = g_cache->find(h)) {
    *e = std::move(entry);
  } else {
    g_cache->insert(h, std::move(entry));
  }
  return *exe;
}

runtime::BufferPtr run(const runtime::Executable& exe, const runtime::Buffer* const* args,
                       size_t n) {
  // Inside an op the program carries the op's name; alone (a view copy, a read) its own.
  const char* outer = runtime::trace::current_label();
  runtime::trace::Label label(outer != nullptr ? outer : "tpu storage program");
  auto out = exe.execute(args, n);
  TORCH_CHECK(out.ok(), out.status().message());
  return (*out)[0];
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

}  // namespace torchtpu::aten
