#include "aten/interrupts.h"

#include <atomic>

namespace torchtpu::aten {
namespace {

std::atomic<InterruptClassifier> g_classify{nullptr};

}  // namespace

void set_interrupt_classifier(InterruptClassifier classify) { g_classify.store(classify); }

bool is_interrupt(const std::exception& e) {
  InterruptClassifier classify = g_classify.load();
  return classify != nullptr && classify(e);
}

}  // namespace torchtpu::aten
