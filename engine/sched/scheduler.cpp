#include "sched/scheduler.hpp"

#include <algorithm>
#include <optional>

#include "core/log.hpp"

namespace kiln::sched {
namespace {

bool by_arrival(const Sequence* a, const Sequence* b) {
  return a->arrival < b->arrival;
}

uint32_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, uint32_t limit) {
  uint32_t n = 0;
  while (n < limit && n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

Scheduler::Scheduler(model::ModelHost& host, uint32_t token_budget, bool prefix_caching, uint32_t snapshot_interval)
    : host_(host),
      budget_(token_budget ? std::min(token_budget, host.limits().max_batch_tokens) : host.limits().max_batch_tokens) {
  if (prefix_caching) {
    cache::PrefixTree::Hooks hooks;
    hooks.drop = [this](cache::BlockSpan& span) { host_.drop(span); };
    hooks.drop_state = [this](int32_t slot) {
      model::StateSnapshot snap{slot, 0};
      host_.release_snapshot(snap);
    };
    hooks.frees = [this](const std::vector<int32_t>& ids) {
      for (size_t g = 0; g < ids.size(); ++g)
        if (ids[g] >= 0 && host_.cache().block_refs(g, ids[g]) == 1) return true;
      return false;
    };
    tree_ = std::make_unique<cache::PrefixTree>(host.limits().block_tokens, host.cache().layout().groups.size(),
                                                std::move(hooks));
    // A step's commit frees the sliding blocks that left the window during it; the tree holds
    // blocks after commits only, so a chunk at most window - block long loses none of them.
    // Hybrid models keep the cap on the delta-rule grid, where their snapshots are valid.
    const uint32_t bt = host.limits().block_tokens, sc = host.limits().recurrent ? host.limits().state_chunk : 0;
    for (const cache::KvGroup& g : host.cache().layout().groups)
      if (g.kind == KILN_CACHE_SLIDING_KV && g.window > bt) {
        uint32_t cap = (g.window - bt) / bt * bt;
        if (sc && cap >= sc) cap = cap / sc * sc;
        window_chunk_ = window_chunk_ ? std::min(window_chunk_, cap) : cap;
      }
    // Hybrid models resume only where a snapshot was taken: every snapshot_interval tokens of a
    // prefill (rounded to the delta-rule chunk), the cost of one more step per interval.
    if (sc && snapshot_interval) snapshot_interval_ = std::max(sc, snapshot_interval / sc * sc);
  }
}

Scheduler::~Scheduler() = default;

bool Scheduler::announce_blocks() {
  if (!tree_) return false;
  const cache::KvCache& kv = host_.cache();
  bool sliding = false;
  for (const cache::KvGroup& g : kv.layout().groups) sliding |= g.kind == KILN_CACHE_SLIDING_KV;
  std::function<bool(const cache::BlockSpan&)> usable;
  if (sliding) usable = [&kv](const cache::BlockSpan& span) { return kv.prefix_usable(span); };
  // The rule start() matches by: a snapshot at the hit for recurrent layers, the window for sliding ones.
  tree_->announce(std::move(usable), host_.limits().recurrent);
  return true;
}

std::vector<cache::PrefixTree::Event> Scheduler::take_events() {
  return tree_ ? tree_->take_events() : std::vector<cache::PrefixTree::Event>{};
}

std::vector<cache::PrefixTree::Announced> Scheduler::announced() const {
  return tree_ ? tree_->announced() : std::vector<cache::PrefixTree::Announced>{};
}

void Scheduler::reset_prefix_cache() {
  if (tree_) tree_->clear();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st{preemptions_, waiting_.size(), running_.size()};
  if (tree_) {
    const cache::PrefixTree::Stats& t = tree_->stats();
    st.prefix_lookups = lookups_;
    st.prefix_hits = hits_;
    st.cached_tokens = cached_tokens_;
    st.queried_tokens = queried_tokens_;
    st.cached_blocks = t.nodes;
    st.evicted_blocks = t.evicted_blocks;
    st.snapshots = t.snapshots;
    st.snapshot_bytes = t.snapshots * host_.cache().layout().state_bytes_per_slot;
    st.evicted_snapshots = t.evicted_snapshots;
  }
  return st;
}

cache::Status Scheduler::start(Sequence* s, uint64_t id, uint32_t* reused) {
  s->computed = s->indexed = 0;
  s->on_grid = true;
  *reused = 0;
  if (tree_ && s->tokens.size() > 1) {
    const bool recurrent = host_.limits().recurrent;
    const cache::KvCache& kv = host_.cache();
    // Recompute at least the last token: a full hit still needs this step's logits.
    cache::PrefixTree::Match m = tree_->match(
        s->cache_key, s->tokens, static_cast<uint32_t>(s->tokens.size()) - 1,
        [&](const cache::BlockSpan& span) { return kv.prefix_usable(span); }, recurrent);
    if (m.length) {
      const model::StateSnapshot snap{m.state_slot, m.length};
      if (host_.add_sequence(id, m.span, recurrent ? &snap : nullptr) == cache::Status::ok) {
        s->computed = s->indexed = *reused = m.length;
        return cache::Status::ok;
      }
    }
  }
  return host_.add_sequence(id);
}

bool Scheduler::wait_for_shared_prefix(const Sequence* s) {
  if (!tree_ || s->prompt_len < 2) return false;
  const model::HostLimits& lim = host_.limits();
  // A recurrent model resumes only at a snapshot: none when there are no snapshot slots, else at
  // the interval's multiples the running sequence's prefill stops at.
  if (lim.recurrent && (!lim.snapshot_slots || !snapshot_interval_)) return false;
  const uint32_t grid = lim.recurrent ? snapshot_interval_ : lim.block_tokens;
  for (const Sequence* r : running_) {
    if (r->cache_key != s->cache_key || r->computed >= r->prompt_len) continue;
    // The common prompt prefix r has yet to compute: worth waiting for when it goes a grid step
    // past what the tree holds for s already (the part r has computed is in the tree).
    const uint32_t shared =
        common_prefix(r->tokens, s->tokens, std::min(r->prompt_len, s->prompt_len - 1)) / grid * grid;
    if (shared >= r->computed + grid) return true;
  }
  return false;
}

void Scheduler::index(Sequence* s) {
  if (!tree_ || !s->host_seq || s->failed) return;
  const uint32_t bt = host_.limits().block_tokens;
  const uint32_t upto = std::min<uint32_t>(s->computed, static_cast<uint32_t>(s->tokens.size())) / bt * bt;
  if (upto > s->indexed) {
    tree_->insert(s->cache_key, s->tokens, host_.hold(s->host_seq, upto));
    s->indexed = upto;
  }
  const model::HostLimits& lim = host_.limits();
  const uint32_t at = s->computed;
  if (!lim.recurrent || !lim.state_chunk) return;
  // A step that ended off the delta-rule grid (a budget cut, a decode step) changed the state's
  // bits from those of an uninterrupted prefill: no snapshot of this sequence is a valid hit since.
  if (at % lim.state_chunk) s->on_grid = false;
  if (!s->on_grid || at % bt || at > upto) return;
  if (!tree_->wants_state(s->cache_key, s->tokens, at)) return;
  std::optional<model::StateSnapshot> snap = host_.snapshot(s->host_seq);
  if (!snap && tree_->evict_state()) snap = host_.snapshot(s->host_seq);
  if (snap) tree_->attach_state(s->cache_key, s->tokens, at, snap->slot);
}

void Scheduler::enqueue(Sequence* s) {
  s->arrival = next_arrival_++;
  s->computed = 0;
  s->host_seq = 0;
  s->started = false;
  s->cached = 0;
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
  if (p.rows.size() >= lim.max_batch_seqs) return false;
  const uint32_t remaining = static_cast<uint32_t>(s->tokens.size()) - s->computed;
  uint32_t chunk = std::min(remaining, budget);
  if (window_chunk_ && remaining > 1) chunk = std::min(chunk, window_chunk_);
  if (tree_ && lim.recurrent && lim.state_chunk && s->computed < s->prompt_len) {
    // Cut the prompt's prefill at a multiple of the delta-rule chunk, where a snapshot can be taken:
    // the last one before the chunk's end, or before the prompt's last token for the final chunk.
    uint32_t end = s->computed + chunk;
    if (snapshot_interval_) end = std::min(end, (s->computed / snapshot_interval_ + 1) * snapshot_interval_);
    const uint32_t aligned = (end < s->prompt_len ? end : s->prompt_len - 1) / lim.state_chunk * lim.state_chunk;
    if (aligned > s->computed && aligned < s->computed + chunk) chunk = aligned - s->computed;
  }
  while (chunk > 0) {
    cache::SeqStep st;
    st.seq = s->host_seq;
    st.tokens.assign(s->tokens.begin() + s->computed, s->tokens.begin() + s->computed + chunk);
    const bool reaches_end = s->computed + chunk == s->tokens.size();
    // Checked with a logits row: a step of part-way chunks alone has none, which the host refuses;
    // plan() gives the step one (not sampled) when no chunk reaches its end.
    st.logits = true;
    p.rows.push_back({s, std::move(st), reaches_end});
    const model::StepStatus status = host_.check(p.steps());
    if (status.ok()) {
      p.rows.back().step.logits = reaches_end;
      p.prefill_tokens += chunk;
      return true;
    }
    p.rows.pop_back();
    // Out of blocks: the prefix tree's least recently used blocks go first.
    if (status.status == cache::Status::out_of_blocks && tree_ && tree_->evict_leaf()) continue;
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
      if (s->tokens.size() - s->computed != 1 || p.rows.size() >= lim.max_batch_seqs) continue;
      p.rows.push_back({s, {s->host_seq, {s->tokens.back()}, true, false}, true});
    }
    p.decode_tokens = static_cast<uint32_t>(p.rows.size());
    if (!p.rows.empty()) {
      const model::StepStatus st = host_.check(p.steps());
      if (!st.ok()) {
        if (st.status == cache::Status::out_of_blocks && tree_ && tree_->evict_leaf()) continue;
        if (st.status == cache::Status::out_of_blocks && running_.size() > 1) {
          preempt(running_.back());
          continue;
        }
        // A lone sequence that cannot grow, or one the host refuses: give up on it.
        Sequence* bad = running_.back();
        for (const PlanRow& r : p.rows)
          if (st.seq && r.seq->host_seq == *st.seq) bad = r.seq;
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
    // 3. Admissions in arrival order; the first that does not fit stops the rest (no overtaking),
    // except that one waiting for a prefix another sequence is computing lets later ones pass.
    for (size_t i = 0; i < waiting_.size() && budget > 0 && p.rows.size() < lim.max_batch_seqs;) {
      Sequence* s = waiting_[i];
      if (wait_for_shared_prefix(s)) {
        ++i;
        continue;
      }
      const uint64_t id = next_seq_++;
      uint32_t reused = 0;
      s->host_seq = id;  // before start(): if restoring a snapshot throws, remove() still releases it
      if (start(s, id, &reused) != cache::Status::ok) {  // every slot taken
        s->host_seq = 0;
        break;
      }
      const uint32_t before = p.prefill_tokens;
      if (!try_add(p, s, budget)) {
        host_.release(id);
        s->host_seq = 0;
        s->computed = s->indexed = 0;
        if (s->failed) {
          waiting_.erase(waiting_.begin() + static_cast<long>(i));
          continue;
        }
        break;
      }
      // Admitted: what the cache gave counts now (a refused admission reused nothing).
      if (tree_ && s->tokens.size() > 1) {
        ++lookups_;
        hits_ += reused > 0;
        cached_tokens_ += reused;
        queried_tokens_ += s->tokens.size();
      }
      if (!s->started) s->cached = std::min(reused, s->prompt_len);
      s->started = true;
      budget -= p.prefill_tokens - before;
      waiting_.erase(waiting_.begin() + static_cast<long>(i));
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
    if (!p.empty() && std::none_of(p.rows.begin(), p.rows.end(), [](const PlanRow& r) { return r.step.logits; }))
      p.rows.back().step.logits = true;  // the host wants a logits row; this one is not sampled
    return p;
  }
}

void Scheduler::commit(const Plan& plan) {
  for (const PlanRow& r : plan.rows) {
    r.seq->computed += static_cast<uint32_t>(r.step.tokens.size());
    index(r.seq);
  }
}

void Scheduler::abort(const Plan& plan) {
  // The host rolled the step back; a model with recurrent layers may have lost the sequences'
  // state, so they recompute from the start like preempted ones.
  for (const PlanRow& r : plan.rows)
    if (r.seq->host_seq && std::find(running_.begin(), running_.end(), r.seq) != running_.end()) preempt(r.seq);
}

}  // namespace kiln::sched
