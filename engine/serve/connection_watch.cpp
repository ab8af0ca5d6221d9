#include "serve/connection_watch.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/log.hpp"

namespace kiln::serve {
namespace {

using Clock = std::chrono::steady_clock;

std::string key(const std::string& addr, int port) {
  return addr + " " + std::to_string(port);
}

/** The peer of an accepted connection of the server on `port`, or "" for any other descriptor. */
std::string peer_of(int fd, int port) {
  std::string la, pa;
  int lp = 0, pp = 0;
  if (!socket_end(fd, false, &la, &lp) || lp != port) return "";
  int listening = 0;
  socklen_t len = sizeof listening;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) return "";
  if (!socket_end(fd, true, &pa, &pp)) return "";
  return key(pa, pp);
}

}  // namespace

std::vector<int> open_descriptors() {
  std::vector<int> fds;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (const int fd = std::atoi(e->d_name); fd > 2) fds.push_back(fd);
    closedir(d);
  }
  return fds;
}

bool socket_end(int fd, bool peer, std::string* addr, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if ((peer ? getpeername : getsockname)(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

ConnectionWatch::ConnectionWatch(int port, std::chrono::milliseconds idle_limit, size_t max_connections)
    : port_(port), idle_limit_(idle_limit), max_connections_(max_connections) {
  thread_ = std::thread([this] { run(); });
}

ConnectionWatch::~ConnectionWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ConnectionWatch::enter(const std::string& addr, int port) {
  std::lock_guard lock(mu_);
  ++conns_[key(addr, port)].busy;
}

void ConnectionWatch::leave(const std::string& addr, int port) {
  std::lock_guard lock(mu_);
  auto it = conns_.find(key(addr, port));
  if (it == conns_.end()) return;
  if (--it->second.busy <= 0) {
    it->second.busy = 0;
    it->second.idle_since = Clock::now();  // now waiting for the next keep-alive request
  }
}

void ConnectionWatch::run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop_; })) {
    lock.unlock();
    scan();
    lock.lock();
  }
}

void ConnectionWatch::scan() {
  // Descriptors first, without the lock (the kernel calls are the slow part).
  std::vector<std::pair<std::string, int>> found;
  for (int fd : open_descriptors())
    if (std::string k = peer_of(fd, port_); !k.empty()) found.emplace_back(std::move(k), fd);
  const Clock::time_point now = Clock::now();
  std::vector<std::pair<std::string, int>> to_cut;
  {
    std::lock_guard lock(mu_);
    for (auto& [k, c] : conns_) c.seen = false;
    for (auto& [k, fd] : found) {
      auto [it, fresh] = conns_.try_emplace(k);
      Conn& c = it->second;
      if (fresh || c.fd < 0) c.idle_since = now;
      c.fd = fd;
      c.seen = true;
    }
    // Gone connections leave (unless a handler still holds them: it will leave() soon).
    for (auto it = conns_.begin(); it != conns_.end();)
      it = !it->second.seen && it->second.busy == 0 ? conns_.erase(it) : std::next(it);
    std::vector<std::pair<Clock::time_point, std::string>> idle;
    size_t open = 0;
    for (auto& [k, c] : conns_) {
      if (!c.seen) continue;
      ++open;
      if (c.busy) continue;
      if (now - c.idle_since > idle_limit_)
        to_cut.emplace_back(k, c.fd);
      else
        idle.emplace_back(c.idle_since, k);
    }
    open_.store(open);
    // Over the cap: the longest idle go first.
    if (open - to_cut.size() > max_connections_) {
      std::sort(idle.begin(), idle.end());
      for (size_t i = 0; i < idle.size() && open - to_cut.size() > max_connections_; ++i)
        to_cut.emplace_back(idle[i].second, conns_[idle[i].second].fd);
    }
  }
  for (const auto& [k, fd] : to_cut) {
    if (peer_of(fd, port_) != k) continue;  // closed meanwhile (and perhaps reused): leave it
    cut_.fetch_add(1);
    ::shutdown(fd, SHUT_RDWR);  // httplib's read fails and it closes the connection
    log::info("[serve] cut connection {} (no complete request within the read timeout, or too many)", k);
  }
}

}  // namespace kiln::serve
