#include "serve/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.hpp"
#include "core/log.hpp"
#include "parse/event_mapper.hpp"
#include "parse/pipeline.hpp"
#include "sched/parallel.hpp"
#include "sched/scheduler.hpp"
#include "serve/kv_events.hpp"
#include "serve/prompt.hpp"
#include "text/stream_decoder.hpp"

#ifndef KILN_UNDER_TSAN
#include <tbb/flow_graph.h>
#endif

namespace kiln::serve {

using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

bool Engine::keeps_control_tokens(const GenRequest& r) const {
  return !r.skip_special || (r.chat && model_.parsers_read_control_tokens());
}

/** One sequence of one request, owned by the engine thread. */
struct Engine::Choice {
  std::shared_ptr<GenRequest> r;
  uint32_t index = 0;
  sched::Sequence seq;
  std::optional<sched::Sampler> sampler;
  std::optional<text::StreamDecoder> decoder;
  std::optional<parse::ParserPipeline> parsers;  ///< chat only
  std::optional<parse::EventMapper> mapper;      ///< chat only
  std::optional<grammar::Matcher> matcher;       ///< constrained decoding
  std::vector<uint64_t> mask;                    ///< the matcher's mask for this step
  std::vector<sched::Sampled> pending;           ///< sampled, not yet emitted (stop ids are not)
  uint32_t max_tokens = 0, generated = 0;
  Finish finish = Finish::none;  ///< decided (stop id, length, failure): no more steps
  std::string error;
  bool removed = false;  ///< out of the scheduler
  bool done = false;     ///< its last piece is out (or the request was cancelled)
  Clock::time_point first_token{};
};

/** A request after preparation: its prompts as ids, on the way to the engine thread. */
struct Engine::Prep {
  std::shared_ptr<GenRequest> r;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<bool> from_bos;  ///< per prompt: empty or BOS alone (the output starts a text)
  std::string prompt_tail;
  uint32_t max_tokens = 0;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  ///< constrained requests
  std::vector<std::unique_ptr<Choice>> choices;             ///< built here, so that a failure is the request's 400
};

struct Engine::Graph {
#ifndef KILN_UNDER_TSAN
  tbb::flow::graph g;
  tbb::flow::function_node<std::shared_ptr<GenRequest>> prepare;
  explicit Graph(Engine* e)
      : prepare(g, tbb::flow::unlimited, [e](const std::shared_ptr<GenRequest>& r) { e->prepare_guarded(r); }) {}
  ~Graph() {
    g.wait_for_all();
  }
#else
  explicit Graph(Engine*) {}  // TSan builds prepare inline (see sched/parallel.hpp)
#endif
};

struct Engine::State {
  State(model::ModelHost& host, const CacheConfig& c)
      : sched(host, 0, c.prefix_caching, static_cast<uint32_t>(c.snapshot_interval)) {}
  sched::Scheduler sched;
  std::vector<std::unique_ptr<Choice>> live;
  uint64_t steps = 0;
  double step_seconds = 0, host_seconds = 0;
  uint64_t readback_bytes = 0, candidate_steps = 0;
  uint64_t kernels = 0, barriers = 0;  ///< of the last step
  std::unique_ptr<KvEventPublisher> events;  ///< KV-cache events, when the server publishes them
  bool resync = false;                       ///< a batch was dropped: the next one sends the whole state
};

Engine::Engine(ServedModel& model, Metrics& metrics)
    : model_(model),
      metrics_(metrics),
      graph_(std::make_unique<Graph>(this)),
      st_(std::make_unique<State>(model.host(), model.config().cache)) {
  const char* env = std::getenv("KILN_DEVICE_SAMPLING");
  if (!(env && std::string_view(env) == "0")) {
    const uint32_t V = model.n_vocab();
    uint32_t excluded = 0;
    if (const uint64_t* ok = model.sampleable())
      for (uint32_t t = 0; t < V; ++t) excluded += ((ok[t >> 6] >> (t & 63)) & 1) ? 0 : 1;
    constexpr uint32_t kCandidates = 64, kMostCandidates = 1024;  // the sampler's top_k, the device's limit
    if (kCandidates + excluded <= kMostCandidates) {
      candidates_ = std::min(kCandidates + excluded, V);
      covered_ = candidates_ == V ? V : kCandidates;
    }
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  graph_.reset();  // waits for preparations in progress
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Engine::submit(std::shared_ptr<GenRequest> r) {
  preparing_.fetch_add(1);
#ifdef KILN_UNDER_TSAN
  prepare_guarded(r);
#else
  graph_->prepare.try_put(std::move(r));
#endif
}

// ---- preparation (TBB flow graph node, many at once)

void Engine::prepare_guarded(const std::shared_ptr<GenRequest>& r) {
  try {
    prepare(r);
  } catch (const std::exception& e) {  // an unexpected failure still answers the request
    std::lock_guard guard(r->mu);
    if (!r->prepared) {
      r->prepare_error = fmt::format("the request could not be prepared: {}", e.what());
      r->prepared = true;
      r->cv.notify_all();
    }
  }
  preparing_.fetch_sub(1);
}

uint64_t Engine::queued() const {
  return static_cast<uint64_t>(std::max<int64_t>(0, preparing_.load() + inbox_choices_.load()));
}

void Engine::prepare(const std::shared_ptr<GenRequest>& r) {
  std::lock_guard guard(r->mu);  // also orders this thread after the submitter (TSan sees it)
  const auto fail = [&](std::string message, std::string param) {
    r->prepare_error = std::move(message);
    r->prepare_param = std::move(param);
    r->prepared = true;
    r->cv.notify_all();
  };
  auto p = std::make_unique<Prep>();
  p->r = r;
  const char* prompt_param = r->chat ? "messages" : "prompt";
  try {
    Prompts prompts = prompts_of(model_, *r);
    p->prompts = std::move(prompts.ids);
    p->from_bos = std::move(prompts.from_bos);
    const std::string& text = prompts.chat_text;
    p->prompt_tail = text.substr(text.size() > 256 ? text.size() - 256 : 0);
  } catch (const PromptError& e) {
    return fail(e.what(), e.param);
  }
  const uint32_t ctx = model_.max_context();
  const uint64_t cap = std::min<uint64_t>(ctx, model_.cache_token_capacity());
  uint32_t longest = 0;
  for (const auto& ids : p->prompts) longest = std::max<uint32_t>(longest, static_cast<uint32_t>(ids.size()));
  // Too long for the context: OpenAI's code and wording, which clients and agents look for (they
  // compact the conversation and retry).
  const auto overflow = [&](std::string message, std::string param, uint64_t output, uint64_t limit) {
    r->prepare_code = "context_length_exceeded";
    r->overflow_prompt = longest;
    r->overflow_output = output;
    r->overflow_limit = limit;
    return fail(std::move(message), std::move(param));
  };
  if (r->max_prompt_tokens && longest > r->max_prompt_tokens)
    return overflow(fmt::format("This model's maximum context length is {} tokens for a prompt on this server "
                                "(server.limits.max_prompt_tokens). However, your {} resulted in {} tokens. Please "
                                "reduce the length of the {}.",
                                r->max_prompt_tokens, prompt_param, longest, prompt_param),
                    prompt_param, 0, r->max_prompt_tokens);
  if (longest >= cap)
    return overflow(
        fmt::format(
            "This model's maximum context length is {} tokens{}. However, your {} resulted in {} "
            "tokens, leaving no room for a generated token. Please reduce the length of the {}.",
            cap, cap < ctx ? fmt::format(" (its context is {}, limited by its KV cache memory)", ctx) : std::string(),
            prompt_param, longest, prompt_param),
        prompt_param, 0, cap - 1);
  const uint64_t room = cap - longest;
  if (r->max_tokens) {
    if (*r->max_tokens > room)
      return overflow(fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                  "({} in the {}, {} in the completion). Please reduce the length of the {} or "
                                  "completion (max_tokens).",
                                  cap, longest + *r->max_tokens, longest, prompt_param, *r->max_tokens, prompt_param),
                      "max_tokens", *r->max_tokens, cap);
    p->max_tokens = *r->max_tokens;
  } else {
    p->max_tokens = static_cast<uint32_t>(room);
    if (model_.default_max_tokens()) p->max_tokens = std::min(p->max_tokens, model_.default_max_tokens());
    if (r->max_output_tokens) p->max_tokens = std::min(p->max_tokens, r->max_output_tokens);
  }
  if (!r->constraint.empty()) {
    const ConstraintSpec& cs = r->constraint;
    try {
      ReasoningFrame frame;
      const std::string tool_parser = model_.tool_parser() ? model_.tool_parser()->name : "";
      if (r->chat && model_.reasoning_parser()) {
        frame = reasoning_frame(model_.reasoning_parser()->name, p->prompt_tail, r->parser.thinking);
        // A call opener ends reasoning in the parsers: inside the free block it would start a call
        // no grammar checks.
        if (const auto syntax = grammar::tool_syntax(tool_parser); syntax && r->parse_tools)
          frame.never = grammar::tool_call_openers(*syntax);
      }
      p->grammar = model_.grammars().get(cs, frame, tool_parser, keeps_control_tokens(*r));
    } catch (const grammar::GrammarError& e) {
      const std::string where = e.where().empty() ? cs.param : e.where();
      return fail(fmt::format("'{}' cannot be used for constrained decoding: {}", cs.param, e.what()), where);
    } catch (const HostError& e) {
      return fail(e.what(), cs.param);
    }
  }
  try {
    for (size_t pi = 0; pi < p->prompts.size(); ++pi)
      for (uint32_t j = 0; j < r->n; ++j) p->choices.push_back(make_choice(r, *p, pi, j));
  } catch (const grammar::GrammarError& e) {  // the matcher's start state (an empty language, a cap)
    return fail(fmt::format("'{}' cannot be used for constrained decoding: {}", r->constraint.param, e.what()),
                r->constraint.param);
  } catch (const std::exception& e) {
    return fail(fmt::format("cannot decode or parse this model's output: {}", e.what()), "model");
  }
  r->choices_total = static_cast<uint32_t>(p->prompts.size()) * r->n;
  for (const auto& ids : p->prompts) r->usage.prompt_tokens += ids.size();
  if (r->return_token_ids) r->prompt_token_ids = p->prompts;
  r->prepared = true;
  r->cv.notify_all();
  {
    std::lock_guard lock(mu_);
    inbox_choices_.fetch_add(static_cast<int64_t>(p->choices.size()));
    inbox_.push_back(std::move(p));
  }
  cv_.notify_all();
}

std::unique_ptr<Engine::Choice> Engine::make_choice(const std::shared_ptr<GenRequest>& r, const Prep& p, size_t prompt,
                                                    uint32_t j) const {
  auto c = std::make_unique<Choice>();
  c->r = r;
  c->index = static_cast<uint32_t>(prompt) * r->n + j;
  c->seq.owner = c.get();
  c->seq.tokens = p.prompts[prompt];
  c->seq.prompt_len = static_cast<uint32_t>(c->seq.tokens.size());
  c->seq.cache_key = r->cache_salt;  // one tree per model: the salt alone keeps tenants apart
  c->max_tokens = p.max_tokens;
  sched::SamplingParams sp = r->sampling;
  sp.seed += c->index;  // one stream per choice: n > 1 gives different samples, reproducibly
  c->sampler.emplace(sp, model_.n_vocab(), c->seq.tokens, model_.sampleable());
  if (const text::Tokenizer* tok = model_.tokenizer()) {
    text::StreamOptions so;
    so.stop = r->stop;
    so.skip_special = !keeps_control_tokens(*r);
    // After an empty prompt the output is the start of a text (SentencePiece drops its leading
    // space there); after a prompt it continues one.
    so.at_sequence_start = p.from_bos[prompt];
    c->decoder.emplace(*tok, so);
  }
  if (p.grammar) {
    c->matcher.emplace(p.grammar);
    c->mask.resize(p.grammar->tokens().mask_words());
  }
  if (r->chat) {
    ParserRequest pr = r->parser;
    pr.prompt_tail = p.prompt_tail;
    c->parsers.emplace(model_.reasoning_parser(), r->parse_tools ? model_.tool_parser() : nullptr, pr);
    c->mapper.emplace();
  }
  return c;
}

// ---- the engine thread

void Engine::admit() {
  std::vector<std::unique_ptr<Prep>> in;
  {
    std::unique_lock lock(mu_);
    if (st_->live.empty()) cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || !calls_.empty(); });
    in.swap(inbox_);
  }
  run_calls();
  for (auto& p : in) {
    for (auto& c : p->choices) {
      st_->sched.enqueue(&c->seq);
      st_->live.push_back(std::move(c));
    }
    inbox_choices_.fetch_sub(static_cast<int64_t>(p->choices.size()));
  }
}

void Engine::call(std::function<void()> fn) {
  auto task = std::make_shared<std::packaged_task<void()>>(std::move(fn));
  std::future<void> done = task->get_future();
  {
    std::lock_guard lock(mu_);
    if (stop_) throw_error("[serve] model '{}': the engine has stopped", model_.name());
    calls_.push_back([task] { (*task)(); });
  }
  cv_.notify_all();
  done.get();
}

void Engine::run_calls() {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard lock(mu_);
    calls.swap(calls_);
  }
  for (auto& fn : calls) fn();  // a packaged task: its exception goes to the caller
}

void Engine::start_events(std::unique_ptr<KvEventPublisher> publisher) {
  call([&] {
    st_->events = std::move(publisher);
    if (!st_->sched.announce_blocks()) {
      log::warn("[serve] model '{}': prefix caching is off, so its KV events only ever say AllBlocksCleared",
                model_.name());
      st_->events->publish({{cache::PrefixTree::Event::Kind::cleared, {}, std::nullopt, {}, {}}});
    }
    publish_events();  // the tree's first event: a clear
  });
}

void Engine::end_events() {
  call([&] {
    if (!st_->events) return;
    publish_events();
    st_->events->publish({{cache::PrefixTree::Event::Kind::cleared, {}, std::nullopt, {}, {}}});
    st_->events->flush(std::chrono::seconds(1));
    st_->events.reset();
  });
}

void Engine::reset_prefix_cache() {
  call([&] {
    st_->sched.reset_prefix_cache();
    publish_events();
  });
}

Engine::AnnouncedBlocks Engine::announced_blocks() {
  AnnouncedBlocks out;
  call([&] {
    publish_events();  // so that the listing and the last batch agree
    out.blocks = st_->sched.announced();
    if (st_->events) {
      out.topic = st_->events->topic();
      out.seq = st_->events->last_seq();
    }
  });
  return out;
}

void Engine::publish_events() {
  std::vector<cache::PrefixTree::Event> events = st_->sched.take_events();
  if (!st_->events) return;
  if (st_->resync) {
    // A batch was dropped (the publisher's queue was full): subscribers get the whole state again.
    events.clear();
    events.push_back({cache::PrefixTree::Event::Kind::cleared, {}, std::nullopt, {}, {}});
    for (cache::PrefixTree::Announced& a : st_->sched.announced())
      events.push_back({cache::PrefixTree::Event::Kind::stored, {a.hash}, a.parent, std::move(a.tokens), a.key});
  }
  if (events.empty()) return;
  const bool resync = st_->resync;
  st_->resync = st_->events->publish(std::move(events)) < 0;
  if (st_->resync && !resync)
    log::warn(
        "[serve] model '{}': the KV event queue is full (server.kv_events.max_queue_size); the next batch "
        "sends the whole cache state",
        model_.name());
}

void Engine::retire(bool cancellations) {
  for (auto& c : st_->live) {
    if (cancellations && !c->done && c->finish == Finish::none && c->r->cancelled.load(std::memory_order_relaxed)) {
      c->done = true;  // nobody reads its output any more
    }
    if (!c->removed && (c->finish != Finish::none || c->done || c->seq.failed)) {
      st_->sched.remove(&c->seq);
      c->removed = true;
    }
    if (c->seq.failed && c->finish == Finish::none) {
      c->finish = Finish::error;
      c->error = c->seq.failure;
    }
  }
  std::erase_if(st_->live, [](const std::unique_ptr<Choice>& c) { return c->done; });
}

/** The rows of one step's logits mapped to the choices that sample from them. */
struct Engine::PlanRows {
  const model::StepResult* result = nullptr;
  std::vector<std::pair<Choice*, uint32_t>> rows;  // choice, logits row
};

model::StepOutputs Engine::outputs_for(const sched::Plan& plan) const {
  model::StepOutputs out;
  if (!candidates_) return out;
  for (const sched::PlanRow& r : plan.rows) {
    if (!r.sample) continue;
    const Choice& c = *static_cast<const Choice*>(r.seq->owner);
    // A grammar's mask can leave any id allowed; a sampler that needs more than the candidates
    // (penalties, bias, greedy logprobs, no top_k, a top_k beyond them) needs the whole row.
    const size_t need = c.matcher ? 0 : c.sampler->candidates_needed();
    if (need == 0 || need > covered_) return out;
  }
  out.candidates = candidates_;
  return out;
}

void Engine::sample(const PlanRows& pr) {
  const uint32_t V = model_.n_vocab();
  const std::vector<int32_t>& stops = model_.stop_ids();
  sched::parallel_each(pr.rows.size(), [&](size_t i) {
    Choice& c = *pr.rows[i].first;
    if (c.finish != Finish::none || c.done) return;
    const size_t row = pr.rows[i].second;
    sched::Sampled s;
    if (const size_t k = pr.result->candidates) {
      // The step read back each row's best ids (outputs_for checked every sampler can use them).
      try {
        s = c.sampler->sample_candidates(pr.result->candidate_ids.data() + row * k,
                                         pr.result->candidate_logits.data() + row * k, k);
      } catch (const std::exception& e) {
        c.finish = Finish::error;
        c.error = fmt::format("sampling failed: {}", e.what());
        return;
      }
    } else if (const float* logits = pr.result->logits.data() + row * V; c.matcher) {
      try {
        c.matcher->fill_mask(c.mask.data());
        s = c.sampler->sample(logits, c.mask.data());
        if (!c.matcher->accept_token(s.token))
          throw std::runtime_error(fmt::format("the grammar refused token {} that its own mask allowed", s.token));
      } catch (const std::exception& e) {
        c.finish = Finish::error;
        c.error = fmt::format("constrained decoding failed: {}", e.what());
        return;
      }
    } else {
      s = c.sampler->sample(logits);
    }
    ++c.generated;
    // A stop token the grammar accepted ends the output even with ignore_eos (the grammar is done).
    const bool stop_id = (!c.r->ignore_eos && std::find(stops.begin(), stops.end(), s.token) != stops.end()) ||
                         std::find(c.r->stop_ids.begin(), c.r->stop_ids.end(), s.token) != c.r->stop_ids.end() ||
                         (c.matcher && c.matcher->is_ended());
    if (stop_id) {
      c.finish = Finish::stop;  // neither its text nor its logprob goes out (as OpenAI)
      return;
    }
    c.seq.tokens.push_back(s.token);
    c.pending.push_back(s);
    if (c.matcher && c.matcher->must_end())
      c.finish = Finish::stop;  // the grammar is complete and allows nothing more
    else if (c.generated >= c.max_tokens)
      c.finish = Finish::length;
  });
}

void Engine::emit() {
  std::vector<Choice*> work;
  for (auto& c : st_->live)
    if (!c->done && (!c->pending.empty() || c->finish != Finish::none)) work.push_back(c.get());
  sched::parallel_each(work.size(), [&](size_t i) {
    Choice& c = *work[i];
    try {
      emit_one(c);
    } catch (const std::exception& e) {  // this choice fails, nothing else
      Piece p;
      p.choice = c.index;
      p.error = fmt::format("emitting the output failed: {}", e.what());
      c.finish = Finish::error;
      c.done = true;
      c.r->push(std::move(p));
    }
  });
}

void Engine::emit_one(Choice& c) {
  {
    Piece piece;
    piece.choice = c.index;
    std::string text;
    const bool lp = c.r->sampling.top_logprobs >= 0;
    for (const sched::Sampled& p : c.pending) {
      if (c.decoder)
        text += c.decoder->push(p.token);
      else
        text += fmt::format("{} ", p.token);  // a model without a tokenizer answers in ids
      if (lp) piece.logprobs.push_back(p);
      if (c.r->return_token_ids) piece.token_ids.push_back(p.token);
      if (c.decoder && c.decoder->stopped()) {
        c.finish = Finish::stop;
        const int si = c.decoder->stop_index();
        if (si >= 0 && static_cast<size_t>(si) < c.r->stop.size())
          piece.stop_sequence = c.r->stop[static_cast<size_t>(si)];
        break;
      }
    }
    if (c.first_token == Clock::time_point{} && !c.pending.empty()) {
      c.first_token = Clock::now();
      if (c.index == 0)
        metrics_.first_token(model_.name(), std::chrono::duration<double>(c.first_token - c.r->arrival).count());
    }
    c.pending.clear();
    const bool last = c.finish != Finish::none;
    if (last && c.decoder) text += c.decoder->finish();
    if (c.parsers) {
      std::vector<ParseEvent> events;
      try {
        if (!text.empty()) c.parsers->feed(text, events);
        if (last) c.parsers->finish(events);
        for (const ParseEvent& e : events)
          if (auto d = c.mapper->on_event(e)) piece.deltas.push_back(std::move(*d));
        if (last)
          for (parse::Delta& d : c.mapper->flush()) piece.deltas.push_back(std::move(d));
      } catch (const std::exception& e) {
        c.finish = Finish::error;
        c.error = fmt::format("the output parser failed: {}", e.what());
      }
      if (last)
        for (const std::string& problem : c.mapper->check()) log::warn("[serve] {}: {}", c.r->id, problem);
    } else {
      piece.text = std::move(text);
    }
    if (last) {
      if (c.finish == Finish::error) {
        piece.error = c.error.empty() ? "generation failed" : c.error;
      } else {
        // tool_calls only for a call that ended normally; one cut by max_tokens is "length".
        piece.finish = c.mapper && !c.mapper->message().tool_calls.empty() && c.finish == Finish::stop
                           ? Finish::tool_calls
                           : c.finish;
      }
      const double tpot = c.generated > 1 ? since(c.first_token) / (c.generated - 1) : 0;
      if (c.generated > 1) metrics_.per_output_token(model_.name(), tpot);
      {
        std::lock_guard lock(c.r->mu);
        c.r->usage.completion_tokens += c.generated;
        if (c.index % c.r->n == 0) c.r->usage.cached_tokens += c.seq.cached;  // once per prompt
      }
      metrics_.tokens(model_.name(), c.index == 0 ? c.r->usage.prompt_tokens : 0, c.generated);
      c.done = true;
    }
    if (last || !piece.text.empty() || !piece.deltas.empty() || !piece.logprobs.empty() || !piece.token_ids.empty())
      c.r->push(std::move(piece));
  }
}

void Engine::publish_gauges(double step_s, double host_s) {
  const model::ModelHost& h = model_.host();
  const cache::KvCache& kv = h.cache();
  EngineGauges g;
  const sched::SchedulerStats ss = st_->sched.stats();
  g.waiting = ss.waiting;
  g.running = ss.running;
  g.preemptions = ss.preemptions;
  g.prefix_lookups = ss.prefix_lookups;
  g.prefix_hits = ss.prefix_hits;
  g.cached_tokens = ss.cached_tokens;
  g.cached_blocks = ss.cached_blocks;
  g.evicted_blocks = ss.evicted_blocks;
  g.snapshots = ss.snapshots;
  g.snapshot_bytes = ss.snapshot_bytes;
  g.evicted_snapshots = ss.evicted_snapshots;
  g.kv_token_capacity = kv.layout().token_capacity();
  g.kv_bytes_per_token = kv.layout().bytes_per_token();
  // vLLM's usage: blocks only the prefix tree holds count as free (an eviction away from use);
  // pools of different groups weighted by their bytes.
  double used_bytes = 0, all_bytes = 0;
  for (size_t gi = 0; gi < kv.layout().groups.size(); ++gi) {
    const cache::KvGroup& grp = kv.layout().groups[gi];
    const uint64_t n = grp.n_blocks, f = kv.free_blocks(gi);
    g.kv_blocks_free += f;
    g.kv_blocks_used += n - f;
    used_bytes += double(grp.bytes_per_block) * double(n - f - kv.idle_blocks(gi));
    all_bytes += double(grp.bytes_per_block) * double(n);
  }
  g.kv_usage = all_bytes > 0 ? used_bytes / all_bytes : 0;
  g.block_tokens = kv.layout().block_tokens;
  g.queried_tokens = ss.queried_tokens;
  st_->steps += step_s > 0;
  st_->step_seconds += step_s;
  st_->host_seconds += host_s;
  g.steps = st_->steps;
  g.step_seconds = st_->step_seconds;
  g.host_seconds = st_->host_seconds;
  g.readback_bytes = st_->readback_bytes;
  g.candidate_steps = st_->candidate_steps;
  g.kernels = st_->kernels;
  g.barriers = st_->barriers;
  metrics_.gauges(model_.name(), g);
  if (step_s > 0) metrics_.step(model_.name(), step_s, host_s);
}

void Engine::loop() {
  publish_gauges(0, 0);  // the model's gauges exist before its first request (routers read them)
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stop_) break;
    }
    try {
      iterate();
    } catch (const std::exception& e) {
      // A bug, not a bad request (those fail alone). Every request here ends with an error rather
      // than the process; the engine starts over with an empty batch.
      log::error("[serve] model '{}': the engine failed: {}; ending its {} running request(s)", model_.name(), e.what(),
                 st_->live.size());
      for (auto& c : st_->live) {
        if (!c->done) {
          Piece p;
          p.choice = c->index;
          p.error = std::string("the engine failed: ") + e.what();
          c->r->push(std::move(p));
        }
        try {
          if (!c->removed) st_->sched.remove(&c->seq);
        } catch (const std::exception&) {
        }
      }
      st_->live.clear();
    }
  }
  shutdown();
}

void Engine::iterate() {
  model::ModelHost& host = model_.host();
  {
    admit();
    retire(true);
    const Clock::time_point t0 = Clock::now();
    sched::Plan plan = st_->sched.plan();
    retire(false);  // sequences the plan gave up on (none of them is in the plan)
    if (plan.empty()) {
      emit();
      retire(true);
      publish_events();
      publish_gauges(0, 0);
      if (!st_->live.empty() && st_->sched.idle()) return;
      if (!st_->live.empty()) {
        // Nothing fits right now and nothing is in flight: should not happen (the scheduler
        // preempts); wait a little rather than spin.
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(5));
      }
      return;
    }
    const model::StepOutputs outputs = outputs_for(plan);
    double host_s = since(t0);
    model::StepTicket ticket;
    model::StepResult res;
    bool ok = true, ran = true;
    std::string failure;
    std::optional<uint64_t> refused;  // the sequence a refused step names
    try {
      const model::StepStatus s = host.submit(plan.steps(), &ticket, outputs);
      if (!s.ok()) {
        ok = ran = false;
        failure = s.message;
        refused = s.seq;
      }
    } catch (const std::exception& e) {
      ok = false;
      failure = e.what();
    }
    const Clock::time_point te = Clock::now();
    emit();  // the previous step's tokens, while the device runs this one
    host_s += since(te);
    if (ok) {
      try {
        host.finish(ticket, &res);
      } catch (const std::exception& e) {
        ok = false;
        failure = e.what();
      }
    }
    const Clock::time_point ts = Clock::now();
    if (!ok && !ran) {
      // Refused before anything ran (nothing changed): the sequence it names fails, the others
      // are planned again. The scheduler checked the step, so this is a bug to log.
      log::error("[serve] model '{}': the host refused a planned step: {}", model_.name(), failure);
      for (const sched::PlanRow& r : plan.rows)
        if (!refused || r.seq->host_seq == *refused) {
          r.seq->failed = true;
          r.seq->failure = "the model host refused this request's step: " + failure;
        }
    } else if (!ok) {
      log::error("[serve] model '{}': a step failed: {}", model_.name(), failure);
      st_->sched.abort(plan);
      for (const sched::PlanRow& r : plan.rows) {
        r.seq->failed = true;
        r.seq->failure = "the step running this request failed on the device: " + failure;
      }
    } else {
      st_->sched.commit(plan);
      st_->readback_bytes += res.readback_bytes;
      st_->candidate_steps += res.candidates > 0;
      st_->kernels = res.kernels;
      st_->barriers = res.barriers;
      PlanRows pr;
      pr.result = &res;
      // Logits rows come in the plan's order; a sampled step's row is its last.
      uint32_t row = 0;
      for (const sched::PlanRow& r : plan.rows) {
        const cache::SeqStep& st = r.step;
        row += st.tokens.empty() ? 0 : st.logits_all ? static_cast<uint32_t>(st.tokens.size()) : st.logits ? 1 : 0;
        if (!r.sample) continue;
        if (row == 0 || row > res.rows || res.row_seq[row - 1] != st.seq) {
          log::error("[serve] model '{}': the step's logits rows do not follow its plan", model_.name());
          r.seq->failed = true;
          r.seq->failure = "the model host returned no logits row for this request";
          continue;
        }
        pr.rows.push_back({static_cast<Choice*>(r.seq->owner), row - 1});
      }
      sample(pr);
    }
    publish_events();  // after the commit: what the step wrote is in the tree
    host_s += since(ts);
    publish_gauges(since(t0), host_s);
  }
}

void Engine::shutdown() {
  run_calls();  // whoever waits on a call gets its answer
  // Whoever still waits gets an error rather than silence.
  for (auto& c : st_->live)
    if (!c->done) {
      Piece p;
      p.choice = c->index;
      p.error = "the server is shutting down";
      c->r->push(std::move(p));
    }
  std::vector<std::unique_ptr<Prep>> left;
  {
    std::lock_guard lock(mu_);
    left.swap(inbox_);
  }
  for (auto& p : left) {  // pushed outside mu_: prepare() takes a request's mu before mu_
    Piece piece;
    piece.error = "the server is shutting down";
    for (uint32_t i = 0; i < p->r->choices_total; ++i) {
      piece.choice = i;
      p->r->push(piece);
    }
  }
}

}  // namespace kiln::serve
