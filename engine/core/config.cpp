// YAML configuration: a small schema walker over yaml-cpp nodes. Each field is read through a
// Section that knows the file and the node's mark, so every error can say file:line:col and what
// form was expected. Unknown keys are errors with a "did you mean" hint.
#include "core/config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/dtype.hpp"

namespace kiln {

ConfigError::ConfigError(std::string file, int line, int column, const std::string& message)
    : std::runtime_error(line > 0 ? fmt::format("{}:{}:{}: {}", file, line, column, message)
                                  : fmt::format("{}: {}", file, message)),
      file_(std::move(file)),
      line_(line),
      column_(column) {}

bool parse_byte_size(const std::string& text, uint64_t* out) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  if (s.empty()) return false;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return false;
  double value;
  try {
    size_t used = 0;
    value = std::stod(s.substr(0, i), &used);
    if (used != i) return false;
  } catch (...) {
    return false;
  }
  std::string unit = s.substr(i);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::pair<const char*, double> units[] = {{"", 1},
                                                         {"b", 1},
                                                         {"k", 1024.0},
                                                         {"kb", 1e3},
                                                         {"kib", 1024.0},
                                                         {"m", 1048576.0},
                                                         {"mb", 1e6},
                                                         {"mib", 1048576.0},
                                                         {"g", 1073741824.0},
                                                         {"gb", 1e9},
                                                         {"gib", 1073741824.0},
                                                         {"t", 1099511627776.0},
                                                         {"tb", 1e12},
                                                         {"tib", 1099511627776.0}};
  for (const auto& [name, mult] : units)
    if (unit == name) {
      double bytes = value * mult;
      if (!std::isfinite(bytes) || bytes < 0 || bytes > 1.8e19) return false;
      *out = static_cast<uint64_t>(bytes);
      return true;
    }
  return false;
}

namespace {

// Edit distance for "did you mean" hints.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

class Section {
 public:
  Section(const std::string* file, YAML::Node node, std::string path)
      : file_(file), node_(std::move(node)), path_(std::move(path)) {}

  [[noreturn]] void fail_at(const YAML::Node& n, const std::string& msg) const {
    YAML::Mark m = n.Mark();
    if (m.is_null()) throw ConfigError(*file_, 0, 0, msg);
    throw ConfigError(*file_, m.line + 1, m.column + 1, msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(node_, msg); }

  /** Requires a mapping whose keys are all in `allowed`. */
  void expect_map(std::initializer_list<const char*> allowed) const {
    if (!node_.IsMap()) fail(fmt::format("{} must be a mapping ({}: {{key: value, ...}})", path_, path_));
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      std::string key = it->first.Scalar();
      bool ok = false;
      for (const char* a : allowed) ok |= key == a;
      if (ok) continue;
      std::string best;
      size_t best_d = 3;
      std::string list;
      for (const char* a : allowed) {
        list += (list.empty() ? "" : ", ") + std::string(a);
        size_t d = distance(key, a);
        if (d < best_d) best_d = d, best = a;
      }
      std::string hint = best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
      fail_at(it->first, fmt::format("unknown key '{}' in {}{}; expected one of: {}", key, path_, hint, list));
    }
  }

  bool has(const char* key) const { return node_.IsMap() && node_[key] && !node_[key].IsNull(); }
  YAML::Node child(const char* key) const { return node_[key]; }
  Section section(const char* key) const { return Section(file_, node_[key], path_ + "." + key); }
  std::string sub(const char* key) const { return path_ + "." + key; }

  std::string str(const char* key, const std::string& def, bool required = false) const {
    if (!has(key)) {
      if (required) fail(fmt::format("{} is missing required key '{}' (a string)", path_, key));
      return def;
    }
    YAML::Node n = node_[key];
    if (!n.IsScalar()) fail_at(n, fmt::format("{} must be a string", sub(key)));
    return n.Scalar();
  }

  template <class T>
  T number(const char* key, T def, T lo, T hi, const char* form) const {
    if (!has(key)) return def;
    YAML::Node n = node_[key];
    T v{};
    bool ok = n.IsScalar();
    if (ok) {
      try {
        v = n.as<T>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    if (!ok)
      fail_at(n, fmt::format("{} must be {} (got '{}')", sub(key), form, n.IsScalar() ? n.Scalar() : "a non-scalar"));
    if (v < lo || v > hi) fail_at(n, fmt::format("{} must be {} in [{}, {}] (got {})", sub(key), form, lo, hi, v));
    return v;
  }

  template <class T>
  std::optional<T> opt_number(const char* key, T lo, T hi, const char* form) const {
    if (!has(key)) return std::nullopt;
    return number<T>(key, T{}, lo, hi, form);
  }

  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    YAML::Node n = node_[key];
    bool v = false;
    bool ok = n.IsScalar();
    if (ok) {
      try {
        v = n.as<bool>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    if (!ok) fail_at(n, fmt::format("{} must be true or false", sub(key)));
    return v;
  }

  std::vector<std::string> strings(const char* key) const {
    std::vector<std::string> out;
    if (!has(key)) return out;
    YAML::Node n = node_[key];
    if (!n.IsSequence()) fail_at(n, fmt::format("{} must be a list of strings ([a, b, ...])", sub(key)));
    for (const auto& e : n) {
      if (!e.IsScalar()) fail_at(e, fmt::format("{} entries must be strings", sub(key)));
      out.push_back(e.Scalar());
    }
    return out;
  }

  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }

 private:
  const std::string* file_;
  YAML::Node node_;
  std::string path_;
};

std::string resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || base_dir.empty()) return p;
  std::filesystem::path path(p);
  if (path.is_absolute()) return p;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

ServerConfig read_server(const Section& s) {
  s.expect_map({"host", "port", "api_keys", "max_request_bytes", "max_concurrent_requests", "request_timeout_s",
                "read_timeout_s", "max_connections", "drain_timeout_s", "strip_system_lines", "response_store",
                "vllm_metrics", "debug_endpoints", "kv_events", "limits"});
  ServerConfig c;
  c.host = s.str("host", c.host);
  c.port = s.number<int>("port", c.port, 0, 65535, "a port number");
  c.api_keys = s.strings("api_keys");
  if (s.has("max_request_bytes")) {
    YAML::Node n = s.child("max_request_bytes");
    if (!n.IsScalar() || !parse_byte_size(n.Scalar(), &c.max_request_bytes) || c.max_request_bytes == 0)
      s.fail_at(n, "server.max_request_bytes must be a size such as 8MiB or 1048576");
  }
  c.max_concurrent_requests =
      s.number<int>("max_concurrent_requests", c.max_concurrent_requests, 1, 1 << 20, "an integer");
  c.request_timeout_s = s.number<int>("request_timeout_s", c.request_timeout_s, 1, 86400 * 7, "seconds");
  c.read_timeout_s = s.number<int>("read_timeout_s", c.read_timeout_s, 1, 3600, "seconds");
  c.max_connections = s.number<int>("max_connections", c.max_connections, 1, 1 << 20, "an integer");
  c.drain_timeout_s = s.number<int>("drain_timeout_s", c.drain_timeout_s, 0, 3600, "seconds");
  c.strip_system_lines = s.strings("strip_system_lines");
  for (size_t i = 0; i < c.strip_system_lines.size(); ++i) {
    try {
      std::regex re(c.strip_system_lines[i], std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      s.fail_at(s.child("strip_system_lines")[i],
                fmt::format("server.strip_system_lines[{}] is not a valid regular expression: {}", i, e.what()));
    }
  }
  if (s.has("response_store")) {
    const Section r = s.section("response_store");
    r.expect_map({"max_responses", "max_bytes"});
    auto& m = c.response_store;
    m.max_responses = r.number<int>("max_responses", m.max_responses, 0, 1 << 24, "a count (0: store nothing)");
    if (r.has("max_bytes")) {
      YAML::Node n = r.child("max_bytes");
      if (!n.IsScalar() || !parse_byte_size(n.Scalar(), &m.max_bytes))
        r.fail_at(n, "server.response_store.max_bytes must be a size such as 64MiB");
    }
  }
  c.vllm_metrics = s.boolean("vllm_metrics", c.vllm_metrics);
  c.debug_endpoints = s.boolean("debug_endpoints", c.debug_endpoints);
  if (s.has("kv_events")) {
    const Section k = s.section("kv_events");
    k.expect_map(
        {"enabled", "publisher", "endpoint", "replay_endpoint", "topic", "buffer_steps", "hwm", "max_queue_size"});
    auto& e = c.kv_events;
    e.enabled = k.boolean("enabled", e.enabled);
    e.publisher = k.str("publisher", e.publisher);
    if (e.publisher != "zmq" && e.publisher != "null")
      k.fail_at(k.child("publisher"), "server.kv_events.publisher must be zmq (or null: none)");
    e.endpoint = k.str("endpoint", e.endpoint);
    e.replay_endpoint = k.str("replay_endpoint", e.replay_endpoint);
    for (const char* key : {"endpoint", "replay_endpoint"}) {
      const std::string& v = std::string(key) == "endpoint" ? e.endpoint : e.replay_endpoint;
      if (!v.empty() && !v.starts_with("tcp://") && !v.starts_with("ipc://") && !v.starts_with("inproc://"))
        k.fail_at(k.child(key), fmt::format("server.kv_events.{} must be a ZeroMQ address: tcp://*:5557 (bind), "
                                            "tcp://HOST:PORT (connect), ipc://PATH or inproc://NAME",
                                            key));
    }
    if (e.endpoint.empty()) k.fail_at(k.child("endpoint"), "server.kv_events.endpoint must not be empty");
    e.topic = k.str("topic", e.topic);
    e.buffer_steps = k.number<int>("buffer_steps", e.buffer_steps, 0, 1 << 24, "a count of batches");
    e.hwm = k.number<int>("hwm", e.hwm, 0, 1 << 30, "a count of messages (0: unbounded)");
    e.max_queue_size = k.number<int>("max_queue_size", e.max_queue_size, 1, 1 << 30, "a count of batches");
    if (e.publisher == "null") e.enabled = false;
  }
  if (s.has("limits")) {
    const Section l = s.section("limits");
    l.expect_map(
        {"max_messages", "max_prompt_tokens", "max_tokens", "max_n", "max_stop", "max_tools", "max_tools_bytes"});
    auto& m = c.limits;
    m.max_messages = l.number<int>("max_messages", m.max_messages, 1, 1 << 20, "an integer");
    m.max_prompt_tokens =
        l.number<int>("max_prompt_tokens", m.max_prompt_tokens, 0, 1 << 24, "a token count (0 = context)");
    m.max_tokens = l.number<int>("max_tokens", m.max_tokens, 0, 1 << 24, "a token count (0 = context)");
    m.max_n = l.number<int>("max_n", m.max_n, 1, 256, "an integer");
    m.max_stop = l.number<int>("max_stop", m.max_stop, 0, 1024, "an integer");
    m.max_tools = l.number<int>("max_tools", m.max_tools, 0, 1 << 16, "an integer");
    if (l.has("max_tools_bytes")) {
      YAML::Node n = l.child("max_tools_bytes");
      if (!n.IsScalar() || !parse_byte_size(n.Scalar(), &m.max_tools_bytes))
        l.fail_at(n, "server.limits.max_tools_bytes must be a size such as 256KiB");
    }
  }
  return c;
}

BackendConfig read_backend(const Section& s) {
  s.expect_map({"kind", "device", "allow_cpu_fallback"});
  BackendConfig c;
  c.kind = s.str("kind", c.kind);
  if (c.kind != "auto" && c.kind != "vulkan" && c.kind != "cpu" && c.kind != "reference")
    s.fail_at(s.child("kind"),
              fmt::format("backend.kind must be one of auto, vulkan, cpu, reference (got '{}')", c.kind));
  c.device = s.str("device", c.device);
  c.allow_cpu_fallback = s.boolean("allow_cpu_fallback", c.allow_cpu_fallback);
  return c;
}

PluginsConfig read_plugins(const Section& s, const std::string& base) {
  s.expect_map({"paths"});
  PluginsConfig c;
  for (auto& p : s.strings("paths")) c.paths.push_back(resolve(base, p));
  return c;
}

SamplingConfig read_sampling(const Section& s) {
  s.expect_map({"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                "max_tokens", "seed"});
  SamplingConfig c;
  c.temperature = s.opt_number<double>("temperature", 0.0, 100.0, "a number");
  c.top_p = s.opt_number<double>("top_p", 0.0, 1.0, "a number");
  c.min_p = s.opt_number<double>("min_p", 0.0, 1.0, "a number");
  c.repetition_penalty = s.opt_number<double>("repetition_penalty", 0.0, 100.0, "a number");
  c.presence_penalty = s.opt_number<double>("presence_penalty", -2.0, 2.0, "a number");
  c.frequency_penalty = s.opt_number<double>("frequency_penalty", -2.0, 2.0, "a number");
  c.top_k = s.opt_number<int>("top_k", 0, 1 << 30, "an integer (0 = off)");
  c.max_tokens = s.opt_number<int>("max_tokens", 1, 1 << 30, "a positive integer");
  c.seed = s.opt_number<uint64_t>("seed", 0, UINT64_MAX, "an unsigned integer");
  return c;
}

CacheConfig read_cache(const Section& s) {
  s.expect_map(
      {"block_tokens", "memory", "prefix_caching", "snapshot_memory", "snapshot_interval", "kv_dtype", "kv_layers"});
  CacheConfig c;
  c.block_tokens = s.number<int>("block_tokens", c.block_tokens, 1, 4096, "an integer");
  if (s.has("memory")) {
    YAML::Node n = s.child("memory");
    std::string text = n.IsScalar() ? n.Scalar() : "";
    double frac = -1;
    try {
      size_t used = 0;
      frac = std::stod(text, &used);
      if (used != text.size() || text.find('.') == std::string::npos) frac = -1;
    } catch (...) {
    }
    if (frac > 0 && frac <= 1.0) {
      c.memory_fraction = frac;
    } else if (parse_byte_size(text, &c.memory_bytes) && c.memory_bytes > 0) {
      c.memory_fraction = 0;
    } else {
      s.fail_at(n, fmt::format("{} must be a size such as 2GiB or a fraction of device memory in (0, 1] such as 0.5 "
                               "(got '{}')",
                               s.sub("memory"), text));
    }
  }
  c.prefix_caching = s.boolean("prefix_caching", c.prefix_caching);
  c.snapshot_interval = s.number<int>("snapshot_interval", c.snapshot_interval, 1, 1 << 20, "a token count");
  if (s.has("snapshot_memory")) {
    const YAML::Node n = s.child("snapshot_memory");
    if (!n.IsScalar() || !parse_byte_size(n.Scalar(), &c.snapshot_memory_bytes))
      s.fail_at(n, fmt::format("{} must be a size such as 256MiB, or 0 for a tenth of the cache memory",
                               s.sub("snapshot_memory")));
  }
  c.kv_dtype = s.str("kv_dtype", c.kv_dtype);
  if (!kv_dtype_from_name(c.kv_dtype))
    s.fail_at(s.child("kv_dtype"),
              fmt::format("{} must be one of f32, f16, bf16, q8, q4 (got '{}')", s.sub("kv_dtype"), c.kv_dtype));
  if (s.has("kv_layers")) {
    const YAML::Node m = s.child("kv_layers");
    if (!m.IsMap())
      s.fail_at(m,
                fmt::format("{} must be a map of layer index to dtype, e.g. {{0: f16, -1: q8}}", s.sub("kv_layers")));
    for (auto it = m.begin(); it != m.end(); ++it) {
      int layer = 0;
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      size_t used = 0;
      try {
        layer = std::stoi(key, &used);
      } catch (...) {
        used = 0;
      }
      if (key.empty() || used != key.size())
        s.fail_at(it->first,
                  fmt::format("{} keys must be layer indices (negative counts from the last layer), got '{}'",
                              s.sub("kv_layers"), key));
      const std::string v = it->second.IsScalar() ? it->second.Scalar() : "";
      if (!kv_dtype_from_name(v))
        s.fail_at(it->second,
                  fmt::format("{}.{} must be one of f32, f16, bf16, q8, q4 (got '{}')", s.sub("kv_layers"), key, v));
      if (!c.kv_layers.emplace(layer, v).second)
        s.fail_at(it->first, fmt::format("{} names layer {} twice", s.sub("kv_layers"), layer));
    }
  }
  return c;
}

ModelConfig read_model(const Section& s, const std::string& base) {
  s.expect_map({"name", "path", "arch", "max_context", "max_batch_tokens", "max_seqs", "cache", "tool_parser",
                "reasoning_parser", "chat_template", "parse_special_in_content", "sampling", "description", "aliases",
                "json_whitespace"});
  ModelConfig c;
  c.name = s.str("name", "", true);
  c.path = resolve(base, s.str("path", "", true));
  c.arch = s.str("arch", c.arch);
  c.max_context = s.number<int>("max_context", c.max_context, 0, 1 << 24, "a token count (0 = model's)");
  c.max_batch_tokens = s.number<int>("max_batch_tokens", c.max_batch_tokens, 1, 1 << 20, "a token count");
  c.max_seqs = s.number<int>("max_seqs", c.max_seqs, 1, 1 << 16, "an integer");
  if (s.has("cache")) c.cache = read_cache(s.section("cache"));
  c.tool_parser = s.str("tool_parser", "");
  c.reasoning_parser = s.str("reasoning_parser", "");
  c.chat_template = resolve(base, s.str("chat_template", ""));
  c.parse_special_in_content = s.boolean("parse_special_in_content", c.parse_special_in_content);
  c.description = s.str("description", "");
  if (s.has("sampling")) c.sampling = read_sampling(s.section("sampling"));
  c.aliases = s.strings("aliases");
  for (size_t i = 0; i < c.aliases.size(); ++i)
    if (c.aliases[i].empty())
      s.fail_at(s.child("aliases")[i],
                fmt::format("{}[{}] is empty: give a model name or a glob", s.sub("aliases"), i));
  c.json_whitespace = s.str("json_whitespace", c.json_whitespace);
  if (c.json_whitespace != "compact" && c.json_whitespace != "flexible")
    s.fail_at(s.child("json_whitespace"),
              fmt::format("{} must be compact or flexible (got '{}')", s.sub("json_whitespace"), c.json_whitespace));
  return c;
}

Config parse(const YAML::Node& root, const std::string& file, const std::string& base) {
  Config cfg;
  cfg.file = file;
  if (!root || root.IsNull()) return cfg;  // an empty file is a valid, empty configuration
  Section top(&cfg.file, root, "top level");
  top.expect_map({"server", "backend", "plugins", "models", "log"});
  if (top.has("log")) {
    Section s = top.section("log");
    s.expect_map({"level"});
    std::string level = s.str("level", "info");
    if (level != "debug" && level != "info" && level != "warn" && level != "error" && level != "off")
      s.fail_at(s.child("level"),
                fmt::format("log.level must be one of debug, info, warn, error, off (got '{}')", level));
    cfg.log_level = level;
  }
  if (top.has("server")) cfg.server = read_server(Section(&cfg.file, root["server"], "server"));
  if (top.has("backend")) cfg.backend = read_backend(Section(&cfg.file, root["backend"], "backend"));
  if (top.has("plugins")) cfg.plugins = read_plugins(Section(&cfg.file, root["plugins"], "plugins"), base);
  if (top.has("models")) {
    YAML::Node ms = root["models"];
    if (!ms.IsSequence()) top.fail_at(ms, "models must be a list (models: [{name: ..., path: ...}, ...])");
    std::set<std::string> names;
    for (size_t i = 0; i < ms.size(); ++i) {
      Section s(&cfg.file, ms[i], fmt::format("models[{}]", i));
      ModelConfig m = read_model(s, base);
      if (!names.insert(m.name).second)
        s.fail_at(ms[i]["name"], fmt::format("duplicate model name '{}': names must be unique", m.name));
      cfg.models.push_back(std::move(m));
    }
    // An exact alias names one model: not another's name, nor another's alias.
    std::set<std::string> aliases;
    for (size_t i = 0; i < cfg.models.size(); ++i)
      for (size_t j = 0; j < cfg.models[i].aliases.size(); ++j) {
        const std::string& a = cfg.models[i].aliases[j];
        Section s(&cfg.file, ms[i], fmt::format("models[{}]", i));
        if (names.count(a) && a != cfg.models[i].name)
          s.fail_at(ms[i]["aliases"][j], fmt::format("alias '{}' is the name of another model", a));
        if (!aliases.insert(a).second)
          s.fail_at(ms[i]["aliases"][j], fmt::format("alias '{}' is given twice: an alias names one model", a));
      }
  }
  return cfg;
}

Config load(const std::string& text, const std::string& file, const std::string& base) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(file, e.mark.line + 1, e.mark.column + 1, "YAML syntax error: " + e.msg);
  }
  return parse(root, file, base);
}

template <class T>
void emit_opt(YAML::Emitter& e, const char* key, const std::optional<T>& v) {
  if (v) e << YAML::Key << key << YAML::Value << *v;
}

}  // namespace

Config Config::load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, 0, 0, "cannot read the file (does it exist and is it readable?)");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string base = std::filesystem::absolute(path).parent_path().string();
  return load(ss.str(), path, base);
}

Config Config::load_string(const std::string& yaml, const std::string& name) {
  return load(yaml, name, std::filesystem::current_path().string());
}

std::string Config::to_yaml() const {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "log" << YAML::Value << YAML::BeginMap << YAML::Key << "level" << YAML::Value
    << log_level.value_or("info") << YAML::EndMap;
  if (server) {
    e << YAML::Key << "server" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "host" << YAML::Value << server->host;
    e << YAML::Key << "port" << YAML::Value << server->port;
    e << YAML::Key << "api_keys" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (size_t i = 0; i < server->api_keys.size(); ++i) e << "<redacted>";
    e << YAML::EndSeq;
    e << YAML::Key << "max_request_bytes" << YAML::Value << server->max_request_bytes;
    e << YAML::Key << "max_concurrent_requests" << YAML::Value << server->max_concurrent_requests;
    e << YAML::Key << "request_timeout_s" << YAML::Value << server->request_timeout_s;
    e << YAML::Key << "read_timeout_s" << YAML::Value << server->read_timeout_s;
    e << YAML::Key << "strip_system_lines" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::string& p : server->strip_system_lines) e << p;
    e << YAML::EndSeq;
    e << YAML::Key << "max_connections" << YAML::Value << server->max_connections;
    e << YAML::Key << "drain_timeout_s" << YAML::Value << server->drain_timeout_s;
    e << YAML::Key << "response_store" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "max_responses" << YAML::Value << server->response_store.max_responses;
    e << YAML::Key << "max_bytes" << YAML::Value << server->response_store.max_bytes;
    e << YAML::EndMap;
    const auto& l = server->limits;
    e << YAML::Key << "limits" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "max_messages" << YAML::Value << l.max_messages;
    e << YAML::Key << "max_prompt_tokens" << YAML::Value << l.max_prompt_tokens;
    e << YAML::Key << "max_tokens" << YAML::Value << l.max_tokens;
    e << YAML::Key << "max_n" << YAML::Value << l.max_n;
    e << YAML::Key << "max_stop" << YAML::Value << l.max_stop;
    e << YAML::Key << "max_tools" << YAML::Value << l.max_tools;
    e << YAML::Key << "max_tools_bytes" << YAML::Value << l.max_tools_bytes;
    e << YAML::EndMap;
    e << YAML::EndMap;
  }
  if (backend) {
    e << YAML::Key << "backend" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "kind" << YAML::Value << backend->kind;
    e << YAML::Key << "device" << YAML::Value << backend->device;
    e << YAML::Key << "allow_cpu_fallback" << YAML::Value << backend->allow_cpu_fallback;
    e << YAML::EndMap;
  }
  if (plugins) {
    e << YAML::Key << "plugins" << YAML::Value << YAML::BeginMap << YAML::Key << "paths" << YAML::Value
      << YAML::BeginSeq;
    for (const auto& p : plugins->paths) e << p;
    e << YAML::EndSeq << YAML::EndMap;
  }
  if (!models.empty()) {
    e << YAML::Key << "models" << YAML::Value << YAML::BeginSeq;
    for (const auto& m : models) {
      e << YAML::BeginMap;
      e << YAML::Key << "name" << YAML::Value << m.name;
      e << YAML::Key << "path" << YAML::Value << m.path;
      e << YAML::Key << "arch" << YAML::Value << m.arch;
      e << YAML::Key << "max_context" << YAML::Value << m.max_context;
      e << YAML::Key << "max_batch_tokens" << YAML::Value << m.max_batch_tokens;
      e << YAML::Key << "max_seqs" << YAML::Value << m.max_seqs;
      e << YAML::Key << "cache" << YAML::Value << YAML::BeginMap;
      e << YAML::Key << "block_tokens" << YAML::Value << m.cache.block_tokens;
      if (m.cache.memory_bytes)
        e << YAML::Key << "memory" << YAML::Value << m.cache.memory_bytes;
      else
        e << YAML::Key << "memory" << YAML::Value << m.cache.memory_fraction;
      e << YAML::Key << "prefix_caching" << YAML::Value << m.cache.prefix_caching;
      e << YAML::Key << "snapshot_memory" << YAML::Value << m.cache.snapshot_memory_bytes;
      e << YAML::Key << "snapshot_interval" << YAML::Value << m.cache.snapshot_interval;
      e << YAML::Key << "kv_dtype" << YAML::Value << m.cache.kv_dtype;
      if (!m.cache.kv_layers.empty()) {
        e << YAML::Key << "kv_layers" << YAML::Value << YAML::BeginMap;
        for (const auto& [layer, t] : m.cache.kv_layers) e << YAML::Key << layer << YAML::Value << t;
        e << YAML::EndMap;
      }
      e << YAML::EndMap;
      e << YAML::Key << "tool_parser" << YAML::Value << m.tool_parser;
      e << YAML::Key << "reasoning_parser" << YAML::Value << m.reasoning_parser;
      e << YAML::Key << "chat_template" << YAML::Value << m.chat_template;
      e << YAML::Key << "parse_special_in_content" << YAML::Value << m.parse_special_in_content;
      e << YAML::Key << "description" << YAML::Value << m.description;
      e << YAML::Key << "aliases" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const std::string& a : m.aliases) e << a;
      e << YAML::EndSeq;
      e << YAML::Key << "json_whitespace" << YAML::Value << m.json_whitespace;
      e << YAML::Key << "sampling" << YAML::Value << YAML::BeginMap;
      emit_opt(e, "temperature", m.sampling.temperature);
      emit_opt(e, "top_p", m.sampling.top_p);
      emit_opt(e, "top_k", m.sampling.top_k);
      emit_opt(e, "min_p", m.sampling.min_p);
      emit_opt(e, "repetition_penalty", m.sampling.repetition_penalty);
      emit_opt(e, "presence_penalty", m.sampling.presence_penalty);
      emit_opt(e, "frequency_penalty", m.sampling.frequency_penalty);
      emit_opt(e, "max_tokens", m.sampling.max_tokens);
      emit_opt(e, "seed", m.sampling.seed);
      e << YAML::EndMap;
      e << YAML::EndMap;
    }
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace kiln
