#include "common.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(strfmt("%s: cannot create: %s", tmp.c_str(), std::strerror(errno)));
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(strfmt("%s: write failed: %s", path.c_str(), std::strerror(e)));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(strfmt("%s: fsync/close failed: %s", path.c_str(), std::strerror(e)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(strfmt("%s: rename failed: %s", path.c_str(), std::strerror(e)));
  }
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024 && u < 4) { x /= 1024; ++u; }
  return strfmt(u == 0 ? "%.0f %s" : "%.2f %s", x, units[u]);
}

}  // namespace les::cli
