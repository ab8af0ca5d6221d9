// The kiln executable as a user runs it: exit codes, stdout/stderr, one line per refusal.
#include <gtest/gtest.h>
#include <kiln/kiln_plugin.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "source_paths.hpp"

namespace {

namespace fs = std::filesystem;

struct Result {
  int rc;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_cli_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run(const std::string& args, const std::string& stdin_text = "") {
    fs::path in = dir_ / "stdin", out = dir_ / "stdout", err = dir_ / "stderr";
    std::ofstream(in) << stdin_text;
    std::string cmd = std::string(KILN_TEST_BIN_DIR) + "/kiln " + args + " <" + in.string() + " >" + out.string() +
                      " 2>" + err.string();
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  static std::string plugins(const std::string& sub) { return std::string(KILN_TEST_PLUGIN_DIR) + "/" + sub; }

  fs::path dir_;
};

TEST_F(Cli, Version) {
  Result r = run("--version");
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.rfind("kiln ", 0), 0u);
  EXPECT_NE(r.out.find("plugin ABI " + std::to_string(KILN_ABI_MAJOR) + "."), std::string::npos) << r.out;
}

TEST_F(Cli, NoArgumentsPrintsCommandsAndFails) {
  Result r = run("");
  EXPECT_EQ(r.rc, 2);
  for (const char* c : {"plugins", "config check", "serve"}) EXPECT_NE(r.out.find(c), std::string::npos) << c;
}

TEST_F(Cli, UnknownCommandAndOption) {
  Result r = run("frobnicate");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
  r = run("plugins --frob");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown option '--frob'"), std::string::npos);
}

TEST_F(Cli, EverySubcommandHasHelp) {
  for (const char* c : {"plugins", "config check", "serve"}) {
    Result r = run(std::string(c) + " --help");
    EXPECT_EQ(r.rc, 0) << c;
    EXPECT_EQ(r.out.rfind("usage: kiln " + std::string(c), 0), 0u) << r.out;
  }
}

TEST_F(Cli, PluginsListsConfiguredPlugin) {
  std::string cfg = write("p.yaml", "plugins:\n  paths: [" + plugins("good") + "]\n");
  Result r = run("plugins --config " + cfg);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("tool-parser       test_lines       test_good"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reasoning-parser  test_passthrough test_good"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(plugins("good") + "/test_good.so"), std::string::npos) << r.out;
}

TEST_F(Cli, PluginsReportsEachRefusalOnOneLineAndFails) {
  std::string cfg = write("p.yaml", "plugins:\n  paths: [" + plugins("good") + ", " + plugins("dup") + ", " +
                                        plugins("no_entry") + ", " + plugins("handmade_1") + ", " + plugins("garbage") +
                                        ", " + plugins("missing_folder") + "]\n");
  Result r = run("plugins --config " + cfg);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("test_lines"), std::string::npos);
  // stderr: the log lines plus exactly one "refused" summary line per refused plugin.
  std::istringstream lines(r.err);
  int refused = 0;
  for (std::string line; std::getline(lines, line);) refused += line.rfind("refused ", 0) == 0;
  EXPECT_EQ(refused, 5) << r.err;
  for (const char* why : {"duplicate tool-parser name 'test_lines'", "not a kiln plugin", "ABI major mismatch",
                          "cannot load", "plugin folder not found"})
    EXPECT_NE(r.err.find(why), std::string::npos) << why << "\n" << r.err;
}

TEST_F(Cli, PluginsLoadOption) {
  Result r = run("plugins --load " + plugins("good") + "/test_good.so");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("test_lines"), std::string::npos);
}

TEST_F(Cli, ConfigCheckReportsFileLineColumn) {
  std::string cfg = write("bad.yaml", "server:\n  port: 8080\n  hots: x\n");
  Result r = run("config check " + cfg);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind(cfg + ":3:3: unknown key 'hots' in server (did you mean 'host'?)", 0), 0u) << r.err;
}

TEST_F(Cli, ConfigCheckPrintsEffectiveConfig) {
  std::string cfg = write("ok.yaml", "server: {port: 9999}\n");
  Result r = run("config check " + cfg);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("port: 9999"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("host: 127.0.0.1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("request_timeout_s: 600"), std::string::npos) << r.out;
}

TEST_F(Cli, DefaultConfigIsValid) {
  Result r = run(std::string("config check --quiet ") + KILN_TEST_SOURCE_DIR + "/configs/default.yaml");
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_TEST_SOURCE_DIR) / "configs"))
    if (e.path().extension() == ".yaml") {
      Result c = run("config check --quiet " + e.path().string());
      EXPECT_EQ(c.rc, 0) << e.path() << ": " << c.err;
    }
}

}  // namespace
