// Human-readable speculative decoding statistics (les run --stats).
#pragma once

#include <string>

#include "les/session/generate.h"

namespace les {

// Acceptance by position, mean accepted length, the depths chosen, drafting and verification time;
// bytes_read: expert bytes read during generation (0 when resident).
std::string format_spec_stats(const GenerateStats& st, uint64_t bytes_read);

}  // namespace les
