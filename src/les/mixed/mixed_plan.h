// Mixed-precision plans: measure each tensor group's sensitivity on calibration text, allocate
// types under a size target (or a streaming-cost target), and describe the result as a recipe
// that is stored in the output file's metadata (key les.mixed.recipe, JSON).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "les/convert/quantize_model.h"
#include "les/gguf/gguf.h"
#include "les/mixed/sensitivity.h"

namespace les::mixed {

constexpr const char* kRecipeKey = "les.mixed.recipe";

struct MixedOptions {
  uint64_t target_bytes = 0;  // output file size; 0: from target_bpw
  double target_bpw = 0;      // bits per weight over all tensor elements
  std::vector<int32_t> calib_tokens;
  SensitivityOptions sensitivity;
  ImportanceFn importance;
  std::string imatrix_name;   // recorded in the recipe
  // Streaming cost (les quantize --mem): 0 = the file size is the cost. Otherwise expert bytes
  // cost their measured per-layer miss rate per token and dense bytes their effect on the cache.
  uint64_t mem_budget = 0;
  // Calibration tokens whose routing is replayed for the miss rates (windows of at most
  // route_window tokens): separate from the sensitivity windows, which may be short (--probe).
  int route_tokens = 1024;
  int route_window = 512;
  // A sensitivity measured before (sensitivity_from_json): used instead of measuring.
  const SensitivityReport* measured = nullptr;
  // If set, receives the sensitivity the plan was made from.
  SensitivityReport* report_out = nullptr;
};

struct RecipeEntry {
  std::string group;          // "blk.3.ffn_down"
  int layer = -1;
  std::string kind;
  Type type = Type::F32;
  bool keep = false;          // the source data unchanged
  uint64_t bytes = 0;
  double dkld = 0;            // predicted (measured alone)
  double miss_rate = 0;       // streaming cost model: routed experts' misses per use (0: file cost)
};

struct MixedRecipe {
  std::vector<RecipeEntry> entries;
  uint64_t target_bytes = 0;
  uint64_t predicted_bytes = 0;  // the output file, header included (estimate)
  uint64_t fixed_bytes = 0;      // tensors in no group, header and padding
  double predicted_kld = 0;      // sum of the chosen groups' dKLD
  int calib_tokens = 0;          // scored positions per measurement
  int measurements = 0;
  double seconds = 0;
  std::string cost_model = "file";  // "file" or "stream"
  std::string imatrix;
  // Candidate types left out because no importance matrix was given (quantizer_needs_importance).
  std::vector<Type> excluded_types;
  // Stream cost model: expert bytes streamed per token, dense bytes priced by the misses their
  // cache space would have saved; of the allocation and of a uniform file of the target size.
  double stream_bytes_per_token = 0;
  double stream_bytes_per_token_ref = 0;
  double total_bpw() const;
  uint64_t n_weights = 0;        // elements of all tensors
};

// Measures and allocates. in: the input GGUF (unpacked; its tensors are the source data).
MixedRecipe plan_mixed(const std::string& in_path, const MixedOptions& opt, const SensitivityProgress& progress = {});

// The overrides and the recipe metadata for quantize_model.
QuantizePlan plan_from_recipe(const MixedRecipe& r, const gguf::File& in, int n_threads);

std::string recipe_to_json(const MixedRecipe& r);
// The recipe stored in a file's metadata; throws les::Error if absent or malformed.
MixedRecipe recipe_from_gguf(const gguf::File& f);
// The recipe as a table: one line per group (type, bytes, predicted dKLD) and a layer x kind grid.
std::string format_recipe(const MixedRecipe& r);

}  // namespace les::mixed
