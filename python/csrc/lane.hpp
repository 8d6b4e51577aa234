// A lane is one hoop communicator and the thread that makes its calls.
//
// hoop lets one thread at a time call into a communicator and its calls on
// host memory block until done, so a lane runs the work queued on it one
// item at a time, in queue order, on its own thread: the caller gets a
// Work back at once and computes on while the call runs (DDP's backward
// overlapping its gradient all-reduce). A thread that waits for an item
// the lane has not started runs it (and whatever is queued before it)
// itself, so a synchronous call costs no hand-over between threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "device.hpp"
#include "torch_api.hpp"

namespace hoop_torch {

class Lane;

// What a body needs to make its hoop calls.
struct CallContext {
  hoop_comm_t comm;
  hoop_stream_t stream;  // NULL for host tensors
};

// Raises hoop's error of a call `what` that failed, as Python sees it.
inline void check(hoop_result_t result, const CallContext& call,
                  const char* what) {
  if (result != HOOP_SUCCESS)
    throw_hoop_error(call.comm, result, what);
}

// One queued call.  Its body runs once, on the lane's thread or on a thread
// that waits for it; then the Work completes, with the body's exception if
// it threw, and so does its future.
class HoopWork : public c10d::Work {
 public:
  using Body = std::function<void(const CallContext&)>;

  HoopWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
           Body body, const Stream& stream, std::weak_ptr<Lane> lane,
           int source_rank);

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  friend class Lane;

  // Runs the body; keeps what it threw for complete().
  void run(hoop_comm_t comm);
  // Marks the Work and its future done; runs the future's callbacks.
  void complete();

  std::vector<at::Tensor> outputs_;
  Body body_;
  Stream stream_;
  std::weak_ptr<Lane> lane_;
  int source_rank_;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  // Under the lane's mutex: when it was queued, taken off the queue to
  // run, and finished.
  std::chrono::steady_clock::time_point queued_;
  bool taken_ = false;
  bool done_ = false;
};

class Lane {
 public:
  // Makes the lane's communicator; it throws to refuse.  Called once, by
  // the first thread that runs an item, so that a lane whose peer is late
  // to join blocks no caller.
  using Opener = std::function<hoop_comm_t()>;

  explicit Lane(Opener open);
  // A lane over a communicator already made.
  explicit Lane(hoop_comm_t comm);
  // Lets the queued items run, stops the thread and destroys the
  // communicator.
  ~Lane();

  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  void submit(const c10::intrusive_ptr<HoopWork>& work);

  // Returns once `work` is done: runs it here when the lane is idle and
  // it is still queued; otherwise waits, up to `timeout` (0: no limit).
  void wait(HoopWork* work, std::chrono::milliseconds timeout);

  // Runs `work` on this thread once everything queued before it has run;
  // for calls that hoop itself queues on a CUDA stream.
  void run_here(const c10::intrusive_ptr<HoopWork>& work);

  // The communicator if it is open, else NULL; for the queries, which
  // hoop answers from any thread.
  hoop_comm_t comm() const;

 private:
  void loop();
  // With the lock held and the lane idle: runs the front item on this
  // thread, releasing the lock meanwhile.
  void run_front(std::unique_lock<std::mutex>& lock);
  // The same for `work`, already off the queue.
  void execute(std::unique_lock<std::mutex>& lock,
               const c10::intrusive_ptr<HoopWork>& work);
  // With the lane claimed by this thread: the communicator, opened on
  // first use.  Throws what opening threw, every time.
  hoop_comm_t open();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<c10::intrusive_ptr<HoopWork>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  // Whether the last item run was run by a thread waiting for it.
  bool waiter_ran_last_ = false;
  Opener opener_;
  hoop_comm_t comm_ = nullptr;
  std::exception_ptr open_error_;
  std::thread thread_;
};

}  // namespace hoop_torch
