// Host side of a parser plugin: one instance per request, events collected as owned strings.
#pragma once

#include <kiln/kiln_plugin.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct Component;

struct ParseEvent {
  kiln_parse_event_kind kind;
  uint32_t tool_index = 0;
  std::string text;  ///< CONTENT / REASONING / TOOL_CALL_ARGS
  std::string id;    ///< TOOL_CALL_START
  std::string name;  ///< TOOL_CALL_START
  bool operator==(const ParseEvent&) const = default;
};

struct ParserRequest {
  int thinking = -1;
  std::string tools_json;
  std::string prompt_tail;
};

class ParserInstance {
 public:
  /** Creates a per-request parser from a reasoning- or tool-parser component; throws HostError. */
  ParserInstance(const Component& component, const ParserRequest& request);
  ~ParserInstance();
  ParserInstance(const ParserInstance&) = delete;
  ParserInstance& operator=(const ParserInstance&) = delete;

  /** Feeds a delta; appends the events to `out`. Throws HostError when the plugin reports failure. */
  void feed(std::string_view delta, std::vector<ParseEvent>& out);
  void finish(std::vector<ParseEvent>& out);
  const std::string& name() const { return name_; }

 private:
  const kiln_parser_vtable* vt_;
  void* self_ = nullptr;
  std::string name_;
};

}  // namespace kiln
