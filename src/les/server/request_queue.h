// First-come first-served access to the engine: a request takes a ticket (refused when the
// waiting line is full), waits its turn (first in line and fewer than max_running running), runs,
// and leaves. A ticket dropped while waiting leaves the line.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace les::server {

class RequestQueue {
 public:
  // max_running: requests that run at once (the server's --parallel slots).
  explicit RequestQueue(int max_waiting, int max_running = 1);

  class Ticket {
   public:
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // Blocks until this ticket is first in line and a running place is free, calling keep_waiting about
    // every poll_ms meanwhile; returns false (and leaves the line) when it returns false.
    bool wait_turn(const std::function<bool()>& keep_waiting, int poll_ms = 500);
   private:
    friend class RequestQueue;
    Ticket(RequestQueue& q, uint64_t id) : q_(q), id_(id) {}
    RequestQueue& q_;
    uint64_t id_;
    bool running_ = false, left_ = false;
  };

  // A place in line, or null when max_waiting requests already wait.
  std::unique_ptr<Ticket> try_enter();
  int waiting() const;   // in line, not running
  bool busy() const { return running() > 0; }
  int running() const;   // requests running

 private:
  void leave(Ticket& t);
  const int max_waiting_, max_running_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> line_;  // waiting tickets, first in line first
  uint64_t next_id_ = 0;
  int running_ = 0;
};

}  // namespace les::server
