#include "sched/scheduler.hpp"

#include <algorithm>

#include "core/log.hpp"

namespace kiln::sched {
namespace {

bool by_arrival(const Sequence* a, const Sequence* b) {
  return a->arrival < b->arrival;
}

}  // namespace

Scheduler::Scheduler(model::ModelHost& host, uint32_t token_budget)
    : host_(host),
      budget_(token_budget ? std::min(token_budget, host.limits().max_batch_tokens) : host.limits().max_batch_tokens) {}

void Scheduler::enqueue(Sequence* s) {
  s->arrival = next_arrival_++;
  s->computed = 0;
  s->host_seq = 0;
  waiting_.push_back(s);
}

void Scheduler::remove(Sequence* s) {
  if (s->host_seq) host_.release(s->host_seq);
  s->host_seq = 0;
  std::erase(running_, s);
  std::erase(waiting_, s);
}

void Scheduler::preempt(Sequence* s) {
  log::debug("[sched] preempting a sequence at {} tokens (KV cache full)", s->tokens.size());
  host_.release(s->host_seq);
  s->host_seq = 0;
  s->computed = 0;
  ++s->preemptions;
  ++preemptions_;
  std::erase(running_, s);
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, by_arrival), s);
}

bool Scheduler::try_add(Plan& p, Sequence* s, uint32_t budget) {
  const model::HostLimits& lim = host_.limits();
  if (p.steps.size() >= lim.max_batch_seqs) return false;
  const uint32_t remaining = static_cast<uint32_t>(s->tokens.size()) - s->computed;
  uint32_t chunk = std::min(remaining, budget);
  while (chunk > 0) {
    cache::SeqStep st;
    st.seq = s->host_seq;
    st.tokens.assign(s->tokens.begin() + s->computed, s->tokens.begin() + s->computed + chunk);
    const bool reaches_end = s->computed + chunk == s->tokens.size();
    // Checked with a logits row: a step of part-way chunks alone has none, which the host refuses;
    // plan() gives the step one (not sampled) when no chunk reaches its end.
    st.logits = true;
    p.steps.push_back(std::move(st));
    const model::StepStatus status = host_.check(p.steps);
    if (status.ok()) {
      p.steps.back().logits = reaches_end;
      p.seqs.push_back(s);
      p.sample.push_back(reaches_end);
      p.prefill_tokens += chunk;
      return true;
    }
    p.steps.pop_back();
    if (status.status != cache::Status::out_of_blocks) {
      if (status.status != cache::Status::too_many_tokens && status.status != cache::Status::too_many_seqs) {
        s->failed = true;
        s->failure = status.message;
      }
      return false;
    }
    // Out of blocks: a smaller chunk may still fit in what is free.
    if (chunk <= lim.block_tokens) return false;
    chunk = std::max(lim.block_tokens, chunk / 2);
  }
  return false;
}

Plan Scheduler::plan() {
  const model::HostLimits& lim = host_.limits();
  for (;;) {
    // Sequences the scheduler gave up on leave the running set (the engine removes them).
    for (Sequence* s : std::vector<Sequence*>(running_))
      if (s->failed) remove(s);
    Plan p;
    // 1. Running decodes, oldest first.
    for (Sequence* s : running_) {
      if (s->tokens.size() - s->computed != 1 || p.steps.size() >= lim.max_batch_seqs) continue;
      p.steps.push_back({s->host_seq, {s->tokens.back()}, true, false});
      p.seqs.push_back(s);
      p.sample.push_back(true);
    }
    p.decode_tokens = static_cast<uint32_t>(p.steps.size());
    if (!p.steps.empty()) {
      const model::StepStatus st = host_.check(p.steps);
      if (!st.ok()) {
        if (st.status == cache::Status::out_of_blocks && running_.size() > 1) {
          preempt(running_.back());
          continue;
        }
        // A lone sequence that cannot grow, or one the host refuses: give up on it.
        Sequence* bad = running_.back();
        for (Sequence* s : p.seqs)
          if (st.seq && s->host_seq == *st.seq) bad = s;
        bad->failed = true;
        bad->failure = st.message.empty() ? "the KV cache cannot hold this sequence" : st.message;
        continue;
      }
    }
    uint32_t budget = budget_ > p.decode_tokens ? budget_ - p.decode_tokens : 0;
    // 2. Running sequences part-way through their prompt (or recomputing after preemption).
    for (Sequence* s : running_) {
      if (budget == 0) break;
      if (s->tokens.size() - s->computed <= 1) continue;
      const uint32_t before = p.prefill_tokens;
      if (try_add(p, s, budget)) budget -= p.prefill_tokens - before;
    }
    // 3. Admissions in arrival order; the first that does not fit stops the rest (no overtaking).
    while (!waiting_.empty() && budget > 0 && p.steps.size() < lim.max_batch_seqs) {
      Sequence* s = waiting_.front();
      const uint64_t id = next_seq_++;
      if (host_.add_sequence(id) != cache::Status::ok) break;  // every slot taken
      s->host_seq = id;
      const uint32_t before = p.prefill_tokens;
      if (!try_add(p, s, budget)) {
        host_.release(id);
        s->host_seq = 0;
        if (s->failed) {
          waiting_.pop_front();
          continue;
        }
        break;
      }
      budget -= p.prefill_tokens - before;
      waiting_.pop_front();
      running_.insert(std::upper_bound(running_.begin(), running_.end(), s, by_arrival), s);
    }
    if (p.empty() && !running_.empty()) {
      // Part-way prefills hold every free block and none can go on: free the youngest.
      if (running_.size() > 1 || !waiting_.empty()) {
        preempt(running_.back());
        continue;
      }
      Sequence* s = running_.back();
      if (!s->failed) {
        s->failed = true;
        s->failure = "the KV cache cannot hold this sequence; raise cache.memory or shorten the request";
      }
      return p;
    }
    if (!p.empty() && std::none_of(p.steps.begin(), p.steps.end(), [](const cache::SeqStep& s) { return s.logits; }))
      p.steps.back().logits = true;  // the host wants a logits row; this one is not sampled
    return p;
  }
}

void Scheduler::commit(const Plan& plan) {
  for (size_t i = 0; i < plan.steps.size(); ++i)
    plan.seqs[i]->computed += static_cast<uint32_t>(plan.steps[i].tokens.size());
}

void Scheduler::abort(const Plan& plan) {
  // The host rolled the step back; a model with recurrent layers may have lost the sequences'
  // state, so they recompute from the start like preempted ones.
  for (Sequence* s : plan.seqs)
    if (s->host_seq && std::find(running_.begin(), running_.end(), s) != running_.end()) preempt(s);
}

}  // namespace kiln::sched
