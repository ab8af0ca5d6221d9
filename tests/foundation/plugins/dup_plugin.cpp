// Provides a tool parser whose name clashes with test_good's: the second one loaded is refused.
#include <kiln/plugin.hpp>

namespace {
class Dup : public kiln::ToolCallParser {
 public:
  explicit Dup(const kiln::ParserOptions&) {}
  void feed(std::string_view d, kiln::EventSink& out) override { out.content(d); }
  void finish(kiln::EventSink&) override {}
};
}  // namespace

KILN_PLUGIN(test_dup, "1.0.0", kiln::tool_parser<Dup>("test_lines"))
