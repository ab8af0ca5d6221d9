// Test helpers: where the shared fixtures are, and a scratch directory per test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "source_paths.hpp"

namespace kiln::test {

/** $KILN_FIXTURES, else <source>/../shared/fixtures. */
inline std::string fixtures_dir() {
  if (const char* e = std::getenv("KILN_FIXTURES"); e && *e) return e;
  return std::string(KILN_TEST_SOURCE_DIR) + "/../shared/fixtures";
}

inline std::string fixture(const std::string& rel) { return fixtures_dir() + "/" + rel; }

/** The message of the kiln::HostError `fn` throws ("" when it throws none). */
inline std::string host_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const HostError& e) {
    return e.what();
  }
  return "";
}

/** The 40 greedy ids from BOS that stories260K/EXPECTED_GREEDY.txt records (empty when missing). */
inline std::vector<int32_t> stories260k_expected_greedy() {
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

#define KILN_REQUIRE_FIXTURE(path)                                                     \
  do {                                                                                 \
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture missing: " << (path); \
  } while (0)

/** A fresh directory under the system temp folder, removed at destruction. */
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("kiln-") + (info ? std::string(info->test_suite_name()) + "-" + info->name() : "t");
    static int counter = 0;  // several TempDirs in one test must not share a folder
    path_ = std::filesystem::temp_directory_path() /
            (name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::test
