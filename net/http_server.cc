#include "net/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "base/error.h"
#include "net/worker_pool.h"

namespace hubzoo::net {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kReadChunk = 16384;
constexpr int kReadsPerEvent = 4;  // then other connections get their turn
constexpr uint64_t kListenId = 0, kWakeId = 1;
constexpr auto kTick = std::chrono::milliseconds(50);

// kIdle: waiting for a request's first byte; kHead, kBody: reading one;
// kBusy: a worker has it (not in epoll); kWrite: the reactor writes `out`;
// kDrain: after an error answer, reading and dropping what the client still
// sends so the answer is not lost to a reset.
enum class Phase { kIdle, kHead, kBody, kBusy, kWrite, kDrain };
// What follows a written answer.
enum class After { kKeepAlive, kLinger, kClose };

struct Conn {
  int fd = -1;
  uint64_t id = 0;
  std::string ip;
  RequestParser parser;
  std::string pending;  // read, not parsed yet: at most one read beyond a request
  std::string out;
  size_t out_off = 0;
  Phase phase = Phase::kIdle;
  After after = After::kKeepAlive;
  bool registered = false;  // in epoll
  bool dead = false;
  Clock::time_point deadline, body_start;
  const Route* route = nullptr;
  uint64_t drained = 0;
  uint64_t body_counted = 0;  // this body's bytes in Impl::body_memory
};

// A worker's answer, handed to the reactor.
struct Completion {
  uint64_t id = 0;
  std::string bytes;  // a whole response to write (empty when streamed)
  bool close = false;
  bool streamed = false;
};

bool reading(Phase p) { return p == Phase::kIdle || p == Phase::kHead || p == Phase::kBody; }

std::string peer_ip(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof(buf));
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions opt;
  std::vector<Route> routes;
  Hooks hooks;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false}, abort{false};
  std::atomic<int64_t> open{0}, busy{0};
  std::atomic<uint64_t> max_body{0}, refused{0}, body_memory{0};

  std::mutex done_mu;  // workers -> reactor
  std::vector<Completion> done;

  // Reactor thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, int> per_ip;
  std::vector<uint64_t> dead;
  std::unique_ptr<WorkerPool> pool;
  uint64_t next_id = 2;
  bool stop_begun = false, listen_paused = false;
  Clock::time_point now, stop_deadline, resume_accept;

  Impl(HttpOptions o, std::vector<Route> r, Hooks h)
      : opt(std::move(o)), routes(std::move(r)), hooks(std::move(h)) {
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd < 0 || wake_fd < 0) throw Error(std::string("epoll: ") + std::strerror(errno));
  }
  ~Impl() {
    for (int fd : {listen_fd, epoll_fd, wake_fd}) {
      if (fd >= 0) ::close(fd);
    }
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof(one));
  }

  Response error(int status, const std::string& message) {
    Response r;
    if (hooks.error) {
      r = hooks.error(status, message);
    } else {
      r.body = message + "\n";
    }
    r.status = status;
    return r;
  }

  void watch(Conn& c, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = c.id;
    epoll_ctl(epoll_fd, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &ev);
    c.registered = true;
  }
  void unwatch(Conn& c) {
    if (c.registered) epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    c.registered = false;
  }

  // The body left the reactor's reading (handed on, refused or dropped).
  void release_body(Conn& c) {
    body_memory -= c.body_counted;
    c.body_counted = 0;
  }

  void close_conn(Conn& c) {
    if (c.dead) return;
    c.dead = true;
    release_body(c);
    unwatch(c);
    ::close(c.fd);
    if (--per_ip[c.ip] <= 0) per_ip.erase(c.ip);
    --open;
    dead.push_back(c.id);
  }

  // Back to waiting for the next request; handles what was pipelined behind.
  void to_idle(Conn& c) {
    c.phase = Phase::kIdle;
    c.deadline = now + opt.idle_timeout;
    c.route = nullptr;
    watch(c, EPOLLIN | EPOLLRDHUP);
    process(c);
  }

  void flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        c.deadline = now + opt.write_timeout;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;  // EPOLLOUT brings us back
      } else {
        return close_conn(c);
      }
    }
    c.out.clear();
    c.out.shrink_to_fit();
    c.out_off = 0;
    if (c.after == After::kKeepAlive && !stopping) return to_idle(c);
    if (c.after == After::kLinger && !stopping) {
      ::shutdown(c.fd, SHUT_WR);
      c.phase = Phase::kDrain;
      c.deadline = now + opt.linger;
      c.drained = 0;
      return watch(c, EPOLLIN | EPOLLRDHUP);
    }
    close_conn(c);
  }

  void reply(Conn& c, const Response& res, const Request& req, After after) {
    release_body(c);
    if (hooks.on_response) hooks.on_response(req, res.status);
    const bool keep = after == After::kKeepAlive && req.keep_alive && !stopping;
    if (!keep && after == After::kKeepAlive) after = After::kClose;
    c.out = serialize_head(res, {keep, req.minor_version, false}) + res.body;
    c.out_off = 0;
    c.after = after;
    c.phase = Phase::kWrite;
    c.deadline = now + opt.write_timeout;
    watch(c, EPOLLOUT);
    flush(c);
  }

  void reply_error(Conn& c, int status, const std::string& message, After after) {
    reply(c, error(status, message), c.parser.request(), after);
  }

  // After the head, before any body byte: route, method, authorization,
  // declared size. False when answered.
  bool accept_head(Conn& c) {
    const Request& head = c.parser.request();
    const Route* match = nullptr;
    std::string allow;
    for (const Route& r : routes) {
      const bool hit = r.prefix ? head.path.size() > r.path.size() && head.path.starts_with(r.path)
                                : head.path == r.path;
      if (!hit) continue;
      allow += (allow.empty() ? "" : ", ") + r.method;
      if (r.method == head.method) {
        match = &r;
        break;
      }
    }
    if (allow.empty()) {
      reply_error(c, 404, "Unknown endpoint: " + head.method + " " + head.path, After::kLinger);
      return false;
    }
    if (!match) {
      Response res = error(405, "Method " + head.method + " is not allowed on " + head.path);
      res.set_header("Allow", allow);
      reply(c, res, head, After::kLinger);
      return false;
    }
    if (match->auth && hooks.authorize) {
      if (auto refusal = hooks.authorize(head)) {
        reply(c, *refusal, head, After::kLinger);
        return false;
      }
    }
    c.route = match;
    c.parser.continue_body();  // 413 here when Content-Length is over the limit
    if (c.parser.state() == RequestParser::State::kBody) {
      if (head.expect_continue && c.pending.empty()) {
        static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] ssize_t n =
            ::send(c.fd, kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      c.phase = Phase::kBody;
      c.body_start = now;
      c.deadline = now + opt.body_grace;
    }
    return true;
  }

  void process(Conn& c) {
    using State = RequestParser::State;
    while (!c.dead && reading(c.phase)) {
      const State st = c.parser.state();
      if (st == State::kHeadComplete) {
        if (!accept_head(c)) return;
        continue;
      }
      if (st == State::kComplete) return dispatch(c);
      if (st == State::kError) {
        return reply_error(c, c.parser.error().status, c.parser.error().message, After::kLinger);
      }
      if (c.pending.empty()) return;
      if (c.phase == Phase::kIdle) {
        c.phase = Phase::kHead;
        c.deadline = now + opt.header_timeout;
      }
      c.pending.erase(0, c.parser.feed(c.pending));
      if (c.phase == Phase::kBody) {
        const uint64_t got = c.parser.request().body.size();
        if (got > max_body.load()) max_body = got;
        body_memory += got - c.body_counted;
        c.body_counted = got;
        if (body_memory.load() > opt.max_body_memory) {
          Response res =
              error(503, "The server is receiving too many request bodies; retry later.");
          res.set_header("Retry-After", "1");
          return reply(c, res, c.parser.request(), After::kLinger);
        }
        // The body keeps at least min_body_rate after its grace period.
        c.deadline =
            c.body_start + opt.body_grace +
            std::chrono::milliseconds(got * 1000 / std::max<uint64_t>(opt.min_body_rate, 1));
      }
    }
  }

  static void run_handler(Impl& s, const Route& r, const Request& req, Response& res) {
    try {
      r.handler(req, res);
    } catch (const std::exception& e) {
      res = s.error(500, std::string("Internal error: ") + e.what());
    } catch (...) {
      res = s.error(500, "Internal error");
    }
  }

  void dispatch(Conn& c) {
    release_body(c);
    auto req = std::make_shared<Request>(c.parser.take());
    req->remote_ip = c.ip;
    c.parser.reset();
    const Route& r = *c.route;
    if (r.inline_) {
      Response res;
      run_handler(*this, r, *req, res);
      if (res.stream) res = error(500, "Internal error: an inline route cannot stream");
      return reply(c, res, *req, After::kKeepAlive);
    }
    const bool keep = req->keep_alive;
    c.phase = Phase::kBusy;
    unwatch(c);
    ++busy;
    const bool queued = pool->try_submit(
        [this, id = c.id, fd = c.fd, req, &r, keep] { work(id, fd, *req, r, keep); });
    if (queued) return;
    --busy;
    Response res = error(503, "The server is busy; retry later.");
    res.set_header("Retry-After", "1");
    reply(c, res, *req, After::kKeepAlive);
  }

  // On a worker: runs the handler and writes a stream; a whole response goes
  // back to the reactor to write.
  void work(uint64_t id, int fd, const Request& req, const Route& r, bool keep) {
    Response res;
    run_handler(*this, r, req, res);
    Completion out;
    out.id = id;
    if (res.stream) {
      const bool chunked = req.minor_version == 1;
      StreamWriter w({fd, chunked, opt.write_timeout, &stopping, &abort});
      bool ok = w.write_raw(serialize_head(res, {keep, req.minor_version, true}));
      if (ok) {
        try {
          res.stream(w);
        } catch (...) {
          ok = false;  // mid-stream: nothing to answer but a closed connection
        }
      }
      ok = ok && !w.failed() && w.finish();
      out.streamed = true;
      out.close = !keep || !ok || !chunked;
    } else {
      out.bytes = serialize_head(res, {keep, req.minor_version, false}) + res.body;
      out.close = !keep;
    }
    if (hooks.on_response) hooks.on_response(req, res.status);
    res = Response();  // the handler's captures die on the worker
    {
      std::lock_guard lock(done_mu);
      done.push_back(std::move(out));
    }
    wake();
  }

  void take_completions() {
    std::vector<Completion> batch;
    {
      std::lock_guard lock(done_mu);
      batch.swap(done);
    }
    for (Completion& d : batch) {
      auto it = conns.find(d.id);
      if (it == conns.end() || it->second->dead) continue;
      Conn& c = *it->second;
      --busy;
      if (d.streamed) {
        if (d.close || stopping) {
          close_conn(c);
        } else {
          to_idle(c);
        }
        continue;
      }
      c.out = std::move(d.bytes);
      c.out_off = 0;
      c.after = d.close ? After::kClose : After::kKeepAlive;
      c.phase = Phase::kWrite;
      c.deadline = now + opt.write_timeout;
      watch(c, EPOLLOUT);
      flush(c);
    }
  }

  void refuse(int fd) {
    ++refused;
    Response res = error(503, "Too many connections; retry later.");
    res.set_header("Retry-After", "1");
    const std::string bytes = serialize_head(res, {false, 1, false}) + res.body;
    [[maybe_unused]] ssize_t n =
        ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }

  void accept_all() {
    while (true) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: pause accepting briefly instead of spinning.
          epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
          listen_paused = true;
          resume_accept = now + std::chrono::milliseconds(100);
        }
        return;
      }
      std::string ip = peer_ip(addr);
      auto ip_it = per_ip.find(ip);
      const int from_ip = ip_it == per_ip.end() ? 0 : ip_it->second;
      if (open.load() >= opt.max_connections || from_ip >= opt.max_connections_per_ip) {
        refuse(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto conn = std::make_unique<Conn>();
      conn->fd = fd;
      conn->id = next_id++;
      conn->ip = std::move(ip);
      conn->parser = RequestParser(opt.limits);
      conn->deadline = now + opt.idle_timeout;
      ++per_ip[conn->ip];
      ++open;
      Conn& c = *conn;
      conns.emplace(c.id, std::move(conn));
      watch(c, EPOLLIN | EPOLLRDHUP);
    }
  }

  void on_readable(Conn& c) {
    char buf[kReadChunk];
    for (int round = 0; round < kReadsPerEvent && !c.dead; ++round) {
      if (!reading(c.phase) && c.phase != Phase::kDrain) return;
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return close_conn(c);  // EOF or error
      if (c.phase == Phase::kDrain) {
        c.drained += static_cast<uint64_t>(n);
        if (c.drained > 2 * opt.limits.max_body + (1 << 20)) return close_conn(c);
        continue;
      }
      c.pending.append(buf, static_cast<size_t>(n));
      process(c);
    }
  }

  void on_event(const epoll_event& ev) {
    if (ev.data.u64 == kListenId) return accept_all();
    if (ev.data.u64 == kWakeId) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(wake_fd, &v, sizeof(v));
      return;
    }
    auto it = conns.find(ev.data.u64);
    if (it == conns.end() || it->second->dead) return;
    Conn& c = *it->second;
    if (c.phase == Phase::kWrite) {
      if (ev.events & (EPOLLERR | EPOLLHUP)) return close_conn(c);
      return flush(c);
    }
    on_readable(c);
  }

  void check_deadlines() {
    for (auto& [id, conn] : conns) {
      Conn& c = *conn;
      if (c.dead || c.phase == Phase::kBusy || now < c.deadline) continue;
      if (c.phase == Phase::kHead) {
        reply_error(c, 408, "The request head did not arrive in time.", After::kClose);
      } else if (c.phase == Phase::kBody) {
        reply_error(c, 408, "The request body arrived too slowly.", After::kClose);
      } else {
        close_conn(c);  // idle, or a write / linger that took too long
      }
    }
    if (listen_paused && listen_fd >= 0 && now >= resume_accept) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
      listen_paused = false;
    }
  }

  void begin_stop() {
    stop_begun = true;
    stop_deadline = now + opt.stop_grace;
    if (listen_fd >= 0) {
      ::close(listen_fd);  // also leaves the epoll set
      listen_fd = -1;
    }
    for (auto& [id, conn] : conns) {
      Conn& c = *conn;
      if (c.dead) continue;
      if (c.phase == Phase::kWrite) {
        c.after = After::kClose;
      } else if (c.phase != Phase::kBusy) {
        close_conn(c);
      }
    }
  }

  void reap() {
    for (uint64_t id : dead) conns.erase(id);
    dead.clear();
  }

  void loop() {
    epoll_event events[256];
    auto next_tick = Clock::now();
    while (true) {
      const int n = epoll_wait(epoll_fd, events, 256, static_cast<int>(kTick.count()));
      now = Clock::now();
      for (int i = 0; i < n; ++i) {
        on_event(events[i]);
        reap();
      }
      take_completions();
      if (now >= next_tick) {
        check_deadlines();
        next_tick = now + kTick;
      }
      if (stopping && !stop_begun) begin_stop();
      reap();
      if (stop_begun && (conns.empty() || now >= stop_deadline)) return;
    }
  }
};

HttpServer::HttpServer(HttpOptions options, std::vector<Route> routes, Hooks hooks)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(routes), std::move(hooks))) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& s = *impl_;
  const std::string where = s.opt.host + ":" + std::to_string(s.opt.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(s.opt.port);
  if (getaddrinfo(s.opt.host.c_str(), port.c_str(), &hints, &found) != 0 || !found) {
    throw InvalidArgument("cannot listen on " + where + " (not an address of this machine)");
  }
  std::string why = "no address";
  for (addrinfo* a = found; a && s.listen_fd < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      s.listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (s.listen_fd < 0) throw InvalidArgument("cannot listen on " + where + " (" + why + ")");
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(addr).sin6_port
                                          : reinterpret_cast<sockaddr_in&>(addr).sin_port);
}

void HttpServer::run() {
  Impl& s = *impl_;
  if (s.listen_fd < 0) throw InvalidArgument("HttpServer::run before bind");
  s.pool = std::make_unique<WorkerPool>(std::max(s.opt.workers, 1), s.opt.max_queued);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev);
  ev.data.u64 = kWakeId;
  epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.wake_fd, &ev);
  s.loop();
  // The grace is over: streams' writes fail, workers end, then every socket closes.
  s.abort = true;
  s.pool->stop();
  s.take_completions();
  for (auto& [id, conn] : s.conns) s.close_conn(*conn);
  s.reap();
  s.busy = 0;
}

void HttpServer::stop() {
  impl_->stopping = true;
  impl_->wake();
}

HttpStats HttpServer::stats() const {
  const Impl& s = *impl_;
  return {s.open.load(), s.busy.load(), s.max_body.load(), s.body_memory.load(), s.refused.load()};
}

}  // namespace hubzoo::net
