#include "serve/http_server.hpp"

#include <fmt/format.h>
#include <fnmatch.h>
#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <regex>
#include <unordered_map>

#include "core/error.hpp"
#include "core/json_ordered.hpp"
#include "core/log.hpp"
#include "serve/anthropic.hpp"
#include "serve/connection_watch.hpp"
#include "serve/engine.hpp"
#include "serve/kv_events.hpp"
#include "serve/metrics.hpp"
#include "serve/openai.hpp"
#include "serve/prompt.hpp"
#include "serve/responses.hpp"
#include "serve/served_model.hpp"
#include "template/template.hpp"

namespace kiln::serve {

using json = OrderedJson;  // objects in the client's key order
using Clock = std::chrono::steady_clock;

namespace {

/**
 * Whether the client of `req` is still connected. httplib (0.11) does not expose the socket, so the
 * connection is found once by its address pair among our open sockets and then checked with poll:
 * a peer that closed its side shows POLLRDHUP. The address pair is checked again each time, so a
 * reused descriptor is never mistaken for the original connection.
 */
class Liveness {
 public:
  explicit Liveness(const httplib::Request& req) : req_(req) {}
  bool alive() {
    if (fd_ < 0 && !find()) return true;  // cannot tell: assume connected
    if (!matches(fd_)) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) < 0) return true;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0;
  }

 private:
  bool matches(int fd) const {
    std::string pa, la;
    int pp = 0, lp = 0;
    if (!socket_end(fd, true, &pa, &pp) || !socket_end(fd, false, &la, &lp)) return false;
    return pp == req_.remote_port && lp == req_.local_port && pa == req_.remote_addr && la == req_.local_addr;
  }
  bool find() {
    if (searched_) return false;
    searched_ = true;
    for (int fd : open_descriptors())
      if (matches(fd)) {
        fd_ = fd;
        break;
      }
    return fd_ >= 0;
  }

  const httplib::Request& req_;
  int fd_ = -1;
  bool searched_ = false;
};

/**
 * Whether `key` is one of `keys`, in time that does not depend on where a guess first differs from
 * a key: every byte of every key is compared (the lengths leak, as they do everywhere).
 */
bool key_matches(const std::vector<std::string>& keys, const std::string& key) {
  unsigned any = 0;
  for (const std::string& k : keys) {
    unsigned diff = k.size() == key.size() ? 0u : 1u;
    for (size_t i = 0; i < k.size(); ++i)
      diff |= static_cast<unsigned char>(k[i]) ^ static_cast<unsigned char>(i < key.size() ? key[i] : 0);
    any |= diff == 0 ? 1u : 0u;
  }
  return any != 0;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

/** A JSON object body, or false with the 400 sent. */
void send_anthropic_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(anthropic_error_json(e), "application/json");
}

bool object_body(const httplib::Request& req, httplib::Response& res, json* body) {
  if (json_depth(req.body) > kMaxJsonDepth) {
    send_error(res, {400, fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth), "",
                     "invalid_request_error", ""});
    return false;
  }
  try {
    *body = parse_ordered_json(req.body);
  } catch (const std::exception& e) {
    send_error(res,
               {400, fmt::format("the request body is not valid JSON: {}", e.what()), "", "invalid_request_error", ""});
    return false;
  }
  if (!body->is_object()) {
    send_error(res, {400, "the request body must be a JSON object", "", "invalid_request_error", ""});
    return false;
  }
  if (body->contains("model") && !(*body)["model"].is_string()) {
    send_error(res, {400, "'model' must be a string", "model", "invalid_request_error", ""});
    return false;
  }
  return true;
}

}  // namespace

struct HttpServer::Impl {
  std::vector<std::unique_ptr<ServedModel>> models;
  std::vector<std::unique_ptr<Engine>> engines;
  ServerConfig cfg;
  Metrics metrics;
  httplib::Server svr;
  std::atomic<int> in_flight{0};
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> running{false}, ran{false};  ///< run() was entered / has returned (stop() waits between)
  std::mutex lifecycle;                          ///< orders add_models() against drain()
  /** The models are loaded and their engines run: until then only the probes and /metrics answer. */
  std::atomic<bool> ready{false};
  std::string host;  ///< where bind() listens (the KV event topics name it)
  int port = -1;
  /** Engines for the models (once loaded); publishers for them once bound. */
  void start_engines();
  void start_events();
  bool events_started = false;
  /** kiln serve --render-only: models without weights; only the tokenizer routes answer. */
  std::atomic<bool> render_only{false};
  std::unique_ptr<ConnectionWatch> watch;  ///< started by bind(), once the port is known

  /** Marks the request's connection busy for its lifetime (the watch cuts only idle ones). */
  struct Busy {
    ConnectionWatch* w;
    std::string addr;
    int port;
    Busy(ConnectionWatch* watch, const httplib::Request& req) : w(watch), addr(req.remote_addr), port(req.remote_port) {
      if (w) w->enter(addr, port);
    }
    ~Busy() {
      if (w) w->leave(addr, port);
    }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;
  };
  /** A route handler run with its connection marked busy. */
  httplib::Server::Handler busy(std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      Busy b(watch.get(), req);
      fn(req, res);
    };
  }  ///< SIGTERM: not ready, no new generation requests

  ServedModel* lookup(const std::string& name, ApiError* err) {
    if (name.empty()) {
      if (models.size() == 1) return models.front().get();
      *err = {400, "'model' is required: this server serves several models (see GET /v1/models)", "model",
              "invalid_request_error", ""};
      return nullptr;
    }
    // A model's name, then an exact alias, then the first alias glob that matches (in YAML order).
    for (auto& m : models)
      if (m->name() == name) return m.get();
    for (auto& m : models)
      for (const std::string& a : m->config().aliases)
        if (a == name) return m.get();
    for (auto& m : models)
      for (const std::string& a : m->config().aliases)
        if (a.find_first_of("*?[") != std::string::npos && ::fnmatch(a.c_str(), name.c_str(), 0) == 0) return m.get();
    std::string names;
    for (auto& m : models) names += (names.empty() ? "" : ", ") + m->name();
    *err = {404,
            fmt::format("the model '{}' does not exist; this server serves: {} (a model's 'aliases' in the YAML "
                        "can route other names to it)",
                        name, names),
            "model", "invalid_request_error", "model_not_found"};
    return nullptr;
  }
  Engine& engine_of(const ServedModel* m) {
    for (size_t i = 0; i < models.size(); ++i)
      if (models[i].get() == m) return *engines[i];
    throw_error("[serve] no engine for model");
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  /** OpenAI's Responses API (serve/responses.hpp): create, retrieve, delete, cancel. */
  std::unique_ptr<ResponseStore> responses;
  std::mutex responses_mu;
  /** Responses in flight, for cancel: id → (owner, request). */
  std::unordered_map<std::string, std::pair<std::string, std::weak_ptr<GenRequest>>> responses_in_flight;
  /** The API key a request carries ("" when the server has none: one tenant). */
  std::string owner_of(const httplib::Request& req) const;
  void responses_create(const httplib::Request& req, httplib::Response& res);
  void responses_get(const httplib::Request& req, httplib::Response& res);
  void responses_delete(const httplib::Request& req, httplib::Response& res);
  void responses_cancel(const httplib::Request& req, httplib::Response& res);
  /** POST /v1/messages and /v1/messages/count_tokens (Anthropic's API, serve/anthropic.hpp). */
  void messages(const httplib::Request& req, httplib::Response& res);
  void count_tokens(const httplib::Request& req, httplib::Response& res);
  // A generation request, from checked to answered: admitted, prepared by its engine, then answered
  // whole or streamed, in OpenAI's or Anthropic's format (Writer, SendError).
  using SendError = void (*)(httplib::Response&, const ApiError&);
  struct Admission;
  /** Admitted (null with a 429 or, while draining, a 503 sent). */
  std::shared_ptr<Admission> admit(httplib::Response& res, const ApiRequest& api, SendError send);
  /** Waits for the engine to prepare the request; false with its 400 or 503 sent. */
  bool prepared(httplib::Response& res, GenRequest& g, Admission& admission, bool anthropic, SendError send);
  /** `make(api)` gives the Writer (std::unique_ptr). */
  template <class Writer, class Make>
  void serve(const httplib::Request& req, httplib::Response& res, ApiRequest parsed, bool anthropic, Make make);
  template <class Writer>
  void serve(const httplib::Request& req, httplib::Response& res, ApiRequest parsed, bool anthropic) {
    serve<Writer>(req, res, std::move(parsed), anthropic,
                  [](const ApiRequest& a) { return std::make_unique<Writer>(a, a.model->name()); });
  }
  /** The whole answer once the last piece is in (or the error that ended it). */
  template <class Writer>
  void answer(const httplib::Request& req, httplib::Response& res, const ApiRequest& api, Writer& w,
              Admission& admission, Clock::time_point deadline, SendError send);
  /** Server-sent events as pieces come. */
  template <class Writer>
  void stream(const httplib::Request& req, httplib::Response& res, std::shared_ptr<ApiRequest> api,
              std::shared_ptr<Writer> writer, std::shared_ptr<Admission> admission, Clock::time_point deadline,
              bool anthropic);
  std::vector<std::regex> strip_lines;  ///< server.strip_system_lines, compiled
  /** The body and model of a /tokenize or /detokenize request, or null with the error sent. */
  ServedModel* tokenizer_request(const httplib::Request& req, httplib::Response& res, json* body);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  /** POST /v1/chat/completions/render and /v1/completions/render: the token ids a request prefills. */
  void render(const httplib::Request& req, httplib::Response& res, bool chat);
  /** GET /debug/kv_blocks (server.debug_endpoints): a model's announced prefix-cache blocks. */
  void kv_blocks(const httplib::Request& req, httplib::Response& res);
  void routes();
};

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  ApiError err;
  std::optional<ApiRequest> parsed = parse_request(
      req.body, chat, [&](const std::string& n, ApiError* e) { return lookup(n, e); }, cfg.limits, &err);
  if (!parsed) {
    metrics.request_done("", err.status);
    return send_error(res, err);
  }
  serve<ResponseWriter>(req, res, std::move(*parsed), false);
}

void HttpServer::Impl::messages(const httplib::Request& req, httplib::Response& res) {
  ApiError err;
  std::optional<ApiRequest> parsed = parse_messages(
      req.body, [&](const std::string& n, ApiError* e) { return lookup(n, e); }, cfg.limits, strip_lines, &err);
  if (!parsed) {
    metrics.request_done("", err.status);
    return send_anthropic_error(res, err);
  }
  serve<MessagesWriter>(req, res, std::move(*parsed), true);
}

void HttpServer::Impl::count_tokens(const httplib::Request& req, httplib::Response& res) {
  ApiError err;
  std::optional<std::string> body = serve::count_tokens(
      req.body, [&](const std::string& n, ApiError* e) { return lookup(n, e); }, cfg.limits, strip_lines, &err);
  if (!body) return send_anthropic_error(res, err);
  res.set_content(*body, "application/json");
}

/** Ends a request's admission exactly once, whatever path the request leaves by (an exception
 *  included: the destructor counts it as a 500 and gives the slot back). */
struct HttpServer::Impl::Admission {
  Impl* self;
  std::string model, id;
  std::shared_ptr<GenRequest> gen;
  Clock::time_point start = Clock::now();
  bool ended = false;
  void end(int status) {
    if (ended) return;
    ended = true;
    // Counted before the in-flight gauge drops, so a reader who sees 0 in flight sees the count.
    self->metrics.request_done(model, status);
    if (status == 499) self->metrics.cancelled(model);
    self->metrics.in_flight(-1);
    self->in_flight.fetch_sub(1);
    Usage u;
    {
      std::lock_guard lock(gen->mu);
      u = gen->usage;
    }
    log::info("[serve] {} {} {}: {} prompt + {} generated tokens in {:.3f} s", id, model, status, u.prompt_tokens,
              u.completion_tokens, std::chrono::duration<double>(Clock::now() - start).count());
  }
  ~Admission() { end(500); }
};

std::shared_ptr<HttpServer::Impl::Admission> HttpServer::Impl::admit(httplib::Response& res, const ApiRequest& api,
                                                                     SendError send) {
  // At most max_concurrent_requests generation requests at once, none while draining (counted
  // first, so that drain() never sees 0 while a request is being admitted).
  const int before = in_flight.fetch_add(1);
  if (draining.load()) {
    in_flight.fetch_sub(1);
    res.set_header("Retry-After", "5");
    metrics.request_done(api.model->name(), 503);
    send(res, {503, "the server is shutting down; retry on another replica", "", "server_error", "shutting_down"});
    return nullptr;
  }
  if (before >= cfg.max_concurrent_requests) {
    in_flight.fetch_sub(1);
    res.set_header("Retry-After", "1");
    metrics.request_done(api.model->name(), 429);
    send(res, {429,
               fmt::format("the server is at its limit of {} concurrent requests; retry shortly",
                           cfg.max_concurrent_requests),
               "", "rate_limit_error", "rate_limit_exceeded"});
    return nullptr;
  }
  metrics.in_flight(1);
  // Constructed in place: a copy's destructor would end it.
  return std::shared_ptr<Admission>(new Admission{this, api.model->name(), api.gen->id, api.gen});
}

bool HttpServer::Impl::prepared(httplib::Response& res, GenRequest& g, Admission& admission, bool anthropic,
                                SendError send) {
  std::string why, param, code;
  switch (g.wait_prepared(std::chrono::seconds(cfg.request_timeout_s), &why, &param, &code)) {
    case GenRequest::Prepared::ok:
      return true;
    case GenRequest::Prepared::refused:
      admission.end(400);
      if (anthropic && code == "context_length_exceeded")  // Anthropic's own wording, which its clients read
        why = g.overflow_output
                  ? fmt::format(
                        "input length and `max_tokens` exceed context limit: {} + {} > {}, "
                        "decrease input length or `max_tokens` and try again",
                        g.overflow_prompt, g.overflow_output, g.overflow_limit)
                  : fmt::format("prompt is too long: {} tokens > {} maximum", g.overflow_prompt, g.overflow_limit);
      send(res, {400, why, param, "invalid_request_error", code});
      return false;
    case GenRequest::Prepared::timed_out:
      g.cancelled.store(true);
      admission.end(503);
      send(res, {503, "the request was not prepared in time; retry", "", "server_error", ""});
      return false;
  }
  return false;
}

template <class Writer, class Make>
void HttpServer::Impl::serve(const httplib::Request& req, httplib::Response& res, ApiRequest parsed, bool anthropic,
                             Make make) {
  const SendError send = anthropic ? send_anthropic_error : kiln::serve::send_error;
  std::shared_ptr<Admission> admission = admit(res, parsed, send);
  if (!admission) return;
  auto api = std::make_shared<ApiRequest>(std::move(parsed));
  engine_of(api->model).submit(api->gen);
  if (!prepared(res, *api->gen, *admission, anthropic, send)) return;
  const auto deadline = Clock::now() + std::chrono::seconds(cfg.request_timeout_s);
  std::shared_ptr<Writer> writer = make(*api);
  if (api->stream)
    stream<Writer>(req, res, api, std::move(writer), std::move(admission), deadline, anthropic);
  else
    answer<Writer>(req, res, *api, *writer, *admission, deadline, send);
}

/** A writer that can end its answer as cancelled (the Responses API's cancel route). */
template <class Writer>
concept Cancellable = requires(Writer& w) {
  w.cancel();
};

template <class Writer>
void HttpServer::Impl::answer(const httplib::Request& req, httplib::Response& res, const ApiRequest& api, Writer& w,
                              Admission& admission, Clock::time_point deadline, SendError send) {
  GenRequest& g = *api.gen;
  Liveness live(req);
  std::vector<Piece> pieces;
  std::string error;
  for (;;) {
    pieces.clear();
    const bool more = g.next(pieces, std::chrono::milliseconds(100));
    for (const Piece& p : pieces) {
      if (!p.error.empty()) error = p.error;
      w.absorb(p);
    }
    if (!more) break;
    if constexpr (Cancellable<Writer>) {
      if (g.cancelled.load()) {  // by the cancel route: the answer so far, marked cancelled
        w.cancel();
        break;
      }
    }
    if (stopping.load()) {
      g.cancelled.store(true);
      admission.end(503);
      return send(res, {503, "the server is shutting down", "", "server_error", ""});
    }
    if (!live.alive()) {
      g.cancelled.store(true);
      admission.end(499);
      return;  // nobody to answer
    }
    if (Clock::now() > deadline) {
      g.cancelled.store(true);
      admission.end(504);
      return send(res,
                  {504, fmt::format("the request took longer than request_timeout_s ({} s)", cfg.request_timeout_s), "",
                   "timeout_error", "timeout"});
    }
  }
  if (!error.empty()) {
    admission.end(500);
    return send(res, {500, error, "", "server_error", ""});
  }
  Usage u;
  {
    std::lock_guard lock(g.mu);
    u = g.usage;
  }
  res.set_content(w.final_body(u), "application/json");
  admission.end(200);
}

template <class Writer>
void HttpServer::Impl::stream(const httplib::Request& req, httplib::Response& res, std::shared_ptr<ApiRequest> api,
                              std::shared_ptr<Writer> writer, std::shared_ptr<Admission> admission,
                              Clock::time_point deadline, bool anthropic) {
  // Server-sent events until [DONE]; a client that goes away cancels the request.
  auto live = std::make_shared<Liveness>(req);
  auto streaming = std::make_shared<Busy>(watch.get(), req);  // held until the stream ends
  auto finished = std::make_shared<bool>(false);
  auto done = [admission](int status) { admission->end(status); };
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream; charset=utf-8",  // without the charset, Python's requests reads it as Latin-1
      [this, api, writer, live, finished, deadline, done, anthropic](size_t, httplib::DataSink& sink) {
        GenRequest& r = *api->gen;
        std::vector<Piece> pieces;
        bool more = r.next(pieces, std::chrono::milliseconds(100));
        std::string out;
        for (const Piece& p : pieces) out += writer->stream_piece(p);
        if constexpr (Cancellable<Writer>) {
          if (more && r.cancelled.load() && !*finished) {  // by the cancel route: end the stream cancelled
            writer->cancel();
            more = false;
          }
        }
        if (!more) {
          Usage u;
          {
            std::lock_guard lock(r.mu);
            u = r.usage;
          }
          out += writer->stream_end(u);
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          r.cancelled.store(true);
          return false;
        }
        if (!more) {
          *finished = true;
          done(200);
          sink.done();
          return true;
        }
        if (stopping.load() || !live->alive()) {
          r.cancelled.store(true);
          return false;
        }
        if (Clock::now() > deadline) {
          r.cancelled.store(true);
          const ApiError timeout{504, "the request took longer than request_timeout_s", "", "timeout_error", "timeout"};
          const std::string e = anthropic ? "event: error\ndata: " + anthropic_error_json(timeout) + "\n\n"
                                          : "data: " + error_json(timeout) + "\n\ndata: [DONE]\n\n";
          sink.write(e.data(), e.size());
          *finished = true;
          done(504);
          sink.done();
        }
        return true;
      },
      [api, finished, done, streaming](bool) {
        api->gen->cancelled.store(true);  // no effect when it finished; frees it when the client left
        if (!*finished) done(499);
      });
}

std::string HttpServer::Impl::owner_of(const httplib::Request& req) const {
  if (cfg.api_keys.empty()) return {};
  // Bearer (OpenAI clients) or x-api-key (Anthropic clients).
  const std::string auth = req.get_header_value("Authorization");
  return auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : req.get_header_value("x-api-key");
}

void HttpServer::Impl::responses_create(const httplib::Request& req, httplib::Response& res) {
  ApiError err;
  const std::string owner = owner_of(req);
  std::optional<ResponsesRequest> parsed = parse_responses(
      req.body, [this](const std::string& name, ApiError* e) { return lookup(name, e); }, cfg.limits, *responses, owner,
      &err);
  if (!parsed) return send_error(res, err);
  auto rr = std::make_shared<const ResponsesRequest>(std::move(*parsed));
  {
    std::lock_guard lock(responses_mu);
    std::erase_if(responses_in_flight, [](const auto& kv) { return kv.second.second.expired(); });
    responses_in_flight[rr->id] = {owner, rr->api.gen};
  }
  serve<ResponsesWriter>(req, res, rr->api, false, [this, rr](const ApiRequest& api) {
    return std::make_unique<ResponsesWriter>(rr, responses.get(), api.model->name());
  });
}

namespace {
ApiError no_response(const std::string& id) {
  return {404, fmt::format("no response '{}' (it was not stored, was deleted, or was evicted)", id), "",
          "invalid_request_error", "not_found"};
}
}  // namespace

void HttpServer::Impl::responses_get(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  const std::optional<ResponseStore::Entry> e = responses->get(id, owner_of(req));
  if (!e) return send_error(res, no_response(id));
  res.set_content(e->response, "application/json");
}

void HttpServer::Impl::responses_delete(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  if (!responses->erase(id, owner_of(req))) return send_error(res, no_response(id));
  res.set_content(json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}.dump(), "application/json");
}

void HttpServer::Impl::responses_cancel(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  std::shared_ptr<GenRequest> g;
  {
    std::lock_guard lock(responses_mu);
    const auto it = responses_in_flight.find(id);
    if (it != responses_in_flight.end() && it->second.first == owner_of(req)) g = it->second.second.lock();
  }
  if (g && g->finished()) g.reset();  // answered already; the engine lets go of it at its next step
  if (!g) {
    if (responses->get(id, owner_of(req)))
      return send_error(res, {400,
                              fmt::format("response '{}' has finished; only a response in progress can be "
                                          "cancelled",
                                          id),
                              "", "invalid_request_error", ""});
    return send_error(res, no_response(id));
  }
  g->cancelled.store(true);
  res.set_content(cancelled_response_json(id), "application/json");
}

ServedModel* HttpServer::Impl::tokenizer_request(const httplib::Request& req, httplib::Response& res, json* body) {
  if (!object_body(req, res, body)) return nullptr;
  ApiError err;
  ServedModel* m = lookup(body->value("model", ""), &err);
  if (!m) {
    send_error(res, err);
    return nullptr;
  }
  if (!m->tokenizer()) {
    send_error(res, {400, "this model has no tokenizer", "model", "invalid_request_error", ""});
    return nullptr;
  }
  return m;
}

void HttpServer::Impl::tokenize(const httplib::Request& req, httplib::Response& res) {
  json body;
  ServedModel* m = tokenizer_request(req, res, &body);
  if (!m) return;
  try {
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      // The chat route's own parsing (tool_choice none drops the tools, and so on) and prompt: the
      // ids it gives are the ones a chat request with this body prefills.
      ApiError err;
      std::optional<ApiRequest> parsed = parse_request_body(
          body, true, [&](const std::string& n, ApiError* e) { return lookup(n, e); }, cfg.limits, &err);
      if (!parsed) return send_error(res, err);
      ids = prompts_of(*parsed->model, *parsed->gen).ids.front();
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      bool add_special = true;
      if (body.contains("add_special_tokens")) {
        if (!body["add_special_tokens"].is_boolean())
          return send_error(res, {400, "'add_special_tokens' must be true or false", "add_special_tokens",
                                  "invalid_request_error", ""});
        add_special = body["add_special_tokens"].get<bool>();
      }
      ids = m->encode(body["prompt"].get<std::string>(), add_special);
    } else {
      return send_error(res, {400, "give 'prompt' (a string) or 'messages'", "prompt", "invalid_request_error", ""});
    }
    res.set_content(json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m->max_context()}}.dump(),
                    "application/json");
  } catch (const PromptError& e) {
    send_error(res, {400, e.what(), e.param, "invalid_request_error", ""});
  } catch (const std::exception& e) {
    send_error(res, {400, e.what(), body.contains("messages") ? "messages" : "prompt", "invalid_request_error", ""});
  }
}

void HttpServer::Impl::render(const httplib::Request& req, httplib::Response& res, bool chat) {
  ApiError err;
  std::optional<ApiRequest> parsed = parse_request(
      req.body, chat, [&](const std::string& n, ApiError* e) { return lookup(n, e); }, cfg.limits, &err);
  if (!parsed) return send_error(res, err);
  Prompts p;
  try {
    p = prompts_of(*parsed->model, *parsed->gen);
  } catch (const PromptError& e) {
    return send_error(res, {400, e.what(), e.param, "invalid_request_error", ""});
  }
  if (chat) {
    res.set_content(json{{"model", parsed->model->name()}, {"token_ids", p.ids.front()}, {"prompt", p.chat_text}}.dump(
                        -1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    return;
  }
  const GenRequest& g = *parsed->gen;
  json out = json::array();
  for (size_t i = 0; i < p.ids.size(); ++i)
    out.push_back({{"model", parsed->model->name()},
                   {"token_ids", p.ids[i]},
                   {"prompt", i < g.prompt_texts.size() ? json(g.prompt_texts[i]) : json(nullptr)}});
  res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void HttpServer::Impl::kv_blocks(const httplib::Request& req, httplib::Response& res) {
  ApiError err;
  ServedModel* m = lookup(req.get_param_value("model"), &err);
  if (!m) return send_error(res, err);
  const Engine::AnnouncedBlocks a = engine_of(m).announced_blocks();
  json blocks = json::array();
  for (const cache::PrefixTree::Announced& b : a.blocks)
    blocks.push_back({{"hash", b.hash},
                      {"parent", b.parent ? json(*b.parent) : json(nullptr)},
                      {"token_ids", b.tokens},
                      {"extra_keys", b.key.empty() ? json(nullptr) : json::array({b.key})}});
  res.set_content(json{{"model", m->name()},
                       {"topic", a.topic},
                       {"block_size", m->host().limits().block_tokens},
                       {"published_seq", a.seq},
                       {"blocks", std::move(blocks)}}
                      .dump(),
                  "application/json");
}

void HttpServer::Impl::detokenize(const httplib::Request& req, httplib::Response& res) {
  json body;
  ServedModel* m = tokenizer_request(req, res, &body);
  if (!m) return;
  const auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    return send_error(res, {400, "'tokens' must be an array of token ids", "tokens", "invalid_request_error", ""});
  std::vector<int32_t> ids;
  for (const json& x : *it) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= m->n_vocab())
      return send_error(res, {400, fmt::format("'tokens' must hold token ids in [0, {})", m->n_vocab()), "tokens",
                              "invalid_request_error", ""});
    ids.push_back(x.get<int32_t>());
  }
  text::DecodeOptions o;
  o.skip_special = !body.contains("skip_special_tokens") || body["skip_special_tokens"] != false;
  res.set_content(json{{"prompt", m->tokenizer()->decode(ids, o)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

void HttpServer::Impl::routes() {
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind a port this one holds
  // and silently take part of its connections: SO_REUSEADDR alone (restarts over TIME_WAIT).
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.set_payload_max_length(cfg.max_request_bytes);
  svr.set_read_timeout(cfg.read_timeout_s, 0);
  svr.set_write_timeout(30, 0);
  const size_t threads = static_cast<size_t>(std::max(8, cfg.max_concurrent_requests + 8));
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Origin", "*");
    if (req.method == "OPTIONS") {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
      res.status = 200;
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool probe = req.path == "/health" || req.path == "/health/ready" || req.path == "/metrics";
    if (!probe && !ready.load(std::memory_order_acquire)) {
      res.set_header("Retry-After", "5");
      send_error(res, {503, "the server is loading its models; retry shortly (GET /health/ready says when)", "",
                       "server_error", "loading"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (render_only) {
      static const std::regex allowed(
          R"(^/(health(/ready)?|metrics|tokenize|detokenize|v1/models|v1/(chat/)?completions/render|v1/messages/count_tokens)$)");
      if (!std::regex_match(req.path, allowed)) {
        send_error(res, {404,
                         fmt::format("{} {}: this server only renders and tokenizes (kiln serve --render-only); send "
                                     "generation requests to a replica",
                                     req.method, req.path),
                         "", "invalid_request_error", ""});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    const bool guarded = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" ||
                         req.path == "/reset_prefix_cache" || req.path.rfind("/debug/", 0) == 0;
    if (guarded && !cfg.api_keys.empty()) {
      // Bearer (OpenAI clients) or x-api-key (Anthropic clients).
      const std::string auth = req.get_header_value("Authorization"), x_key = req.get_header_value("x-api-key");
      if (!key_matches(cfg.api_keys, owner_of(req))) {
        const ApiError e{401,
                         auth.empty() && x_key.empty()
                             ? "an API key is required: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
                             : "the API key is not valid",
                         "", "authentication_error", "invalid_api_key"};
        req.path.rfind("/v1/messages", 0) == 0 ? send_anthropic_error(res, e) : send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      send_error(res,
                 {413, "the request body is larger than server.max_request_bytes", "", "invalid_request_error", ""});
    else if (res.status == 404)
      send_error(res, {404, fmt::format("no route {} {}", req.method, req.path), "", "invalid_request_error", ""});
    else
      send_error(res, {res.status, fmt::format("HTTP {}", res.status), "", "invalid_request_error", ""});
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log::error("[serve] {}", what);
    send_error(res, {500, what, "", "server_error", ""});
  });
  // Liveness: the process serves (while loading and draining too). Readiness: it takes requests.
  svr.Get("/health", busy([this](const httplib::Request&, httplib::Response& res) {
            const char* status = !ready.load() ? "loading" : draining.load() ? "draining" : "ok";
            res.set_content(json{{"status", status}, {"in_flight", in_flight.load()}}.dump(), "application/json");
          }));
  svr.Get("/health/ready", busy([this](const httplib::Request&, httplib::Response& res) {
            const bool loaded = ready.load(), leaving = draining.load();
            if (!loaded || leaving) res.status = 503;  // load balancers send nothing here
            res.set_content(json{{"status", !loaded   ? "loading"
                                            : leaving ? "draining"
                                                      : "ready"}}
                                .dump(),
                            "application/json");
          }));
  svr.Get("/metrics", busy([this](const httplib::Request&, httplib::Response& res) {
            std::map<std::string, uint64_t> queued;
            if (ready.load(std::memory_order_acquire))
              for (size_t i = 0; i < engines.size(); ++i) queued[models[i]->name()] = engines[i]->queued();
            std::string text = metrics.render(cfg.vllm_metrics, queued);
            if (watch)
              text += fmt::format(
                  "# HELP kiln_connections_open Client connections open.\n# TYPE kiln_connections_open gauge\n"
                  "kiln_connections_open {}\n"
                  "# HELP kiln_connections_cut_total Connections closed for sending no complete request within "
                  "server.read_timeout_s, or over server.max_connections.\n# TYPE kiln_connections_cut_total counter\n"
                  "kiln_connections_cut_total {}\n",
                  watch->open(), watch->cut());
            res.set_content(text, "text/plain; version=0.0.4");
          }));
  svr.Get("/v1/models", busy([this](const httplib::Request&, httplib::Response& res) {
            json data = json::array();
            for (auto& m : models)
              data.push_back({{"id", m->name()},
                              {"object", "model"},
                              {"created", m->created()},
                              {"owned_by", "kiln"},
                              {"max_model_len", m->max_context()},
                              {"description", m->description()}});
            res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
          }));
  // Every route runs with its connection marked busy: the connection watch cuts only connections
  // that are not inside a handler (streams stay busy until they end, see generate()).
  svr.Post("/v1/chat/completions",
           busy([this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); }));
  svr.Post("/v1/completions",
           busy([this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); }));
  svr.Post("/v1/messages", busy([this](const httplib::Request& req, httplib::Response& res) { messages(req, res); }));
  svr.Post("/v1/messages/count_tokens",
           busy([this](const httplib::Request& req, httplib::Response& res) { count_tokens(req, res); }));
  svr.Post("/v1/responses",
           busy([this](const httplib::Request& req, httplib::Response& res) { responses_create(req, res); }));
  svr.Get(R"(/v1/responses/([^/]+))",
          busy([this](const httplib::Request& req, httplib::Response& res) { responses_get(req, res); }));
  svr.Delete(R"(/v1/responses/([^/]+))",
             busy([this](const httplib::Request& req, httplib::Response& res) { responses_delete(req, res); }));
  svr.Post(R"(/v1/responses/([^/]+)/cancel)",
           busy([this](const httplib::Request& req, httplib::Response& res) { responses_cancel(req, res); }));
  svr.Post("/v1/chat/completions/render",
           busy([this](const httplib::Request& req, httplib::Response& res) { render(req, res, true); }));
  svr.Post("/v1/completions/render",
           busy([this](const httplib::Request& req, httplib::Response& res) { render(req, res, false); }));
  svr.Post("/reset_prefix_cache", busy([this](const httplib::Request&, httplib::Response& res) {
             for (auto& e : engines) e->reset_prefix_cache();
             res.set_content(json{{"status", "ok"}}.dump(), "application/json");
           }));
  if (cfg.debug_endpoints)
    svr.Get("/debug/kv_blocks",
            busy([this](const httplib::Request& req, httplib::Response& res) { kv_blocks(req, res); }));
  svr.Post("/tokenize", busy([this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); }));
  svr.Post("/detokenize", busy([this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); }));
}

HttpServer::HttpServer(const ServerConfig& server) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = server;
  for (const std::string& p : server.strip_system_lines) impl_->strip_lines.emplace_back(p, std::regex::ECMAScript);
  impl_->responses = std::make_unique<ResponseStore>(static_cast<size_t>(server.response_store.max_responses),
                                                     server.response_store.max_bytes);
  impl_->routes();
}

HttpServer::HttpServer(std::vector<std::unique_ptr<ServedModel>> models, const ServerConfig& server)
    : HttpServer(server) {
  add_models(std::move(models));
}

bool HttpServer::add_models(std::vector<std::unique_ptr<ServedModel>> models) {
  std::lock_guard lock(impl_->lifecycle);
  if (impl_->ready.load()) throw_error("[serve] the server's models are loaded already");
  if (impl_->draining.load()) return false;  // stopped while they loaded: they serve nothing
  impl_->models = std::move(models);
  impl_->start_engines();
  if (impl_->port >= 0) impl_->start_events();
  impl_->ready.store(true, std::memory_order_release);  // the routes see the models from here on
  return true;
}

void HttpServer::Impl::start_engines() {
  size_t renderers = 0;
  for (auto& m : models) renderers += m->render_only();
  if (renderers && renderers != models.size())
    throw_error("[serve] a server's models are all render-only or none is ({} of {} are)", renderers, models.size());
  render_only = renderers > 0;
  if (render_only) return;
  for (auto& m : models) engines.push_back(std::make_unique<Engine>(*m, metrics));
}

void HttpServer::Impl::start_events() {
  if (!cfg.kv_events.enabled || events_started || render_only) return;
  events_started = true;
  for (size_t i = 0; i < models.size(); ++i)
    engines[i]->start_events(std::make_unique<KvEventPublisher>(
        cfg.kv_events, kv_event_topic(cfg.kv_events.topic, host, port, models[i]->name()), static_cast<int>(i),
        models[i]->host().limits().block_tokens));
}

HttpServer::~HttpServer() {
  stop();
  impl_->watch.reset();
  impl_->engines.clear();  // ends what is left, then the models go
}

namespace {

/**
 * httplib (0.11, built into Debian's shared library) listens with a backlog of 5, so a burst of
 * clients connecting at once overflows the accept queue and waits for retransmissions. Listening
 * again on the same socket with a larger backlog is allowed and only changes the backlog; the
 * socket is found by its local port among our listening sockets.
 */
void widen_backlog(int port) {
  for (int fd : open_descriptors()) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    std::string a;
    int p = -1;
    if (!socket_end(fd, false, &a, &p)) continue;
    if (p == port) ::listen(fd, SOMAXCONN);
  }
}

}  // namespace

int HttpServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? impl_->svr.bind_to_any_port(host) : (impl_->svr.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    log::error("[serve] cannot listen on {}:{} (in use, or not an address of this machine)", host, port);
    return bound;
  }
  widen_backlog(bound);
  impl_->watch = std::make_unique<ConnectionWatch>(bound, std::chrono::seconds(impl_->cfg.read_timeout_s),
                                                   static_cast<size_t>(impl_->cfg.max_connections));
  impl_->host = host;
  impl_->port = bound;
  if (!impl_->models.empty()) impl_->start_events();
  return bound;
}

bool HttpServer::run() {
  impl_->running.store(true);
  const bool ok = impl_->stopping.load() || impl_->svr.listen_after_bind();
  impl_->ran.store(true);
  return ok;
}

bool HttpServer::ready() const {
  return impl_->ready.load();
}

bool HttpServer::drain(int seconds) {
  {
    std::lock_guard lock(impl_->lifecycle);  // add_models() either finished or will see the drain
    impl_->draining.store(true);
  }
  log::info("[serve] draining: {} request(s) in progress, up to {} s", impl_->in_flight.load(), seconds);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (impl_->in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int left = impl_->in_flight.load();
  if (left > 0) log::warn("[serve] drain timeout: ending {} request(s) still in progress", left);
  // Subscribers forget this replica's blocks: it serves nothing more.
  if (impl_->ready.load())
    for (auto& e : impl_->engines) e->end_events();
  return left == 0;
}

void HttpServer::stop() {
  impl_->stopping.store(true);
  // httplib's stop() does nothing until its listener runs: when run() has started but httplib's
  // loop not yet, wait for it (a run() that starts later sees `stopping` and returns at once).
  for (int i = 0; i < 5000 && impl_->running.load() && !impl_->ran.load() && !impl_->svr.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->svr.stop();
}

}  // namespace kiln::serve
