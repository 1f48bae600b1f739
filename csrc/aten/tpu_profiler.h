// The tpu device's activity in torch.profiler: a Kineto child profiler.
//
// With ProfilerActivity.PrivateUse1 (shown as ProfilerActivity.TPU once the backend is
// renamed) Kineto asks its child profilers for sessions; ours enables the runtime's
// execution trace (runtime/execution_trace.h) while recording and turns each record into a
// Kineto activity: a program is a kernel (named after the aten op or graph that enqueued
// it, with its argument + output bytes), a host transfer a memcpy. Activities carry the
// correlation id of the host op that enqueued them, so PyTorch attributes their device
// time to that op (key_averages' device columns) and the Chrome trace draws the flow.
#pragma once

namespace torchtpu::aten {

// Registers the child profiler with Kineto (idempotent). Called once at import.
void register_profiler();

}  // namespace torchtpu::aten
