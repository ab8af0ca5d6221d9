// A well-formed test plugin: a tool parser that turns "CALL name args" lines into calls and a
// reasoning parser that passes text through. Built as a real .so by the test suite.
#include <kiln/plugin.hpp>

#include <string>

namespace {

class LineToolParser : public kiln::ToolCallParser {
 public:
  explicit LineToolParser(const kiln::ParserOptions& o) : tools_(o.tools_json) {}
  void feed(std::string_view delta, kiln::EventSink& out) override {
    buf_ += delta;
    size_t nl;
    while ((nl = buf_.find('\n')) != std::string::npos) {
      line(buf_.substr(0, nl + 1), out);
      buf_.erase(0, nl + 1);
    }
  }
  void finish(kiln::EventSink& out) override {
    if (!buf_.empty()) line(buf_, out);
    buf_.clear();
  }

 private:
  void line(const std::string& l, kiln::EventSink& out) {
    if (l.rfind("CALL ", 0) == 0) {
      std::string rest = l.substr(5);
      if (!rest.empty() && rest.back() == '\n') rest.pop_back();
      size_t sp = rest.find(' ');
      out.tool_call_start(calls_, "", rest.substr(0, sp));
      out.tool_call_arguments(calls_, sp == std::string::npos ? "{}" : rest.substr(sp + 1));
      ++calls_;
    } else {
      out.content(l);
    }
  }
  std::string tools_, buf_;
  uint32_t calls_ = 0;
};

class PassThroughReasoning : public kiln::ReasoningParser {
 public:
  explicit PassThroughReasoning(const kiln::ParserOptions& o) : thinking_(o.thinking == 1) {}
  void feed(std::string_view d, kiln::EventSink& out) override { thinking_ ? out.reasoning(d) : out.content(d); }
  void finish(kiln::EventSink&) override {}

 private:
  bool thinking_;
};

}  // namespace

KILN_PLUGIN(test_good, "1.2.3", kiln::tool_parser<LineToolParser>("test_lines", "CALL name {json} lines"),
            kiln::reasoning_parser<PassThroughReasoning>("test_passthrough", "all reasoning when thinking"))
