#include "runtime/metrics/metrics_server.h"

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility> (C++20).
#include <utility>
// clang-format off
#include <boost/asio.hpp>
// clang-format on

#include <chrono>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace zrt::metrics {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr std::size_t kMaxRequestBytes = 8192;
constexpr auto kRequestDeadline = std::chrono::seconds(5);

std::string response(int status, const char* reason, const std::string& contentType, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + ' ' + reason + "\r\nContent-Type: " + contentType +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

struct MetricsServer::Impl {
  std::string address;
  int port = 0;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  std::mutex mu;
  std::string text;  // guarded by mu

  // One connection: read the request head, answer, close. Owns itself through shared_ptr.
  struct Session : std::enable_shared_from_this<Session> {
    Impl& server;
    tcp::socket socket;
    asio::streambuf request{kMaxRequestBytes};
    asio::steady_timer deadline;
    std::string reply;

    Session(Impl& s, tcp::socket sock) : server(s), socket(std::move(sock)), deadline(s.io) {}

    void start() {
      auto self = shared_from_this();
      deadline.expires_after(kRequestDeadline);
      deadline.async_wait([self](const boost::system::error_code& ec) {
        if (!ec) {
          boost::system::error_code ignored;
          self->socket.close(ignored);
        }
      });
      asio::async_read_until(socket, request, "\r\n\r\n",
                             [self](const boost::system::error_code& ec, std::size_t) { self->onRequest(ec); });
    }

    void onRequest(const boost::system::error_code& ec) {
      if (ec) {
        deadline.cancel();
        return;  // closed, timed out or too long: nothing worth answering
      }
      std::istream in(&request);
      std::string method, target;
      in >> method >> target;
      if (method != "GET" && method != "HEAD") {
        reply = response(405, "Method Not Allowed", "text/plain", "only GET\n");
      } else if (target != "/metrics" && target.rfind("/metrics?", 0) != 0) {
        reply = response(404, "Not Found", "text/plain", "the metrics are at /metrics\n");
      } else {
        std::string body;
        {
          std::lock_guard lock(server.mu);
          body = server.text;
        }
        reply = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
        if (method == "HEAD") reply.resize(reply.find("\r\n\r\n") + 4);
      }
      auto self = shared_from_this();
      asio::async_write(socket, asio::buffer(reply), [self](const boost::system::error_code&, std::size_t) {
        boost::system::error_code ignored;
        self->socket.shutdown(tcp::socket::shutdown_both, ignored);
        self->socket.close(ignored);
        self->deadline.cancel();
      });
    }
  };

  void accept() {
    acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<Session>(*this, std::move(socket))->start();
      accept();
    });
  }
};

MetricsServer::MetricsServer(const std::string& address, int port) : impl_(std::make_unique<Impl>()) {
  impl_->address = address;
  const std::string where = address + ":" + std::to_string(port);
  if (port < 0 || port > 65535) ZRT_THROW(InvalidArgument, "metrics endpoint ", where, ": port out of range");
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(address, ec);
  if (ec) ZRT_THROW(InvalidArgument, "metrics endpoint ", where, ": \"", address, "\" is not an IP address");
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  tcp::acceptor& a = impl_->acceptor;
  if (a.open(endpoint.protocol(), ec); ec)
    ZRT_THROW(Error, "metrics endpoint ", where, ": cannot open a socket: ", ec.message());
  // A restarted job may rebind while its predecessor's connections sit in TIME_WAIT.
  a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (a.bind(endpoint, ec); ec)
    ZRT_THROW(Error, "metrics endpoint ", where, ": cannot bind: ", ec.message(),
              " (another process on this port? choose another with --metrics-port or zrt.metrics_port)");
  if (a.listen(asio::socket_base::max_listen_connections, ec); ec)
    ZRT_THROW(Error, "metrics endpoint ", where, ": cannot listen: ", ec.message());
  impl_->port = a.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([this] {
    try {
      impl_->io.run();
    } catch (const std::exception& e) {
      // The endpoint is an aid, not part of training: it stops, the job goes on.
      ZRT_WARN("metrics endpoint stopped: ", e.what());
    }
  });
}

MetricsServer::~MetricsServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsServer::port() const { return impl_->port; }

const std::string& MetricsServer::address() const { return impl_->address; }

void MetricsServer::publish(std::string text) {
  std::lock_guard lock(impl_->mu);
  impl_->text = std::move(text);
}

}  // namespace zrt::metrics
