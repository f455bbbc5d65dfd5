// The flags that configure an Engine (model, memory budget, expert streaming, context,
// speculation) and sampling, shared by `les run`, `les chat` and `les serve`.
#pragma once

#include <vector>

#include "args.h"
#include "les/engine/engine.h"
#include "les/sample/sampler.h"

namespace les::cli {

std::vector<FlagSpec> engine_flag_specs();
std::vector<FlagSpec> sampling_flag_specs();
// Concatenation helper: a command's own flags, then groups of shared ones.
std::vector<FlagSpec> with_flags(std::vector<FlagSpec> own, const std::vector<FlagSpec>& more);

// Reads and validates the engine flags; throws les::Error naming a bad or inconsistent flag.
EngineOptions engine_options_from(const Args& a);
SamplerParams sampling_from(const Args& a);

}  // namespace les::cli
