// third_party_parser: a small tool-call parser plugin written only against the kiln SDK.
//
// Format ("markdown_json"): models that were never trained on a tool format often answer with a
// fenced JSON block. Each block
//
//   ```json
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   ```
//
// whose fence starts a line becomes a tool call (`arguments` may also be a JSON string, or be
// called `parameters`; missing means {}). Everything else, including fenced JSON that is not a call
// object, stays content byte for byte. Streaming: text is emitted as soon as it cannot be the start
// of a fence; a block is emitted when its closing fence arrives (or at end of stream).
#include <kiln/plugin.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace {

constexpr std::string_view kFence = "```json";
constexpr std::string_view kEnd = "```";
constexpr size_t npos = std::string_view::npos;

class MarkdownJsonParser : public kiln::ToolCallParser {
 public:
  explicit MarkdownJsonParser(const kiln::ParserOptions&) {}

  void feed(std::string_view delta, kiln::EventSink& out) override {
    buf_.append(delta);
    run(false, out);
  }
  void finish(kiln::EventSink& out) override { run(true, out); }

 private:
  void run(bool eof, kiln::EventSink& out) {
    size_t pos = 0;
    while (in_block_ ? block(eof, pos, out) : text(eof, pos, out)) {
    }
    buf_.erase(0, pos);
  }

  /** Text outside blocks. A fence counts only at the start of a line and followed by a newline. */
  bool text(bool eof, size_t& pos, kiln::EventSink& out) {
    std::string_view s = std::string_view(buf_).substr(pos);
    for (size_t i = 0; i < s.size(); ++i) {
      bool line_start = i == 0 ? at_line_start_ : s[i - 1] == '\n';
      if (!line_start || s[i] != '`') continue;
      std::string_view t = s.substr(i);
      size_t need = kFence.size() + 1;  // the fence and the newline after it
      bool prefix = kFence.substr(0, std::min(t.size(), kFence.size())) == t.substr(0, kFence.size());
      if (!prefix) continue;
      if (t.size() < need) {
        if (eof) break;  // a truncated fence at the end is text
        emit_text(s.substr(0, i), pos, out);
        return false;
      }
      if (t[kFence.size()] != '\n') continue;
      emit_text(s.substr(0, i), pos, out);
      pos += need;
      in_block_ = true;
      scan_ = 0;
      return true;
    }
    emit_text(s, pos, out);
    return false;
  }

  void emit_text(std::string_view t, size_t& pos, kiln::EventSink& out) {
    if (t.empty()) return;
    out.content(t);
    pos += t.size();
    at_line_start_ = t.back() == '\n';
  }

  /** Inside a block: wait for a closing fence at the start of a line. */
  bool block(bool eof, size_t& pos, kiln::EventSink& out) {
    std::string_view s = std::string_view(buf_).substr(pos);
    size_t e = npos;
    for (size_t i = s.find(kEnd.substr(0, 1), scan_); i != npos; i = s.find('`', i + 1)) {
      if (i != 0 && s[i - 1] != '\n') continue;
      std::string_view t = s.substr(i, kEnd.size());
      if (kEnd.substr(0, t.size()) != t) continue;
      if (t.size() < kEnd.size() && !eof) {
        scan_ = i;
        return false;
      }
      if (t.size() == kEnd.size()) {
        e = i;
        break;
      }
    }
    if (e == npos && !eof) {
      scan_ = s.size();
      return false;
    }
    std::string_view body = s.substr(0, e == npos ? s.size() : e);
    size_t consumed = e == npos ? s.size() : e + kEnd.size();
    std::string name, arguments;
    if (to_call(body, &name, &arguments)) {
      out.tool_call_start(calls_, "", name);  // the host assigns the id
      out.tool_call_arguments(calls_, arguments);
      ++calls_;
    } else {
      std::string raw(kFence);
      raw += '\n';
      raw += s.substr(0, consumed);
      out.content(raw);  // not a call: the block stays text, unchanged
    }
    pos += consumed;
    at_line_start_ = false;
    in_block_ = false;
    return true;
  }

  static bool to_call(std::string_view body, std::string* name, std::string* arguments) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (!j.is_object()) return false;
    auto n = j.find("name");
    if (n == j.end() || !n->is_string() || n->get_ref<const std::string&>().empty()) return false;
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (const char* key : {"arguments", "parameters"}) {
      auto a = j.find(key);
      if (a == j.end()) continue;
      args = a->is_string() ? nlohmann::ordered_json::parse(a->get<std::string>(), nullptr, false) : *a;
      break;
    }
    if (!args.is_object()) return false;
    *name = n->get<std::string>();
    *arguments = args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return true;
  }

  std::string buf_;
  bool in_block_ = false;
  bool at_line_start_ = true;
  size_t scan_ = 0;
  uint32_t calls_ = 0;
};

}  // namespace

KILN_PLUGIN(third_party_parser, "1.0.0",
            kiln::tool_parser<MarkdownJsonParser>("markdown_json", "```json {\"name\", \"arguments\"} ``` fenced blocks"))
