// bench_parsers: how fast the parser plugins are, through the host path a server uses.
//
//   MB/s       the whole stream fed at once (feed + finish), events collected by the host
//   us/token   the stream fed one "token" at a time (tags are single tokens as in the real
//              vocabularies, other text 4-byte pieces), with events mapped to OpenAI deltas as a
//              server would; the target is < 5 us/token, invisible beside a decode step
// The reference row is a plain copy of the same bytes, measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "parse/event_mapper.hpp"
#include "parse/pipeline.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_qwen3_coder(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_gemma4(uint32_t, uint32_t);

namespace {

using Clock = std::chrono::steady_clock;

const char* kTools = R"([{"type":"function","function":{"name":"write_file","parameters":{"type":"object","properties":{
  "path":{"type":"string"},"content":{"type":"string"},"options":{"type":"object"},"mode":{"type":"integer"}}}}}])";

std::string code_block(int i) {
  std::string s;
  for (int line = 0; line < 8; ++line)
    s += fmt::format("    total_{0} = compute(values[{1}], scale={1}.5)  # line {1} of block {0}\n", i, line);
  return s;
}

std::string qwen_stream(size_t bytes) {
  std::string s = "I will write the files now.\n\n";
  for (int i = 0; s.size() < bytes; ++i)
    s += fmt::format("<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/mod_{0}.py\n</parameter>\n"
                     "<parameter=content>\n{1}</parameter>\n<parameter=options>\n{{'force': True, 'n': {0}}}\n"
                     "</parameter>\n<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>\n",
                     i, code_block(i));
  return s;
}

std::string gemma_stream(size_t bytes) {
  const std::string q = "<|\"|>";
  std::string s = "<|channel>thought\nThe user wants files written.<channel|>";
  for (int i = 0; s.size() < bytes; ++i)
    s += fmt::format("<|tool_call>call:write_file{{path:{2}src/mod_{0}.py{2},content:{2}{1}{2},options:{{force:true,n:{0}}},"
                     "mode:420}}<tool_call|>",
                     i, code_block(i), q);
  return s;
}

/** Cuts the stream like a tokenizer would: special tags whole, other text in 4-byte pieces. */
std::vector<std::string_view> tokens(std::string_view s, const std::vector<std::string_view>& tags) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = std::min<size_t>(4, s.size() - i);
    for (auto t : tags)
      if (s.substr(i, t.size()) == t) len = t.size();
    // do not run into a tag with a plain piece
    for (size_t k = 1; k < len; ++k)
      if (s[i + k] == '<') len = k;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

template <class Fn>
double best_seconds(Fn&& fn, int reps = 3) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

struct Row {
  std::string name;
  double mb_s, us_token, us_token_parser;
  size_t n_tokens;
};

Row measure(const std::string& name, const kiln::Component* reasoning, const kiln::Component* tools,
            const std::string& stream, const std::vector<std::string_view>& toks) {
  kiln::ParserRequest req;
  req.tools_json = kTools;
  req.thinking = 1;
  size_t sink = 0;
  double whole = best_seconds([&] {
    kiln::parse::ParserPipeline p(reasoning, tools, req);
    std::vector<kiln::ParseEvent> events;
    p.feed(stream, events);
    p.finish(events);
    sink += events.size();
  });
  double parser_only = best_seconds([&] {
    kiln::parse::ParserPipeline p(reasoning, tools, req);
    std::vector<kiln::ParseEvent> events;
    for (auto t : toks) {
      events.clear();
      p.feed(t, events);
      sink += events.size();
    }
    p.finish(events);
  });
  double per_token = best_seconds([&] {
    kiln::parse::ParserPipeline p(reasoning, tools, req);
    kiln::parse::EventMapper mapper(kiln::parse::CallIds(1));
    std::vector<kiln::ParseEvent> events;
    for (auto t : toks) {
      events.clear();
      p.feed(t, events);
      for (const auto& e : events)
        if (auto d = mapper.on_event(e)) sink += kiln::parse::delta_json(*d).size();  // as far as the wire
    }
    events.clear();
    p.finish(events);
    for (const auto& e : events)
      if (auto d = mapper.on_event(e)) sink += kiln::parse::delta_json(*d).size();  // as far as the wire
  });
  if (sink == 0) fmt::print("(no events?)\n");
  return {name, stream.size() / whole / 1e6, per_token / toks.size() * 1e6, parser_only / toks.size() * 1e6,
          toks.size()};
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::stoul(argv[1]) : 4u << 20;
  kiln::PluginRegistry reg;
  reg.register_static(&kiln_plugin_descriptor_qwen3_coder, "<static qwen3_coder>");
  reg.register_static(&kiln_plugin_descriptor_gemma4, "<static gemma4>");
  using kiln::parse::find_parser;
  const auto& qwen_tools = find_parser(reg, KILN_COMPONENT_TOOL_PARSER, "qwen3_coder");
  const auto& qwen_reason = find_parser(reg, KILN_COMPONENT_REASONING_PARSER, "qwen3");
  const auto& gemma_tools = find_parser(reg, KILN_COMPONENT_TOOL_PARSER, "gemma4");
  const auto& gemma_reason = find_parser(reg, KILN_COMPONENT_REASONING_PARSER, "gemma4");

  std::string qs = qwen_stream(bytes), gs = gemma_stream(bytes);
  auto qt = tokens(qs, {"<tool_call>", "</tool_call>"});
  auto gt = tokens(gs, {"<|tool_call>", "<tool_call|>", "<|\"|>", "<|channel>", "<channel|>"});

  // Reference: copying the bytes, once and token by token.
  std::string copy;
  double ref_whole = best_seconds([&] { copy.assign(qs); });
  double ref_tok = best_seconds([&] {
    copy.clear();
    for (auto t : qt) copy.append(t);
  });
  Row ref{"reference: byte copy", qs.size() / ref_whole / 1e6, ref_tok / qt.size() * 1e6, 0, qt.size()};

  std::vector<Row> rows = {
      measure("qwen3_coder", nullptr, &qwen_tools, qs, qt),
      measure("qwen3 -> qwen3_coder", &qwen_reason, &qwen_tools, qs, qt),
      measure("gemma4", nullptr, &gemma_tools, gs, gt),
      measure("gemma4 -> gemma4", &gemma_reason, &gemma_tools, gs, gt),
  };
  fmt::print("parser throughput, {:.1f} MB tool-call-heavy streams (events collected by the host;\n"
             "per token: one token per feed, events mapped to OpenAI deltas; target < 5 us/token)\n\n",
             bytes / 1e6);
  fmt::print("{:<24} {:>10} {:>12} {:>16} {:>10} {:>14}\n", "parser", "MB/s", "us/token", "(parser only)",
             "tokens", "x copy (tok)");
  for (const auto& r : rows)
    fmt::print("{:<24} {:>10.1f} {:>12.3f} {:>16.3f} {:>10} {:>14.1f}\n", r.name, r.mb_s, r.us_token,
               r.us_token_parser, r.n_tokens, r.us_token / ref.us_token);
  fmt::print("{:<24} {:>10.1f} {:>12.4f} {:>10}\n", ref.name, ref.mb_s, ref.us_token, ref.n_tokens);
  bool ok = std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.us_token < 5.0; });
  fmt::print("\nper-token target (< 5 us): {}\n", ok ? "met" : "NOT met");
  return 0;
}
