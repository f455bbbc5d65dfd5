// Whole-file writes that either happen completely or not at all.
#pragma once

#include <cstddef>
#include <string>

namespace les {

// Writes bytes to path atomically: a temporary file beside it, fsync, rename over path. On any
// failure the temporary file is removed, path is untouched, and les::Error names the step.
void write_file_atomic(const std::string& path, const void* data, size_t n);

}  // namespace les
