// The metrics endpoint (runtime/metrics/metrics_server.h) over a real loopback socket: GET
// /metrics answers the text last published, other paths 404, other methods 405, a silent client
// does not block shutdown, and a port already taken is refused naming address:port.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "core/error.h"
#include "runtime/metrics/metrics_server.h"

using namespace zrt;
using namespace zrt::metrics;

namespace {

int connectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<unsigned short>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  timeval tv{10, 0};  // a server that never answers fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// The whole response to one request (the server closes the connection after it).
std::string fetch(int port, const std::string& request) {
  const int fd = connectTo(port);
  REQUIRE(::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("GET /metrics answers the last text published; other paths and methods are refused") {
  MetricsServer server("127.0.0.1", 0);
  REQUIRE(server.port() > 0);
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string r = fetch(server.port(), get);
  CHECK(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(r.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(r.find("Content-Length: 0\r\n") != std::string::npos);
  server.publish("zrt_steps_total{rank=\"0\"} 1\n");
  r = fetch(server.port(), get);
  CHECK(r.substr(r.find("\r\n\r\n") + 4) == "zrt_steps_total{rank=\"0\"} 1\n");
  server.publish("zrt_steps_total{rank=\"0\"} 2\n");
  r = fetch(server.port(), get);
  CHECK(r.substr(r.find("\r\n\r\n") + 4) == "zrt_steps_total{rank=\"0\"} 2\n");
  CHECK(fetch(server.port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(fetch(server.port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
}

TEST_CASE("a client that never sends its request does not hold up shutdown") {
  int fd = -1;
  const auto t0 = std::chrono::steady_clock::now();
  {
    MetricsServer server("127.0.0.1", 0);
    fd = connectTo(server.port());
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  ::close(fd);
}

TEST_CASE("a port in use and an address that is none are refused, naming address:port") {
  MetricsServer first("127.0.0.1", 0);
  const std::string where = "127.0.0.1:" + std::to_string(first.port());
  CHECK_THROWS_WITH_AS(MetricsServer("127.0.0.1", first.port()), doctest::Contains((where + ": cannot bind").c_str()), Error);
  CHECK_THROWS_WITH_AS(MetricsServer("localhost", 9), doctest::Contains("localhost:9: \"localhost\" is not an IP address"),
                       InvalidArgument);
}
