// The serving engine of one model: continuous batching around the serial scheduling step.
//
//   HTTP threads ──submit──▶ [prepare: template, tokenize, validate]  TBB flow graph node, parallel
//                                   │ (inbox)
//   engine thread:  plan(t+1) ─▶ submit(t+1) ─▶ emit(t) ─▶ finish(t+1) ─▶ sample(t+1) ─▶ …
//                                               parallel     device wait    parallel per sequence
//
// One thread owns the scheduler and the model host. After a step's logits come back, each
// sequence's logits processing and sampling run in parallel (each sequence has its own sampler and
// seeded RNG); the next step is planned and submitted; then, while the device runs it, each
// sequence's new tokens are detokenized, checked against stop strings, run through the reasoning and
// tool-call parsers and published to its request, in parallel. A sequence that a stop string ends
// during emit is in the step already submitted: its row is ignored and it leaves at the next plan.
// Cancelled requests (client gone) leave at the next plan too, freeing their blocks and slot.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/prefix_tree.hpp"
#include "serve/metrics.hpp"
#include "serve/request.hpp"
#include "serve/served_model.hpp"

namespace kiln::sched {
struct Plan;
struct Sequence;
}  // namespace kiln::sched

namespace kiln::serve {

class Engine {
 public:
  Engine(ServedModel& model, Metrics& metrics);
  ~Engine();  ///< stops the thread; requests still running end with an error piece
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /** Queues a request for preparation; the caller then waits on the request (wait_prepared, next). */
  void submit(std::shared_ptr<GenRequest> request);
  ServedModel& model() { return model_; }

  /** Sequences admitted but not running yet: being prepared or waiting for the scheduler (now). */
  uint64_t queued() const;

  // KV-cache events (serve/kv_events.hpp). Each runs on the engine thread and returns when done.
  /** Publishes the prefix cache's servable blocks from now on, starting with a clear. */
  void start_events(std::unique_ptr<class KvEventPublisher> publisher);
  /** Publishes a last clear (the replica is going away), sends it and stops publishing. */
  void end_events();
  /** Drops every cached prefix no running sequence holds (published as a clear). */
  void reset_prefix_cache();
  /** The announced blocks, the topic, and the sequence number of the batch that holds them. */
  struct AnnouncedBlocks {
    std::string topic;
    int64_t seq = -1;
    std::vector<cache::PrefixTree::Announced> blocks;
  };
  AnnouncedBlocks announced_blocks();

 private:
  struct Choice;
  struct Prep;
  void prepare_guarded(const std::shared_ptr<GenRequest>& r);
  void prepare(const std::shared_ptr<GenRequest>& r);
  std::unique_ptr<Choice> make_choice(const std::shared_ptr<GenRequest>& r, const Prep& p, size_t prompt,
                                      uint32_t j) const;
  /** The detokenizer keeps control tokens: asked for, or the model's parsers read them. */
  bool keeps_control_tokens(const GenRequest& r) const;
  void loop();
  void iterate();  ///< one step: admit, plan, submit, emit, finish, sample
  void shutdown();
  void admit();
  struct PlanRows;
  void sample(const PlanRows& rows);
  /** Candidates instead of logits rows when every sampler of the step can pick from them exactly. */
  model::StepOutputs outputs_for(const sched::Plan& plan) const;
  void emit();
  void emit_one(Choice& c);
  /** Takes finished, failed and (with `cancellations`) cancelled sequences out of the scheduler and
   *  frees the choices whose last piece is out. Never between plan() and the step's end with
   *  `cancellations`: the plan points at its sequences. */
  void retire(bool cancellations);
  void publish_gauges(double step_s, double host_s);
  /** Sends the step's prefix-cache events to the publisher (or the whole state after an overflow). */
  void publish_events();
  /** Runs `fn` on the engine thread and waits for it (its exception rethrown here). */
  void call(std::function<void()> fn);
  void run_calls();

  ServedModel& model_;
  Metrics& metrics_;
  /** Candidates per row a step reads back when its samplers allow (0: whole rows always): 64 plus
   *  the ids no request may sample, which can rank among the best. KILN_DEVICE_SAMPLING=0: 0. */
  uint32_t candidates_ = 0;
  uint32_t covered_ = 0;  ///< the sampleable ids among them, at least (n_vocab when they are all)
  struct Graph;
  std::unique_ptr<Graph> graph_;  ///< the TBB flow graph of request preparation

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Prep>> inbox_;  ///< prepared, waiting for the engine thread
  std::vector<std::function<void()>> calls_;  ///< call(): run by the engine thread between steps
  bool stop_ = false;
  std::atomic<int64_t> preparing_{0}, inbox_choices_{0};  ///< queued(): requests in preparation, inbox choices

  // Engine thread only.
  struct State;
  std::unique_ptr<State> st_;
  std::thread thread_;
};

}  // namespace kiln::serve
