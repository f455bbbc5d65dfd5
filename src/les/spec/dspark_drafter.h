// The DSpark block drafter behind the Drafter interface: it installs an observer on the target
// context that captures the inputs of the drafter's target layers for every evaluated position,
// injects the kept positions' features after each target pass (prefill or verification), and
// drafts a whole block in one pass of the drafter (dspark_model.h). Its drafts are deterministic
// (the greedy Markov chain, as llama.cpp's), with the confidence head's estimates when present.
#pragma once

#include <memory>

#include "les/model/config.h"
#include "les/spec/drafter.h"
#include "les/spec/dspark_model.h"

namespace les {

class DsparkDrafter final : public Drafter {
 public:
  explicit DsparkDrafter(std::unique_ptr<DsparkModel> m);
  std::string name() const override { return "dspark"; }
  void attach(Context& target) override;
  void draft(std::span<const int32_t> history, int max_n, Draft& out) override;
  void on_target_eval(int pos0, int n, int n_keep, std::span<const int32_t> next_tokens) override;
  uint64_t resident_bytes() const override { return model_ ? model_->bytes() : 0; }
  const DsparkModel& model() const { return *model_; }

 protected:
  void drop() override;

 private:
  std::unique_ptr<DsparkModel> model_;
  Context* target_ = nullptr;
  std::vector<int> slot_of_layer_;   // [target layer + 1]: feature slot of l_out(layer), -1: none
  int slot_of_embd_ = -1;            // feature slot of the token embeddings (target layer 0)
  std::vector<float> pending_;       // [rows][n_feat]: features of the current target pass
  int pending_rows_ = 0, chunk_base_ = 0;
  std::vector<float> backlog_;       // [rows][n_feat]: kept positions not injected yet
  int backlog_rows_ = 0;
  bool in_sync_ = true;              // false once the injected context misses target positions
  int known() const { return model_->n_injected() + backlog_rows_; }  // positions with features
  void truncate(int n_pos);          // forgets positions >= n_pos (injected or in the backlog)
};

}  // namespace les
