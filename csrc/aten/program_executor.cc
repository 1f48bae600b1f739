#include "aten/program_executor.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <string>

#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/status_error.h"
#include "base/metrics.h"
#include "runtime/memory_stats.h"

namespace torchtpu::aten {

void release_executables_past(int64_t map_limit) {
  std::optional<int64_t> maps = runtime::process_map_count();
  if (!maps || *maps <= map_limit) return;
  compile_cache().shrink_all_to(compile_cache().size() / 2);
  base::counter_add("num_map_pressure_releases");
}

int64_t output_bytes_of(const lowering::LoweredGraph& lowered) {
  int64_t bytes = 0;
  for (const lowering::TensorType& t : lowered.output_types) {
    bytes += t.num_elements() * static_cast<int64_t>(base::dtype_size_bytes(t.dtype));
  }
  return bytes;
}

base::StatusOr<std::shared_ptr<const CompiledProgram>> compile_program(
    lowering::LoweredGraph lowered, int device) {
  // Every 32nd program looks at the process's memory maps (reading them costs about a
  // millisecond at tens of thousands).
  static std::atomic<int64_t> programs{0};
  static const int64_t kMapLimit = runtime::max_map_count().value_or(65530) / 2;
  if (programs.fetch_add(1, std::memory_order_relaxed) % 32 == 31) {
    release_executables_past(kMapLimit);
  }
  TORCHTPU_ASSIGN_OR_RETURN(runtime::ExecutablePtr exe,
                            compile_cache().get_or_compile(lowered.text, device));
  auto p = std::make_shared<CompiledProgram>();
  p->output_bytes = output_bytes_of(lowered);
  p->lowered = std::move(lowered);
  p->exe = std::move(exe);
  p->device = device;
  return std::shared_ptr<const CompiledProgram>(std::move(p));
}

std::vector<runtime::BufferPtr> run_program(const CompiledProgram& program, ProgramArgs& args,
                                            CheckMode checks,
                                            const std::vector<std::pair<int, int>>& donations,
                                            const std::string& origin) {
  const std::vector<lowering::GraphParam>& params = program.lowered.params;
  c10::SmallVector<runtime::BufferPtr, 8> buffers;
  for (size_t i = 0; i < params.size(); ++i) {
    const lowering::GraphParam& p = params[i];
    switch (p.source) {
      case lowering::GraphParam::Source::kInput:
        buffers.push_back(args.input(i, p.input_index));
        break;
      case lowering::GraphParam::Source::kScalar:
        buffers.push_back(args.scalar(i, p));
        break;
      case lowering::GraphParam::Source::kRngState:
        buffers.push_back(args.rng_state(i, p));
        break;
    }
  }
  base::StatusOr<std::vector<runtime::BufferPtr>> outputs = base::internal_error("unset");
  if (program.replicated) {
    check_results_fit(program.device, program.output_bytes, /*whole=*/true);
    outputs = program.replicated(program.lowered.text,
                                 std::vector<runtime::BufferPtr>(buffers.begin(), buffers.end()));
    if (!outputs.ok()) {
      const base::Status& st = outputs.status();
      if (st.code() == base::StatusCode::kInvalidArgument) {
        C10_THROW_ERROR(ValueError, st.message());
      }
      if (st.code() == base::StatusCode::kUnavailable) {
        C10_THROW_ERROR(DistBackendError, st.message());
      }
    }
    if (!outputs.ok()) raise_status(outputs.status(), program.device);
  } else {
    // Donation: an input aliased to an output is given up when the caller's storage and
    // this run are its only holders; that storage then takes the output (any other holder
    // still reads the old value, so XLA copies instead: never wrong).
    c10::SmallVector<bool, 8> donate;
    c10::SmallVector<std::pair<int, int>, 4> donated;  // (input, output)
    for (const auto& [input, output] : donations) {
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].source != lowering::GraphParam::Source::kInput ||
            params[i].input_index != input || !args.donatable(input, buffers[i])) {
          continue;
        }
        if (donate.empty()) donate.assign(params.size(), false);
        donate[i] = true;
        donated.emplace_back(input, output);
      }
    }
    int64_t new_bytes = program.output_bytes;
    for (const auto& [input, output] : donated) {
      const lowering::TensorType& t = program.lowered.output_types[output];
      new_bytes -= t.num_elements() * static_cast<int64_t>(base::dtype_size_bytes(t.dtype));
    }
    check_results_fit(program.device, new_bytes);
    c10::SmallVector<const runtime::Buffer*, 8> raw;
    for (const auto& b : buffers) raw.push_back(b.get());
    outputs = program.exe->execute(raw.data(), raw.size(),
                                   donate.empty() ? nullptr : donate.data());
    if (!outputs.ok()) raise_status(outputs.status(), program.device);
    for (const auto& [input, output] : donated) args.donated(input, (*outputs)[output]);
  }
  size_t n = program.lowered.output_types.size();
  if (checks == CheckMode::kReturned) return std::move(outputs).value();
  if (checks == CheckMode::kNow) {
    run_data_checks(*outputs, n, program.lowered.check_kinds, program.lowered.check_messages);
  } else {
    defer_data_checks(*outputs, n, program.lowered.check_kinds, program.lowered.check_messages,
                      origin.empty() ? std::string("a program run earlier") : origin);
  }
  outputs->resize(n);
  return std::move(outputs).value();
}

void run_data_checks(const std::vector<runtime::BufferPtr>& outputs, size_t first,
                     const std::vector<lowering::CheckKind>& kinds,
                     const std::vector<std::string>& messages) {
  int k = first_failed_check(outputs, first, messages.size());
  if (k >= 0) raise_check_failure(kinds.at(k), messages.at(k));
}

int first_failed_check(const std::vector<runtime::BufferPtr>& outputs, size_t first, size_t n) {
  static const base::Counter data_checks("num_data_checks");
  if (n == 0) return -1;
  c10::SmallVector<uint8_t, 16> flags(n);  // XLA's i1 on the host: one byte per flag
  auto status = outputs.at(first)->to_host(flags.data(), static_cast<int64_t>(n));
  TORCH_CHECK(status.ok(), status.message());
  data_checks.add(static_cast<int64_t>(n));
  for (size_t k = 0; k < n; ++k) {
    if (flags[k] == 0) return static_cast<int>(k);
  }
  return -1;
}

}  // namespace torchtpu::aten
