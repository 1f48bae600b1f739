// Graph-mode lowerings (being written).
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {

void register_graph_lowerings() {}

}  // namespace torchtpu::lowering
