// Lanes and their Work; see lane.hpp.
#include "lane.hpp"

#include <pthread.h>
#include <sched.h>

#include <ATen/core/grad_mode.h>

namespace hoop_torch {

namespace {

// How long the lane's thread leaves a new item to a caller that may be
// about to wait for it; the few microseconds from queueing a call to
// Work.wait() in Python, with room for a descheduled caller.
constexpr auto kHeadStart = std::chrono::microseconds(100);

}  // namespace

HoopWork::HoopWork(int rank, c10d::OpType type,
                   std::vector<at::Tensor> outputs, Body body,
                   const Stream& stream, std::weak_ptr<Lane> lane,
                   int source_rank)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      body_(std::move(body)),
      stream_(stream),
      lane_(std::move(lane)),
      source_rank_(source_rank),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::ofTensors(), stream.devices())) {}

bool HoopWork::isCompleted() {
  return c10d::Work::isCompleted() && stream_.ended();
}

bool HoopWork::wait(std::chrono::milliseconds timeout) {
  // A lane that is gone ran everything queued on it first.
  if (std::shared_ptr<Lane> lane = lane_.lock())
    lane->wait(this, timeout);
  bool done = c10d::Work::wait(timeout);
  // As with NCCL, the stream current at wait() (maybe not the call's)
  // waits for the call's device work, which is queued, not done.
  synchronize();
  return done;
}

void HoopWork::synchronize() { stream_.block_current(); }

std::vector<at::Tensor> HoopWork::result() { return outputs_; }

int HoopWork::sourceRank() const {
  TORCH_CHECK(source_rank_ >= 0,
              "sourceRank() is only defined for the Work of a recv");
  return source_rank_;
}

c10::intrusive_ptr<c10::ivalue::Future> HoopWork::getFuture() {
  return future_;
}

void HoopWork::run(hoop_comm_t comm) {
  try {
    // Results are copied into the caller's tensors, which may be leaves
    // that require grad; like every backend, hoop writes their data.
    at::NoGradGuard no_grad;
    body_(CallContext{comm, stream_.handle()});
    stream_.record_end();
  } catch (...) {
    error_ = std::current_exception();
  }
  body_ = nullptr;  // its captured tensors are not needed any more
}

void HoopWork::complete() {
  finish(error_);
  if (error_)
    future_->setError(error_);
  else
    stream_.complete(*future_, c10::IValue(outputs_));
}

Lane::Lane(Opener open) : opener_(std::move(open)) {
  thread_ = std::thread([this] { loop(); });
}

Lane::Lane(hoop_comm_t comm) : comm_(comm) {
  thread_ = std::thread([this] { loop(); });
}

Lane::~Lane() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  // Nothing runs on it any more; a broken communicator is destroyed the
  // same way, and there is no one left to tell of a failure here.
  if (comm_ != nullptr)
    (void)hoop_comm_destroy(comm_);
}

void Lane::submit(const c10::intrusive_ptr<HoopWork>& work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work->queued_ = std::chrono::steady_clock::now();
    queue_.push_back(work);
  }
  changed_.notify_all();
}

void Lane::wait(HoopWork* work, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!work->done_) {
    if (!busy_ && !work->taken_ && !queue_.empty()) {
      waiter_ran_last_ = true;
      run_front(lock);
    } else if (timeout == kNoTimeout) {
      changed_.wait(lock);
    } else if (changed_.wait_until(lock, deadline) ==
                   std::cv_status::timeout &&
               !work->done_) {
      lock.unlock();
      throw_backend_error("hoop: Work.wait() timed out after " +
                          std::to_string(timeout.count()) + " ms");
    }
  }
}

void Lane::run_here(const c10::intrusive_ptr<HoopWork>& work) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (busy_ || !queue_.empty()) {
    if (!busy_)
      run_front(lock);
    else
      changed_.wait(lock);
  }
  execute(lock, work);
}

hoop_comm_t Lane::comm() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return comm_;
}

void Lane::loop() {
  // Woken by a submit, this thread must not preempt the submitter, which
  // for a synchronous call is about to wait and run the item itself:
  // SCHED_BATCH threads never preempt on wake-up.  Failing to set it
  // costs only speed.
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] {
      return !busy_ && (!queue_.empty() || stop_);
    });
    if (queue_.empty())
      return;  // stopping, and everything queued has run
    // While callers wait for their calls at once (synchronous calls), the
    // one that queued the front item is about to run it itself: starting
    // it here would only add a hand-over.  Calls nobody waits for (DDP's
    // buckets, waited for through their futures) start at once.
    auto due = queue_.front()->queued_ + kHeadStart;
    if (waiter_ran_last_ && !stop_ &&
        std::chrono::steady_clock::now() < due) {
      changed_.wait_until(lock, due);
      continue;
    }
    waiter_ran_last_ = false;
    run_front(lock);
  }
}

void Lane::run_front(std::unique_lock<std::mutex>& lock) {
  c10::intrusive_ptr<HoopWork> work = std::move(queue_.front());
  queue_.pop_front();
  execute(lock, work);
}

void Lane::execute(std::unique_lock<std::mutex>& lock,
                   const c10::intrusive_ptr<HoopWork>& work) {
  work->taken_ = true;
  busy_ = true;
  lock.unlock();
  try {
    work->run(open());
  } catch (...) {
    work->error_ = std::current_exception();
  }
  lock.lock();
  busy_ = false;
  lock.unlock();
  // The communicator is free: the next item may start on another thread
  // while this one's future runs its callbacks here.
  changed_.notify_all();
  work->complete();
  lock.lock();
  work->done_ = true;
  changed_.notify_all();
}

hoop_comm_t Lane::open() {
  if (comm_ != nullptr)
    return comm_;
  if (open_error_)
    std::rethrow_exception(open_error_);
  try {
    hoop_comm_t comm = opener_();
    std::lock_guard<std::mutex> lock(mutex_);
    comm_ = comm;
  } catch (...) {
    open_error_ = std::current_exception();
    throw;
  }
  return comm_;
}

}  // namespace hoop_torch
