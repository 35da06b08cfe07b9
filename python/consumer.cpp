// shmbus.Consumer: a reader slot, next(), read_batch() and iteration until
// the end of the stream, fileno() and has_news() for an event loop, and
// close() from another thread while one waits.
#include "module.hpp"

namespace shmbus_py {
namespace {

constexpr std::size_t kMaxBatch = 4096;  // messages per Consumer.read_batch() call

std::unique_ptr<PyConsumer> make_consumer(const PyBus& py_bus, const std::string& name, const std::string& start,
                                          std::uint64_t start_seq, bool durable, bool best_effort, bool copy) {
  const shmbus::Bus& bus = py_bus.get();
  shmbus::ConsumerOptions o;
  o.name = name;
  if (start == "earliest") o.start = shmbus::Start::earliest;
  else if (start == "latest") o.start = shmbus::Start::latest;
  else if (start == "sequence") o.start = shmbus::Start::sequence;
  else if (start == "resume") o.start = shmbus::Start::resume;
  else throw py::value_error("start must be 'earliest', 'latest', 'sequence' or 'resume'");
  o.start_seq = start_seq;
  o.durable = durable;
  o.hold_producer = !best_effort;
  auto c = std::make_unique<PyConsumer>(bus);
  c->copy = copy;
  c->overwrite = bus.info().policy == shmbus::Policy::overwrite;
  c->consumer.emplace(bus, o);
  return c;
}

// `read` (next() or read_batch()) with the end of the stream raised as EndOfStream.
template <class Read>
auto ending_with_end_of_stream(PyConsumer& c, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const py::stop_iteration&) {
    raise_end_of_stream(c.bus.name(), c.end_reason);
  }
}

}  // namespace

PyConsumer::~PyConsumer() {
  own_set.reset();
  for (PyWaitSet* set : std::vector<PyWaitSet*>(sets)) set_dropped(set);
}

// Destroyed while still in a set (only a set that is itself going holds no
// reference to it): out of the C++ set without waiting on anyone.
void PyConsumer::set_dropped(PyWaitSet* set) noexcept {
  if (consumer) set->set.remove(*consumer);
  std::erase(sets, set);
}

void PyConsumer::leave_sets() {
  if (own_set && consumer) {
    // Its descriptor stays open (an event loop may watch it) and wakes
    // whoever watches: the next look finds the consumer closed.
    own_set->remove(*consumer);
    own_set->notify();
  }
  while (!sets.empty()) sets.back()->forget(*this);
}

// The descriptor of own_set: readable once news may have come.
int PyConsumer::fileno() {
  shmbus::Consumer& c = get();
  if (!own_set) {
    auto set = std::make_unique<shmbus::WaitSet>();
    set->add(c);
    own_set = std::move(set);
  }
  return own_set->fd();
}

// Whether next(0) has something to say; if not, fileno() goes quiet until it may.
bool PyConsumer::has_news() {
  Busy b(busy, "Consumer");
  fileno();
  return !own_set->wait(0ns).empty() || eos_pending;
}

// The producer's hold limit let us go: we read on as a best-effort
// reader; .let_go says so. A message returned before may have been
// overwritten while the caller used it: it must hear of that.
void PyConsumer::on_let_go(bool stale_view) {
  let_go = true;
  if (stale_view &&
      PyErr_WarnEx(PyExc_RuntimeWarning,
                   ("bus '" + bus.name() +
                    "': the producer's hold limit let this reader go, and the message returned "
                    "before was overwritten while it was held")
                       .c_str(),
                   1) != 0)
    throw py::error_already_set();
}

// The consumer took its slot back and reads on; what it lost is counted
// in .lost, and the caller must hear of it.
void PyConsumer::on_evicted(std::uint64_t lost_now) {
  throw std::runtime_error("bus '" + bus.name() +
                           "': this consumer's reader slot was taken from it (a stray write into the "
                           "segment, or freed by force); " + std::to_string(lost_now) +
                           " messages lost, reading on at seq " + std::to_string(get().cursor()));
}

// close() came from another thread (or a signal handler) while we waited:
// the consumer goes now, from the one thread that uses it.
void PyConsumer::closed_while_waiting(const char* call) {
  if (!closing) return;
  release();
  throw std::runtime_error("bus '" + bus.name() + "': consumer closed while " + call + " waited");
}

// End of stream seen with a batch that had messages: said at the next call.
void PyConsumer::end_if_pending() {
  if (!eos_pending) return;
  eos_pending = false;
  throw py::stop_iteration("end of stream");  // translated to EndOfStream by the caller
}

// The view a message is handed out as: of the bus's memory (or the
// consumer's copy), revoked at the next call; with `copy`, of a bytes
// object of its own that nothing revokes or reuses.
py::memoryview PyConsumer::payload_of(const shmbus::Message& m) {
  if (!copy) return view.make(bus, m.payload.data(), m.payload.size(), false);
  const py::bytes own(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
  PyObject* mv = PyMemoryView_FromObject(own.ptr());
  if (mv == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::memoryview>(mv);
}

// Up to `max` messages available now, waiting up to `timeout` for the
// first: a list of (seq, timestamp_ns, memoryview), empty on a timeout.
py::list PyConsumer::read_batch(std::size_t max, std::optional<double> timeout) {
  Busy b(busy, "Consumer");
  shmbus::Consumer& c = get();
  waiter = std::this_thread::get_id();
  view.revoke();
  end_if_pending();
  if (max == 0) throw py::value_error("max must be at least 1");
  max = std::min<std::size_t>(max, kMaxBatch);  // the scratch buffer stays small; callers loop
  if (scratch.size() < max) scratch.resize(max);
  const auto t = to_timeout(timeout);
  for (;;) {
    shmbus::PollResult pr;
    std::span<const shmbus::Message> got;
    wait_interruptibly<bool>(
        t,
        [&](std::chrono::nanoseconds w) {
          got = c.read_batch(std::span<shmbus::Message>(scratch.data(), max), pr, w);
          return true;
        },
        [&](bool) {
          return got.empty() && !pr.end_of_stream && !pr.evicted && !pr.let_go && pr.lost == 0 &&
                 pr.corrupt == 0 && !closing;
        });
    closed_while_waiting("read_batch()");
    corrupt += pr.corrupt;
    if (pr.evicted) on_evicted(pr.lost);
    if (pr.let_go) on_let_go(pr.stale_view);
    py::list out(got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const shmbus::Message& m = got[i];
      out[i] = make_message(m, payload_of(m));
    }
    if (pr.end_of_stream) {
      end_reason = pr.end_reason;
      if (got.empty()) throw py::stop_iteration("end of stream");
      eos_pending = true;
    }
    // Only losses, a let-go or corrupt records: read on for messages.
    if (got.empty() && !pr.end_of_stream && (pr.lost > 0 || pr.let_go || pr.corrupt > 0)) continue;
    return out;
  }
}

// The next message, None on timeout; raises EndOfStream.
py::object PyConsumer::next(std::optional<double> timeout) {
  Busy b(busy, "Consumer");
  shmbus::Consumer& c = get();
  waiter = std::this_thread::get_id();
  view.revoke();  // the previous message's record may be reused from here on
  end_if_pending();
  const auto t = to_timeout(timeout);
  for (;;) {
    // `closing` is read with the GIL held, between slices.
    const auto r = wait_interruptibly<shmbus::ReadResult>(
        t, [&](std::chrono::nanoseconds w) { return c.next(w); },
        [this](const shmbus::ReadResult& x) { return x.status == shmbus::ReadStatus::timeout && !closing; });
    closed_while_waiting("next()");
    switch (r.status) {
      case shmbus::ReadStatus::message: {
        const auto& m = r.message;
        return make_message(m, payload_of(m));
      }
      case shmbus::ReadStatus::timeout: return py::none();
      case shmbus::ReadStatus::end_of_stream:
        end_reason = r.end_reason;
        throw py::stop_iteration("end of stream");  // translated to EndOfStream by the caller
      case shmbus::ReadStatus::lost: continue;      // counted in .lost; read on from the oldest
      case shmbus::ReadStatus::corrupt: ++corrupt; continue;
      case shmbus::ReadStatus::let_go: on_let_go(r.stale_view); continue;
      case shmbus::ReadStatus::evicted: on_evicted(r.lost);
    }
  }
}

// close() while another thread waits in next() (the usual shutdown of a
// reader thread): that next() ends within one wait slice, closes the
// consumer and raises; close() returns once it has. From a signal handler
// run inside that next() (same thread) it only asks.
void PyConsumer::close() {
  if (busy) {
    closing = true;
    if (waiter == std::this_thread::get_id()) return;
    while (busy) {
      py::gil_scoped_release unlocked;
      std::this_thread::sleep_for(1ms);
    }
  }
  release();
}

void PyConsumer::release() {
  view.revoke();
  leave_sets();
  consumer.reset();
  closing = false;
}

void register_consumer(py::module_& m) {
  py::class_<PyConsumer> cls(m, "Consumer",
                             "A reader slot: next(), read_batch(), iteration until end of stream; a context "
                             "manager. A message's view is valid until the next call; Consumer(bus, copy=True) "
                             "gives each message its own bytes.");
  cls.def(py::init(&make_consumer), py::arg("bus"), py::kw_only(), py::arg("name") = "consumer",
          py::arg("start") = "earliest", py::arg("start_seq") = 0, py::arg("durable") = false,
          py::arg("best_effort") = false, py::arg("copy") = false)
      .def("next",
           [](PyConsumer& c, std::optional<double> timeout) -> py::object {
             return ending_with_end_of_stream(c, [&] { return c.next(timeout); });
           },
           "The next Message (seq, timestamp_ns, memoryview; .records), or None after `timeout` seconds with "
           "nothing new. "
           "Raises EndOfStream. Releases the previous message's view.",
           py::arg("timeout") = py::none())
      .def("read_batch",
           [](PyConsumer& c, std::size_t max, std::optional<double> timeout) -> py::list {
             return ending_with_end_of_stream(c, [&] { return c.read_batch(max, timeout); });
           },
           "Up to `max` messages available now, waiting up to `timeout` for the first (an empty list after it); "
           "their views are valid until the next call. A message longer than Bus.max_payload that the consumer "
           "copies (overwrite bus, best-effort reader) comes alone in its list. Raises EndOfStream.",
           py::arg("max") = 256, py::arg("timeout") = py::none())
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](PyConsumer& c) -> py::object {
             return c.next(std::nullopt);  // StopIteration at end of stream
           })
      .def("close", &PyConsumer::close,
           "Releases the reader slot; from another thread while one waits in next(), that next() raises "
           "RuntimeError and close() returns once it has.")
      .def("fileno", &PyConsumer::fileno,
           "A descriptor for select/poll/epoll or an event loop (loop.add_reader): readable once next() may have "
           "news. Call has_news() (or next(0)) then: the descriptor stays readable while there is news and goes "
           "quiet after a has_news() that finds none. Owned by the consumer.")
      .def("has_news", &PyConsumer::has_news,
           "True if next(0) has something to say (a message, a loss, the end of the stream); if not, fileno() "
           "goes quiet until there may be.")
      .def_property_readonly("cursor", [](PyConsumer& c) { return c.get().cursor(); })
      .def_property_readonly("delivered", [](PyConsumer& c) { return c.get().delivered(); })
      .def_property_readonly("lost", [](PyConsumer& c) { return c.get().lost(); })
      .def_property_readonly("corrupt", [](const PyConsumer& c) { return c.corrupt; })
      .def_property_readonly("let_go", [](const PyConsumer& c) { return c.let_go; })
      .def_property_readonly("slot", [](PyConsumer& c) { return c.get().slot(); })
      .def_property_readonly("resumed", [](PyConsumer& c) { return c.get().resumed(); })
      .def_property_readonly("resume_gap", [](PyConsumer& c) { return c.get().resume_gap(); })
      .def_property_readonly("end_reason", [](const PyConsumer& c) { return shmbus::to_string(c.end_reason); });
  def_role_methods(cls, "Consumer", "a reader slot", [](const PyConsumer& c) {
    return c.consumer ? ", slot " + std::to_string(c.consumer->slot()) + ", cursor " +
                            std::to_string(c.consumer->cursor())
                      : std::string(", closed");
  });
}

}  // namespace shmbus_py
