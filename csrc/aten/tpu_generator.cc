#include "aten/tpu_generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Utils.h>
#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>

#include "aten/device_runtime.h"

namespace torchtpu::aten {

TpuGeneratorImpl::TpuGeneratorImpl(c10::DeviceIndex index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void TpuGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t TpuGeneratorImpl::seed() {
  uint64_t s = std::random_device()();
  s = (s << 32) ^ std::random_device()();
  set_current_seed(s);
  return s;
}

std::pair<uint64_t, uint64_t> TpuGeneratorImpl::next_state() {
  // The counter half advances by 2^32 per op so consecutive ops draw disjoint blocks.
  return {seed_, (offset_++) << 32};
}

void TpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);  // a contiguous CPU ByteTensor: its bytes are read
  TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "tpu: RNG state must be a uint8 tensor of 16 bytes (seed, offset), got a ",
              new_state.dtype().name(), " tensor of ", new_state.numel(), " elements");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, 8);
  std::memcpy(&offset_, bytes + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TpuGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({16}, at::ScalarType::Byte, std::nullopt, std::nullopt,
                                     std::nullopt, std::nullopt);
  auto* bytes = static_cast<uint8_t*>(state.data_ptr());
  std::memcpy(bytes, &seed_, 8);
  std::memcpy(bytes + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

void check_tpu_generator(const at::Generator& gen, const std::string& op) {
  TORCH_CHECK(gen.defined() && gen.device().is_privateuseone(),
              "Expected a 'tpu' device type for generator but found '",
              gen.defined() ? c10::DeviceTypeName(gen.device().type(), true) : "none",
              "' (in ", op, ")");
}

runtime::BufferPtr next_rng_state_buffer(const at::Generator& generator, int device) {
  at::Generator gen = generator;
  std::pair<uint64_t, uint64_t> state;
  {
    check_tpu_generator(gen, "a random program");
    std::lock_guard<std::mutex> lock(gen.mutex());
    auto* impl = gen.get<TpuGeneratorImpl>();
    state = impl->next_state();
  }
  uint64_t words[2] = {state.first, state.second};
  auto b = client().buffer_from_host(words, base::DType::kU64, {2}, device);
  TORCH_CHECK(b.ok(), b.status().message());
  return *b;
}

at::Generator cpu_generator_for_fallback(const at::Generator& generator) {
  at::Generator gen = generator;
  std::pair<uint64_t, uint64_t> state;
  {
    check_tpu_generator(gen, "a random op run on the CPU");
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get<TpuGeneratorImpl>()->next_state();
  }
  // splitmix64 of the (key, counter) pair: neighbouring offsets give unrelated seeds.
  uint64_t z = state.first ^ (state.second * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return at::make_generator<at::CPUGeneratorImpl>(z ^ (z >> 31));
}

TpuGeneratorImpl* TpuGeneratorImpl::clone_impl() const {
  auto* g = new TpuGeneratorImpl(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex mu;
  static std::deque<at::Generator>* generators = new std::deque<at::Generator>();
  std::lock_guard<std::mutex> lock(mu);
  int n = device_count_or_zero();
  // DeviceIndex is a char type: printed as a number, not as the character it codes.
  TORCH_CHECK(index >= 0 && index < std::max(n, 1), "tpu: no generator for device index ",
              static_cast<int>(index), " (have ", n, " tpu device", n == 1 ? "" : "s",
              "; TORCHTPU_NUM_DEVICES sets how many the CPU plugin makes)");
  while (static_cast<int>(generators->size()) < std::max(n, 1)) {
    generators->push_back(
        at::make_generator<TpuGeneratorImpl>(static_cast<c10::DeviceIndex>(generators->size())));
  }
  return (*generators)[index];
}

}  // namespace torchtpu::aten
