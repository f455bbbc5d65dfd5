// Measured sensitivity of a model's output to the tensor type of each tensor group: for every
// group and candidate type, the mean KL divergence (base || model) on calibration windows when
// that group alone takes the type and every other tensor keeps the base model's data.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "les/convert/quantize_model.h"
#include "les/mixed/tensor_groups.h"
#include "les/model/model.h"

namespace les::mixed {

struct SensitivityOptions {
  int n_ctx = 512;          // calibration window length (each window from position 0)
  int n_windows = 4;        // windows evaluated per measurement (the calibration subset)
  int n_threads = 1;
  int sample_rows = 256;    // rows per tensor for the weighted-error estimate
  std::vector<Type> candidates;  // empty: every weight type les runs
  // Skip a candidate whose weighted error is not below that of a cheaper candidate (it would never
  // be chosen); its dKLD is then not measured.
  bool prune_dominated = true;
  // Measure one candidate per group (the cheapest: the clearest signal) and predict the others'
  // dKLD from it in proportion to their weighted errors. For models too large to measure every
  // candidate; the predicted values are marked measured = false.
  bool probe_only = false;
  // Probe mode, routed-expert groups: apply the candidate to at most this many of the used experts
  // (those with the most routed rows; the others keep their data) and scale the measured dKLD by
  // all routed rows / the converted experts' rows. 0: every used expert.
  int probe_experts = 0;
  QuantMethod method = QuantMethod::fast;  // quantizer of the candidate conversions
};

struct CandidateResult {
  Type type = Type::F32;
  bool keep = false;        // the group's source data, unconverted (dkld 0 by definition)
  uint64_t bytes = 0;       // the group's bytes as this type
  double rel_error = 0;     // importance-weighted squared error / weighted squared norm, sampled rows
  double dkld = 0;          // mean KL divergence from the base: measured, or predicted (probe_only)
  bool measured = false;
};

struct GroupSensitivity {
  TensorGroup group;
  std::vector<CandidateResult> candidates;  // increasing bytes; the keep option last
};

struct SensitivityReport {
  std::vector<GroupSensitivity> groups;
  int n_tokens = 0;         // scored calibration positions per measurement
  int n_measurements = 0;
  double seconds = 0;
};

// (done, total, what) while measuring.
using SensitivityProgress = std::function<void(int done, int total, const std::string& what)>;

// model: resident and unpacked (its tensors are replaced and restored one group at a time).
// calib_tokens: at least one window of n_ctx tokens. Throws les::Error otherwise.
SensitivityReport measure_sensitivity(Model& model, std::span<const int32_t> calib_tokens,
                                      const std::vector<TensorGroup>& groups, const ImportanceFn& importance,
                                      const SensitivityOptions& opt, const SensitivityProgress& progress = {});

// Importance-weighted relative squared error of converting rows of a tensor to `t` (sampled rows).
double sampled_rel_error(const uint8_t* src, const GroupTensor& t, Type dst, int sample_rows,
                         const ImportanceFn& importance, ThreadPool& pool, QuantMethod method = QuantMethod::fast);

}  // namespace les::mixed

namespace les::mixed {

// A measured report as JSON, so one (long) measurement serves many targets. The model is named by
// a fingerprint of its tensors (names, shapes, types); loading checks it and every group against
// the model, and throws les::Error naming the first mismatch.
std::string sensitivity_to_json(const SensitivityReport& r, const gguf::File& model, const std::string& note);
SensitivityReport sensitivity_from_json(const std::string& json, const gguf::File& model, const std::string& what);
uint64_t tensor_fingerprint(const gguf::File& model);

}  // namespace les::mixed
