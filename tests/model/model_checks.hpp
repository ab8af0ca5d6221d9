// Checks every model plugin's tests run (tests/model/test_<plugin>.cpp): the reference goldens of
// tests/reference/goldens/, and the model host's properties (a ragged batch's rows bitwise equal to
// running alone, Vulkan against the CPU backend).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model_host.hpp"
#include "source_paths.hpp"

namespace kiln::test {

struct GoldenPrompt {
  std::vector<int32_t> ids;
  std::vector<float> logits;  ///< [ids.size(), V]
};

/** tests/reference/goldens/<name>.json, written by a PyTorch reference (tests/reference/). */
inline std::vector<GoldenPrompt> load_golden(const std::string& name) {
  const std::string path = std::string(KILN_TEST_SOURCE_DIR) + "/tests/reference/goldens/" + name + ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<GoldenPrompt> out;
  if (!in.good()) return out;
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& p : j.at("prompts")) {
    GoldenPrompt g;
    g.ids = p.at("ids").get<std::vector<int32_t>>();
    for (const auto& row : p.at("logits"))
      for (const auto& v : row) g.logits.push_back(v.get<float>());
    out.push_back(std::move(g));
  }
  return out;
}

/**
 * Three sequences run two steps together (prefills, then decodes beside a second prefill chunk, in
 * an order that differs from their ids) and each alone: every row must be bitwise the same.
 */
inline void expect_ragged_batch_matches_alone(model::ModelHost& host, const std::vector<std::vector<int32_t>>& first,
                                              const std::vector<std::vector<int32_t>>& second) {
  const size_t V = host.hparams().n_vocab;
  std::vector<std::vector<float>> alone(3), batched(3);
  for (uint64_t s = 0; s < 3; ++s) {
    ASSERT_EQ(host.add_sequence(100 + s), cache::Status::ok);
    for (const auto* step : {&first, &second}) {
      model::StepResult r;
      ASSERT_TRUE(host.step({{100 + s, (*step)[s], true, true}}, &r).ok());
      alone[s].insert(alone[s].end(), r.logits.begin(), r.logits.end());
    }
    host.release(100 + s);
  }
  for (uint64_t s = 0; s < 3; ++s) ASSERT_EQ(host.add_sequence(s), cache::Status::ok);
  for (const auto* step : {&first, &second}) {
    model::StepResult r;
    ASSERT_TRUE(
        host.step({{2, (*step)[2], true, true}, {0, (*step)[0], true, true}, {1, (*step)[1], true, true}}, &r).ok());
    for (uint32_t row = 0; row < r.rows; ++row) {
      auto& dst = batched[r.row_seq[row]];
      dst.insert(dst.end(), r.logits.begin() + row * V, r.logits.begin() + (row + 1) * V);
    }
  }
  for (uint64_t s = 0; s < 3; ++s) {
    ASSERT_EQ(batched[s].size(), alone[s].size()) << s;
    EXPECT_EQ(std::memcmp(batched[s].data(), alone[s].data(), alone[s].size() * 4), 0) << "sequence " << s;
    host.release(s);
  }
}

/** Normalized mean squared error of `b` against `a` (the op harness's measure). */
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace kiln::test
