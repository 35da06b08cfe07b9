// shmbus.WaitSet: waits on many consumers from one thread, with wait() or
// through fileno() in an event loop.
#include "module.hpp"

namespace shmbus_py {

// Until no wait() runs on another thread (the GIL released meanwhile).
void PyWaitSet::quiesce() {
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

void PyWaitSet::add(py::object obj) {
  PyConsumer& c = obj.cast<PyConsumer&>();
  shmbus::WaitSet& s = get();
  quiesce();
  s.add(c.get());
  c.sets.push_back(this);
  members.emplace_back(&c, std::move(obj));
}

// Without the Python object (the consumer is going).
void PyWaitSet::forget(PyConsumer& c) {
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

void PyWaitSet::remove(PyConsumer& c) {
  get();
  forget(c);
}

py::list PyWaitSet::wait(std::optional<double> timeout) {
  // Another thread waits to change the set: let it, first.
  while (changing && !busy) {
    py::gil_scoped_release unlocked;
    std::this_thread::sleep_for(1ms);
  }
  Busy b(busy, "WaitSet");
  shmbus::WaitSet& s = get();
  waiter = std::this_thread::get_id();
  // The members are ours while we wait (see PyWaitSet in module.hpp).
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

void PyWaitSet::close() {
  if (closed) return;
  if (born == g_forks) quiesce();
  while (!members.empty()) forget(*members.back().first);
  closed = true;
  set.notify();  // a loop watching it wakes, and finds it closed
}

PyWaitSet::~PyWaitSet() {
  for (auto& [pc, obj] : members) {
    if (pc->consumer) set.remove(*pc->consumer);
    std::erase(pc->sets, this);
  }
}

void register_wait_set(py::module_& m) {
  py::class_<PyWaitSet> cls(m, "WaitSet",
                            "Waits on many consumers from one thread: wait(), or fileno() for an event loop. Holds "
                            "up to 127 consumers; a consumer closed leaves it.");
  cls.def(py::init([]() { return std::make_unique<PyWaitSet>(); }))
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
      .def("__repr__", [](const PyWaitSet& s) {
        return "<shmbus.WaitSet of " + std::to_string(s.members.size()) + " consumers" +
               (s.closed ? ", closed>" : ">");
      });
  def_context_manager(cls);
}

}  // namespace shmbus_py
