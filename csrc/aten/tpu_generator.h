// The `tpu` random generator: a (seed, offset) pair that random programs take as a
// runtime input, so a new seed never means a new compile. Every random op consumes one
// offset step; the state round-trips through get_state/set_state as 16 bytes.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <string>

#include "runtime/buffer.h"

namespace torchtpu::aten {

class TpuGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit TpuGeneratorImpl(c10::DeviceIndex index, uint64_t seed = 67280421310721ull);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Returns the (key, counter) pair for one random op and advances the offset.
  std::pair<uint64_t, uint64_t> next_state();

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  TpuGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex index);

// Raises CUDA's error when `gen` is not a tpu generator (another device's, or none) where
// tpu op `op` takes one: Generator::get is a static_cast, so no other may reach it.
void check_tpu_generator(const at::Generator& gen, const std::string& op);

// The ui64[2] state buffer one random program takes: `gen` (a tpu generator) advanced
// by one op, placed on `device`.
runtime::BufferPtr next_rng_state_buffer(const at::Generator& gen, int device);

// A CPU generator for one random op that runs on the CPU in place of tpu (a fallback):
// seeded from `gen` (a tpu generator) advanced by one op, so torch.tpu.manual_seed makes
// it reproducible and the CPU's own random stream is left alone.
at::Generator cpu_generator_for_fallback(const at::Generator& gen);

}  // namespace torchtpu::aten
