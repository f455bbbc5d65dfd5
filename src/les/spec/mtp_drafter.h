// The qwen35moe MTP (NextN) head as a drafter. MTP row for target position j+1 is (x_{j+1}, h_j),
// h_j the target's hidden state at j (after output_norm); its logits predict x_{j+2}, its hidden
// state feeds the next row of a draft chain. After every target pass the kept positions' rows
// (with the target's own hidden states) are queued and fed in one batch by the next draft (the MTP
// cache then mirrors the committed text; plain rounds cost nothing), and a draft chains rows from
// the newest one, which are rolled back before the next feed. After the
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

 protected:
  void drop() override;

 private:
  Context* ctx_ = nullptr;
  int fed_ = 0;             // MTP cache rows of committed positions
  bool have_next_ = false;  // mtp_logits(last_row_) predicts the token after the newest committed one
  bool full_ = false;       // the MTP cache cannot take the committed rows: no more drafts
  int last_row_ = 0;
  // Committed rows (token x_{j+1}, target hidden h_j) not fed yet: fed in one batch by the next
  // draft, so that rounds the depth controller keeps plain cost nothing.
  std::vector<int32_t> backlog_tokens_;
  std::vector<float> backlog_h_;
};

}  // namespace les
