// Error strategy: the library never exits the process. Anything that can fail on bad input
// (parsers, loaders, storage) throws les::Error with context (file, key/tensor, offset,
// expected/actual). Front ends (CLI, server) catch it and turn it into an exit code or HTTP error.
// Broken internal invariants use LES_ASSERT, which is always on.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace les {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// printf-style message builder for error contexts.
std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The system's text for an errno value ("No such file or directory").
std::string errno_text(int e);

[[noreturn]] void assert_fail(const char* expr, const char* file, int line);

}  // namespace les

#define LES_ASSERT(cond) \
  do { if (!(cond)) ::les::assert_fail(#cond, __FILE__, __LINE__); } while (0)
