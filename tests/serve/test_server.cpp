// kiln serve in-process on 127.0.0.1 with the embedded stories260K (real weights) on the CPU
// device: the OpenAI API end to end, continuous batching giving each request exactly what it gets
// alone, errors in OpenAI's shape, cancellation freeing blocks, overload answered with 429.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "backend/backend.hpp"
#include "host_helpers.hpp"
#include "sanitized.hpp"
#include "server_harness.hpp"

namespace kiln::serve::test {
namespace {

TEST(Serve, ChatAndCompletionsAnswerWithUsage) {
  Server s;
  int st = 0;
  json r = s.post(
      "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}}, {"max_tokens", 12}, {"temperature", 0}},
      &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_FALSE(r["choices"][0]["message"]["content"].get<std::string>().empty());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), 3);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  json c = s.post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200) << c.dump();
  const std::string text = c["choices"][0]["text"];
  EXPECT_EQ(text.rfind(", there was", 0), 0u) << text;  // the trained model's own continuation
  // Streaming gives the same text, ends with [DONE], and reports usage when asked.
  std::vector<json> events;
  bool done = false;
  const std::string streamed = s.stream("/v1/completions",
                                        {{"prompt", "Once upon a time"},
                                         {"max_tokens", 8},
                                         {"temperature", 0},
                                         {"stream_options", {{"include_usage", true}}}},
                                        &events, &done);
  EXPECT_EQ(streamed, text);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 8);
  EXPECT_TRUE(events.back()["choices"].empty());
  // Token ids as the prompt.
  json ids = s.post("/tokenize", {{"prompt", "Once upon a time"}}, &st);
  ASSERT_EQ(st, 200);
  json c2 = s.post("/v1/completions", {{"prompt", ids["tokens"]}, {"max_tokens", 8}, {"temperature", 0}}, &st);
  EXPECT_EQ(c2["choices"][0]["text"], text);
  json de = s.post("/detokenize", {{"tokens", ids["tokens"]}}, &st);
  EXPECT_EQ(de["prompt"], "Once upon a time");
}

TEST(Serve, StopStringsAcrossTokensAndSeeds) {
  Server s;
  int st = 0;
  // " girl" spans three tokens (" g", "ir", "l") in this model's output.
  json r = s.post("/v1/completions",
                  {{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 0}, {"stop", " girl"}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["text"], ", there was a little");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // Same seed at temperature 1: the same text, streamed or not; n = 2 gives two seeded samples.
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 1}, {"seed", 1234}};
  const std::string a = s.post("/v1/completions", body)["choices"][0]["text"];
  const std::string b = s.post("/v1/completions", body)["choices"][0]["text"];
  EXPECT_EQ(a, b);
  EXPECT_EQ(s.stream("/v1/completions", body), a);
  json two = body;
  two["n"] = 2;
  json r2 = s.post("/v1/completions", two);
  ASSERT_EQ(r2["choices"].size(), 2u);
  EXPECT_EQ(r2["choices"][0]["text"], a);
  EXPECT_NE(r2["choices"][1]["text"], a);
  // Logprobs: the sampled token's and the alternatives, best first.
  json lp = s.post("/v1/chat/completions",
                   {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                    {"max_tokens", 4},
                    {"temperature", 0},
                    {"logprobs", true},
                    {"top_logprobs", 3}},
                   &st);
  ASSERT_EQ(st, 200) << lp.dump();
  const json& content = lp["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (const json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);  // greedy: the best one
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
  }
}

void concurrent_streams(const std::string& device) {
  Server s({}, model_config(), device);
  const int N = kiln::test::reduced() ? 8 : 16;  // under a sanitizer 8, still batched together and ragged
  const auto body = [](int i, bool sampled) {
    json b = {{"prompt", "Once upon a time " + std::string(static_cast<size_t>(i % 5), '!') + std::to_string(i)},
              {"max_tokens", 24 + i % 7}};
    if (sampled) {
      b["temperature"] = 1.0;
      b["seed"] = 100 + i;
    } else {
      b["temperature"] = 0;
    }
    return b;
  };
  for (bool sampled : {false, true}) {
    std::vector<std::string> alone(N);
    for (int i = 0; i < N; ++i) alone[i] = s.stream("/v1/completions", body(i, sampled));
    std::vector<std::future<std::string>> together;
    for (int i = 0; i < N; ++i)
      together.push_back(
          std::async(std::launch::async, [&, i] { return s.stream("/v1/completions", body(i, sampled)); }));
    for (int i = 0; i < N; ++i) {
      const std::string got = together[i].get();
      EXPECT_FALSE(got.empty()) << i;
      EXPECT_EQ(got, alone[i]) << "request " << i << (sampled ? " (seeded)" : " (greedy)");
    }
  }
  EXPECT_EQ(s.client().Get("/health")->status, 200);
}

TEST(Serve, ConcurrentStreamsGetWhatTheyGetAlone) {
  concurrent_streams("cpu");
}

TEST(Serve, ConcurrentStreamsGetWhatTheyGetAloneOnVulkan) {
  if (!backend::Registry::instance().find("vulkan")) GTEST_SKIP() << "no vulkan device registered";
  concurrent_streams("vulkan");
}

// Steps whose samplers can pick from each row's best ids read those back instead of whole logits
// rows; the outputs (text and logprobs, greedy and seeded, alone and batched) are those of reading
// the rows, and requests that need whole rows (no top_k, penalties) still get them.
void device_candidates(const std::string& device) {
  const std::vector<json> bodies = {
      {{"temperature", 0}},
      {{"temperature", 0.8}, {"top_k", 20}, {"seed", 5}, {"logprobs", 3}},
      {{"temperature", 1.0}, {"top_k", 40}, {"top_p", 0.9}, {"min_p", 0.05}, {"seed", 6}},
      {{"temperature", 1.0}, {"seed", 7}},
      {{"temperature", 0.7}, {"top_k", 10}, {"presence_penalty", 0.5}, {"seed", 8}},
  };
  // Under a sanitizer each kind of request once, shorter (still batched together and ragged).
  const bool small = kiln::test::reduced();
  const auto body = [&](size_t i) {
    json b = bodies[i % bodies.size()];
    b["prompt"] = "Once upon a time " + std::to_string(i);
    b["max_tokens"] = (small ? 8 : 16) + static_cast<int>(i % 3);
    return b;
  };
  const size_t n = bodies.size() * (small ? 1 : 2);
  const auto run = [&](Server& s) {
    std::vector<json> alone(n), together(n);
    for (size_t i = 0; i < n; ++i) alone[i] = s.post("/v1/completions", body(i))["choices"][0];
    std::vector<std::future<json>> f;
    for (size_t i = 0; i < n; ++i)
      f.push_back(std::async(std::launch::async, [&, i] { return s.post("/v1/completions", body(i)); }));
    for (size_t i = 0; i < n; ++i) together[i] = f[i].get()["choices"][0];
    return std::make_pair(alone, together);
  };
  ::setenv("KILN_DEVICE_SAMPLING", "0", 1);
  std::pair<std::vector<json>, std::vector<json>> rows;
  {
    Server s({}, model_config(), device);
    rows = run(s);
    EXPECT_EQ(s.metric("kiln_candidate_steps_total"), 0);
  }
  ::unsetenv("KILN_DEVICE_SAMPLING");
  Server s({}, model_config(), device);
  const auto cand = run(s);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(cand.first[i].dump(), rows.first[i].dump()) << "request " << i << " alone";
    EXPECT_EQ(cand.second[i].dump(), rows.first[i].dump()) << "request " << i << " batched";
    EXPECT_EQ(rows.second[i].dump(), rows.first[i].dump()) << "request " << i << " batched, whole rows";
  }
  const double steps = s.metric("kiln_candidate_steps_total");
  EXPECT_GT(steps, 0);
  EXPECT_LT(steps, s.metric("kiln_steps_total"));  // the penalty and no-top_k requests read rows
}

TEST(Serve, DeviceCandidatesSampleAsWholeRowsDo) {
  device_candidates("cpu");
}

TEST(Serve, DeviceCandidatesSampleAsWholeRowsDoOnVulkan) {
  if (!backend::Registry::instance().find("vulkan")) GTEST_SKIP() << "no vulkan device registered";
  device_candidates("vulkan");
}

TEST(Serve, PreemptionUnderATinyCacheKeepsOutputsExact) {
  // 24 blocks: two sequences of 200 tokens (13 blocks each) cannot both finish; eight at once
  // must preempt and recompute (the scheduler's own test does this deterministically).
  ModelConfig mc = model_config();
  mc.cache.block_tokens = 16;
  mc.cache.memory_bytes = 24 * 16 * 1280;  // 1280 bytes of f32 K and V per token
  mc.max_context = 256;
  // Slow steps, so that the eight surely overlap (the scheduler's own test needs no timing).
  kiln::test::FaultyDevice* dev = kiln::test::faulty("cpu");
  ASSERT_NE(dev, nullptr);
  Server s({}, mc, dev->info().id);
  const int N = 8;
  const auto body = [](int i) {
    return json{{"prompt", "Once upon a time " + std::to_string(i)},
                {"max_tokens", 200},
                {"temperature", 0},
                {"ignore_eos", true}};
  };
  std::vector<std::string> alone(N);
  for (int i = 0; i < N; ++i) alone[i] = s.post("/v1/completions", body(i))["choices"][0]["text"];
  dev->slow_wait(std::chrono::milliseconds(2));
  std::vector<std::future<json>> together;
  for (int i = 0; i < N; ++i)
    together.push_back(std::async(std::launch::async, [&, i] { return s.post("/v1/completions", body(i)); }));
  for (int i = 0; i < N; ++i) EXPECT_EQ(together[i].get()["choices"][0]["text"], alone[i]) << i;
  dev->slow_wait(std::chrono::milliseconds(0));
  EXPECT_GT(s.metric("kiln_preemptions_total"), 0);
  for (int i = 0; i < 200 && s.sequence_blocks() != 0; ++i)  // gauges follow the step
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.sequence_blocks(), 0);
}

TEST(Serve, ChunkedPrefillGivesWhatOneChunkGives) {
  // A budget of 16 tokens per step: a long prompt is prefilled in chunks, on an idle server too.
  ModelConfig small = model_config();
  small.max_batch_tokens = 16;
  std::string prompt = "Once upon a time";
  for (int i = 0; i < 12; ++i) prompt += " there was a little dog and a cat";
  const json body = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}};
  std::string whole, chunked;
  {
    Server s;
    whole = s.post("/v1/completions", body)["choices"][0]["text"];
  }
  {
    Server s({}, small);
    int st = 0;
    json r = s.post("/v1/completions", body, &st);
    ASSERT_EQ(st, 200) << r.dump();
    chunked = r["choices"][0]["text"];
    EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), 64);
  }
  EXPECT_FALSE(whole.empty());
  EXPECT_EQ(chunked, whole);
}

TEST(Serve, ClientsComingAndGoingDoNotDisturbOthers) {
  Server s;
  const int N = 6;
  const auto body = [](int i) {
    return json{{"prompt", "Once upon a time " + std::to_string(i)},
                {"max_tokens", 160},
                {"temperature", 0},
                {"ignore_eos", true}};
  };
  std::vector<std::string> alone(N);
  for (int i = 0; i < N; ++i) alone[i] = s.stream("/v1/completions", body(i));
  std::atomic<bool> stop{false};
  std::vector<std::thread> churn;
  for (int t = 0; t < 3; ++t)
    churn.emplace_back([&, t] {
      for (int k = 0; k < 40 && !stop; ++k) {
        auto c = s.client();
        int chunks = 0;
        json b = body(100 + t);
        b["stream"] = true;
        post_streaming(c, "/v1/completions", b.dump(), [&](const char*, size_t) { return ++chunks < 2 + k % 3; });
      }
    });
  std::vector<std::future<std::string>> together;
  for (int i = 0; i < N; ++i)
    together.push_back(std::async(std::launch::async, [&, i] { return s.stream("/v1/completions", body(i)); }));
  for (int i = 0; i < N; ++i) EXPECT_EQ(together[i].get(), alone[i]) << i;
  stop = true;
  for (auto& t : churn) t.join();
  bool freed = false;
  for (int i = 0; i < 300 && !freed; ++i) {
    freed = s.sequence_blocks() == 0 && s.metric("kiln_requests_in_flight") == 0;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed);
}

TEST(Serve, HostileBodiesAreRefusedNotFatal) {
  Server s;
  std::string deep(100000, '[');
  auto r = s.client().Post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": " + deep + "}]}",
                           "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(s.client().Post("/tokenize", "{\"prompt\": " + deep, "application/json")->status, 400);
  EXPECT_EQ(s.client().Post("/tokenize", R"({"model": 5, "prompt": "x"})", "application/json")->status, 400);
  EXPECT_EQ(s.client()
                .Post("/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": 5}]})", "application/json")
                ->status,
            400);
  EXPECT_EQ(s.client()
                .Post("/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "yes"})",
                      "application/json")
                ->status,
            400);
  // A temperature too small to divide by is greedy.
  const json greedy = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
  json tiny = greedy;
  tiny["temperature"] = 1e-300;
  EXPECT_EQ(s.post("/v1/completions", tiny)["choices"][0]["text"],
            s.post("/v1/completions", greedy)["choices"][0]["text"]);
  EXPECT_EQ(s.client().Get("/health")->status, 200);
}

TEST(Serve, ControlTokensInChatTextAreText) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "hello </s><s> there"}}}}};
  const auto count = [](const json& ids, int id) { return std::count(ids.begin(), ids.end(), json(id)); };
  {
    Server s;
    const json ids = s.post("/tokenize", body)["tokens"];
    EXPECT_EQ(count(ids, 1), 1) << ids.dump();  // the template's own <s> only
    EXPECT_EQ(count(ids, 2), 0) << ids.dump();
    // A raw completions prompt is the client's whole prompt: its control tokens count.
    const json raw = s.post("/tokenize", {{"prompt", "hello </s> there"}, {"add_special_tokens", false}})["tokens"];
    EXPECT_EQ(count(raw, 2), 1) << raw.dump();
  }
  ModelConfig permissive = model_config();
  permissive.parse_special_in_content = true;
  Server s({}, permissive);
  const json ids = s.post("/tokenize", body)["tokens"];
  EXPECT_EQ(count(ids, 1), 2) << ids.dump();
  EXPECT_EQ(count(ids, 2), 1) << ids.dump();
}

TEST(Serve, EveryLimitIsA400NamingIt) {
  ServerConfig sc;
  sc.limits.max_messages = 2;
  sc.limits.max_n = 2;
  sc.limits.max_stop = 1;
  sc.limits.max_tools = 1;
  sc.limits.max_tools_bytes = 300;
  sc.limits.max_prompt_tokens = 12;
  sc.limits.max_tokens = 5;
  Server s(sc);
  const json user = {{"role", "user"}, {"content", "hi"}};
  const json tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}};
  const auto expect = [&](const std::string& path, json body, const std::string& param, const std::string& limit) {
    int st = 0;
    const json r = s.post(path, body, &st);
    EXPECT_EQ(st, 400) << body.dump() << " -> " << r.dump();
    EXPECT_EQ(r["error"]["param"], param) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(limit), std::string::npos) << r.dump();
  };
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  expect(chat, {{"messages", {user, user, user}}}, "messages", "max_messages");
  expect(chat, {{"messages", {user}}, {"n", 3}}, "n", "[1, 2]");
  expect(chat, {{"messages", {user}}, {"stop", {"a", "b"}}}, "stop", "max_stop");
  expect(chat, {{"messages", {user}}, {"stop_token_ids", {1, 2}}}, "stop_token_ids", "max_stop");
  expect(chat, {{"messages", {user}}, {"tools", {tool, tool}}}, "tools", "max_tools");
  json big = tool;
  big["function"]["description"] = std::string(400, 'x');
  expect(chat, {{"messages", {user}}, {"tools", {big}}}, "tools", "max_tools_bytes");
  expect(cmpl, {{"prompt", "Once upon a time there was a little girl named Lily who loved to play"}}, "prompt",
         "max_prompt_tokens");
  expect(cmpl, {{"prompt", "Once"}, {"max_tokens", 6}}, "max_tokens", "[1, 5]");
  // Within the limits it answers, and max_tokens defaults to the limit.
  int st = 0;
  const json ok = s.post(cmpl, {{"prompt", "Once"}, {"ignore_eos", true}}, &st);
  EXPECT_EQ(st, 200) << ok.dump();
  EXPECT_EQ(ok["usage"]["completion_tokens"], 5);
}

TEST(Serve, DrainFinishesWhatRunsAndRefusesWhatComes) {
  Server s;
  std::string streamed;
  bool done = false;
  std::thread slow([&] {
    std::vector<json> events;
    streamed =
        s.stream("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 400}, {"ignore_eos", true}, {"temperature", 0}},
                 &events, &done);
  });
  for (int i = 0; i < 500 && s.metric("kiln_requests_in_flight") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::future<bool> drained = std::async(std::launch::async, [&] { return s.drain(30); });
  for (int i = 0; i < 500 && s.client().Get("/health/ready")->status != 503; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Not ready (routers send nothing more), still alive (a liveness probe must not restart it).
  EXPECT_EQ(s.client().Get("/health/ready")->status, 503);
  EXPECT_EQ(s.client().Get("/health")->status, 200);
  EXPECT_NE(s.client().Get("/health")->body.find("draining"), std::string::npos);
  auto refused = s.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json");
  EXPECT_EQ(refused->status, 503);
  EXPECT_FALSE(refused->get_header_value("Retry-After").empty());
  EXPECT_TRUE(drained.get());
  slow.join();
  EXPECT_TRUE(done);  // the stream in progress ran to its end
  EXPECT_FALSE(streamed.empty());
}

TEST(Serve, TwoHundredFiftySixStreamsWithAThirdHangingUp) {
  ModelConfig mc = model_config();
  mc.max_seqs = 64;
  Server s({}, mc);
  const int unique = 48, N = 256;
  const auto body = [](int u) {
    return json{{"prompt", "Once upon a time " + std::string(static_cast<size_t>(u % 7), '!') + std::to_string(u)},
                {"max_tokens", 16 + (u * 13) % 64},
                {"temperature", u % 2 ? 1.0 : 0.0},
                {"seed", 1000 + u},
                {"ignore_eos", true}};
  };
  std::vector<std::string> alone(unique);
  for (int u = 0; u < unique; ++u) alone[static_cast<size_t>(u)] = s.stream("/v1/completions", body(u));
  std::vector<std::future<std::pair<bool, std::string>>> runs;
  for (int i = 0; i < N; ++i)
    runs.push_back(std::async(std::launch::async, [&, i] {
      const int u = (i * 7) % unique;
      if (i % 3 == 0) {  // hangs up after a few chunks
        auto c = s.client();
        json b = body(u);
        b["stream"] = true;
        int chunks = 0;
        post_streaming(c, "/v1/completions", b.dump(), [&](const char*, size_t) { return ++chunks < 2 + i % 5; });
        return std::make_pair(false, std::string());
      }
      return std::make_pair(true, s.stream("/v1/completions", body(u)));
    }));
  int completed = 0;
  for (int i = 0; i < N; ++i) {
    auto [kept, text] = runs[static_cast<size_t>(i)].get();
    if (!kept) continue;
    ++completed;
    EXPECT_EQ(text, alone[static_cast<size_t>((i * 7) % unique)]) << "request " << i;
  }
  EXPECT_GT(completed, 160);
  bool freed = false;
  for (int i = 0; i < 500 && !freed; ++i) {
    freed = s.sequence_blocks() == 0 && s.metric("kiln_running_sequences") == 0 &&
            s.metric("kiln_requests_in_flight") == 0 && s.metric("kiln_queue_depth") == 0;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed);
  EXPECT_EQ(s.client().Get("/health")->status, 200);
}

TEST(Serve, ASlowClientIsCutOffWithoutAffectingOthers) {
  ServerConfig sc;
  sc.read_timeout_s = 2;
  Server s(sc);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(s.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  // One byte every 200 ms: each read succeeds well within httplib's per-read timeout.
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 40\r\n\r\n{\"prompt\": \"Once\", \"max_tokens\": 2}      ";
  std::atomic<bool> cut{false};
  std::thread slow([&] {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < request.size(); ++i) {
      if (::send(fd, request.data() + i, 1, MSG_NOSIGNAL) != 1) break;
      pollfd p{fd, POLLRDHUP, 0};
      if (::poll(&p, 1, 200) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) break;
    }
    cut = std::chrono::steady_clock::now() - start < std::chrono::seconds(15);
  });
  // Meanwhile others are served.
  for (int i = 0; i < 5; ++i) {
    int st = 0;
    s.post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 4}}, &st);
    EXPECT_EQ(st, 200);
  }
  slow.join();
  ::close(fd);
  EXPECT_TRUE(cut) << "the slow client was not cut off";
  EXPECT_GE(s.metric("kiln_connections_cut_total"), 1);
}

TEST(Serve, ErrorsNameTheField) {
  ServerConfig sc;
  sc.max_request_bytes = 4096;
  Server s(sc);
  const auto expect = [&](const std::string& path, const std::string& body, int status, const std::string& param) {
    auto r = s.client().Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body << " -> " << r->body;
    json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_TRUE(e["error"]["message"].is_string());
    EXPECT_TRUE(e["error"].contains("type") && e["error"].contains("code"));
    if (!param.empty()) {
      EXPECT_EQ(e["error"]["param"], param) << r->body;
    }
  };
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  expect(chat, "{not json", 400, "");
  expect(chat, "[1]", 400, "");
  expect(chat, R"({"messages": "hi"})", 400, "messages");
  expect(chat, R"({"messages": [{"role": "robot", "content": "x"}]})", 400, "messages[0].role");
  expect(chat, R"({"model": "nope", "messages": [{"role": "user", "content": "x"}]})", 404, "model");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", 400, "temperature");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", 400, "temperature");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", 400,
         "top_logprobs");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", 400, "max_tokens");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "n": 100})", 400, "n");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "stop": 5})", 400, "stop");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"99999": 1}})", 400, "logit_bias");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", "tools": []})", 400,
         "tool_choice");
  expect(chat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000})", 400, "max_tokens");
  expect(cmpl, R"({"prompt": {"a": 1}})", 400, "prompt");
  expect(cmpl, R"({"prompt": [1, 2, 999999]})", 400, "prompt");
  expect(cmpl, R"({"prompt": "x", "logprobs": 21})", 400, "logprobs");
  // A prompt over the context (512 here).
  std::vector<int> longp(600, 5);
  expect(cmpl, json{{"prompt", longp}}.dump().substr(0, 4000), 400, "prompt");
  expect(cmpl, std::string(5000, ' ') + "{}", 413, "");
  auto nf = s.client().Get("/v2/nothing");
  EXPECT_EQ(nf->status, 404);
  // Nothing broke: a good request still works.
  int st = 0;
  s.post(cmpl, {{"prompt", "Once"}, {"max_tokens", 2}}, &st);
  EXPECT_EQ(st, 200);
}

TEST(Serve, ApiKeysAreRequiredWhenConfigured) {
  ServerConfig sc;
  sc.api_keys = {"sekret"};
  Server s(sc);
  auto c = s.client();
  auto r = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json");
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("authentication_error"), std::string::npos);
  c.set_bearer_token_auth("wrong");
  EXPECT_EQ(c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json")->status, 401);
  c.set_bearer_token_auth("sekret");
  EXPECT_EQ(c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json")->status, 200);
  EXPECT_EQ(s.client().Get("/health")->status, 200);  // health needs no key
}

TEST(Serve, DisconnectCancelsAndFreesBlocks) {
  // Slow steps (500 tokens: over a second), so the client surely leaves mid-generation.
  kiln::test::FaultyDevice* dev = kiln::test::faulty("cpu");
  ASSERT_NE(dev, nullptr);
  Server s({}, model_config(), dev->info().id);
  dev->slow_wait(std::chrono::milliseconds(3));
  for (bool streamed : {true, false}) {
    std::atomic<int> chunks{0};
    std::thread t([&] {
      auto c = s.client();
      c.set_read_timeout(0, 30000);  // the non-streaming client gives up (closes) after 30 ms
      json body = {{"prompt", "Once upon a time"},
                   {"max_tokens", 500},
                   {"temperature", 1},
                   {"ignore_eos", true},
                   {"stream", streamed}};
      post_streaming(c, "/v1/completions", body.dump(), [&](const char*, size_t) {
        return ++chunks < 5;  // streaming: hang up after a few chunks
      });
    });
    t.join();
    // The sequence leaves at a following step: running and used blocks drop to 0 (bounded wait).
    bool freed = false;
    for (int i = 0; i < 300 && !freed; ++i) {
      freed = s.metric("kiln_running_sequences") == 0 && s.sequence_blocks() == 0 &&
              s.metric("kiln_requests_in_flight") == 0;
      if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(freed) << (streamed ? "streaming" : "non-streaming");
    EXPECT_LT(s.metric("kiln_generated_tokens_total"), 500 * 2);
  }
  EXPECT_GE(s.metric("kiln_requests_cancelled_total"), 2);
  dev->slow_wait(std::chrono::milliseconds(0));
}

TEST(Serve, OverloadGets429WithRetryAfter) {
  ServerConfig sc;
  sc.max_concurrent_requests = 1;
  Server s(sc);
  std::atomic<bool> started{false};
  std::thread slow([&] {
    auto c = s.client();
    json body = {{"prompt", "Once"}, {"max_tokens", 300}, {"ignore_eos", true}, {"stream", true}};
    post_streaming(c, "/v1/completions", body.dump(), [&](const char*, size_t) {
      started = true;
      return true;
    });
  });
  for (int i = 0; i < 500 && !started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto r = s.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  slow.join();
  EXPECT_EQ(s.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json")->status, 200);
}

}  // namespace
}  // namespace kiln::serve::test
