// shmbus-bench — Boost.Interprocess message_queue.
//
// A message_queue is a unicast queue in shared memory guarded by one
// process-shared mutex and two condition variables. With N consumers the
// orchestrator creates N queues (NAME.q0 ...) and the producer sends every
// message to each. Ping-pong uses NAME.ping and NAME.pong.
#include <boost/date_time/posix_time/posix_time_types.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <memory>
#include <string>
#include <vector>

#include "roles.hpp"

namespace bench {
namespace bip = boost::interprocess;

std::string bipc_queue_name(const RunConfig& cfg, const std::string& suffix) {
  std::string n = cfg.name;
  n += '.';
  n += suffix;
  return n;
}

std::vector<std::string> bipc_queue_names(const RunConfig& cfg) {
  std::vector<std::string> names;
  if (cfg.mode == Mode::pingpong) {
    names = {bipc_queue_name(cfg, "ping"), bipc_queue_name(cfg, "pong")};
  } else {
    for (std::uint32_t i = 0; i < cfg.consumers; ++i)
      names.push_back(bipc_queue_name(cfg, 'q' + std::to_string(i)));
  }
  return names;
}

void bipc_create(const RunConfig& cfg) {
  for (const auto& n : bipc_queue_names(cfg)) {
    bip::message_queue::remove(n.c_str());
    bip::message_queue q(bip::create_only, n.c_str(), cfg.queue_depth, cfg.size);
  }
}

void bipc_remove(const RunConfig& cfg) {
  for (const auto& n : bipc_queue_names(cfg)) bip::message_queue::remove(n.c_str());
}

namespace {

class BipcSender {
 public:
  explicit BipcSender(const std::vector<std::string>& names) {
    for (const auto& n : names)
      queues_.push_back(std::make_unique<bip::message_queue>(bip::open_only, n.c_str()));
  }
  bool send(const std::byte* p, std::size_t n) noexcept {
    try {
      for (auto& q : queues_) q->send(p, n, 0);
      return true;
    } catch (const std::exception& e) {
      std::snprintf(err_, sizeof err_, "%s", e.what());
      return false;
    }
  }
  void finish() noexcept {}
  const char* error() const noexcept { return err_; }

 private:
  std::vector<std::unique_ptr<bip::message_queue>> queues_;
  char err_[128] = {};
};

class BipcReceiver {
 public:
  BipcReceiver(const std::string& name, std::size_t size)
      : q_(bip::open_only, name.c_str()), buf_(size) {}

  // One message per call: each receive takes the queue's mutex.
  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    try {
      bip::message_queue::size_type got = 0;
      unsigned prio = 0;
      if (timeout_ns == kForever) {
        q_.receive(buf_.data(), buf_.size(), got, prio);
      } else {
        const auto until = boost::posix_time::microsec_clock::universal_time() +
                           boost::posix_time::microseconds(static_cast<long>(timeout_ns / 1000));
        if (!q_.timed_receive(buf_.data(), buf_.size(), got, prio, until)) return 0;
      }
      on_message(buf_.data(), got);
      return 1;
    } catch (const std::exception& e) {
      std::snprintf(err_, sizeof err_, "%s", e.what());
      return -1;
    }
  }
  const char* error() const noexcept { return err_; }

 private:
  bip::message_queue q_;
  std::vector<std::byte> buf_;
  char err_[128] = {};
};

}  // namespace

void run_bipc(Control& c, Role role, int id) {
  const RunConfig& cfg = c.cfg;
  if (cfg.mode == Mode::pingpong) {
    const auto ping = bipc_queue_name(cfg, "ping");
    const auto pong = bipc_queue_name(cfg, "pong");
    if (role == Role::producer) {
      BipcSender s({ping});
      BipcReceiver r(pong, cfg.size);
      ping_loop(c, s, r);
    } else {
      BipcSender s({pong});
      BipcReceiver r(ping, cfg.size);
      pong_loop(c, s, r);
    }
    return;
  }
  const auto names = bipc_queue_names(cfg);
  if (role == Role::producer) {
    BipcSender s(names);
    if (cfg.mode == Mode::idle)
      idle_producer_loop(c, s);
    else
      producer_loop(c, s);
  } else {
    BipcReceiver r(names.at(static_cast<std::size_t>(id)), cfg.size);
    if (cfg.mode == Mode::idle)
      idle_consumer_loop(c, id, r);
    else
      consumer_loop(c, id, r);
  }
}

}  // namespace bench
