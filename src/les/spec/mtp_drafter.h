// The qwen35moe MTP (NextN) head as a drafter. MTP row for target position j+1 is (x_{j+1}, h_j),
// h_j the target's hidden state at j (after output_norm); its logits predict x_{j+2}, its hidden
// state feeds the next row of a draft chain. After every target pass the kept positions' rows are
// fed with the target's own hidden states (the MTP cache then mirrors the committed text), and
// a draft chains rows from the newest one, which are rolled back before the next feed. After the
// prompt only its last position is fed (its other hidden states are not kept by the prefill).
#pragma once

#include "les/spec/drafter.h"

namespace les {

class MtpDrafter final : public Drafter {
 public:
  std::string name() const override { return "mtp"; }
  // Throws les::Error when the target has no runnable MTP block.
  void attach(Context& target) override;
  void draft(std::span<const int32_t> history, int max_n, Draft& out) override;
  void on_target_eval(int pos0, int n, int n_keep, std::span<const int32_t> next_tokens) override;

 private:
  Context* ctx_ = nullptr;
  int fed_ = 0;             // MTP cache rows of committed positions
  bool have_next_ = false;  // mtp_logits(last_row_) predicts the token after the newest committed one
  int last_row_ = 0;
  std::vector<float> rows_h_;
};

}  // namespace les
