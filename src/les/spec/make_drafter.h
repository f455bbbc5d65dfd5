// Builds the drafter a `--spec KIND` option names (one place for every front end).
#pragma once

#include <memory>
#include <string>

#include "les/model/context.h"
#include "les/spec/drafter.h"

namespace les {

struct DrafterOptions {
  std::string kind;        // none, draft, ngram, dspark, mtp
  std::string draft_path;  // draft / dspark: the drafter's GGUF
  int n_threads = 1;
  int n_ctx = 0;           // the target context's size
  SamplerParams sampling;  // the target's sampling settings
  int ngram_min = 1, ngram_max = 4;
};

// Null for "none". Throws les::Error for an unknown kind, a missing or mismatched draft file.
std::unique_ptr<Drafter> make_drafter(const DrafterOptions& o, const Model& target);

// The kinds, for help texts and errors.
const char* drafter_kinds();

}  // namespace les
