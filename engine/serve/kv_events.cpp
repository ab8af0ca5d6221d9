#include "serve/kv_events.hpp"

#include <fmt/format.h>
#include <msgpack.h>
#include <unistd.h>
#include <zmq.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"

namespace kiln::serve {

namespace {

/** vLLM's name for the memory tier of its (GPU) KV cache; kiln's cache lives on its device. */
constexpr std::string_view kMedium = "GPU";

void pack_str(msgpack_packer* pk, std::string_view s) {
  msgpack_pack_str(pk, s.size());
  msgpack_pack_str_body(pk, s.data(), s.size());
}

std::string seq_bytes(int64_t seq) {
  std::string b(8, '\0');
  const uint64_t u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<char>(u >> (56 - 8 * i));
  return b;
}

/** Sends `frames` as one multipart message; false when the socket refused (logged by the caller). */
bool send_frames(void* socket, const std::vector<std::string_view>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = (i + 1 < frames.size() ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT;
    if (zmq_send(socket, frames[i].data(), frames[i].size(), flags) < 0) return false;
  }
  return true;
}

}  // namespace

std::string encode_kv_event_batch(double ts, const std::vector<cache::PrefixTree::Event>& events,
                                  uint32_t block_tokens) {
  using Kind = cache::PrefixTree::Event::Kind;
  msgpack_sbuffer buf;
  msgpack_sbuffer_init(&buf);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
  msgpack_pack_array(&pk, 3);  // KVEventBatch: ts, events, data_parallel_rank
  msgpack_pack_double(&pk, ts);
  msgpack_pack_array(&pk, events.size());
  for (const cache::PrefixTree::Event& e : events) {
    switch (e.kind) {
      case Kind::cleared:
        msgpack_pack_array(&pk, 1);
        pack_str(&pk, "AllBlocksCleared");
        break;
      case Kind::removed:
        msgpack_pack_array(&pk, 3);  // tag, block_hashes, medium
        pack_str(&pk, "BlockRemoved");
        msgpack_pack_array(&pk, e.hashes.size());
        for (uint64_t h : e.hashes) msgpack_pack_uint64(&pk, h);
        pack_str(&pk, kMedium);
        break;
      case Kind::stored: {
        // tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
        // then extra_keys (one entry per block) only when a block has any: the cache_salt of a
        // chain that starts at the top, as vLLM puts it in the first block's hash.
        const bool salted = !e.parent && !e.key.empty();
        msgpack_pack_array(&pk, salted ? 9 : 8);
        pack_str(&pk, "BlockStored");
        msgpack_pack_array(&pk, e.hashes.size());
        for (uint64_t h : e.hashes) msgpack_pack_uint64(&pk, h);
        if (e.parent)
          msgpack_pack_uint64(&pk, *e.parent);
        else
          msgpack_pack_nil(&pk);
        msgpack_pack_array(&pk, e.tokens.size());
        for (int32_t t : e.tokens) msgpack_pack_int32(&pk, t);
        msgpack_pack_uint32(&pk, block_tokens);
        msgpack_pack_nil(&pk);
        pack_str(&pk, kMedium);
        msgpack_pack_nil(&pk);
        if (salted) {
          msgpack_pack_array(&pk, e.hashes.size());
          msgpack_pack_array(&pk, 1);
          pack_str(&pk, e.key);
          for (size_t i = 1; i < e.hashes.size(); ++i) msgpack_pack_nil(&pk);
        }
        break;
      }
    }
  }
  msgpack_pack_int32(&pk, 0);
  std::string out(buf.data, buf.size);
  msgpack_sbuffer_destroy(&buf);
  return out;
}

bool binds(const std::string& e) {
  return e.find('*') != std::string::npos || e.find("::") != std::string::npos || e.starts_with("ipc://") ||
         e.starts_with("inproc://");
}

std::string offset_endpoint(const std::string& e, int offset) {
  if (e.empty() || offset == 0) return e;
  if (!e.starts_with("tcp://")) return fmt::format("{}_{}", e, offset);
  const size_t colon = e.rfind(':');
  try {
    return fmt::format("{}:{}", e.substr(0, colon), std::stoi(e.substr(colon + 1)) + offset);
  } catch (const std::exception&) {
    throw_error("[serve] server.kv_events endpoint '{}' has no port to give the server's model {} its own", e, offset);
  }
}

std::string kv_event_topic(const std::string& pattern, const std::string& host, int port, const std::string& model) {
  std::string h = host;
  if (h.empty() || h == "0.0.0.0" || h == "::") {  // every interface: the machine's name says which replica
    char name[256] = {};
    h = ::gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
  }
  std::string out, p = pattern.empty() ? "kv@{host}:{port}@{model}" : pattern;
  for (size_t i = 0; i < p.size();) {
    const size_t close = p[i] == '{' ? p.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += p[i++];
      continue;
    }
    const std::string field = p.substr(i + 1, close - i - 1);
    if (field == "host")
      out += h;
    else if (field == "port")
      out += std::to_string(port);
    else if (field == "model")
      out += model;
    else if (field.starts_with("env:")) {
      const char* v = std::getenv(field.substr(4).c_str());
      out += v ? v : "";
    } else {
      out += p.substr(i, close - i + 1);
    }
    i = close + 1;
  }
  return out;
}

struct KvEventPublisher::Impl {
  struct Batch {
    int64_t seq;
    double ts;
    std::vector<cache::PrefixTree::Event> events;
  };
  uint32_t block_tokens;
  size_t buffer_steps, max_queue;
  std::string topic;
  void* ctx = nullptr;
  void* pub = nullptr;
  void* replay = nullptr;

  std::mutex mu;
  std::condition_variable cv, sent_cv;
  std::deque<Batch> queue;  ///< accepted, not yet sent
  int64_t next_seq = 0, sent_seq = -1;
  bool stop = false;
  std::deque<std::pair<int64_t, std::string>> buffer;  ///< sent batches for replay (thread only)
  std::thread thread;

  void open(void* socket, const std::string& endpoint, bool bind, const char* key) {
    const int rc = bind ? zmq_bind(socket, endpoint.c_str()) : zmq_connect(socket, endpoint.c_str());
    if (rc != 0)
      throw_error("[serve] server.kv_events.{} '{}': cannot {}: {} (choose another address or port)", key, endpoint,
                  bind ? "bind" : "connect", zmq_strerror(zmq_errno()));
  }

  void run() {
    for (;;) {
      std::deque<Batch> work;
      {
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(replay ? 5 : 200), [&] { return stop || !queue.empty(); });
        work.swap(queue);
        if (stop && work.empty()) return;
      }
      for (Batch& b : work) {
        std::string payload = encode_kv_event_batch(b.ts, b.events, block_tokens);
        const std::string seq = seq_bytes(b.seq);
        // PUB never blocks: past its high-water mark ZeroMQ drops for slow subscribers, who see
        // the gap in sequence numbers and replay.
        if (!send_frames(pub, {topic, seq, payload}))
          log::warn("[serve] KV events: batch {} not sent: {}", b.seq, zmq_strerror(zmq_errno()));
        if (buffer_steps) {
          buffer.emplace_back(b.seq, std::move(payload));
          while (buffer.size() > buffer_steps) buffer.pop_front();
        }
      }
      if (!work.empty()) {
        std::lock_guard lock(mu);
        sent_seq = work.back().seq;
        sent_cv.notify_all();
      }
      if (replay) serve_replays();
    }
  }

  /**
   * Answers every replay request waiting: [identity, "", seq] -> [identity, "", topic, seq,
   * payload] for each buffered batch from seq on, then [identity, "", "", -1, ""] (the frames
   * current vLLM sends and llm-d's subscriber checks).
   */
  void serve_replays() {
    for (;;) {
      zmq_pollitem_t item{replay, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 0) <= 0 || !(item.revents & ZMQ_POLLIN)) return;
      std::vector<std::string> frames;
      for (bool more = true; more;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, replay, 0) < 0) {
          zmq_msg_close(&m);
          return;
        }
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
      }
      if (frames.size() != 3 || frames[2].size() != 8) {
        log::warn("[serve] KV events: a replay request of {} frames ignored (want [\"\", seq as 8 bytes])",
                  frames.size() - 1);
        continue;
      }
      uint64_t from = 0;
      for (unsigned char c : frames[2]) from = from << 8 | c;
      const std::string& id = frames[0];
      for (const auto& [seq, payload] : buffer)
        if (static_cast<uint64_t>(seq) >= from) send_frames(replay, {id, "", topic, seq_bytes(seq), payload});
      send_frames(replay, {id, "", "", seq_bytes(-1), ""});
    }
  }
};

KvEventPublisher::KvEventPublisher(const ServerConfig::KvEvents& cfg, std::string topic, int port_offset,
                                   uint32_t block_tokens)
    : impl_(std::make_unique<Impl>()), topic_(std::move(topic)) {
  Impl& m = *impl_;
  m.block_tokens = block_tokens;
  m.buffer_steps = static_cast<size_t>(cfg.buffer_steps);
  m.max_queue = static_cast<size_t>(cfg.max_queue_size);
  m.topic = topic_;
  m.ctx = zmq_ctx_new();
  try {
    m.pub = zmq_socket(m.ctx, ZMQ_PUB);
    const int hwm = cfg.hwm, linger = 1000;  // at close, a second to deliver the last batches
    zmq_setsockopt(m.pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(m.pub, ZMQ_LINGER, &linger, sizeof linger);
    const std::string endpoint = offset_endpoint(cfg.endpoint, port_offset);
    m.open(m.pub, endpoint, binds(endpoint), "endpoint");
    if (!cfg.replay_endpoint.empty()) {
      m.replay = zmq_socket(m.ctx, ZMQ_ROUTER);
      // No high-water mark: a ROUTER drops what is past it without a word, and a replay of the
      // whole buffer (buffer_steps batches and the end marker) must arrive whole.
      const int none = 0;
      zmq_setsockopt(m.replay, ZMQ_LINGER, &none, sizeof none);
      zmq_setsockopt(m.replay, ZMQ_SNDHWM, &none, sizeof none);
      m.open(m.replay, offset_endpoint(cfg.replay_endpoint, port_offset), true, "replay_endpoint");
    }
    log::info("[serve] KV events: topic '{}' on {} ({}){}", topic_, endpoint, binds(endpoint) ? "bound" : "connected",
              m.replay ? fmt::format(", replay on {}", offset_endpoint(cfg.replay_endpoint, port_offset)) : "");
  } catch (...) {
    if (m.pub) zmq_close(m.pub);
    if (m.replay) zmq_close(m.replay);
    zmq_ctx_term(m.ctx);
    throw;
  }
  m.thread = std::thread([&m] {
    try {
      m.run();
    } catch (const std::exception& e) {  // never the process: subscribers see the gap and replay
      log::error("[serve] KV events: the publisher stopped: {}", e.what());
    }
  });
}

KvEventPublisher::~KvEventPublisher() {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mu);
    m.stop = true;
  }
  m.cv.notify_all();
  m.thread.join();
  zmq_close(m.pub);
  if (m.replay) zmq_close(m.replay);
  zmq_ctx_term(m.ctx);  // waits out the PUB socket's linger
}

int64_t KvEventPublisher::publish(std::vector<cache::PrefixTree::Event> events) {
  Impl& m = *impl_;
  const double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  int64_t seq;
  {
    std::lock_guard lock(m.mu);
    if (m.queue.size() >= m.max_queue) return -1;
    seq = m.next_seq++;
    m.queue.push_back({seq, ts, std::move(events)});
  }
  m.cv.notify_one();
  return seq;
}

int64_t KvEventPublisher::last_seq() const {
  std::lock_guard lock(impl_->mu);
  return impl_->next_seq - 1;
}

void KvEventPublisher::flush(std::chrono::milliseconds limit) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  m.sent_cv.wait_for(lock, limit, [&] { return m.sent_seq == m.next_seq - 1; });
}

}  // namespace kiln::serve
