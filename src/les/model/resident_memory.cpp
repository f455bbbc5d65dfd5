// ResidentMemory: how a fully resident model's file becomes memory (model.h).
#include "les/model/model.h"
#include "les/util/error.h"
#include "les/util/meminfo.h"

namespace les {

bool resident_fits(uint64_t file_bytes, uint64_t available_bytes) {
  const uint64_t margin = (uint64_t{1} << 30) + file_bytes / 16;
  return available_bytes > margin && file_bytes <= available_bytes - margin;
}

ResidentMemory choose_resident_memory(uint64_t file_bytes, uint64_t available_bytes, bool huge_pages) {
  return huge_pages && resident_fits(file_bytes, available_bytes) ? ResidentMemory::read : ResidentMemory::map;
}

ResidentMemory choose_resident_memory(uint64_t file_bytes) {
  return choose_resident_memory(file_bytes, memory_available_to_process(), transparent_huge_pages_usable());
}

const char* resident_memory_name(ResidentMemory m) {
  switch (m) {
    case ResidentMemory::automatic: return "automatic";
    case ResidentMemory::map: return "map";
    case ResidentMemory::read: return "read";
  }
  return "?";
}

ResidentMemory parse_resident_memory(const std::string& name) {
  if (name == "auto" || name == "automatic") return ResidentMemory::automatic;
  if (name == "map" || name == "mmap") return ResidentMemory::map;
  if (name == "read") return ResidentMemory::read;
  throw Error(strfmt("unknown resident memory mode '%s' (expected auto, map or read)", name.c_str()));
}

}  // namespace les
