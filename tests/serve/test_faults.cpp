// Fault containment: a device error, an allocation failure and a plugin that throws each fail the
// requests of the step they hit with a 5xx; the server stays healthy and later requests complete.
#include <filesystem>
#include <future>

#include "host_helpers.hpp"
#include "model/checkpoint_writer.hpp"
#include "server_harness.hpp"

namespace kiln::serve::test {
namespace {

const json kLong = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"temperature", 0}};
const json kShort = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};

TEST(Faults, ADeviceErrorFailsItsStepAndNothingElse) {
  kiln::test::FaultyDevice* dev = kiln::test::faulty("cpu");
  ASSERT_NE(dev, nullptr);
  Server s({}, model_config(), dev->info().id);
  int st = 0;
  const std::string before = s.post("/v1/completions", kShort, &st)["choices"][0]["text"];
  ASSERT_EQ(st, 200);
  dev->slow_wait(std::chrono::milliseconds(5));  // 400 steps: the three are surely running together
  std::vector<std::future<int>> running;
  for (int i = 0; i < 3; ++i)
    running.push_back(std::async(std::launch::async, [&] {
      int code = 0;
      s.post("/v1/completions", kLong, &code);
      return code;
    }));
  for (int i = 0; i < 2000 && s.metric("kiln_running_sequences") < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(s.metric("kiln_running_sequences"), 3);
  dev->fail_wait(1);
  for (auto& f : running) EXPECT_EQ(f.get(), 500);
  dev->slow_wait(std::chrono::milliseconds(0));
  EXPECT_EQ(s.client().Get("/health")->status, 200);
  EXPECT_EQ(s.post("/v1/completions", kShort, &st)["choices"][0]["text"], before);
  EXPECT_EQ(st, 200);
  for (int i = 0; i < 200 && s.sequence_blocks() != 0; ++i)  // gauges follow the step
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.sequence_blocks(), 0);
}

TEST(Faults, AnAllocationFailureFailsItsRequest) {
  kiln::test::FaultyDevice* dev = kiln::test::faulty("cpu");
  ASSERT_NE(dev, nullptr);
  Server s({}, model_config(), dev->info().id);
  int st = 0;
  dev->fail_allocate(1);  // the next new batch shape's arena
  const json r =
      s.post("/v1/completions",
             {{"prompt", "A prompt of a length not seen before by this server at all"}, {"max_tokens", 4}}, &st);
  EXPECT_EQ(st, 500) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("allocation"), std::string::npos) << r.dump();
  dev->fail_allocate(0);
  s.post("/v1/completions", kShort, &st);
  EXPECT_EQ(st, 200);
  EXPECT_EQ(s.client().Get("/health")->status, 200);
}

TEST(Faults, ARequestOverItsTimeIsEndedWith504) {
  kiln::test::FaultyDevice* dev = kiln::test::faulty("cpu");
  ASSERT_NE(dev, nullptr);
  ServerConfig sc;
  sc.request_timeout_s = 1;
  Server s(sc, model_config(), dev->info().id);
  dev->slow_wait(std::chrono::milliseconds(20));  // 100 steps: 2 s
  int st = 0;
  const json r = s.post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 100}, {"ignore_eos", true}}, &st);
  EXPECT_EQ(st, 504) << r.dump();
  EXPECT_EQ(r["error"]["code"], "timeout");
  std::vector<json> events;
  bool done = false;
  s.stream("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 100}, {"ignore_eos", true}}, &events, &done);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().contains("error")) << events.back().dump();  // an error event, then [DONE]
  EXPECT_TRUE(done);
  dev->slow_wait(std::chrono::milliseconds(0));
  for (int i = 0; i < 200 && s.sequence_blocks() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.sequence_blocks(), 0);
  s.post("/v1/completions", kShort, &st);
  EXPECT_EQ(st, 200);
}

TEST(Faults, APluginThatThrowsFailsItsRequest) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_faulty_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const int64_t V = 64, P = 256;
  const std::string cfg =
      json{{"model_type", "kiln_test_scripted"}, {"vocab_size", V}, {"max_context", P}, {"throw_at_tokens", 37}}.dump();
  model::write_file(dir + "/config.json", std::vector<uint8_t>(cfg.begin(), cfg.end()));
  model::write_safetensors(
      dir + "/model.safetensors",
      {{"script.weight", DType::f32, {P, V}, model::encode_f32(std::vector<float>(P * V, 0.0f), DType::f32)}});
  ModelConfig mc;
  mc.name = "scripted";
  mc.path = dir;
  mc.cache.memory_bytes = 1 << 20;
  Server s({}, mc);
  int st = 0;
  const json bad = s.post("/v1/completions", {{"prompt", std::vector<int>(37, 3)}, {"max_tokens", 4}}, &st);
  EXPECT_EQ(st, 500) << bad.dump();
  const json good = s.post("/v1/completions", {{"prompt", std::vector<int>(12, 3)}, {"max_tokens", 4}}, &st);
  EXPECT_EQ(st, 200) << good.dump();
  EXPECT_EQ(good["choices"][0]["text"], "0 0 0 0 ");  // a model without a tokenizer answers in ids
  EXPECT_EQ(s.client().Get("/health")->status, 200);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::serve::test
