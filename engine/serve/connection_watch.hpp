// Protection against slow and idle clients that httplib 0.11 lacks: its read timeout applies to
// each read, so a client sending one byte a second holds a connection (and an HTTP thread) forever.
// A watcher thread looks at the server's accepted sockets twice a second; a connection that is not
// inside a request (between accept and the handler, or between keep-alive requests) for longer than
// the read timeout is shut down, and so are the longest-idle ones when there are more than
// max_connections. Handlers mark their connection busy (enter/leave) for as long as they run,
// streaming included.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::serve {

/** The address and port of a socket's remote (`peer`) or local end; false when it has none. */
bool socket_end(int fd, bool peer, std::string* addr, int* port);
/** This process's open descriptors above stderr (httplib 0.11 hides its sockets; they are found here). */
std::vector<int> open_descriptors();

class ConnectionWatch {
 public:
  ConnectionWatch(int port, std::chrono::milliseconds idle_limit, size_t max_connections);
  ~ConnectionWatch();
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

  /** A request on the connection from `addr`:`port` is being handled (nests). */
  void enter(const std::string& addr, int port);
  void leave(const std::string& addr, int port);
  /** Connections cut so far (slow, idle or over the cap). */
  uint64_t cut() const { return cut_.load(); }
  /** Connections open at the last look. */
  size_t open() const { return open_.load(); }

 private:
  struct Conn {
    int fd = -1;
    std::chrono::steady_clock::time_point idle_since;
    int busy = 0;
    bool seen = false;
  };
  void run();
  void scan();

  const int port_;
  const std::chrono::milliseconds idle_limit_;
  const size_t max_connections_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, Conn> conns_;  ///< by peer "addr port"
  std::atomic<uint64_t> cut_{0};
  std::atomic<size_t> open_{0};
  std::thread thread_;
};

}  // namespace kiln::serve
