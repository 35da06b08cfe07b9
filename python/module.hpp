// What the parts of the Python module share: the wait in GIL-released
// slices, the fork check, the views handed out over bus memory, the Bus,
// Consumer and WaitSet wrappers (consumer.cpp and wait_set.cpp each reach
// into the other's), the helpers that register what several classes have
// in common, and each part's register_*() function.
#pragma once

#include <sys/types.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shmbus/shmbus.hpp"

namespace py = pybind11;

namespace shmbus_py {

using namespace std::chrono_literals;

constexpr std::chrono::nanoseconds kSlice = 100ms;

// Forks seen by this process's copy of the module: a Producer or Consumer
// made before a fork belongs to the parent. The child's copy holds no role
// (the library closes the role descriptors in the child) and must not be
// used there: it would write over the parent's records, or share its
// reader's cursor. Bumped by an atfork handler; compared, never a system
// call, on every use.
extern unsigned g_forks;

// Refuses an object made before a fork, in the child.
void check_same_process(unsigned born, const char* what, const std::string& bus);

// Python seconds (None: forever) to a C++ timeout.
std::chrono::nanoseconds to_timeout(std::optional<double> seconds);

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

// Hands out memoryviews over bus memory (one per message of a call) and
// revokes them all at the next call.
class ViewSlot {
 public:
  py::memoryview make(const shmbus::Bus& bus, const std::byte* data, std::size_t size, bool writable);
  void revoke();
  // Releases the memoryviews handed out (those that are not exported
  // further); returns how many buffers made from them still reach the
  // memory: numpy arrays, slices, memoryviews of them.
  std::size_t release_and_count();

 private:
  std::vector<std::pair<py::object, py::object>> handed_;  // (view, memoryview of it)
};

// shmbus.Message: the tuple (seq, timestamp_ns, payload), with .records.
py::object make_message(const shmbus::Message& m, py::memoryview payload);

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
  void close() { bus.reset(); }
};

struct PyWaitSet;

// shmbus.Consumer: a reader slot (consumer.cpp).
struct PyConsumer {
  explicit PyConsumer(const shmbus::Bus& b) : bus(b) {}
  ~PyConsumer();
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

  int fileno();
  bool has_news();
  shmbus::Consumer& get() {
    check_same_process(born, "Consumer", bus.name());
    if (!consumer) throw std::runtime_error("bus '" + bus.name() + "': consumer is closed");
    return *consumer;
  }
  py::list read_batch(std::size_t max, std::optional<double> timeout);
  py::object next(std::optional<double> timeout);
  void close();
  void release();
  void on_let_go(bool stale_view);
  [[noreturn]] void on_evicted(std::uint64_t lost_now);
  void closed_while_waiting(const char* call);
  void end_if_pending();
  py::memoryview payload_of(const shmbus::Message& m);
};

// shmbus.WaitSet (wait_set.cpp): waits on many consumers from one thread:
// wait(), or fileno() for an event loop. Holds its members (they stay alive
// while in it); a member closed leaves it. While wait() waits (the GIL
// released), its members count as in use by that thread: next() from
// another thread raises, and close() from another thread (the usual
// shutdown) makes the wait return within one slice and closes the consumer
// there, as it does a waiting next(). Changing the set from another thread
// waits for the wait to return.
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
  void quiesce();
  void add(py::object obj);
  void forget(PyConsumer& c);
  void remove(PyConsumer& c);
  py::list wait(std::optional<double> timeout);
  void close();
  ~PyWaitSet();
};

// `with obj:` returns obj and closes it on the way out.
template <class T>
void def_context_manager(py::class_<T>& cls) {
  cls.def("__enter__", [](py::object self) { return self; }).def("__exit__", [](T& o, py::args) { o.close(); });
}

// What a Producer and a Consumer share: the Bus they were made from, the
// repr "<shmbus.KIND of 'NAME'" + state(obj) + ">", the refusal to be
// pickled (each holds `role` in this process) and the context manager that
// closes them.
template <class T, class State>
void def_role_methods(py::class_<T>& cls, const char* kind, const char* role, State state) {
  cls.def_property_readonly("bus", [](const T& o) { return PyBus(o.bus); })
      .def("__repr__",
           [kind, state](const T& o) {
             return std::string("<shmbus.") + kind + " of '" + o.bus.name() + "'" + state(o) + ">";
           })
      .def("__reduce__", [kind, role](const T& o) -> py::object {
        throw py::type_error("bus '" + o.bus.name() + "': a " + kind + " holds " + role +
                             " in this process and cannot be pickled; pass the Bus (or its name) and make the " +
                             kind + " there");
      });
  def_context_manager(cls);
}

// EndOfStream with its reason, from next() and read_batch().
[[noreturn]] void raise_end_of_stream(const std::string& bus, shmbus::EndReason reason);

void register_errors(py::module_& m);     // errors.cpp: shmbus.Error and the errors built on it
void register_views(py::module_& m);      // views.cpp: shmbus.Message and the type behind the views
void register_bus(py::module_& m);        // bus.cpp: shmbus.Bus, bus_dir(), set_bus_dir()
void register_producer(py::module_& m);   // producer.cpp
void register_consumer(py::module_& m);   // consumer.cpp
void register_wait_set(py::module_& m);   // wait_set.cpp
void register_inspector(py::module_& m);  // inspect.cpp

}  // namespace shmbus_py
