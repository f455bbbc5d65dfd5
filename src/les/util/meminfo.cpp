#include "les/util/meminfo.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>

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

namespace {

// The first line of a file, or "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// A decimal byte count; false for "max", empty or malformed text.
bool parse_bytes(const std::string& s, uint64_t& out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  out = v;
  return true;
}

uint64_t stat_value(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  uint64_t v = 0;
  while (f >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

// The headroom of one cgroup directory, UINT64_MAX when it has no (readable) limit.
uint64_t dir_headroom(const std::string& dir, bool v2) {
  uint64_t limit = 0, usage = 0;
  if (!parse_bytes(first_line(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes")), limit)) return UINT64_MAX;
  if (!v2 && limit >= (uint64_t{1} << 62)) return UINT64_MAX;  // v1's "unlimited" (a page-rounded LLONG_MAX)
  if (!parse_bytes(first_line(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes")), usage)) return UINT64_MAX;
  const uint64_t reclaimable = stat_value(dir + "/memory.stat", v2 ? "inactive_file" : "total_inactive_file");
  const uint64_t used = usage > reclaimable ? usage - reclaimable : 0;
  return limit > used ? limit - used : 0;
}

}  // namespace

uint64_t cgroup_memory_headroom_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  // "0::/path" (v2) or "N:controllers:/path" with "memory" among the controllers (v1).
  std::string v2_path, v1_path;
  bool have_v2 = false, have_v1 = false;
  size_t at = 0;
  while (at < proc_self_cgroup.size()) {
    size_t end = proc_self_cgroup.find('\n', at);
    if (end == std::string::npos) end = proc_self_cgroup.size();
    const std::string line = proc_self_cgroup.substr(at, end - at);
    at = end + 1;
    const size_t c1 = line.find(':'), c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string ctrls = line.substr(c1 + 1, c2 - c1 - 1), path = line.substr(c2 + 1);
    if (line.compare(0, c1, "0") == 0 && ctrls.empty()) {
      v2_path = path;
      have_v2 = true;
    }
    size_t k = 0;
    while (k <= ctrls.size()) {
      size_t e = ctrls.find(',', k);
      if (e == std::string::npos) e = ctrls.size();
      if (ctrls.compare(k, e - k, "memory") == 0) {
        v1_path = path;
        have_v1 = true;
      }
      k = e + 1;
    }
  }
  // v2 when its memory controller is there (memory.max at its root level or below), else v1.
  auto walk = [&](const std::string& base, std::string path, bool v2) {
    uint64_t best = UINT64_MAX;
    for (;;) {
      best = std::min(best, dir_headroom(base + (path == "/" ? "" : path), v2));
      if (path.empty() || path == "/") break;
      const size_t slash = path.find_last_of('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
    return best;
  };
  if (have_v1) {
    const uint64_t h = walk(cgroup_root + "/memory", v1_path, false);
    if (h != UINT64_MAX) return h;
  }
  if (have_v2) return walk(cgroup_root, v2_path, true);
  return UINT64_MAX;
}

uint64_t cgroup_memory_headroom_bytes() {
  std::ifstream f("/proc/self/cgroup");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return cgroup_memory_headroom_bytes(text, "/sys/fs/cgroup");
}

uint64_t memory_available_to_process() {
  return std::min(mem_available_bytes(), cgroup_memory_headroom_bytes());
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
