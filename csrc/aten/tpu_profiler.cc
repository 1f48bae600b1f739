#include "aten/tpu_profiler.h"

// Kineto formats activity metadata with fmt, whose compiled part torch does not export.
#define FMT_HEADER_ONLY
#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "aten/device_runtime.h"
#include "aten/tpu_guard.h"
#include "aten/tpu_streams.h"
#include "runtime/execution_trace.h"

namespace torchtpu::aten {
namespace {

namespace trace = runtime::trace;

const char* kind_name(trace::Kind kind) {
  switch (kind) {
    case trace::Kind::kProgram: return "tpu program";
    case trace::Kind::kHostToDevice: return "Memcpy HtoD (host -> tpu)";
    case trace::Kind::kDeviceToHost: return "Memcpy DtoH (tpu -> host)";
  }
  return "tpu program";
}

class Session : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    trace::set_enabled(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    trace::set_enabled(false);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t start_ns,
                    int64_t end_ns) override {
    std::vector<trace::Record> records = trace::take();
    int64_t first = records.empty() ? start_ns : records.front().start_ns;
    int64_t last = first;
    for (const trace::Record& r : records) last = std::max(last, r.end_ns);
    buffer_.span = libkineto::TraceSpan(first, last, "tpu");
    for (const trace::Record& r : records) {
      if (end_ns > start_ns && (r.end_ns < start_ns || r.start_ns > end_ns)) continue;
      bool program = r.kind == trace::Kind::kProgram;
      std::string name = program && !r.name.empty() ? r.name : std::string(kind_name(r.kind));
      buffer_.emplace_activity(buffer_.span,
                               program ? libkineto::ActivityType::CONCURRENT_KERNEL
                                       : libkineto::ActivityType::GPU_MEMCPY,
                               name);
      libkineto::GenericTraceActivity& a =
          libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
      a.startTime = r.start_ns;
      a.endTime = r.end_ns;
      a.device = r.device;
      a.resource = 0;  // the device's one in-order queue (aten/tpu_streams.h)
      a.id = static_cast<int32_t>(r.correlation_id);
      a.addMetadata("device", r.device);
      a.addMetadata("bytes", r.bytes);
      if (!program && !r.name.empty()) a.addMetadataQuoted("op", r.name);
      if (r.correlation_id != 0) {
        a.flow.id = static_cast<uint32_t>(r.correlation_id);
        a.flow.type = libkineto::kLinkAsyncCpuGpu;
        a.flow.start = false;
        if (linked) a.linked = linked(static_cast<int32_t>(r.correlation_id));
      }
      devices_.insert(r.device);
      logger.handleActivity(a);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    int device = devices_.empty() ? 0 : *devices_.begin();
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{device, device, "tpu", "tpu:" + std::to_string(device)});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (int d : devices_) {
      out.push_back(libkineto::ResourceInfo{0, 0, d, "tpu:" + std::to_string(d) + " queue"});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::make_unique<libkineto::CpuTraceBuffer>(std::move(buffer_));
  }

  void pushCorrelationId(uint64_t id) override { trace::push_correlation(id); }
  void popCorrelationId() override { trace::pop_correlation(); }

 private:
  libkineto::CpuTraceBuffer buffer_;
  std::set<int> devices_;
};

class Profiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string kName = "torchtpu";
    return kName;
  }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    static const std::set<libkineto::ActivityType> kActivities = {
        libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
        libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
    return kActivities;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    return wanted(activity_types) ? std::make_unique<Session>() : nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  // Only when the user asked for device activity (ProfilerActivity.PrivateUse1).
  static bool wanted(const std::set<libkineto::ActivityType>& types) {
    return types.count(libkineto::ActivityType::CONCURRENT_KERNEL) > 0 ||
           types.count(libkineto::ActivityType::GPU_MEMCPY) > 0;
  }
};

// The legacy profiler's device timing (torch.autograd.profiler.profile(use_device="tpu"),
// the form CUDA users write with use_device="cuda"): each op's start and end are timing
// events on the device queue, as CUDA's stubs record cudaEvents. Without these PyTorch's
// default stubs failed every op ("PrivateUse1 used in profiler but not enabled") and the
// table showed negative times.
class LegacyStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    c10::DeviceIndex d = static_cast<c10::DeviceIndex>(current_device_index());
    if (device != nullptr) *device = d;
    void* raw = nullptr;
    record_event(&raw, current_stream(c10::Device(c10::DeviceType::PrivateUse1, d)), d,
                 c10::EventFlag::BACKEND_DEFAULT);
    *event = std::shared_ptr<void>(raw, [](void* e) { destroy_event(e); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    return static_cast<float>(elapsed_ms(start->get(), end->get()) * 1000.0);  // us, as CUDA's
  }
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    int previous = current_device_index();
    for (int d = 0; d < device_count_or_zero(); ++d) {
      set_current_device_index(d);
      op(d);
    }
    set_current_device_index(previous);
  }
  void synchronize() const override { synchronize_device(current_device_index()); }
};

}  // namespace

void register_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    libkineto::api().registerProfilerFactory([]() -> std::unique_ptr<libkineto::IActivityProfiler> {
      return std::make_unique<Profiler>();
    });
    static LegacyStubs* stubs = new LegacyStubs();
    torch::profiler::impl::registerPrivateUse1Methods(stubs);
  });
}

}  // namespace torchtpu::aten
