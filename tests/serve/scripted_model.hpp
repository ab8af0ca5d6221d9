// The scripted test model's files for tool-call and reasoning tests: a byte-level tokenizer with a
// model family's control tokens, a chat template, and a script table that makes greedy decoding
// answer a request with exactly what a real Qwen3.5 or Gemma 4 writes (scripted_test_plugin.cpp).
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint_writer.hpp"
#include "server_harness.hpp"
#include "template/chat_render.hpp"
#include "text/tokenizer.hpp"

namespace kiln::serve::test {

/** GPT-2's byte → printable character map (byte-level BPE vocabularies are written in it). */
inline std::vector<std::string> byte_chars() {
  std::vector<int> bs, cs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  cs = bs;
  for (int b = 0, n = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) bs.push_back(b), cs.push_back(256 + n++);
  std::vector<std::string> out(256);
  for (size_t i = 0; i < bs.size(); ++i) {
    const int c = cs[i];
    std::string u;
    if (c < 0x80) {
      u += static_cast<char>(c);
    } else {
      u += static_cast<char>(0xC0 | (c >> 6));
      u += static_cast<char>(0x80 | (c & 0x3F));
    }
    out[static_cast<size_t>(bs[i])] = u;
  }
  return out;
}

struct Family {
  std::string name, reasoning_parser, tool_parser, eos;
  std::vector<std::pair<std::string, bool>> added;  ///< added tokens (text, special)
  std::string chat_template, script;
};

inline Family qwen() {
  Family f;
  f.name = "qwen";
  f.reasoning_parser = "qwen3";
  f.tool_parser = "qwen3_coder";
  f.eos = "<|im_end|>";
  f.added = {{"<|im_start|>", true}, {"<|im_end|>", true},   {"<think>", false},
             {"</think>", false},    {"<tool_call>", false}, {"</tool_call>", false}};
  f.chat_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if tools %}<|im_start|>system\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
  f.script =
      "The user wants the weather in Paris for 3 days.\n</think>\n\nLet me look that up.\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
      "<parameter=metric>\nTrue\n</parameter>\n</function>\n</tool_call>";
  return f;
}

inline Family gemma() {
  Family f;
  f.name = "gemma";
  f.reasoning_parser = "gemma4";
  f.tool_parser = "gemma4";
  f.eos = "<turn|>";
  f.added = {{"<|turn>", true},       {"<turn|>", true},       {"<|channel>", false}, {"<channel|>", false},
             {"<|tool_call>", false}, {"<tool_call|>", false}, {"<|\"|>", false}};
  f.chat_template =
      "{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content }}<turn|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|turn>model\n{% endif %}";
  f.script =
      "<|channel>thought\nThe user wants the weather in Paris.<channel|>Let me look that up."
      "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3,metric:true}<tool_call|>";
  return f;
}

inline const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather forecast", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
  "required": ["city", "days"]}}}])");

inline json request_body() {
  return {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris for the next 3 days?"}}}},
          {"tools", kTools},
          {"temperature", 0}};
}

/**
 * Writes the tokenizer, template and a script that answers `request_body()` with f.script (unless
 * `answer_request_body` is false) and each of `more` (a chat body, its answer) after its own
 * rendered prompt (their rows must not overlap). `padded_rows` output rows past the tokenizer's
 * last id (a padded vocabulary) get a logit above the script's at every position. `max_context`
 * positions are scripted (the weight is max_context x vocabulary floats).
 */
inline std::string write_model(const Family& f, const std::vector<std::pair<json, std::string>>& more = {},
                               bool answer_request_body = true, int padded_rows = 0, int64_t max_context = 1024) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_scripted_" + f.name + "_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  json vocab = json::object();
  const auto chars = byte_chars();
  for (int b = 0; b < 256; ++b) vocab[chars[static_cast<size_t>(b)]] = b;
  json added = json::array();
  for (size_t i = 0; i < f.added.size(); ++i)
    added.push_back({{"id", 256 + i},
                     {"content", f.added[i].first},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", f.added[i].second}});
  const json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", json::array()}}}};
  const json cfg = {{"eos_token", f.eos}, {"chat_template", f.chat_template}};
  const auto write = [&](const std::string& name, const std::string& text) {
    model::write_file(dir + "/" + name, std::vector<uint8_t>(text.begin(), text.end()));
  };
  write("tokenizer.json", tok.dump());
  write("tokenizer_config.json", cfg.dump());
  const int64_t tokens = 256 + static_cast<int64_t>(f.added.size()), V = tokens + padded_rows, P = max_context;
  write("config.json",
        json{{"model_type", "kiln_test_scripted"}, {"vocab_size", V}, {"max_context", P}, {"eos_token_id", 256 + 1}}
            .dump());
  // Where the answer starts: after the rendered prompt, as the server renders and encodes it.
  const text::Tokenizer t = text::Tokenizer::from_dir(dir);
  const ChatTemplate ct = ChatTemplate::from_model_dir(dir);
  std::vector<float> table(static_cast<size_t>(P * V), 0.0f);
  std::vector<std::pair<json, std::string>> scripts;
  if (answer_request_body) scripts.push_back({request_body(), f.script});
  scripts.insert(scripts.end(), more.begin(), more.end());
  for (int64_t p = 0; p < P; ++p)
    for (int64_t id = tokens; id < V; ++id) table[static_cast<size_t>(p * V + id)] = 50;
  for (auto [body, script] : scripts) {
    if (!body.contains("add_generation_prompt")) body["add_generation_prompt"] = true;
    const size_t L = t.encode(ct.render_request(body.dump())).size();
    std::vector<int32_t> answer = t.encode(script);
    answer.push_back(*t.token_to_id(f.eos));
    for (size_t i = 0; i < answer.size(); ++i)
      table[(L - 1 + i) * static_cast<size_t>(V) + static_cast<size_t>(answer[i])] = 30;
  }
  model::write_safetensors(dir + "/model.safetensors",
                           {{"script.weight", DType::f32, {P, V}, model::encode_f32(table, DType::f32)}});
  return dir;
}

/** The served model of a script written by write_model into `dir`, with the family's parsers. */
inline ModelConfig scripted_config(const Family& f, const std::string& dir) {
  ModelConfig mc;
  mc.name = "scripted";
  mc.path = dir;
  mc.reasoning_parser = f.reasoning_parser;
  mc.tool_parser = f.tool_parser;
  mc.cache.memory_bytes = 1 << 20;
  return mc;
}

}  // namespace kiln::serve::test
