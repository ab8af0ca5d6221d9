// The llama plugin end to end on the model host: real weights (stories260K), the Hugging Face
// golden (tiny-qwen3-moe), and the consistency properties of ragged batches and caches.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "fixtures.hpp"
#include "llama_helpers.hpp"
#include "model/safetensors.hpp"
#include "model/vocab_text.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

std::vector<int32_t> expected_greedy_ids() {
  std::ifstream in(fixture("stories260K/EXPECTED_GREEDY.txt"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto at = text.find("ids: [");
  std::vector<int32_t> ids;
  if (at == std::string::npos) return ids;
  std::stringstream list(text.substr(at + 6, text.find(']', at) - at - 6));
  std::string item;
  while (std::getline(list, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

std::vector<int32_t> greedy(model::ModelHost& host, std::vector<int32_t> prompt, int n) {
  EXPECT_EQ(host.add_sequence(1), cache::Status::ok);
  std::vector<int32_t> out;
  const size_t V = host.hparams().n_vocab;
  for (int i = 0; i < n; ++i) {
    model::StepResult r;
    EXPECT_EQ(host.step({{1, prompt, true, false}}, &r), cache::Status::ok);
    const int32_t next = argmax(r.logits.data(), V);
    out.push_back(next);
    prompt = {next};
  }
  host.release(1);
  return out;
}

}  // namespace

TEST(Stories260K, GreedyFromBosReproducesTheReference) {
  const std::string path = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(path);
  auto host = model::ModelHost::open(path, llama_registry(), cpu_options());
  EXPECT_STREQ(host->hparams().architecture, "llama");
  const auto want = expected_greedy_ids();
  ASSERT_EQ(want.size(), 40u);
  const auto got = greedy(*host, {1}, 40);
  EXPECT_EQ(got, want);
  const std::string text = model::detokenize(*host->checkpoint().vocab(), got);
  EXPECT_EQ(text.rfind(" Once upon a time, there was a little girl named Lily", 0), 0u) << text;
}
