#include "common.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "les/engine/engine.h"
#include "les/quant/kernels.h"
#include "les/util/error.h"

namespace les::cli {

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
    if (i >= s.size()) break;
    size_t j = i;
    while (j < s.size() && s[j] != ',' && s[j] != ' ') ++j;
    const std::string tok = s.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(tok.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || v < 0 || v > INT32_MAX) {
      throw Error(strfmt("--tokens: '%s' is not a token id", tok.c_str()));
    }
    out.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (out.empty()) throw Error("--tokens: no token ids given");
  return out;
}

void apply_isa_flag(const Args& a) {
  if (!a.has("--isa")) return;
  const std::string v = a.str("--isa");
  Isa isa;
  if (!parse_isa(v.c_str(), isa)) throw Error(strfmt("--isa: unknown ISA '%s' (scalar, avx2, avxvnni, avx512)", v.c_str()));
  if (!set_active_isa(isa)) throw Error(strfmt("--isa: this CPU does not support %s", v.c_str()));
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024 && u < 4) { x /= 1024; ++u; }
  return strfmt(u == 0 ? "%.0f %s" : "%.2f %s", x, units[u]);
}

}  // namespace les::cli

namespace les::cli {

void print_memory_choice(const Engine& engine) {
  std::fprintf(stderr, "les: memory: %s\n", engine.memory_choice().why.c_str());
  if (engine.streaming()) {
    std::fprintf(stderr, "les: %s\n", engine.budget().describe().c_str());
    return;
  }
  const Model& m = engine.model();
  const double gib = static_cast<double>(m.gguf().file_size) / (1u << 30);
  if (m.resident_memory() == ResidentMemory::read) {
    std::fprintf(stderr, "les: model: %.2f GiB read into memory (huge pages) in %.2f s\n", gib, m.resident_read_seconds());
  } else {
    std::fprintf(stderr, "les: model: %.2f GiB mapped from the file (page cache)\n", gib);
  }
}

}  // namespace les::cli
