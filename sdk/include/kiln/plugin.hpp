/**
 * @file plugin.hpp
 * @brief Header-only C++ side of the kiln SDK: write a class, register it with one macro.
 *
 * @code
 *   #include <kiln/plugin.hpp>
 *   class MyParser : public kiln::ToolCallParser {
 *    public:
 *     explicit MyParser(const kiln::ParserOptions& opts);
 *     void feed(std::string_view delta, kiln::EventSink& out) override;
 *     void finish(kiln::EventSink& out) override;
 *   };
 *   KILN_PLUGIN(my_plugin, "1.0.0", kiln::tool_parser<MyParser>("my_format", "JSON-in-markdown calls"))
 * @endcode
 *
 * Exceptions thrown by the class are caught at the boundary and returned as kiln_error; nothing
 * but C types crosses. Define KILN_PLUGIN_STATIC when compiling the plugin into the host (tests,
 * sanitizer builds): the macro then exports no `kiln_plugin_get_descriptor` and only defines
 * `kiln_plugin_descriptor_<name>`, which the host registers directly.
 */
#pragma once

#include <kiln/error.hpp>
#include <kiln/kiln_plugin.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

inline std::string_view view(kiln_str s) { return s.data ? std::string_view(s.data, s.size) : std::string_view(); }
inline kiln_str str(std::string_view s) { return kiln_str{s.data(), s.size()}; }

namespace detail {
/** Runs `fn`, turning any exception into a status + message. */
template <class Fn>
kiln_status guarded(kiln_error* err, Fn&& fn) noexcept {
  try {
    fn();
    return KILN_OK;
  } catch (const Error& e) {
    kiln_error_set(err, e.status(), e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    kiln_error_set(err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return KILN_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    kiln_error_set(err, KILN_ERR_INTERNAL, e.what());
    return KILN_ERR_INTERNAL;
  } catch (...) {
    kiln_error_set(err, KILN_ERR_INTERNAL, "unknown exception");
    return KILN_ERR_INTERNAL;
  }
}
}  // namespace detail

/* ---------------------------------------------------------------------------------------------
 * Parsers
 * ------------------------------------------------------------------------------------------- */

/** Options a parser gets per request. */
struct ParserOptions {
  int thinking = -1;              ///< -1 template default, 0 off, 1 on
  std::string_view tools_json;    ///< the request's `tools` array (JSON), may be empty
  std::string_view prompt_tail;   ///< end of the rendered prompt

  static ParserOptions from_c(const kiln_parser_options* o) {
    ParserOptions p;
    if (!o) return p;
    if (KILN_FITS(o, kiln_parser_options, thinking)) p.thinking = o->thinking;
    if (KILN_FITS(o, kiln_parser_options, tools_json)) p.tools_json = view(o->tools_json);
    if (KILN_FITS(o, kiln_parser_options, prompt_tail)) p.prompt_tail = view(o->prompt_tail);
    return p;
  }
};

/** Where a parser sends its events; wraps the host's C callback. */
class EventSink {
 public:
  EventSink(kiln_event_sink fn, void* user) : fn_(fn), user_(user) {}
  void content(std::string_view text) { text_event(KILN_EVENT_CONTENT, 0, text); }
  void reasoning(std::string_view text) { text_event(KILN_EVENT_REASONING, 0, text); }
  void tool_call_start(uint32_t index, std::string_view id, std::string_view name) {
    kiln_parse_event ev = blank(KILN_EVENT_TOOL_CALL_START, index);
    ev.id = str(id);
    ev.name = str(name);
    fn_(user_, &ev);
  }
  void tool_call_arguments(uint32_t index, std::string_view fragment) {
    text_event(KILN_EVENT_TOOL_CALL_ARGS, index, fragment);
  }

 private:
  static kiln_parse_event blank(uint32_t kind, uint32_t index) {
    kiln_parse_event ev{};
    ev.struct_size = sizeof(ev);
    ev.kind = kind;
    ev.tool_index = index;
    return ev;
  }
  void text_event(uint32_t kind, uint32_t index, std::string_view text) {
    if (text.empty()) return;  // empty deltas carry nothing; never emit them
    kiln_parse_event ev = blank(kind, index);
    ev.text = str(text);
    fn_(user_, &ev);
  }
  kiln_event_sink fn_;
  void* user_;
};

/** Base of reasoning and tool-call parsers: one instance per request, fed incrementally. */
class Parser {
 public:
  virtual ~Parser() = default;
  /** Consumes a delta of model output; emits what can be decided, holds back partial tags. */
  virtual void feed(std::string_view delta, EventSink& out) = 0;
  /** End of stream: emits everything still held back. */
  virtual void finish(EventSink& out) = 0;
};
class ReasoningParser : public Parser {};
class ToolCallParser : public Parser {};

namespace detail {
template <class T>
struct ParserAdapter {
  static void* create(const kiln_parser_options* options, kiln_error* err) noexcept {
    T* obj = nullptr;
    guarded(err, [&] { obj = new T(ParserOptions::from_c(options)); });
    return obj;
  }
  static void destroy(void* self) noexcept { delete static_cast<T*>(self); }
  static kiln_status feed(void* self, kiln_str delta, kiln_event_sink sink, void* user, kiln_error* err) noexcept {
    return guarded(err, [&] {
      EventSink out(sink, user);
      static_cast<T*>(self)->feed(view(delta), out);
    });
  }
  static kiln_status finish(void* self, kiln_event_sink sink, void* user, kiln_error* err) noexcept {
    return guarded(err, [&] {
      EventSink out(sink, user);
      static_cast<T*>(self)->finish(out);
    });
  }
  static const kiln_parser_vtable* vtable() {
    static const kiln_parser_vtable vt = {sizeof(kiln_parser_vtable), 0, &create, &destroy, &feed, &finish, {}};
    return &vt;
  }
};

inline kiln_component component(uint32_t kind, const char* name, const char* description, const void* vtable,
                                const char* const* model_types = nullptr) {
  kiln_component c{};
  c.struct_size = sizeof(c);
  c.kind = kind;
  c.name = name;
  c.description = description;
  c.vtable = vtable;
  c.model_types = model_types;
  return c;
}
}  // namespace detail

/** Registers T (derived from kiln::ToolCallParser, constructible from ParserOptions). */
template <class T>
kiln_component tool_parser(const char* name, const char* description = "") {
  static_assert(std::is_base_of_v<ToolCallParser, T>, "T must derive from kiln::ToolCallParser");
  return detail::component(KILN_COMPONENT_TOOL_PARSER, name, description, detail::ParserAdapter<T>::vtable());
}

/** Registers T (derived from kiln::ReasoningParser, constructible from ParserOptions). */
template <class T>
kiln_component reasoning_parser(const char* name, const char* description = "") {
  static_assert(std::is_base_of_v<ReasoningParser, T>, "T must derive from kiln::ReasoningParser");
  return detail::component(KILN_COMPONENT_REASONING_PARSER, name, description,
                           detail::ParserAdapter<T>::vtable());
}

}  // namespace kiln

#include <kiln/model.hpp>

#define KILN_PLUGIN_CONCAT_(a, b) a##b
#define KILN_PLUGIN_CONCAT(a, b) KILN_PLUGIN_CONCAT_(a, b)

#ifdef KILN_PLUGIN_STATIC
#define KILN_PLUGIN_EXPORT_ENTRY_(id)
#else
#define KILN_PLUGIN_EXPORT_ENTRY_(id)                                                                        \
  extern "C" KILN_EXPORT const kiln_plugin_descriptor* kiln_plugin_get_descriptor(uint32_t major,           \
                                                                                  uint32_t minor) {         \
    return KILN_PLUGIN_CONCAT(kiln_plugin_descriptor_, id)(major, minor);                                    \
  }
#endif

/**
 * Declares a plugin `id` (a C identifier) with a version string and one or more components made by
 * kiln::tool_parser<T>(), kiln::reasoning_parser<T>() or kiln::model<T>().
 */
#define KILN_PLUGIN(id, version, ...)                                                                        \
  extern "C" const kiln_plugin_descriptor* KILN_PLUGIN_CONCAT(kiln_plugin_descriptor_, id)(uint32_t,          \
                                                                                          uint32_t) {        \
    static const kiln_component components[] = {__VA_ARGS__};                                                 \
    static const kiln_plugin_descriptor descriptor = {                                                        \
        sizeof(kiln_plugin_descriptor),                                                                       \
        KILN_ABI_MAJOR,                                                                                       \
        KILN_ABI_MINOR,                                                                                       \
        #id,                                                                                                  \
        version,                                                                                              \
        static_cast<uint32_t>(sizeof(components) / sizeof(components[0])),                                   \
        0,                                                                                                    \
        components,                                                                                           \
        nullptr,                                                                                              \
        {}};                                                                                                  \
    return &descriptor;                                                                                       \
  }                                                                                                           \
  KILN_PLUGIN_EXPORT_ENTRY_(id)
