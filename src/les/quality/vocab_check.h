// Whether two models predict over the same vocabulary (required to compare their distributions).
#pragma once

#include "les/model/model.h"

namespace les::quality {

// Throws les::Error naming both files when the vocabulary sizes differ or, where both files
// carry tokenizer.ggml.tokens, when a token's text differs (naming the first such id).
void check_same_vocabulary(const Model& base, const Model& test);

}  // namespace les::quality
