#include "les/util/meminfo.h"

#include <fstream>

namespace les {

uint64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string sysfs_selected_mode(const std::string& line) {
  const size_t b = line.find('[');
  const size_t e = b == std::string::npos ? std::string::npos : line.find(']', b);
  if (e == std::string::npos) return {};
  return line.substr(b + 1, e - b - 1);
}

bool transparent_huge_pages_usable() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return false;
  const std::string mode = sysfs_selected_mode(line);
  return mode == "always" || mode == "madvise";
}

}  // namespace les
