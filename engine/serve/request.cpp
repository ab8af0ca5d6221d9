#include "serve/request.hpp"

namespace kiln::serve {

GenRequest::Prepared GenRequest::wait_prepared(std::chrono::milliseconds timeout, std::string* error,
                                               std::string* param, std::string* code) {
  std::unique_lock lock(mu);
  if (!cv.wait_for(lock, timeout, [&] { return prepared; })) return Prepared::timed_out;
  if (prepare_error.empty()) return Prepared::ok;
  *error = prepare_error;
  *param = prepare_param;
  if (code) *code = prepare_code;
  return Prepared::refused;
}

bool GenRequest::next(std::vector<Piece>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu);
  cv.wait_for(lock, timeout, [&] { return !pieces.empty() || choices_done == choices_total; });
  while (!pieces.empty()) {
    out.push_back(std::move(pieces.front()));
    pieces.pop_front();
  }
  return !(out.empty() && choices_done == choices_total);
}

bool GenRequest::finished() {
  std::lock_guard lock(mu);
  return prepared && choices_done == choices_total;
}

const char* finish_reason(Finish f) {
  switch (f) {
    case Finish::stop:
      return "stop";
    case Finish::length:
      return "length";
    case Finish::tool_calls:
      return "tool_calls";
    case Finish::error:
      return "error";
    case Finish::none:
      break;
  }
  return "";
}

void GenRequest::push(Piece p) {
  {
    std::lock_guard lock(mu);
    if (p.finish != Finish::none || !p.error.empty()) ++choices_done;
    pieces.push_back(std::move(p));
  }
  cv.notify_all();
}

}  // namespace kiln::serve
