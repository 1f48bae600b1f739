// Where an eager op was called from: the Python stack of the call, captured when fused
// eager records an op whose data check reports later (when its graph runs), so the error
// names the line that called the op, as op by op it would be raised there.
#pragma once

#include <memory>
#include <string>

namespace torchtpu::aten {

struct RecordSite;

// The calling thread's Python stack (empty on a thread that runs no Python). Captured and
// symbolized at once (a few microseconds: only data-checked ops pay it), so holding or
// dropping it later never needs the interpreter.
std::shared_ptr<const RecordSite> capture_record_site();
// Its innermost frames as a Python traceback prints them, outermost first, one
// `  File "f.py", line 3, in g` line each; "" when it has none.
std::string format_record_site(const RecordSite& site);
// Whether two captured sites are the same stack (file, function and line of each frame).
bool same_record_site(const RecordSite& a, const RecordSite& b);
// Whether it has no frame (captured on a thread running no Python).
bool record_site_empty(const RecordSite& site);

}  // namespace torchtpu::aten
