// llama.cpp as an independent oracle: kiln's greedy ids equal llama.cpp's (node-llama-cpp 3.21.1,
// its prebuilt CPU build, installed by scripts/setup.sh into .cache/llama-oracle) on the same GGUF
// files: stories260K (real weights), and the tiny Gemma 4 and Qwen3.5-MoE checkpoints converted to
// GGUF (random weights, llama.cpp's gemma4 and qwen35moe code). On the CPU reference and on Vulkan.
//
// Variants llama.cpp does not load as HF defines them, so not compared here: Gemma 4 KV sharing
// whose last non-shared layers are not [sliding, full] (llama.cpp picks the layer to reuse by
// position: an assertion in llama-kv-cache.cpp), Qwen3-Next with dense layers among MoE ones
// (mlp_only_layers: "missing tensor blk.1.ffn_gate_inp.weight"), and Gated DeltaNet with value
// heads narrower than key heads (llama.cpp assumes equal: a wrong attn_qkv shape).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "all_models.hpp"
#include "fixtures.hpp"
#include "gemma4_checkpoint.hpp"
#include "llama_helpers.hpp"
#include "qwen3_5_checkpoint.hpp"
#include "source_paths.hpp"

using namespace kiln;
using namespace kiln::test;
namespace fs = std::filesystem;

namespace {

const fs::path kOracle = fs::path(KILN_TEST_SOURCE_DIR) / ".cache/llama-oracle";

/** Why the oracle cannot run here, or "" when it can. */
std::string oracle_missing() {
  if (!fs::exists(kOracle / "node_modules/node-llama-cpp"))
    return "node-llama-cpp is not installed under .cache/llama-oracle (run scripts/setup.sh)";
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not installed";
  return "";
}

/** llama.cpp's greedy ids for `prompt` (tools/oracle/llama/greedy.mjs); empty when it failed. */
std::vector<int32_t> llama_cpp_greedy(const std::string& gguf, const std::vector<int32_t>& prompt, int n,
                                      std::string* error) {
  // The script runs beside its node_modules (ES module imports resolve from the script's folder).
  fs::copy_file(fs::path(KILN_TEST_SOURCE_DIR) / "tools/oracle/llama/greedy.mjs", kOracle / "greedy.mjs",
                fs::copy_options::overwrite_existing);
  std::string ids;
  for (int32_t t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const std::string cmd =
      "node '" + (kOracle / "greedy.mjs").string() + "' '" + gguf + "' " + ids + " " + std::to_string(n) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  pclose(p);
  const auto at = out.rfind("{\"ids\"");
  if (at == std::string::npos) {
    *error = out;
    return {};
  }
  return nlohmann::json::parse(out.substr(at, out.find('\n', at) - at)).at("ids").get<std::vector<int32_t>>();
}

struct Greedy {
  std::vector<int32_t> ids;
  std::vector<float> margins;  ///< top-1 minus top-2 logit at each step
};

Greedy kiln_greedy(model::ModelHost& host, std::vector<int32_t> prompt, int n) {
  EXPECT_EQ(host.add_sequence(1), cache::Status::ok);
  Greedy g;
  const size_t V = host.hparams().n_vocab;
  for (int i = 0; i < n; ++i) {
    model::StepResult r;
    EXPECT_EQ(host.step({{1, prompt, true, false}}, &r), cache::Status::ok);
    std::vector<float> l(r.logits.begin(), r.logits.begin() + static_cast<long>(V));
    const int32_t best = argmax(l.data(), V);
    const float top = l[static_cast<size_t>(best)];
    l[static_cast<size_t>(best)] = -INFINITY;
    g.ids.push_back(best);
    g.margins.push_back(top - l[static_cast<size_t>(argmax(l.data(), V))]);
    prompt = {best};
  }
  host.release(1);
  return g;
}

// Random-weight models have near ties; llama.cpp keeps K/V in f16 and sums in its own order, so
// logits differ in the 3rd-4th digit. Ids are compared up to the first step whose top two logits
// kiln has closer than this (a clear choice must agree; a tie may go either way).
constexpr float kClearMargin = 0.05f;

class LlamaCppOracle : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    if (const std::string m = oracle_missing(); !m.empty()) GTEST_SKIP() << m;
  }
  /** Greedy ids agree up to the first near tie, and at least `min_clear` of them. */
  void expect_same_greedy(const std::string& gguf, const std::vector<int32_t>& prompt, int n, int min_clear) {
    std::string error;
    const auto want = llama_cpp_greedy(gguf, prompt, n, &error);
    ASSERT_EQ(want.size(), static_cast<size_t>(n)) << "llama.cpp failed on " << gguf << ":\n" << error;
    auto host = model::ModelHost::open(gguf, all_models_registry(), options());
    const Greedy got = kiln_greedy(*host, prompt, n);
    int clear = 0;
    while (clear < n && got.margins[static_cast<size_t>(clear)] >= kClearMargin) ++clear;
    EXPECT_GE(clear, min_clear) << "too few clear choices to compare; kiln's margins start with a near tie";
    const std::vector<int32_t> a(got.ids.begin(), got.ids.begin() + clear), b(want.begin(), want.begin() + clear);
    EXPECT_EQ(a, b) << gguf << ": kiln and llama.cpp differ within the first " << clear << " clear choices";
  }
};

INSTANTIATE_TEST_SUITE_P(Devices, LlamaCppOracle, ::testing::Values("cpu", "vulkan"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace

TEST_P(LlamaCppOracle, Stories260KGreedyIdsAgree) {
  const std::string path = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(path);
  expect_same_greedy(path, {1}, 40, 40);
}

TEST_P(LlamaCppOracle, TinyGemma4GgufGreedyIdsAgree) {
  TempDir dir;
  write_gemma4_gguf(gemma4_31b_like(), dir / "tiny.gguf");
  expect_same_greedy(dir / "tiny.gguf", {2, 300, 301, 302, 303}, 12, 6);
}

TEST_P(LlamaCppOracle, TinyQwen35MoeGgufGreedyIdsAgree) {
  TempDir dir;
  write_qwen35_gguf(qwen35_moe_tiny(), dir / "tiny.gguf");
  // Its random logits are flat (kiln's margins 0.11, 0.54, 0.22, then 0.027): three clear choices.
  // The two agree on the first 8 ids and part at the 9th, a 0.014 margin in kiln's logits where
  // llama.cpp's order differs by ~0.02 (about 1% of the logits), more than f16 K/V explains; kiln
  // matches the PyTorch reference's logits to 2e-4 (test_model_qwen3_5).
  expect_same_greedy(dir / "tiny.gguf", {1, 300, 301, 302, 303}, 12, 3);
}
