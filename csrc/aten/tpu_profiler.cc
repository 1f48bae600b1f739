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
      buffer_.emplace_activity(buffer_.span,
                               program ? libkineto::ActivityType::CONCURRENT_KERNEL
                                       : libkineto::ActivityType::GPU_MEMCPY,
                               program && !r.name.empty() ? r.name : std::string(kind_name(r.kind)));
      libkineto::GenericTraceActivity& a = libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
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

}  // namespace

void register_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    libkineto::api().registerProfilerFactory(
        []() -> std::unique_ptr<libkineto::IActivityProfiler> { return std::make_unique<Profiler>(); });
  });
}

}  // namespace torchtpu::aten
