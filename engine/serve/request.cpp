#include "serve/request.hpp"

namespace kiln::serve {

bool GenRequest::wait_prepared() {
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return prepared; });
  return prepare_error.empty();
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

void GenRequest::push(Piece p) {
  {
    std::lock_guard lock(mu);
    if (p.finish || !p.error.empty()) ++choices_done;
    pieces.push_back(std::move(p));
  }
  cv.notify_all();
}

}  // namespace kiln::serve
