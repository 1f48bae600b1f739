// The interpreter's interrupts inside an op: a KeyboardInterrupt (Ctrl-C) or SystemExit
// raised in Python code that an op runs (a Python meta kernel or the imports it makes, the
// fused graph hook). They must reach the caller as they are, never be taken for the op's
// failure (a CPU fallback, a fused graph's failed values). aten has no Python: the
// bindings install the classifier.
#pragma once

#include <exception>

namespace torchtpu::aten {

using InterruptClassifier = bool (*)(const std::exception&);
void set_interrupt_classifier(InterruptClassifier classify);

// Whether `e` is a Python BaseException that is no Exception (KeyboardInterrupt,
// SystemExit); false before the bindings installed the classifier.
bool is_interrupt(const std::exception& e);

}  // namespace torchtpu::aten
