// KV-cache events in vLLM's wire format (vllm/distributed/kv_events.py), which routers that score
// replicas by their cache contents subscribe to (llm-d's KV-cache indexer): a ZeroMQ PUB socket
// sending [topic, sequence number (8 bytes, big-endian), msgpack payload] per batch, the payload
// [ts, [event, ...], 0] with BlockStored / BlockRemoved / AllBlocksCleared as tagged arrays, and
// an optional ROUTER socket replaying the last batches from a sequence number.
//
// One publisher per served model. The engine thread hands it a batch per step (publish never
// blocks: a bounded queue, a thread that encodes and sends); sequence numbers are given as batches
// are accepted, so the engine knows the number of the batch that holds its latest state.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/prefix_tree.hpp"
#include "core/config.hpp"

namespace kiln::serve {

class KvEventPublisher {
 public:
  /**
   * Opens the sockets at `cfg`'s endpoints with their ports raised by `port_offset` (a server's
   * n-th model, as vLLM offsets data-parallel ranks); throws with a message naming the endpoint
   * when one cannot be opened.
   */
  KvEventPublisher(const ServerConfig::KvEvents& cfg, std::string topic, int port_offset, uint32_t block_tokens);
  ~KvEventPublisher();  ///< sends what is queued, gives the socket a second to deliver, closes
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  /**
   * Queues one batch and returns its sequence number; -1 when the queue is full (the batch is
   * dropped: the caller must send its whole state again, starting with a clear).
   */
  int64_t publish(std::vector<cache::PrefixTree::Event> events);
  /** The sequence number of the last batch accepted (-1: none). */
  int64_t last_seq() const;
  const std::string& topic() const { return topic_; }
  /** Waits (up to `limit`) until every accepted batch is on the socket. */
  void flush(std::chrono::milliseconds limit);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string topic_;
};

/** One batch's msgpack payload: [ts, [event, ...], 0] as vLLM's KVEventBatch encodes it. */
std::string encode_kv_event_batch(double ts, const std::vector<cache::PrefixTree::Event>& events,
                                  uint32_t block_tokens);

/** `endpoint` with its port raised by `offset` (tcp:// only; ipc:// and inproc:// get "_N"). */
std::string offset_endpoint(const std::string& endpoint, int offset);

/** vLLM's rule: bound when the address has '*', '::', ipc:// or inproc://, else connected. */
bool binds(const std::string& endpoint);

/** The topic for `model`: `pattern` ("" -> "kv@{host}:{port}@{model}") with its fields filled. */
std::string kv_event_topic(const std::string& pattern, const std::string& host, int port, const std::string& model);

}  // namespace kiln::serve
