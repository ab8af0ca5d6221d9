#include "plugin/parser_host.hpp"

#include "core/error.hpp"
#include "plugin/registry.hpp"

namespace kiln {
namespace {
void collect(void* user, const kiln_parse_event* ev) {
  auto* out = static_cast<std::vector<ParseEvent>*>(user);
  ParseEvent e;
  e.kind = static_cast<kiln_parse_event_kind>(ev->kind);
  e.tool_index = ev->tool_index;
  auto s = [](kiln_str v) { return v.data ? std::string(v.data, v.size) : std::string(); };
  e.text = s(ev->text);
  if (ev->kind == KILN_EVENT_TOOL_CALL_START) {
    e.id = s(ev->id);
    e.name = s(ev->name);
  }
  out->push_back(std::move(e));
}
}  // namespace

ParserInstance::ParserInstance(const Component& c, const ParserRequest& r)
    : vt_(static_cast<const kiln_parser_vtable*>(c.vtable)), name_(c.name) {
  if (c.kind != KILN_COMPONENT_REASONING_PARSER && c.kind != KILN_COMPONENT_TOOL_PARSER)
    throw_error("[plugin] '{}' is a {}, not a parser", c.name, component_kind_name(c.kind));
  kiln_parser_options o{};
  o.struct_size = sizeof(o);
  o.thinking = r.thinking;
  o.tools_json = {r.tools_json.data(), r.tools_json.size()};
  o.prompt_tail = {r.prompt_tail.data(), r.prompt_tail.size()};
  kiln_error err{};
  self_ = vt_->create(&o, &err);
  if (!self_)
    throw_error("[plugin] {} '{}': create failed: {}", component_kind_name(c.kind), c.name,
                err.message[0] ? err.message : "no reason given");
}

ParserInstance::~ParserInstance() {
  if (self_) vt_->destroy(self_);
}

void ParserInstance::feed(std::string_view delta, std::vector<ParseEvent>& out) {
  kiln_error err{};
  if (vt_->feed(self_, {delta.data(), delta.size()}, &collect, &out, &err) != KILN_OK)
    throw_error("[parser {}] {}", name_, err.message);
}

void ParserInstance::finish(std::vector<ParseEvent>& out) {
  kiln_error err{};
  if (vt_->finish(self_, &collect, &out, &err) != KILN_OK) throw_error("[parser {}] {}", name_, err.message);
}

}  // namespace kiln
