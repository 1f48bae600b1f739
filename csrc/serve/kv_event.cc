#include "serve/kv_event.h"

namespace torchtpu::serve {

const char* kv_event_kind_name(KvEventKind kind) {
  switch (kind) {
    case KvEventKind::kBlockStored: return "BlockStored";
    case KvEventKind::kBlockRemoved: return "BlockRemoved";
    case KvEventKind::kAllBlocksCleared: return "AllBlocksCleared";
  }
  return "?";
}

}  // namespace torchtpu::serve
