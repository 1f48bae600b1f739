#include "aten/record_site.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <cstdint>
#include <vector>

namespace torchtpu::aten {

struct RecordSite {
  struct Frame {
    std::string file, function;
    uint64_t line = 0;
  };
  std::vector<Frame> frames;  // innermost first
};

namespace {

// Frames a message names: the call and its nearest callers (a test runner's or a training
// framework's outer frames add length, not the line at fault).
constexpr size_t kMaxFrames = 12;

}  // namespace

std::shared_ptr<const RecordSite> capture_record_site() {
  auto site = std::make_shared<RecordSite>();
  std::shared_ptr<torch::CapturedTraceback> tb =
      torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
  torch::SymbolizedTracebacks s = torch::symbolize({tb.get()});
  if (!s.tracebacks.empty()) {
    for (uint64_t i : s.tracebacks[0]) {
      const auto& f = s.all_frames.at(i);
      site->frames.push_back({f.filename, f.funcname, f.lineno});
      if (site->frames.size() == kMaxFrames) break;
    }
  }
  return site;
}

bool record_site_empty(const RecordSite& site) { return site.frames.empty(); }

bool same_record_site(const RecordSite& a, const RecordSite& b) {
  if (a.frames.size() != b.frames.size()) return false;
  for (size_t i = 0; i < a.frames.size(); ++i) {
    const RecordSite::Frame& x = a.frames[i];
    const RecordSite::Frame& y = b.frames[i];
    if (x.line != y.line || x.file != y.file || x.function != y.function) return false;
  }
  return true;
}

std::string format_record_site(const RecordSite& site) {
  std::string out;
  for (auto it = site.frames.rbegin(); it != site.frames.rend(); ++it) {
    if (!out.empty()) out += "\n";
    out += "  File \"" + it->file + "\", line " + std::to_string(it->line) + ", in " +
           it->function;
  }
  return out;
}

}  // namespace torchtpu::aten
