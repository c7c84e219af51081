// The metrics endpoint: a minimal HTTP/1.x server (Boost.Asio) on its own thread that answers
// GET /metrics with the last text published (Prometheus' text format, metrics_report.h), 404 for
// any other path and 405 for any other method. One request per connection; a client that sends
// no complete request within 5 s, or more than 8 KiB of header, is dropped.
// Thread-safety: publish() from any thread; the server reads the text under a mutex.
#pragma once

#include <memory>
#include <string>

namespace zrt::metrics {

class MetricsServer {
 public:
  // Listens on address:port (port 0: one the kernel picks, see port()). Throws Error naming
  // address:port when the address is not an IP address or the port cannot be bound.
  MetricsServer(const std::string& address, int port);
  // Stops accepting, drops open connections and joins the thread (bounded: no handler blocks).
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;
  const std::string& address() const;
  // Replaces the body served at /metrics.
  void publish(std::string text);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zrt::metrics
