#include "les/util/error.h"

#include <cstdarg>
#include <system_error>
#include <vector>

namespace les {

std::string strfmt(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), fmt, ap2);
    out.resize(static_cast<size_t>(n));
  }
  va_end(ap2);
  return out;
}

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "les: internal invariant failed: %s (%s:%d)\n", expr, file, line);
  std::abort();
}

}  // namespace les
