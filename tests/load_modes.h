// The ways a test can load a model: resident mapped, resident read into memory, and streaming
// (dense tensors only), with a name for failure messages.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "les/model/model.h"

namespace les::test {

inline std::vector<std::pair<std::string, LoadOptions>> every_load_mode() {
  return {{"resident, mapped", LoadOptions{.map_experts = true, .resident = ResidentMemory::map}},
          {"resident, read", LoadOptions{.map_experts = true, .resident = ResidentMemory::read}},
          {"streaming", LoadOptions{.map_experts = false}}};
}

}  // namespace les::test
