// The server in-process on 127.0.0.1 with a tiny handler set, driven by raw
// sockets. Synchronisation is by the sockets and the server's own stats, not
// by sleeping; the only sleeps pace a deliberately slow client.
#include "net/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>

#include <gtest/gtest.h>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace hubzoo::net {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A flag one thread sets and another waits for.
class Event {
 public:
  void set() {
    std::lock_guard lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool wait(milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

struct Probe {
  std::atomic<int> echo_calls{0};
  Event stream_write_failed, stream_started, release_block, block_entered;
};

std::vector<Route> routes(Probe& p) {
  std::vector<Route> r;
  r.push_back({"GET", "/health", false, false, true,
               [](const Request&, Response& res) { res.set_content("ok", "text/plain"); }});
  r.push_back({"POST", "/echo", false, true, false, [&p](const Request& req, Response& res) {
                 ++p.echo_calls;
                 res.set_content(req.body, "application/octet-stream");
               }});
  r.push_back({"GET", "/stream", false, true, false, [&p](const Request&, Response& res) {
                 res.content_type = "text/event-stream";
                 res.stream = [&p](StreamWriter& w) {
                   p.stream_started.set();
                   while (!w.stopping()) {
                     if (!w.write("tick\n")) return p.stream_write_failed.set();
                     std::this_thread::sleep_for(milliseconds(5));  // a producer's pace
                   }
                   w.write("last\n");
                 };
               }});
  r.push_back({"GET", "/block", false, true, false, [&p](const Request&, Response& res) {
                 p.block_entered.set();
                 p.release_block.wait(milliseconds(10000));
                 res.set_content("unblocked", "text/plain");
               }});
  return r;
}

Hooks hooks() {
  Hooks h;
  h.authorize = [](const Request& req) -> std::optional<Response> {
    if (req.header_value("Authorization") == "Bearer k") return std::nullopt;
    Response res;
    res.status = 401;
    res.set_content("no key", "text/plain");
    return res;
  };
  return h;
}

class Served {
 public:
  explicit Served(HttpOptions o) : server_(o, routes(probe), hooks()) {
    port = server_.bind();
    thread_ = std::thread([this] { server_.run(); });
  }
  ~Served() { stop(); }
  void stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  HttpStats stats() const { return server_.stats(); }

  Probe probe;
  int port = 0;

 private:
  HttpServer server_;
  std::thread thread_;
};

HttpOptions small_options() {
  HttpOptions o;
  o.workers = 2;
  o.max_queued = 4;
  o.limits.max_body = 64 << 10;
  return o;
}

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{5, 0};  // no test waits longer for a byte
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

bool send_str(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until the connection closes (or 5 s pass without a byte).
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// Reads one response with a Content-Length body.
std::string read_response(int fd) {
  std::string out;
  char c;
  while (out.find("\r\n\r\n") == std::string::npos && recv(fd, &c, 1, 0) == 1) out += c;
  const size_t at = out.find("Content-Length: ");
  if (at == std::string::npos) return out;
  size_t len = std::stoul(out.substr(at + 16));
  while (len > 0 && recv(fd, &c, 1, 0) == 1) {
    out += c;
    --len;
  }
  return out;
}

int status_of(const std::string& response) {
  return response.size() >= 12 ? std::stoi(response.substr(9, 3)) : 0;
}

const char* kHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

std::string post_echo(std::string_view body) {
  return "POST /echo HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

TEST(HttpServer, KeepAliveAndPipelining) {
  Served s(small_options());
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd, post_echo("hello") + kHealth + post_echo("again")));
  std::string a = read_response(fd), b = read_response(fd), c = read_response(fd);
  EXPECT_EQ(status_of(a), 200);
  EXPECT_TRUE(a.ends_with("\r\n\r\nhello")) << a;
  EXPECT_TRUE(b.ends_with("\r\n\r\nok")) << b;
  EXPECT_TRUE(c.ends_with("\r\n\r\nagain")) << c;
  // Unknown path 404, wrong method 405 (with Allow).
  ASSERT_TRUE(send_str(fd, "GET /nothing HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(status_of(read_response(fd)), 404);
  close(fd);
  const int fd2 = connect_to(s.port);
  ASSERT_TRUE(send_str(fd2, "POST /health HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  const std::string r = read_response(fd2);
  EXPECT_EQ(status_of(r), 405);
  EXPECT_NE(r.find("Allow: GET"), std::string::npos);
  close(fd2);
}

TEST(HttpServer, NoKeyIs401BeforeTheBodyIsRead) {
  Served s(small_options());
  const int fd = connect_to(s.port);
  // The head only: a server that read the body first would wait for it.
  ASSERT_TRUE(send_str(fd, "POST /echo HTTP/1.1\r\nContent-Length: 60000\r\n\r\n"));
  const auto t0 = Clock::now();
  EXPECT_EQ(status_of(read_response(fd)), 401);
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  EXPECT_EQ(s.probe.echo_calls.load(), 0);
  close(fd);
  // And a declared body over the limit is refused from the head alone.
  const int fd2 = connect_to(s.port);
  ASSERT_TRUE(send_str(fd2,
                       "POST /echo HTTP/1.1\r\nAuthorization: Bearer k\r\n"
                       "Content-Length: 1000000\r\n\r\n"));
  EXPECT_EQ(status_of(read_response(fd2)), 413);
  close(fd2);
}

// Sends a chunked body of up to `total` bytes in 4 KiB chunks, stopping when
// an answer arrives; returns the answer.
std::string send_chunked(int fd, const std::string& head, size_t total) {
  send_str(fd, head);
  const std::string chunk = "1000\r\n" + std::string(4096, 'x') + "\r\n";
  for (size_t sent = 0; sent < total; sent += 4096) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) break;
    if (!send_str(fd, chunk)) break;
  }
  return read_response(fd);
}

TEST(HttpServer, ChunkedBodyOverTheLimitIs413WhileReading) {
  Served s(small_options());
  const int fd = connect_to(s.port);
  const std::string head =
      "POST /echo HTTP/1.1\r\nAuthorization: Bearer k\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(status_of(send_chunked(fd, head, 8 << 20)), 413);
  close(fd);
  EXPECT_LE(s.stats().max_body_buffered, 64u << 10);
  EXPECT_EQ(s.probe.echo_calls.load(), 0);
  // Without the key: 401 at once, nothing buffered.
  const int fd2 = connect_to(s.port);
  const std::string no_key = "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(status_of(send_chunked(fd2, no_key, 8 << 20)), 401);
  close(fd2);
  EXPECT_LE(s.stats().max_body_buffered, 64u << 10);
}

TEST(HttpServer, ThousandIdleConnectionsDoNotStopHealthOrWork) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 2200 && lim.rlim_max >= 2200) {
    lim.rlim_cur = 2200;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  ASSERT_GE(lim.rlim_cur, 2200u) << "needs 2200 file descriptors";
  Served s(small_options());  // two workers
  std::vector<int> idle;
  for (int i = 0; i < 1000; ++i) {
    const int fd = connect_to(s.port);
    ASSERT_TRUE(send_str(fd, kHealth));
    ASSERT_EQ(status_of(read_response(fd)), 200) << i;  // now an idle keep-alive connection
    idle.push_back(fd);
  }
  EXPECT_GE(s.stats().open_connections, 1000);
  const auto t0 = Clock::now();
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd, kHealth));
  EXPECT_EQ(status_of(read_response(fd)), 200);
  EXPECT_LT(Clock::now() - t0, milliseconds(1000));
  ASSERT_TRUE(send_str(fd, post_echo("work")));
  EXPECT_TRUE(read_response(fd).ends_with("work"));
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  close(fd);
  for (int f : idle) close(f);
}

// Sends `piece_size` bytes of `data` every 50 ms from a thread (a slow client)
// while this thread reads the whole answer; returns it and how long it took.
struct SlowClient {
  std::string response;
  Clock::duration took{};
};
SlowClient trickle(int fd, const std::string& data, size_t piece_size) {
  std::atomic<bool> done{false};
  std::thread slow([&] {
    for (size_t i = 0; i < data.size() && !done; i += piece_size) {
      const size_t n = std::min(piece_size, data.size() - i);
      if (send(fd, data.data() + i, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  SlowClient out;
  const auto t0 = Clock::now();
  out.response = read_all(fd);
  out.took = Clock::now() - t0;
  done = true;
  slow.join();
  return out;
}

TEST(HttpServer, SlowHeadIsCutAtTheDeadline) {
  HttpOptions o = small_options();
  o.header_timeout = milliseconds(400);
  Served s(o);
  const int fd = connect_to(s.port);
  // One byte per 50 ms, for up to 6.5 s.
  const SlowClient c = trickle(fd, "GET /health HTTP/1.1\r\nX-Pad: " + std::string(100, 'a'), 1);
  EXPECT_EQ(status_of(c.response), 408) << c.response;
  EXPECT_GE(c.took, milliseconds(350));
  EXPECT_LT(c.took, milliseconds(1500));
  close(fd);
}

TEST(HttpServer, SlowBodyIsCutByTheMinimumRate) {
  HttpOptions o = small_options();
  o.body_grace = milliseconds(300);
  o.min_body_rate = 1000;  // bytes per second after the grace
  Served s(o);
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd,
                       "POST /echo HTTP/1.1\r\nAuthorization: Bearer k\r\n"
                       "Content-Length: 10000\r\n\r\n"));
  std::string body;
  for (int i = 0; i < 100; ++i) body += "0123456789";
  const SlowClient c = trickle(fd, body, 10);  // 10 bytes per 50 ms: 200 B/s
  EXPECT_EQ(status_of(c.response), 408) << c.response;
  EXPECT_LT(c.took, milliseconds(2000));
  EXPECT_EQ(s.probe.echo_calls.load(), 0);
  close(fd);
}

TEST(HttpServer, BodiesBeingReadShareOneMemoryBudget) {
  HttpOptions o = small_options();  // 64 KiB per body
  o.max_body_memory = 100 << 10;
  Served s(o);
  const std::string head =
      "POST /echo HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Length: 65536\r\n\r\n";
  const int a = connect_to(s.port);
  ASSERT_TRUE(send_str(a, head + std::string(60000, 'a')));
  const auto deadline = Clock::now() + milliseconds(5000);
  while (s.stats().body_memory < 60000 && Clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(s.stats().body_memory, 60000u);
  const int b = connect_to(s.port);
  ASSERT_TRUE(send_str(b, head + std::string(60000, 'b')));
  const std::string refused = read_response(b);
  EXPECT_EQ(status_of(refused), 503) << refused;
  close(b);
  // The first body completes; then nothing is held.
  ASSERT_TRUE(send_str(a, std::string(5536, 'a')));
  EXPECT_EQ(read_response(a).size() > 65536, true);
  EXPECT_EQ(s.stats().body_memory, 0u);
  close(a);
}

TEST(HttpServer, PerIpCapRefusesWith503) {
  HttpOptions o = small_options();
  o.max_connections_per_ip = 3;
  Served s(o);
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) {
    fds.push_back(connect_to(s.port));
    ASSERT_TRUE(send_str(fds.back(), kHealth));
    ASSERT_EQ(status_of(read_response(fds.back())), 200);
  }
  const int extra = connect_to(s.port);
  EXPECT_EQ(status_of(read_all(extra)), 503);
  close(extra);
  EXPECT_EQ(s.stats().refused_connections, 1u);
  // The cap counts open connections: one closed, one more fits.
  close(fds.back());
  fds.pop_back();
  const auto deadline = Clock::now() + milliseconds(3000);
  while (s.stats().open_connections > 2 && Clock::now() < deadline) std::this_thread::yield();
  const int again = connect_to(s.port);
  ASSERT_TRUE(send_str(again, kHealth));
  EXPECT_EQ(status_of(read_response(again)), 200);
  close(again);
  for (int f : fds) close(f);
}

TEST(HttpServer, IdleKeepAliveConnectionIsClosed) {
  HttpOptions o = small_options();
  o.idle_timeout = milliseconds(300);
  Served s(o);
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd, kHealth));
  ASSERT_EQ(status_of(read_response(fd)), 200);
  const auto t0 = Clock::now();
  char c;
  EXPECT_EQ(recv(fd, &c, 1, 0), 0);  // closed by the server, not timed out (5 s)
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  close(fd);
}

TEST(HttpServer, StreamOfAClientThatLeftFailsItsWrites) {
  Served s(small_options());
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd, "GET /stream HTTP/1.1\r\nAuthorization: Bearer k\r\n\r\n"));
  char buf[256];
  ASSERT_GT(recv(fd, buf, sizeof(buf), 0), 0);
  close(fd);
  EXPECT_TRUE(s.probe.stream_write_failed.wait(milliseconds(5000)));
  // The worker is free again.
  const int fd2 = connect_to(s.port);
  ASSERT_TRUE(send_str(fd2, post_echo("after")));
  EXPECT_TRUE(read_response(fd2).ends_with("after"));
  close(fd2);
}

TEST(HttpServer, StopEndsStreamsWithTheirLastEvent) {
  Served s(small_options());
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd, "GET /stream HTTP/1.1\r\nAuthorization: Bearer k\r\n\r\n"));
  ASSERT_TRUE(s.probe.stream_started.wait(milliseconds(5000)));
  s.stop();  // returns once the stream ended and the connection closed
  const std::string got = read_all(fd);
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(got.find("last\n"), std::string::npos);
  EXPECT_TRUE(got.ends_with("\r\n0\r\n\r\n")) << got.substr(got.size() > 40 ? got.size() - 40 : 0);
  EXPECT_FALSE(s.probe.stream_write_failed.wait(milliseconds(0)));
  close(fd);
}

TEST(HttpServer, InlineRoutesAnswerWhileWorkersAreBusyAndAFullQueueIs503) {
  HttpOptions o = small_options();
  o.workers = 1;
  o.max_queued = 0;
  Served s(o);
  const int blocked = connect_to(s.port);
  ASSERT_TRUE(send_str(blocked, "GET /block HTTP/1.1\r\nAuthorization: Bearer k\r\n\r\n"));
  ASSERT_TRUE(s.probe.block_entered.wait(milliseconds(5000)));
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd, kHealth));
  EXPECT_EQ(status_of(read_response(fd)), 200);
  ASSERT_TRUE(send_str(fd, post_echo("x")));
  const std::string busy = read_response(fd);
  EXPECT_EQ(status_of(busy), 503);
  EXPECT_NE(busy.find("Retry-After: 1"), std::string::npos);
  s.probe.release_block.set();
  const std::string unblocked = read_response(blocked);
  EXPECT_TRUE(unblocked.ends_with("unblocked")) << unblocked;
  close(fd);
  close(blocked);
}

TEST(HttpServer, ExpectContinueAndHttp10) {
  Served s(small_options());
  const int fd = connect_to(s.port);
  ASSERT_TRUE(send_str(fd,
                       "POST /echo HTTP/1.1\r\nAuthorization: Bearer k\r\n"
                       "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  EXPECT_EQ(read_response(fd), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(send_str(fd, "abc"));
  EXPECT_TRUE(read_response(fd).ends_with("abc"));
  close(fd);
  const int fd2 = connect_to(s.port);
  ASSERT_TRUE(send_str(fd2, "GET /health HTTP/1.0\r\n\r\n"));
  const std::string got = read_all(fd2);  // 1.0 without keep-alive: closed after
  EXPECT_EQ(status_of(got), 200);
  EXPECT_NE(got.find("Connection: close"), std::string::npos);
  close(fd2);
}

}  // namespace
}  // namespace hubzoo::net
