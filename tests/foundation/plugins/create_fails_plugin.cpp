// A plugin whose parser refuses to be created (constructor throws): create() must fail cleanly.
#include <kiln/plugin.hpp>

namespace {
class Refuses : public kiln::ToolCallParser {
 public:
  explicit Refuses(const kiln::ParserOptions& o) {
    if (o.tools_json.empty()) throw kiln::Error(KILN_ERR_INVALID_ARGUMENT, "this parser needs tools (none given)");
  }
  void feed(std::string_view d, kiln::EventSink& out) override {
    if (d == "explode") throw std::runtime_error("feed failed on purpose");
    out.content(d);
  }
  void finish(kiln::EventSink&) override {}
};
}  // namespace

KILN_PLUGIN(test_create_fails, "1.0.0", kiln::tool_parser<Refuses>("test_refuses"))
