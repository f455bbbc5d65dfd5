// Shared by the plain (generate.cpp) and speculative (speculative.cpp) generation loops.
#pragma once

#include "les/session/generate.h"
#include "les/util/clock.h"

namespace les {

// Non-finite logits mean non-finite weights (a corrupt file): sampling from them would emit
// arbitrary tokens, so generation stops with an error instead.
void check_finite(const float* logits, int n_vocab, int n_past);

// generate() with p.drafter set (the prompt already checked against the context).
GenerateStats generate_speculative(Context& ctx, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                   const GenerateParams& p, const TokenCallback& on_token);

}  // namespace les
