#include "server/generation.h"

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace power::server {

struct Generation::Shared {
  struct Choice {
    std::string pending;
    std::vector<TokenLogprobs> pending_logprobs;
    bool started = false;  // produced a token (or ended)
    bool done = false;
    bool reported = false;  // its end went out in an Update
    Completion completion;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Choice> choices;
  std::atomic<bool> client_gone{false};
};

Generation::Generation(Runtime* runtime, ModelHandle model, std::vector<GenerateRequest> requests,
                       std::vector<int> leader, Tracker tracker)
    : runtime_(runtime),
      model_(std::move(model)),
      requests_(std::move(requests)),
      leader_(std::move(leader)),
      submitted_(requests_.size(), false),
      handles_(requests_.size()),
      keys_(requests_.size(), 0),
      tracker_(std::move(tracker)),
      shared_(std::make_shared<Shared>()) {
  leader_.resize(requests_.size(), -1);
  shared_->choices.resize(requests_.size());
  for (size_t i = 0; i < requests_.size(); ++i) {
    std::shared_ptr<Shared> sh = shared_;
    requests_[i].on_stream = [sh, i](const StreamEvent& e) {
      {
        std::lock_guard<std::mutex> lk(sh->mu);
        Shared::Choice& c = sh->choices[i];
        c.pending.append(e.text);
        if (e.logprobs != nullptr) c.pending_logprobs.push_back(*e.logprobs);
        c.started = true;
      }
      sh->cv.notify_all();
      return !sh->client_gone.load();
    };
    requests_[i].on_done = [sh, i](const Completion& done) {
      {
        std::lock_guard<std::mutex> lk(sh->mu);
        Shared::Choice& c = sh->choices[i];
        c.completion = done;
        c.done = true;
        c.started = true;
      }
      sh->cv.notify_all();
    };
  }
}

Generation::~Generation() {
  cancel_all();
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i]) (void)handles_[i]->wait();
  }
  finish();
}

Status Generation::submit(size_t i) {
  submitted_[i] = true;
  auto h = runtime_->submit(model_, std::move(requests_[i]));
  if (!h.ok()) {
    std::lock_guard<std::mutex> lk(shared_->mu);
    Shared::Choice& c = shared_->choices[i];
    c.completion.status = h.status();
    c.completion.finish = Finish::kError;
    c.done = true;
    c.started = true;
    return h.status();
  }
  handles_[i] = *h;
  if (tracker_.track) keys_[i] = tracker_.track(*h);
  return Status();
}

Status Generation::start() {
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (leader_[i] >= 0) continue;
    if (Status st = submit(i); !st.ok()) {
      cancel_all();
      return st;
    }
  }
  return Status();
}

Status Generation::poll(std::chrono::milliseconds interval, std::vector<Update>* updates) {
  updates->clear();
  std::vector<size_t> ready;
  {
    std::unique_lock<std::mutex> lk(shared_->mu);
    auto news = [&] {
      for (size_t i = 0; i < shared_->choices.size(); ++i) {
        const Shared::Choice& c = shared_->choices[i];
        if (!c.pending.empty() || !c.pending_logprobs.empty() || (c.done && !c.reported)) {
          return true;
        }
        if (!submitted_[i] && leader_[i] >= 0 &&
            shared_->choices[static_cast<size_t>(leader_[i])].started) {
          return true;
        }
      }
      return false;
    };
    shared_->cv.wait_for(lk, interval, news);
    for (size_t i = 0; i < shared_->choices.size(); ++i) {
      Shared::Choice& c = shared_->choices[i];
      if (!submitted_[i] && leader_[i] >= 0 &&
          shared_->choices[static_cast<size_t>(leader_[i])].started) {
        ready.push_back(i);
      }
      if (c.pending.empty() && c.pending_logprobs.empty() && (!c.done || c.reported)) continue;
      Update u;
      u.choice = i;
      u.text.swap(c.pending);
      u.logprobs.swap(c.pending_logprobs);
      if (c.done && !c.reported) {
        c.reported = true;
        u.finished = true;
      }
      updates->push_back(std::move(u));
    }
  }
  for (size_t i : ready) {
    const size_t lead = static_cast<size_t>(leader_[i]);
    bool lead_failed = false;
    {
      std::lock_guard<std::mutex> lk(shared_->mu);
      const Shared::Choice& l = shared_->choices[lead];
      lead_failed = l.done && !l.completion.status.ok();
    }
    if (lead_failed) {  // the same prompt would fail the same way: end it with the leader
      std::lock_guard<std::mutex> lk(shared_->mu);
      submitted_[i] = true;
      Shared::Choice& c = shared_->choices[i];
      c.completion.status = shared_->choices[lead].completion.status;
      c.completion.finish = Finish::kError;
      c.done = true;
      continue;
    }
    if (Status st = submit(i); !st.ok()) {
      cancel_all();
      return st;
    }
  }
  return Status();
}

bool Generation::all_done() const {
  std::lock_guard<std::mutex> lk(shared_->mu);
  for (size_t i = 0; i < shared_->choices.size(); ++i) {
    if (!shared_->choices[i].done || !shared_->choices[i].reported) return false;
  }
  return true;
}

Status Generation::first_error() const {
  std::lock_guard<std::mutex> lk(shared_->mu);
  for (const auto& c : shared_->choices) {
    if (c.done && !c.completion.status.ok()) return c.completion.status;
  }
  return Status();
}

const Completion& Generation::completion(size_t choice) const {
  std::lock_guard<std::mutex> lk(shared_->mu);
  return shared_->choices[choice].completion;
}

void Generation::cancel_all() {
  shared_->client_gone = client_gone_ || shared_->client_gone.load();
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i]) handles_[i]->cancel();
  }
  // Followers not yet submitted never will be.
  std::lock_guard<std::mutex> lk(shared_->mu);
  for (size_t i = 0; i < submitted_.size(); ++i) {
    if (submitted_[i]) continue;
    submitted_[i] = true;
    Shared::Choice& c = shared_->choices[i];
    c.completion.status = Status(StatusCode::kCancelled, "cancelled");
    c.completion.finish = Finish::kCancelled;
    c.done = true;
  }
}

std::vector<Completion> Generation::take_completions() {
  std::vector<Completion> out;
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i]) (void)handles_[i]->wait();
  }
  std::lock_guard<std::mutex> lk(shared_->mu);
  for (const auto& c : shared_->choices) out.push_back(c.completion);
  return out;
}

void Generation::finish() {
  if (finished_) return;
  finished_ = true;
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i] && tracker_.untrack) tracker_.untrack(keys_[i]);
  }
  if (on_finished) {
    std::vector<Completion> all;
    {
      std::lock_guard<std::mutex> lk(shared_->mu);
      for (size_t i = 0; i < shared_->choices.size(); ++i) {
        if (handles_[i]) all.push_back(shared_->choices[i].completion);
      }
    }
    on_finished(all, client_gone_ || shared_->client_gone.load());
  }
}

}  // namespace power::server
