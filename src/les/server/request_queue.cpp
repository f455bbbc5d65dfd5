#include "les/server/request_queue.h"

#include <algorithm>
#include <chrono>

namespace les::server {

RequestQueue::RequestQueue(int max_waiting, int max_running)
    : max_waiting_(max_waiting), max_running_(std::max(1, max_running)) {}

std::unique_ptr<RequestQueue::Ticket> RequestQueue::try_enter() {
  std::lock_guard<std::mutex> lk(mu_);
  if (static_cast<int>(line_.size()) >= max_waiting_) return nullptr;
  const uint64_t id = next_id_++;
  line_.push_back(id);
  return std::unique_ptr<Ticket>(new Ticket(*this, id));
}

int RequestQueue::waiting() const {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int>(line_.size());
}

int RequestQueue::running() const {
  std::lock_guard<std::mutex> lk(mu_);
  return running_;
}

bool RequestQueue::Ticket::wait_turn(const std::function<bool()>& keep_waiting, int poll_ms) {
  using clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lk(q_.mu_);
  auto next_poll = clock::now() + std::chrono::milliseconds(poll_ms);
  const auto my_turn = [this] { return q_.line_.front() == id_ && q_.running_ < q_.max_running_; };
  while (!my_turn()) {
    q_.cv_.wait_until(lk, next_poll);
    if (my_turn()) break;
    if (clock::now() < next_poll) continue;
    lk.unlock();
    const bool keep = !keep_waiting || keep_waiting();
    lk.lock();
    next_poll = clock::now() + std::chrono::milliseconds(poll_ms);
    if (!keep) {
      q_.line_.erase(std::find(q_.line_.begin(), q_.line_.end(), id_));
      left_ = true;
      q_.cv_.notify_all();
      return false;
    }
  }
  q_.line_.pop_front();
  ++q_.running_;
  running_ = true;
  q_.cv_.notify_all();  // the next in line may have a running place too
  return true;
}

RequestQueue::Ticket::~Ticket() { q_.leave(*this); }

void RequestQueue::leave(Ticket& t) {
  std::lock_guard<std::mutex> lk(mu_);
  if (t.running_) {
    --running_;
  } else if (!t.left_) {
    auto it = std::find(line_.begin(), line_.end(), t.id_);
    if (it != line_.end()) line_.erase(it);
  }
  t.left_ = true;
  cv_.notify_all();
}

}  // namespace les::server
