// The Python module `shmbus` (pybind11): the C++ API, zero-copy where the bus
// allows it.
//
//  * Consumer.next() returns a Message: the tuple (seq, timestamp_ns,
//    memoryview), with .records (and the three by name) as attributes. The
//    memoryview is one contiguous view of the whole message, also of one
//    that spans records. On a `block` bus it reads the record(s) in shared
//    memory; on an `overwrite` bus, or for a best-effort reader, the
//    consumer's own copy. Either way it is valid until the next call
//    on that consumer, which releases it: using it afterwards raises
//    ValueError instead of reading a record the producer has reused. (Views
//    derived from it -- slices, numpy arrays -- cannot be revoked; they keep
//    the mapping alive, so they never crash, but show whatever the memory
//    holds later. Consumer(copy=True) gives every message its own bytes.)
//  * Producer.claim(n) returns a writable memoryview of the next record (of
//    the records it takes, for n > max_payload), released by commit().
//    commit() refuses (BufferError, the claim stays open) while anything
//    made from the view still exports it: a numpy array written after the
//    commit would change a published message.
//  * Waiting happens with the GIL released, in slices of at most 100 ms
//    between which pending signals are handled: Ctrl-C interrupts a blocked
//    next(), publish() or claim() with KeyboardInterrupt. A call that finds
//    data or space at once never releases the GIL.
#include <pthread.h>
#include <unistd.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shmbus/shmbus.hpp"

namespace py = pybind11;
using namespace std::chrono_literals;
using namespace pybind11::literals;

namespace {

constexpr std::chrono::nanoseconds kSlice = 100ms;
constexpr std::size_t kMaxBatch = 4096;  // messages per Consumer.read_batch() call

// Forks seen by this process's copy of the module: a Producer or Consumer
// made before a fork belongs to the parent. The child's copy holds no role
// (the library closes the role descriptors in the child) and must not be
// used there: it would write over the parent's records, or share its
// reader's cursor. Bumped by an atfork handler; compared, never a system
// call, on every use.
unsigned g_forks = 0;

void after_fork_in_child() { ++g_forks; }

// Refuses an object made before a fork, in the child.
void check_same_process(unsigned born, const char* what, const std::string& bus) {
  if (born != g_forks) [[unlikely]]
    throw std::runtime_error("bus '" + bus + "': this " + what +
                             " was made in the parent process before a fork; make a new one in the child");
}

// Python seconds (None: forever) to a C++ timeout.
std::chrono::nanoseconds to_timeout(std::optional<double> seconds) {
  if (!seconds) return shmbus::forever;
  if (!(*seconds >= 0)) throw py::value_error("timeout must be >= 0 seconds or None");
  if (*seconds > 1e9) return shmbus::forever;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(*seconds * 1e9));
}

// Calls `attempt(timeout)` once with the GIL held and no wait; if it reports
// `would_wait`, again with the GIL released in slices of kSlice, handling
// signals between slices, until it succeeds or `timeout` has passed.
template <class R, class Attempt, class WouldWait>
R wait_interruptibly(std::chrono::nanoseconds timeout, Attempt&& attempt, WouldWait&& would_wait) {
  R r = attempt(0ns);
  if (!would_wait(r) || timeout == 0ns) return r;
  const bool forever = timeout == shmbus::forever;
  const auto deadline = std::chrono::steady_clock::now() + (forever ? 0ns : timeout);
  for (;;) {
    std::chrono::nanoseconds slice = kSlice;
    if (!forever) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= 0ns) return r;
      slice = std::min<std::chrono::nanoseconds>(slice, left);
    }
    {
      py::gil_scoped_release unlocked;
      r = attempt(slice);
    }
    if (!would_wait(r)) return r;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// One zero-copy window onto a payload: the object a memoryview is made from.
// It keeps the bus mapped while anything refers to it.
struct View {
  shmbus::Bus keep;  // the mapping outlives every view of it
  std::byte* data = nullptr;
  std::size_t size = 0;
  bool writable = false;
  bool valid = true;
  // Buffers exported now: one per managed buffer a memoryview of it holds
  // (the memoryview we hand out, and every slice of it, share one), so 0
  // once nothing made from it can reach the memory.
  std::size_t exports = 0;
};

// View's buffer protocol (installed on the type at import): counts exports.
int view_getbuffer(PyObject* self, Py_buffer* b, int flags) {
  View* v = nullptr;
  try {
    v = &py::handle(self).cast<View&>();
  } catch (...) {
    PyErr_SetString(PyExc_BufferError, "not a shmbus view");
    return -1;
  }
  // A revoked view exports nothing.
  const int r = PyBuffer_FillInfo(b, self, v->valid ? v->data : nullptr,
                                  static_cast<Py_ssize_t>(v->valid ? v->size : 0), v->writable ? 0 : 1, flags);
  if (r == 0) ++v->exports;
  return r;
}

void view_releasebuffer(PyObject* self, Py_buffer*) {
  try {
    --py::handle(self).cast<View&>().exports;
  } catch (...) {
  }
}

// Hands out memoryviews over Views (one per message of a call) and revokes
// them all at the next call.
class ViewSlot {
 public:
  py::memoryview make(const shmbus::Bus& bus, const std::byte* data, std::size_t size, bool writable) {
    py::object view = py::cast(View{bus, const_cast<std::byte*>(data), size, writable, true});
    py::memoryview mv = py::reinterpret_steal<py::memoryview>(PyMemoryView_FromObject(view.ptr()));
    if (!mv) throw py::error_already_set();
    handed_.push_back({view, mv});
    return mv;
  }

  void revoke() {
    for (auto& [view, mv] : handed_) {
      view.cast<View&>().valid = false;  // a new memoryview of it is empty
      release(mv);
    }
    handed_.clear();  // keeps its capacity: a batch of the same size allocates nothing here
  }

  // Releases the memoryviews handed out (those that are not exported
  // further); returns how many buffers made from them still reach the
  // memory: numpy arrays, slices, memoryviews of them.
  std::size_t release_and_count() {
    std::size_t n = 0;
    for (auto& [view, mv] : handed_) {
      release(mv);
      n += view.cast<View&>().exports;
    }
    return n;
  }

 private:
  // memoryview.release(): refused (BufferError, cleared here) while the
  // memoryview is exported further; see the header note.
  static void release(const py::object& mv) {
    PyObject* r = PyObject_CallMethod(mv.ptr(), "release", nullptr);
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
  }

  std::vector<std::pair<py::object, py::object>> handed_;
};

// shmbus.Message: a struct sequence (like os.stat_result) that is the tuple
// (seq, timestamp_ns, payload), so `seq, ts, view = message` goes on
// working, with `records` an attribute only.
PyStructSequence_Field g_message_fields[] = {
    {"seq", "sequence number of the message's first record"},
    {"timestamp_ns", "CLOCK_REALTIME at publish, or 0"},
    {"payload", "the message: one contiguous memoryview, valid until the next call on the consumer"},
    {"records", "records the message takes (more than 1: it is longer than max_payload); the next "
                "message's seq is at least seq + records"},
    {nullptr, nullptr}};
PyStructSequence_Desc g_message_desc = {
    "shmbus.Message",
    "A message: the tuple (seq, timestamp_ns, payload), and .records. Sequence numbers count records: a "
    "message longer than Bus.max_payload takes .records of them.",
    g_message_fields, 3};
PyTypeObject* g_message_type = nullptr;  // made at import, kept for the life of the process

py::object make_message(const shmbus::Message& m, py::memoryview payload) {
  py::object seq = py::int_(m.seq), ts = py::int_(m.timestamp_ns), records = py::int_(m.records);
  PyObject* o = PyStructSequence_New(g_message_type);
  if (o == nullptr) throw py::error_already_set();
  // SetItem steals the references.
  PyStructSequence_SetItem(o, 0, seq.release().ptr());
  PyStructSequence_SetItem(o, 1, ts.release().ptr());
  PyStructSequence_SetItem(o, 2, payload.release().ptr());
  PyStructSequence_SetItem(o, 3, records.release().ptr());
  return py::reinterpret_steal<py::object>(o);
}

// Refuses a second thread entering a handle while the first waits without the GIL.
class Busy {
 public:
  explicit Busy(bool& flag, const char* what) : flag_(flag) {
    if (flag_) throw std::runtime_error(std::string(what) + " is in use by another thread");
    flag_ = true;
  }
  ~Busy() { flag_ = false; }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  bool& flag_;
};

shmbus::Policy parse_policy(const std::string& p) {
  if (p == "block") return shmbus::Policy::block;
  if (p == "overwrite") return shmbus::Policy::overwrite;
  throw py::value_error("policy must be 'block' or 'overwrite', not '" + p + "'");
}

// A Python int for an option, range-checked here (pybind11 itself answers
// a negative number with a long "incompatible arguments" TypeError).
template <class T>
T option_value(const char* what, std::int64_t v, std::uint64_t max = std::numeric_limits<T>::max()) {
  if (v < 0 || static_cast<std::uint64_t>(v) > max)
    throw py::value_error(std::string(what) + " must be between 0 and " + std::to_string(max) + ", not " +
                          std::to_string(v));
  return static_cast<T>(v);
}

// A Python int for a sequence or a time: any int from 0 to 2^64 - 1.
std::uint64_t non_negative(const py::object& o, const char* what) {
  if (!py::isinstance<py::int_>(o) || py::isinstance<py::bool_>(o))
    throw py::type_error(std::string(what) + " must be an int, not " +
                         py::str(py::type::of(o).attr("__name__")).cast<std::string>());
  const unsigned long long v = PyLong_AsUnsignedLongLong(o.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " must be between 0 and 2**64 - 1, not " + py::str(o).cast<std::string>());
  }
  return v;
}

shmbus::BusOptions bus_options(std::int64_t capacity, std::int64_t record_size, const std::string& policy,
                               std::int64_t max_readers, std::int64_t mode) {
  shmbus::BusOptions o;
  o.capacity = option_value<std::uint64_t>("capacity", capacity);
  o.record_size = option_value<std::uint32_t>("record_size", record_size);
  o.policy = parse_policy(policy);
  o.max_readers = option_value<std::uint32_t>("max_readers", max_readers);
  o.mode = option_value<mode_t>("mode", mode, 07777);
  return o;
}

// shmbus.Bus: this process's handle on a bus's mapping. close() lets go of
// it; Producers, Consumers and views made from it hold their own, so the
// mapping goes when the last of them does.
struct PyBus {
  explicit PyBus(shmbus::Bus b) : bus(std::move(b)), name(bus->name()) {}
  std::optional<shmbus::Bus> bus;
  std::string name;

  const shmbus::Bus& get() const {
    if (!bus) throw py::value_error("bus '" + name + "': this Bus is closed");
    return *bus;
  }
};

// Bus.create / Bus.open_or_create from keyword options.
template <class F>
auto bus_factory(F f) {
  return [f](const std::string& name, std::int64_t capacity, std::int64_t record_size, const std::string& policy,
             std::int64_t max_readers, std::int64_t mode, const std::optional<std::string>& dir) {
    shmbus::BusOptions o = bus_options(capacity, record_size, policy, max_readers, mode);
    o.dir = dir.value_or("");
    return PyBus(f(name, o));
  };
}
constexpr const char* bus_doc =
    "capacity: records (power of two; 0, the default: the power of two whose ring is nearest 4 MiB, at least 64); "
    "record_size: bytes incl. 24-byte header; dir: the bus directory (default: shmbus.bus_dir())";

// Bus.open_or_create: the library's rule (an existing bus with other
// options than asked is refused, shmbus.OptionsDiffer) unless as_is.
PyBus open_or_create(const std::string& name, std::int64_t capacity, std::int64_t record_size,
                     const std::string& policy, std::int64_t max_readers, std::int64_t mode,
                     const std::optional<std::string>& dir, bool as_is) {
  shmbus::BusOptions o = bus_options(capacity, record_size, policy, max_readers, mode);
  o.dir = dir.value_or("");
  o.existing = as_is ? shmbus::Existing::as_is : shmbus::Existing::same;
  return PyBus(shmbus::Bus::open_or_create(name, o));
}

struct PyProducer {
  explicit PyProducer(const shmbus::Bus& b) : bus(b) {}
  std::optional<shmbus::Producer> producer;
  shmbus::Bus bus;
  ViewSlot claim_view;
  bool claimed = false;
  std::size_t claim_size = 0;
  std::uint64_t claim_seq = 0;  // the claim's sequence: past the padding, for one that starts the next lap
  bool busy = false;
  unsigned born = g_forks;
  std::vector<std::span<const std::byte>> spans;  // publish_batch(), reused

  shmbus::Producer& get() {
    check_same_process(born, "Producer", bus.name());
    if (!producer) throw std::runtime_error("bus '" + bus.name() + "': producer is closed");
    return *producer;
  }

  static void check(shmbus::PublishStatus s, const shmbus::Bus& bus, std::size_t size) {
    switch (s) {
      case shmbus::PublishStatus::ok: return;
      case shmbus::PublishStatus::too_large:
        throw py::value_error("bus '" + bus.name() + "': message of " + std::to_string(size) + " bytes, max " +
                              std::to_string(bus.info().max_message));
      case shmbus::PublishStatus::timeout:
        PyErr_SetString(PyExc_TimeoutError, ("bus '" + bus.name() + "': ring still full").c_str());
        throw py::error_already_set();
      case shmbus::PublishStatus::closed:
        throw std::runtime_error("bus '" + bus.name() + "': producer is closed");
      case shmbus::PublishStatus::invalid:
        throw py::value_error("bus '" + bus.name() + "': sequence already used");
    }
  }

  std::uint64_t publish(py::buffer data, std::optional<double> timeout) {
    Busy b(busy, "Producer");
    if (claimed) throw std::runtime_error("commit() the open claim first");
    shmbus::Producer& p = get();
    py::buffer_info info = data.request();
    if (!PyBuffer_IsContiguous(info.view(), 'C')) throw py::value_error("payload must be contiguous");
    const std::span<const std::byte> payload(static_cast<const std::byte*>(info.ptr),
                                             static_cast<std::size_t>(info.size * info.itemsize));
    const auto r = wait_interruptibly<shmbus::PublishResult>(
        to_timeout(timeout), [&](std::chrono::nanoseconds t) { return p.publish(payload, t); },
        [](const shmbus::PublishResult& x) { return x.status == shmbus::PublishStatus::timeout; });
    check(r.status, bus, payload.size());
    return r.seq;
  }

  // Publishes the buffers in order (one head update and wake-up check per
  // run that fits); returns how many went out: all of them, or fewer if
  // `timeout` ran out (or the bus was removed by force). One too large is
  // refused before any is published.
  std::size_t publish_batch(const py::sequence& items, std::optional<double> timeout) {
    Busy b(busy, "Producer");
    if (claimed) throw std::runtime_error("commit() the open claim first");
    shmbus::Producer& p = get();
    const auto t = to_timeout(timeout);
    const std::size_t n = py::len(items);
    std::vector<py::buffer_info> held;  // the buffers stay exported (and alive) while we copy them
    held.reserve(n);
    spans.clear();
    for (std::size_t i = 0; i < n; ++i) {
      held.push_back(py::reinterpret_borrow<py::buffer>(items[i]).request());
      const py::buffer_info& info = held.back();
      if (!PyBuffer_IsContiguous(info.view(), 'C'))
        throw py::value_error("payload " + std::to_string(i) + " is not contiguous");
      const std::size_t size = static_cast<std::size_t>(info.size * info.itemsize);
      if (size > bus.info().max_message)
        throw py::value_error("bus '" + bus.name() + "': payload " + std::to_string(i) + " is " +
                              std::to_string(size) + " bytes, max " + std::to_string(bus.info().max_message) +
                              "; nothing was published");
      spans.emplace_back(static_cast<const std::byte*>(info.ptr), size);
    }
    std::size_t done = 0;
    wait_interruptibly<std::size_t>(
        t,
        [&](std::chrono::nanoseconds w) {
          done += p.publish_batch(std::span(spans).subspan(done), w);
          return done;
        },
        [&](std::size_t) { return done < n; });
    return done;
  }

  py::memoryview claim(std::size_t n, std::optional<double> timeout) {
    Busy b(busy, "Producer");
    if (claimed) throw std::runtime_error("commit() the open claim first");
    shmbus::Producer& p = get();
    const auto c = wait_interruptibly<shmbus::Claim>(
        to_timeout(timeout), [&](std::chrono::nanoseconds t) { return p.claim(n, t); },
        [](const shmbus::Claim& x) { return x.status == shmbus::PublishStatus::timeout; });
    check(c.status, bus, n);
    claimed = true;
    claim_size = c.data.size();
    claim_seq = c.seq;
    claim_view.revoke();
    return claim_view.make(bus, c.data.data(), c.data.size(), true);
  }

  std::uint64_t commit(std::optional<std::size_t> size) {
    if (!claimed) throw std::runtime_error("nothing is claimed");
    shmbus::Producer& p = get();
    if (size && *size > claim_size)
      throw py::value_error("bus '" + bus.name() + "': commit(" + std::to_string(*size) + ") after claim(" +
                            std::to_string(claim_size) + "): at most the claimed size (the claim stays open)");
    if (const std::size_t n = claim_view.release_and_count(); n != 0) {
      PyErr_SetString(PyExc_BufferError,
                      ("bus '" + bus.name() + "': the claim's view is still exported (" + std::to_string(n) +
                       " buffer" + (n == 1 ? "" : "s") +
                       " made from it: a numpy array, a slice, ...); delete them before commit(), since a write "
                       "through them afterwards would change the published message. The claim stays open")
                          .c_str());
      throw py::error_already_set();
    }
    const std::uint64_t seq = claim_seq;
    claim_view.revoke();
    claimed = false;
    if (size) {
      p.commit(*size);
    } else {
      p.commit();
    }
    return seq;
  }

  void close() {
    claim_view.revoke();
    claimed = false;
    if (producer) producer->close();
    producer.reset();
  }

  void detach() {
    claim_view.revoke();
    claimed = false;
    if (producer) producer->detach();
    producer.reset();
  }
};

struct PyWaitSet;

struct PyConsumer {
  explicit PyConsumer(const shmbus::Bus& b) : bus(b) {}
  ~PyConsumer() {
    own_set.reset();
    for (PyWaitSet* set : std::vector<PyWaitSet*>(sets)) set_dropped(set);
  }
  void set_dropped(PyWaitSet* set) noexcept;
  std::optional<shmbus::Consumer> consumer;
  shmbus::Bus bus;
  ViewSlot view;
  bool copy = false;  // every payload is a view of its own bytes object
  bool overwrite = false;
  bool busy = false;
  bool closing = false;  // close() was called while next() waits: next() closes and raises
  std::thread::id waiter;  // the thread inside next()
  shmbus::EndReason end_reason = shmbus::EndReason::none;
  std::uint64_t corrupt = 0;
  bool let_go = false;
  bool eos_pending = false;  // read_batch() returned messages and the stream had ended
  std::vector<shmbus::Message> scratch;  // read_batch(), reused
  unsigned born = g_forks;
  // fileno(): a wait set of this consumer alone, made on first use.
  std::unique_ptr<shmbus::WaitSet> own_set;
  std::vector<PyWaitSet*> sets;  // the WaitSets it is a member of
  void leave_sets();

  // The descriptor of own_set: readable once news may have come.
  int fileno() {
    shmbus::Consumer& c = get();
    if (!own_set) {
      auto set = std::make_unique<shmbus::WaitSet>();
      set->add(c);
      own_set = std::move(set);
    }
    return own_set->fd();
  }
  // Whether next(0) has something to say; if not, fileno() goes quiet until it may.
  bool has_news() {
    Busy b(busy, "Consumer");
    fileno();
    return !own_set->wait(0ns).empty() || eos_pending;
  }

  shmbus::Consumer& get() {
    check_same_process(born, "Consumer", bus.name());
    if (!consumer) throw std::runtime_error("bus '" + bus.name() + "': consumer is closed");
    return *consumer;
  }

  // The producer's hold limit let us go: we read on as a best-effort
  // reader; .let_go says so. A message returned before may have been
  // overwritten while the caller used it: it must hear of that.
  void on_let_go(bool stale_view) {
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
  [[noreturn]] void on_evicted(std::uint64_t lost_now) {
    throw std::runtime_error("bus '" + bus.name() +
                             "': this consumer's reader slot was taken from it (a stray write into the "
                             "segment, or freed by force); " + std::to_string(lost_now) +
                             " messages lost, reading on at seq " + std::to_string(get().cursor()));
  }

  // close() came from another thread (or a signal handler) while we waited:
  // the consumer goes now, from the one thread that uses it.
  void closed_while_waiting(const char* call) {
    if (!closing) return;
    release();
    throw std::runtime_error("bus '" + bus.name() + "': consumer closed while " + call + " waited");
  }

  // End of stream seen with a batch that had messages: said at the next call.
  void end_if_pending() {
    if (!eos_pending) return;
    eos_pending = false;
    throw py::stop_iteration("end of stream");  // translated to EndOfStream by the caller
  }

  // The view a message is handed out as: of the bus's memory (or the
  // consumer's copy), revoked at the next call; with `copy`, of a bytes
  // object of its own that nothing revokes or reuses.
  py::memoryview payload_of(const shmbus::Message& m) {
    if (!copy) return view.make(bus, m.payload.data(), m.payload.size(), false);
    const py::bytes own(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
    PyObject* mv = PyMemoryView_FromObject(own.ptr());
    if (mv == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::memoryview>(mv);
  }

  // Up to `max` messages available now, waiting up to `timeout` for the
  // first: a list of (seq, timestamp_ns, memoryview), empty on a timeout.
  py::list read_batch(std::size_t max, std::optional<double> timeout) {
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
  py::object next(std::optional<double> timeout) {
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
  void close() {
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

  void release() {
    view.revoke();
    leave_sets();
    consumer.reset();
    closing = false;
  }
};

// Waits on many consumers from one thread: wait(), or fileno() for an event
// loop. Holds its members (they stay alive while in it); a member closed
// leaves it. While wait() waits (the GIL released), its members count as
// in use by that thread: next() from another thread raises, and close()
// from another thread (the usual shutdown) makes the wait return within
// one slice and closes the consumer there, as it does a waiting next().
// Changing the set from another thread waits for the wait to return.
struct PyWaitSet {
  shmbus::WaitSet set;
  std::vector<std::pair<PyConsumer*, py::object>> members;
  unsigned born = g_forks;
  bool busy = false;
  bool changing = false;  // another thread waits to change the set: wait() returns
  std::thread::id waiter;
  bool closed = false;

  shmbus::WaitSet& get() {
    check_same_process(born, "WaitSet", "");
    if (closed) throw py::value_error("the wait set is closed");
    return set;
  }
  // Until no wait() runs on another thread (the GIL released meanwhile).
  void quiesce() {
    if (!busy) return;
    if (waiter == std::this_thread::get_id())
      throw std::runtime_error("the wait set is changed from inside its own wait()");
    changing = true;
    while (busy) {
      py::gil_scoped_release unlocked;
      std::this_thread::sleep_for(1ms);
    }
    changing = false;
  }
  void add(py::object obj) {
    PyConsumer& c = obj.cast<PyConsumer&>();
    shmbus::WaitSet& s = get();
    quiesce();
    s.add(c.get());
    c.sets.push_back(this);
    members.emplace_back(&c, std::move(obj));
  }
  // Without the Python object (the consumer is going).
  void forget(PyConsumer& c) {
    if (!c.consumer) return;
    if (born == g_forks) quiesce();
    set.remove(*c.consumer);
    set.notify();  // an event loop watching the set looks again
    std::erase(c.sets, this);
    for (auto it = members.begin(); it != members.end(); ++it)
      if (it->first == &c) {
        it->second.release().dec_ref();
        members.erase(it);
        break;
      }
  }
  void remove(PyConsumer& c) {
    get();
    forget(c);
  }
  py::list wait(std::optional<double> timeout) {
    // Another thread waits to change the set: let it, first.
    while (changing && !busy) {
      py::gil_scoped_release unlocked;
      std::this_thread::sleep_for(1ms);
    }
    Busy b(busy, "WaitSet");
    shmbus::WaitSet& s = get();
    waiter = std::this_thread::get_id();
    // The members are ours while we wait (see above).
    std::vector<PyConsumer*> held;
    struct Unhold {
      std::vector<PyConsumer*>& held;
      ~Unhold() {
        for (PyConsumer* pc : held) pc->busy = false;
      }
    } unhold{held};
    for (const auto& [pc, obj] : members) {
      pc->get();
      if (pc->busy) throw std::runtime_error("bus '" + pc->bus.name() + "': Consumer is in use by another thread");
      pc->busy = true;
      pc->waiter = waiter;
      held.push_back(pc);
    }
    auto closing = [&] {
      return std::any_of(held.begin(), held.end(), [](const PyConsumer* pc) { return pc->closing; });
    };
    std::span<shmbus::Consumer* const> ready;
    wait_interruptibly<bool>(
        to_timeout(timeout),
        [&](std::chrono::nanoseconds w) {
          ready = s.wait(w);
          return true;
        },
        [&](bool) { return ready.empty() && !changing && !closing(); });
    py::list out;
    for (shmbus::Consumer* c : ready)
      for (const auto& [pc, obj] : members)
        if (!pc->closing && pc->consumer && &*pc->consumer == c) out.append(obj);
    for (PyConsumer* pc : held) pc->busy = false;
    held.clear();
    // Closed from another thread while we waited: closed here, from the
    // thread that waited (which also takes it out of the set).
    std::vector<PyConsumer*> to_close;
    for (const auto& [pc, obj] : members)
      if (pc->closing) to_close.push_back(pc);
    busy = false;  // forget() below must not wait for ourselves
    for (PyConsumer* pc : to_close) pc->release();
    return out;
  }
  void close() {
    if (closed) return;
    if (born == g_forks) quiesce();
    while (!members.empty()) forget(*members.back().first);
    closed = true;
    set.notify();  // a loop watching it wakes, and finds it closed
  }
  ~PyWaitSet() {
    for (auto& [pc, obj] : members) {
      if (pc->consumer) set.remove(*pc->consumer);
      std::erase(pc->sets, this);
    }
  }
};

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

struct EndOfStreamTag {};

// EndOfStream (the exception type `type`) with its reason, from next() and read_batch().
[[noreturn]] void raise_end_of_stream(const PyConsumer& c, PyObject* type) {
  const char* reason = shmbus::to_string(c.end_reason);
  py::object exc =
      py::reinterpret_borrow<py::object>(type)(py::str("bus '" + c.bus.name() + "': end of stream (" + reason + ")"));
  exc.attr("reason") = reason;
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

py::dict reader_dict(const shmbus::ReaderView& r, std::uint64_t head) {
  py::dict d;
  d["slot"] = r.slot;
  d["pid"] = r.pid;
  d["liveness"] = shmbus::to_string(r.liveness);
  d["name"] = py::bytes(r.name).attr("decode")("utf-8", "replace");
  d["cursor"] = r.cursor;
  d["lag"] = head > r.cursor ? head - r.cursor : 0;
  d["delivered"] = r.delivered;
  d["lost"] = r.lost;
  d["attach_time_ns"] = r.attach_time_ns;
  d["last_active_ns"] = r.last_active_ns;
  d["sleeping"] = r.sleeping;
  d["best_effort"] = r.best_effort;
  d["let_go_ns"] = r.let_go_ns;
  d["evicted"] = r.evicted;
  d["stopped"] = r.stopped;
  return d;
}

// The snapshot as shmbus-inspect show --json reports it: the library's
// diagnose() decides what the producer waits for and what to warn of.
py::dict snapshot_dict(const shmbus::Snapshot& s) {
  const shmbus::Diagnosis diagnosis = shmbus::diagnose(s);
  py::dict d;
  d["name"] = s.info.name;
  d["policy"] = shmbus::to_string(s.info.policy);
  d["capacity"] = s.info.capacity;
  d["record_size"] = s.info.record_size;
  d["max_payload"] = s.info.max_payload;
  d["max_message"] = s.info.max_message;
  d["max_readers"] = s.info.max_readers;
  d["segment_size"] = s.info.segment_size;
  d["creation_time_ns"] = s.info.creation_time_ns;
  d["layout_version"] = s.info.layout_version;
  d["dir"] = s.info.dir;
  d["pages"] = s.info.pages;
  d["page_size"] = s.info.page_size;
  d["head"] = s.head;
  d["oldest"] = s.oldest;
  d["last_publish_ns"] = s.last_publish_ns;
  py::dict c;
  c["published"] = s.counters.published;
  c["producer_waits"] = s.counters.producer_waits;
  c["producer_wait_ns"] = s.counters.producer_wait_ns;
  c["wakeups"] = s.counters.wakeups;
  c["readers_reclaimed"] = s.counters.readers_reclaimed;
  c["readers_let_go"] = s.counters.readers_let_go;
  c["data_sleepers"] = s.counters.data_sleepers;
  d["counters"] = c;
  py::dict p;
  p["attached"] = s.producer.attached;
  p["pid"] = s.producer.pid;
  p["liveness"] = shmbus::to_string(s.producer.liveness);
  p["closed"] = s.producer.closed;
  p["stopped"] = s.producer.stopped;
  // A dead producer's last wait says nothing any more.
  p["waiting_for_space"] = s.producer.waiting_for_space && diagnosis.producer_alive;
  p["blocked_on_slot"] = diagnosis.blocked_on_slot ? py::cast(*diagnosis.blocked_on_slot) : py::none();
  p["takeovers"] = s.producer.takeovers;
  d["producer"] = p;
  py::list readers;
  for (const auto& r : s.readers) readers.append(reader_dict(r, s.head));
  d["readers"] = readers;
  py::list bookmarks;
  for (const auto& b : s.bookmarks) {
    py::dict bd;
    bd["name"] = py::bytes(b.name).attr("decode")("utf-8", "replace");
    bd["cursor"] = b.cursor;
    bd["lag"] = s.head > b.cursor ? s.head - b.cursor : 0;
    bd["gone"] = b.cursor < s.oldest ? s.oldest - b.cursor : 0;
    bd["updated_ns"] = b.updated_ns;
    bd["held"] = b.held;
    bd["holder_pid"] = b.held ? b.holder_pid : 0;
    bookmarks.append(bd);
  }
  d["bookmarks"] = bookmarks;
  d["removed"] = s.removed;
  py::list warnings;
  for (const shmbus::Warning& w : diagnosis.warnings) {
    py::dict wd;
    wd["kind"] = w.kind;
    wd["slot"] = w.slot ? py::cast(*w.slot) : py::none();
    wd["message"] = w.message;
    warnings.append(wd);
  }
  d["warnings"] = warnings;
  return d;
}

}  // namespace

// shmbus._shmbus: the package shmbus (shmbus/__init__.py) re-exports it.
PYBIND11_MODULE(_shmbus, m) {
  m.doc() = "shmbus: a shared-memory message bus (one producer, many consumers, each reading "
            "every message). The stubs, shmbus/__init__.pyi, type the API.";
  m.attr("__version__") = SHMBUS_VERSION;
  m.def("bus_dir", &shmbus::bus_dir,
        "The directory a bus without dir= lives in: the one set_bus_dir() set, else $SHMBUS_DIR, else /dev/shm.");
  m.def("set_bus_dir", [](const std::string& dir) { shmbus::set_bus_dir(dir); },
        "Makes dir (a tmpfs or hugetlbfs directory; checked) the default of this process; '' goes back to "
        "$SHMBUS_DIR or /dev/shm.",
        py::arg("dir"));
  ::pthread_atfork(nullptr, nullptr, after_fork_in_child);

  static py::exception<shmbus::Error> error(m, "Error", PyExc_OSError);
  static py::exception<EndOfStreamTag> end_of_stream(m, "EndOfStream", PyExc_Exception);
  // Errors that are also the built-in OSError a Python program catches:
  // `except FileNotFoundError` sees a missing bus. errno is set to match.
  // Handles, kept for the life of the process (no destructor runs after
  // the interpreter is gone).
  const py::object type = py::module_::import("builtins").attr("type");
  static const py::handle not_found =
      type("BusNotFound", py::make_tuple(error, py::handle(PyExc_FileNotFoundError)),
           py::dict("__module__"_a = "shmbus", "__doc__"_a = "No bus of that name."))
          .release();
  static const py::handle exists =
      type("BusExists", py::make_tuple(error, py::handle(PyExc_FileExistsError)),
           py::dict("__module__"_a = "shmbus", "__doc__"_a = "A bus of that name exists."))
          .release();
  static const py::handle denied =
      type("BusPermissionError", py::make_tuple(error, py::handle(PyExc_PermissionError)),
           py::dict("__module__"_a = "shmbus", "__doc__"_a = "The bus exists but may not be opened."))
          .release();
  static const py::handle differ =
      type("OptionsDiffer", py::make_tuple(error, py::handle(PyExc_ValueError)),
           py::dict("__module__"_a = "shmbus",
                    "__doc__"_a = "Bus.open_or_create found the bus with other options than asked."))
          .release();
  m.attr("OptionsDiffer") = differ;
  m.attr("BusNotFound") = not_found;
  m.attr("BusExists") = exists;
  m.attr("BusPermissionError") = denied;

  // The stub's type names exist at run time too (`from shmbus import Message`).
  {
    const py::module_ typing = py::module_::import("typing");
    const py::module_ builtins = py::module_::import("builtins");
    g_message_type = PyStructSequence_NewType(&g_message_desc);
    if (g_message_type == nullptr) throw py::error_already_set();
    m.attr("Message") = py::handle(reinterpret_cast<PyObject*>(g_message_type));
    m.attr("Policy") = typing.attr("Literal")[py::make_tuple("block", "overwrite")];
    const py::module_ abc = py::module_::import("collections.abc");
    m.attr("Buffer") = py::hasattr(abc, "Buffer")
                           ? py::object(abc.attr("Buffer"))  // Python 3.12+
                           : py::object(typing.attr("Union")[py::make_tuple(
                                 builtins.attr("bytes"), builtins.attr("bytearray"), builtins.attr("memoryview"))]);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const shmbus::Error& e) {
      py::object cls = py::reinterpret_borrow<py::object>(error.ptr());
      int err = 0;
      switch (e.errc()) {
        case shmbus::Errc::not_found: cls = py::reinterpret_borrow<py::object>(not_found); err = ENOENT; break;
        case shmbus::Errc::already_exists: cls = py::reinterpret_borrow<py::object>(exists); err = EEXIST; break;
        case shmbus::Errc::permission_denied:
        case shmbus::Errc::foreign_owner: cls = py::reinterpret_borrow<py::object>(denied); err = EACCES; break;
        case shmbus::Errc::options_differ: cls = py::reinterpret_borrow<py::object>(differ); break;
        default: break;
      }
      // OSError(errno, strerror) fills .errno and .strerror; str() is our one line.
      py::object exc = err != 0 ? cls(err, py::str(e.what())) : cls(py::str(e.what()));
      exc.attr("errc") = static_cast<int>(e.errc());
      if (err != 0) exc.attr("args") = py::make_tuple(err, py::str(e.what()));
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });

  {
    // Our own buffer slots (pybind11's def_buffer cannot count releases).
    const py::class_<View> view_type(m, "_View", py::buffer_protocol());
    auto* t = reinterpret_cast<PyTypeObject*>(view_type.ptr());
    t->tp_as_buffer->bf_getbuffer = view_getbuffer;
    t->tp_as_buffer->bf_releasebuffer = view_releasebuffer;
    PyType_Modified(t);
  }

  py::class_<PyBus>(m, "Bus",
                    "A named bus (DIR/shmbus.NAME, DIR /dev/shm unless set): create, open or remove it; pickles by "
                    "name and directory. A context "
                    "manager: leaving it closes this handle (Producers and Consumers made from it carry on).")
      .def_static("create", bus_factory(&shmbus::Bus::create), bus_doc, py::arg("name"), py::kw_only(),
                  py::arg("capacity") = 0, py::arg("record_size") = 256, py::arg("policy") = "block",
                  py::arg("max_readers") = 16, py::arg("mode") = 0600, py::arg("dir") = py::none())
      .def_static("open_or_create", &open_or_create, bus_doc, py::arg("name"), py::kw_only(),
                  py::arg("capacity") = 0, py::arg("record_size") = 256, py::arg("policy") = "block",
                  py::arg("max_readers") = 16, py::arg("mode") = 0600, py::arg("dir") = py::none(),
                  py::arg("as_is") = false)
      .def_static("open",
                  [](const std::string& name, double ready_timeout, const std::optional<std::string>& dir) {
                    shmbus::OpenOptions o;
                    o.ready_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(ready_timeout * 1000));
                    o.dir = dir.value_or("");
                    py::gil_scoped_release unlocked;
                    return PyBus(shmbus::Bus::open(name, o));
                  },
                  py::arg("name"), py::arg("ready_timeout") = 2.0, py::kw_only(), py::arg("dir") = py::none())
      .def_static(
          "remove",
          [](const std::string& name, bool end_streams, const std::optional<std::string>& dir_arg) {
            const std::string dir = dir_arg.value_or("");
            py::gil_scoped_release unlocked;
            if (!end_streams) return shmbus::Bus::remove(name, dir);
            try {
              return shmbus::remove_in_use(name, {}, dir);
            } catch (const shmbus::Error& e) {
              // A segment this library cannot read (another layout version,
              // not a bus, half made) has no stream of ours to end: its name
              // goes all the same.
              switch (e.errc()) {
                case shmbus::Errc::not_a_bus:
                case shmbus::Errc::version_mismatch:
                case shmbus::Errc::truncated:
                case shmbus::Errc::corrupt:
                case shmbus::Errc::not_ready:
                case shmbus::Errc::not_allocated: return shmbus::Bus::remove(name, dir);
                default: throw;
              }
            }
          },
          "Removes the bus; True if it existed. Ends the stream of every consumer still attached (EndOfStream, "
          "reason 'removed') and closes its producer, so nobody runs on in a removed bus; end_streams=False only "
          "removes the name (mapped users carry on).",
          py::arg("name"), py::kw_only(), py::arg("end_streams") = true, py::arg("dir") = py::none())
      .def_static(
          "exists",
          [](const std::string& name, const std::optional<std::string>& dir) {
            return shmbus::Bus::exists(name, dir.value_or(""));
          },
          "True if a bus of that name exists (in dir, default shmbus.bus_dir()).", py::arg("name"), py::kw_only(),
          py::arg("dir") = py::none())
      .def_static(
          "move_reader_name",
          [](const std::string& name, const std::string& reader, const py::object& to,
             const py::object& time_ns, const std::optional<std::string>& dir) -> py::object {
            shmbus::ReaderNameTarget t;
            if (to.is_none() == time_ns.is_none())
              throw py::value_error("move_reader_name: give exactly one of to= and time_ns=");
            if (!time_ns.is_none()) {
              t.kind = shmbus::ReaderNameTarget::Kind::time;
              t.value = non_negative(time_ns, "time_ns");
            } else if (py::isinstance<py::str>(to)) {
              const std::string w = to.cast<std::string>();
              if (w == "earliest")
                t.kind = shmbus::ReaderNameTarget::Kind::earliest;
              else if (w == "latest")
                t.kind = shmbus::ReaderNameTarget::Kind::latest;
              else
                throw py::value_error("move_reader_name: to='" + w + "' is not 'earliest', 'latest' or a sequence");
            } else {
              t.kind = shmbus::ReaderNameTarget::Kind::sequence;
              t.value = non_negative(to, "to");
            }
            std::optional<shmbus::ReaderNameMove> done;
            {
              // A time is looked for in the retained records: the whole ring at worst.
              const py::gil_scoped_release unlocked;
              done = shmbus::move_reader_name(name, reader, t, {}, dir.value_or(""));
            }
            if (!done) return py::none();
            return py::dict("from"_a = done->from, "to"_a = done->to, "oldest"_a = done->oldest,
                            "head"_a = done->head, "timestamp_ns"_a = done->timestamp_ns,
                            "unstamped"_a = done->unstamped);
          },
          "Moves the remembered reader name `reader` of bus `name` so that the next Consumer(start='resume') "
          "under it starts at to= ('earliest', 'latest' or a sequence) or at the first retained message "
          "stamped at time_ns= (CLOCK_REALTIME) or later. Returns a dict (from, to, oldest, head, timestamp_ns, "
          "unstamped), or None if no such name is remembered. shmbus.Error while a live reader holds the name "
          "(errc NAME_IN_USE) or for a position not retained (errc NOT_RETAINED).",
          py::arg("name"), py::arg("reader"), py::kw_only(), py::arg("to") = py::none(),
          py::arg("time_ns") = py::none(), py::arg("dir") = py::none())
      .def_static(
          "forget_reader_name",
          [](const std::string& name, const std::string& reader, const std::optional<std::string>& dir) {
            return shmbus::forget_reader_name(name, reader, {}, dir.value_or(""));
          },
          "Forgets the remembered reader name `reader` of bus `name`; True if it was remembered. shmbus.Error "
          "(errc NAME_IN_USE) while a live reader holds it.",
          py::arg("name"), py::arg("reader"), py::kw_only(), py::arg("dir") = py::none())
      .def_static(
          "let_go_reader",
          [](const std::string& name, std::uint32_t slot, const std::optional<std::string>& dir) {
            shmbus::let_go_reader(name, slot, std::nullopt, {}, dir.value_or(""));
          },
          "Lets the reader in slot `slot` of bus `name` go at once, as a producer's hold limit does: it no longer "
          "holds the producer, reads on as a best-effort reader and is told what it loses. shmbus.Error (errc "
          "INVALID_OPTIONS) for a reader that does not hold the producer, errc NOT_FOUND for an empty slot.",
          py::arg("name"), py::arg("slot"), py::kw_only(), py::arg("dir") = py::none())
      .def_property_readonly("dir", [](const PyBus& b) { return b.get().info().dir; },
                             "The directory of the bus's segment (absolute).")
      .def_property_readonly("path", [](const PyBus& b) { return b.get().info().path; })
      .def_property_readonly("pages", [](const PyBus& b) { return b.get().info().pages; },
                             "What backs the bus's memory, e.g. 'hugetlbfs, 2 MiB huge pages'.")
      .def_property_readonly("page_size", [](const PyBus& b) { return b.get().info().page_size; })
      .def_property_readonly("name", [](const PyBus& b) { return b.name; })
      .def_property_readonly("policy", [](const PyBus& b) { return shmbus::to_string(b.get().info().policy); })
      .def_property_readonly("capacity", [](const PyBus& b) { return b.get().info().capacity; })
      .def_property_readonly("record_size", [](const PyBus& b) { return b.get().info().record_size; })
      .def_property_readonly("max_payload", [](const PyBus& b) { return b.get().info().max_payload; },
                             "The longest message that fits one record (record_size - 24).")
      .def_property_readonly("max_message", [](const PyBus& b) { return b.get().info().max_message; },
                             "The longest message the bus accepts: one longer than max_payload takes "
                             "consecutive records (at most half the ring, and at most 1 GiB).")
      .def_property_readonly("max_readers", [](const PyBus& b) { return b.get().info().max_readers; })
      .def_property_readonly("head", [](const PyBus& b) { return b.get().head(); })
      .def_property_readonly("oldest", [](const PyBus& b) { return b.get().oldest(); })
      .def_property_readonly("closed", [](const PyBus& b) { return !b.bus; }, "True once close() was called.")
      .def("close", [](PyBus& b) { b.bus.reset(); },
           "Lets go of this handle on the bus (again: nothing). Producers, Consumers and views made from it keep "
           "the bus mapped until they go; the bus itself stays (Bus.remove removes it).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyBus& b, py::args) { b.bus.reset(); })
      // A Bus travels to another process (multiprocessing's spawn) by name,
      // and is opened again there.
      .def(py::pickle([](const PyBus& b) { return py::make_tuple(b.get().name(), b.get().info().dir); },
                      [](const py::tuple& t) {
                        if (t.size() != 1 && t.size() != 2) throw py::value_error("not a pickled shmbus.Bus");
                        shmbus::OpenOptions o;
                        if (t.size() == 2) o.dir = t[1].cast<std::string>();
                        return PyBus(shmbus::Bus::open(t[0].cast<std::string>(), o));
                      }))
      .def("__repr__", [](const PyBus& b) {
        if (!b.bus) return "<shmbus.Bus '" + b.name + "', closed>";
        const shmbus::BusInfo& i = b.bus->info();
        return "<shmbus.Bus '" + b.name + "' " + shmbus::to_string(i.policy) + " " + std::to_string(i.capacity) +
               " x " + std::to_string(i.record_size) + " B>";
      });

  py::class_<PyProducer>(m, "Producer",
                          "The bus's one producer: publish(), publish_batch(), claim()/commit(); a context "
                          "manager (leaving it closes the stream).")
      .def(py::init([](const PyBus& py_bus, const std::string& timestamps, std::uint32_t wait_for_readers,
                       std::optional<double> wait_for_readers_timeout, std::optional<double> max_hold) {
             const shmbus::Bus& bus = py_bus.get();
             shmbus::ProducerOptions o;
             if (timestamps == "off") o.timestamps = shmbus::Timestamps::off;
             else if (timestamps == "coarse") o.timestamps = shmbus::Timestamps::coarse;
             else if (timestamps == "precise") o.timestamps = shmbus::Timestamps::precise;
             else throw py::value_error("timestamps must be 'off', 'coarse' or 'precise'");
             o.wait_for_readers = wait_for_readers;
             if (max_hold && !(*max_hold >= 0)) throw py::value_error("max_hold must be a number of seconds >= 0");
             o.max_hold = to_timeout(max_hold);
             auto p = std::make_unique<PyProducer>(bus);
             // Waiting for readers happens in slices, with signals handled
             // between them (Ctrl-C raises KeyboardInterrupt); running out
             // of time raises TimeoutError, as publish() does.
             const auto total = to_timeout(wait_for_readers_timeout);
             const auto deadline = std::chrono::steady_clock::now() + (total == shmbus::forever ? 0ns : total);
             for (;;) {
               auto slice = kSlice;
               if (total != shmbus::forever)
                 slice = std::clamp<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now(), 0ns, kSlice);
               o.wait_for_readers_timeout = slice;
               try {
                 py::gil_scoped_release unlocked;
                 p->producer.emplace(bus, o);
                 return p;
               } catch (const shmbus::Error& e) {
                 if (e.errc() != shmbus::Errc::timeout) throw;
                 if (total != shmbus::forever && std::chrono::steady_clock::now() >= deadline) {
                   PyErr_SetString(PyExc_TimeoutError, e.what());
                   throw py::error_already_set();
                 }
               }
               if (PyErr_CheckSignals() != 0) throw py::error_already_set();
             }
           }),
           py::arg("bus"), py::kw_only(), py::arg("timestamps") = "off", py::arg("wait_for_readers") = 0,
           py::arg("wait_for_readers_timeout") = py::none(), py::arg("max_hold") = py::none())
      .def("publish", &PyProducer::publish,
           "Copies `data` (any contiguous buffer, up to Bus.max_message bytes) into the next record (records, "
           "if longer than Bus.max_payload); returns its sequence number. ValueError if too large, "
           "TimeoutError if a block bus stays full for `timeout` seconds.",
           py::arg("data"), py::arg("timeout") = py::none())
      .def("publish_batch", &PyProducer::publish_batch,
           "Publishes the buffers in order; returns how many went out (fewer if `timeout` ran out). "
           "ValueError, with nothing published, if one is too large.",
           py::arg("items"), py::arg("timeout") = py::none())
      .def("claim", &PyProducer::claim,
           "The next record's payload, writable in place, `size` bytes (up to Bus.max_message: one "
           "contiguous view over the records it takes); valid until commit().",
           py::arg("size"), py::arg("timeout") = py::none())
      .def("commit", &PyProducer::commit,
           "Publishes the claimed record (its first `size` bytes, default all); returns its sequence number. "
           "BufferError (the claim stays open) while a numpy array or slice made from the claim's view lives.",
           py::arg("size") = py::none())
      .def("close", &PyProducer::close,
           "Marks end-of-stream and gives up the producer role. An open claim is abandoned, never published.")
      .def("detach", &PyProducer::detach, "Gives up the role without end-of-stream (consumers wait for a new producer).")
      .def_property_readonly("next_seq", [](PyProducer& p) { return p.get().next_seq(); })
      .def_property_readonly("bus", [](const PyProducer& p) { return PyBus(p.bus); })
      .def("__repr__",
           [](const PyProducer& p) {
             return "<shmbus.Producer of '" + p.bus.name() + "'" +
                    (p.producer ? ", next seq " + std::to_string(p.producer->next_seq()) : std::string(", closed")) +
                    ">";
           })
      .def("__reduce__",
           [](const PyProducer& p) -> py::object {
             throw py::type_error("bus '" + p.bus.name() +
                                  "': a Producer holds the bus's producer role in this process and cannot be "
                                  "pickled; pass the Bus (or its name) and make the Producer there");
           })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyProducer& p, py::args) { p.close(); });

  py::class_<PyConsumer>(m, "Consumer",
                          "A reader slot: next(), read_batch(), iteration until end of stream; a context manager. "
                          "A message's view is valid until the next call; Consumer(bus, copy=True) gives each "
                          "message its own bytes.")
      .def(py::init([](const PyBus& py_bus, const std::string& name, const std::string& start,
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
           }),
           py::arg("bus"), py::kw_only(), py::arg("name") = "consumer", py::arg("start") = "earliest",
           py::arg("start_seq") = 0, py::arg("durable") = false, py::arg("best_effort") = false,
           py::arg("copy") = false)
      .def("next",
           [](PyConsumer& c, std::optional<double> timeout) -> py::object {
             try {
               return c.next(timeout);
             } catch (const py::stop_iteration&) {
               raise_end_of_stream(c, end_of_stream.ptr());
             }
           },
           "The next Message (seq, timestamp_ns, memoryview; .records), or None after `timeout` seconds with "
           "nothing new. "
           "Raises EndOfStream. Releases the previous message's view.",
           py::arg("timeout") = py::none())
      .def("read_batch",
           [](PyConsumer& c, std::size_t max, std::optional<double> timeout) -> py::list {
             try {
               return c.read_batch(max, timeout);
             } catch (const py::stop_iteration&) {
               raise_end_of_stream(c, end_of_stream.ptr());
             }
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
      .def_property_readonly("end_reason",
                             [](const PyConsumer& c) { return shmbus::to_string(c.end_reason); })
      .def_property_readonly("bus", [](const PyConsumer& c) { return PyBus(c.bus); })
      .def("__repr__",
           [](const PyConsumer& c) {
             return "<shmbus.Consumer of '" + c.bus.name() + "'" +
                    (c.consumer ? ", slot " + std::to_string(c.consumer->slot()) + ", cursor " +
                                      std::to_string(c.consumer->cursor())
                                : std::string(", closed")) +
                    ">";
           })
      .def("__reduce__",
           [](const PyConsumer& c) -> py::object {
             throw py::type_error("bus '" + c.bus.name() +
                                  "': a Consumer holds a reader slot in this process and cannot be pickled; "
                                  "pass the Bus (or its name) and make the Consumer there");
           })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyConsumer& c, py::args) { c.close(); });

  py::class_<PyWaitSet>(m, "WaitSet",
                        "Waits on many consumers from one thread: wait(), or fileno() for an event loop. Holds "
                        "up to 127 consumers; a consumer closed leaves it.")
      .def(py::init([]() { return std::make_unique<PyWaitSet>(); }))
      .def("add", &PyWaitSet::add, "Adds a consumer (ValueError-like Error if it is a member already).",
           py::arg("consumer"))
      .def("remove", [](PyWaitSet& s, PyConsumer& c) { s.remove(c); }, "Removes a consumer (nothing if not a member).",
           py::arg("consumer"))
      .def("wait", &PyWaitSet::wait,
           "The members with news (a message, a loss, the end of the stream), waiting up to `timeout` seconds "
           "(None: as long as it takes; 0: just look); an empty list after the timeout. A member is returned until "
           "its news is read.",
           py::arg("timeout") = py::none())
      .def("fileno", [](PyWaitSet& s) { return s.get().fd(); },
           "A descriptor for an event loop: readable once a member may have news; then call wait(0), which keeps "
           "it readable while it returns members and makes it quiet when it returns none.")
      .def("__len__", [](const PyWaitSet& s) { return s.members.size(); })
      .def("close", &PyWaitSet::close, "Lets go of every member; the set cannot be used after.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyWaitSet& s, py::args) { s.close(); })
      .def("__repr__", [](const PyWaitSet& s) {
        return "<shmbus.WaitSet of " + std::to_string(s.members.size()) + " consumers" +
               (s.closed ? ", closed>" : ">");
      });

  py::class_<shmbus::Inspector>(m, "Inspector", "Reads a bus's header, counters and reader table without attaching.")
      .def(py::init([](const std::string& name, const std::optional<std::string>& dir) {
             return shmbus::Inspector::open(name, {}, dir.value_or(""));
           }),
           py::arg("name"), py::kw_only(), py::arg("dir") = py::none())
      .def(
          "snapshot", [](const shmbus::Inspector& i) { return snapshot_dict(i.snapshot()); },
          "The bus as a dict: geometry, head, oldest, counters, producer, readers, bookmarks, warnings (typed in "
          "the stubs; the judgement shmbus-inspect show --json makes).");
}
