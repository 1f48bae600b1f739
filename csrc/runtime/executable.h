// Executable: RAII owner of a compiled, loaded PJRT program.
//
// execute() is asynchronous: it returns output Buffers as soon as the plugin has enqueued
// the work; reading an output (Buffer::to_host) waits for it.
// Thread safety: execute() may be called concurrently from several threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/buffer.h"
#include "runtime/pjrt_api.h"

struct PJRT_LoadedExecutable;
struct PJRT_Executable;
struct PJRT_Buffer;
struct PJRT_Api;

namespace torchtpu::runtime {

class Executable {
 public:
  Executable(std::shared_ptr<const Plugin> plugin, PJRT_LoadedExecutable* raw, int device_index);
  // A program replicated over `device_indices` (replica r on device_indices[r]).
  Executable(std::shared_ptr<const Plugin> plugin, PJRT_LoadedExecutable* raw,
             std::vector<int> device_indices);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  size_t num_outputs() const { return num_outputs_; }
  // The bytes its outputs take (per replica), from the program's output types; 0 when
  // the plugin cannot say.
  int64_t output_bytes() const { return output_bytes_; }

  // The device of replica 0 (the only one of a program compiled for one device).
  int device_index() const { return device_indices_[0]; }
  const std::vector<int>& device_indices() const { return device_indices_; }
  int num_replicas() const { return static_cast<int>(device_indices_.size()); }

  // Runs the program on its device with `args` (one buffer per parameter, all on that
  // device). Parameter i is donated when `donate[i]` is true and the program aliases it
  // to an output: the output then reuses its memory and the argument buffer is deleted,
  // so the caller must hold no other reference to it. Nothing is donated by default.
  base::StatusOr<std::vector<BufferPtr>> execute(const std::vector<const Buffer*>& args,
                                                 const std::vector<bool>& donate = {}) const;
  // The same over an array (`donate` null or num_args long): what hot paths call, with
  // their arguments on the stack.
  base::StatusOr<std::vector<BufferPtr>> execute(const Buffer* const* args, size_t num_args,
                                                 const bool* donate = nullptr) const;
  // Runs every replica in one PJRT execution: `args[r]` are replica r's arguments (on
  // device_indices()[r]), and result [r] its outputs. Parameter i of every replica is
  // donated when `donate[i]` is true (as in execute()). The replicas of one program meet
  // in its collectives, so they are only ever launched together.
  base::StatusOr<std::vector<std::vector<BufferPtr>>> execute_replicated(
      const std::vector<std::vector<const Buffer*>>& args,
      const std::vector<bool>& donate = {}) const;
  // Serialized form for the on-disk cache (plugin-specific bytes).
  base::StatusOr<std::string> serialize() const;

 private:
  std::shared_ptr<const Plugin> plugin_;
  // `args[r]` points at replica r's num_args arguments; `outputs[r]` receives its outputs.
  base::Status run(const Buffer* const* const* args, size_t num_args, const bool* donate,
                   std::vector<BufferPtr>* outputs) const;

  void read_output_types(const PJRT_Api* api, PJRT_Executable* executable);
  // Wraps output `k` of an execution on `device_index` (its type known or asked).
  base::StatusOr<BufferPtr> wrap_output(PJRT_Buffer* raw, size_t k, int device_index) const;

  PJRT_LoadedExecutable* raw_;
  std::vector<int> device_indices_;
  size_t num_outputs_ = 0;
  // Output types, read once from the program: outputs are wrapped without asking each
  // buffer for its element type and dims (two PJRT calls and an allocation per output).
  // Empty when the plugin cannot say; each buffer is asked then.
  std::vector<base::DType> output_dtypes_;
  std::vector<std::shared_ptr<const std::vector<int64_t>>> output_dims_;
  int64_t output_bytes_ = 0;
  // How long the last wait for this program's results took (runtime/poll_wait.h).
  std::shared_ptr<WaitHistory> waits_ = std::make_shared<WaitHistory>();
};

using ExecutablePtr = std::shared_ptr<Executable>;

}  // namespace torchtpu::runtime
