// shmbus.Producer: the bus's one producer, publish(), publish_batch() and
// claim()/commit() with the claim's writable view.
#include "module.hpp"

namespace shmbus_py {
namespace {

struct PyProducer {
  explicit PyProducer(const shmbus::Bus& b) : bus(b) {}
  std::optional<shmbus::Producer> producer;
  shmbus::Bus bus;
  ViewSlot claim_view;
  bool busy = false;
  unsigned born = g_forks;
  std::vector<std::span<const std::byte>> spans;  // publish_batch(), reused

  shmbus::Producer& get() {
    check_same_process(born, "Producer", bus.name());
    if (!producer) throw std::runtime_error("bus '" + bus.name() + "': producer is closed");
    return *producer;
  }

  // The claim open now (its status closed when none is); the producer keeps it.
  shmbus::Claim open_claim() const { return producer ? producer->open_claim() : shmbus::Claim{}; }

  void check_no_claim() const {
    if (open_claim()) throw std::runtime_error("commit() the open claim first");
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
    check_no_claim();
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
    check_no_claim();
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
    check_no_claim();
    shmbus::Producer& p = get();
    const auto c = wait_interruptibly<shmbus::Claim>(
        to_timeout(timeout), [&](std::chrono::nanoseconds t) { return p.claim(n, t); },
        [](const shmbus::Claim& x) { return x.status == shmbus::PublishStatus::timeout; });
    check(c.status, bus, n);
    claim_view.revoke();
    return claim_view.make(bus, c.data.data(), c.data.size(), true);
  }

  std::uint64_t commit(std::optional<std::size_t> size) {
    const shmbus::Claim open = open_claim();
    if (!open) throw std::runtime_error("nothing is claimed");
    shmbus::Producer& p = get();
    if (size && *size > open.data.size())
      throw py::value_error("bus '" + bus.name() + "': commit(" + std::to_string(*size) + ") after claim(" +
                            std::to_string(open.data.size()) +
                            "): at most the claimed size (the claim stays open)");
    if (const std::size_t n = claim_view.release_and_count(); n != 0) {
      PyErr_SetString(PyExc_BufferError,
                      ("bus '" + bus.name() + "': the claim's view is still exported (" + std::to_string(n) +
                       " buffer" + (n == 1 ? "" : "s") +
                       " made from it: a numpy array, a slice, ...); delete them before commit(), since a write "
                       "through them afterwards would change the published message. The claim stays open")
                          .c_str());
      throw py::error_already_set();
    }
    claim_view.revoke();
    if (size) {
      p.commit(*size);
    } else {
      p.commit();
    }
    return open.seq;  // past the padding, for a claim that starts the next lap
  }

  // An open claim is abandoned with the role.
  void close() {
    claim_view.revoke();
    if (producer) producer->close();
    producer.reset();
  }

  void detach() {
    claim_view.revoke();
    if (producer) producer->detach();
    producer.reset();
  }
};

std::unique_ptr<PyProducer> make_producer(const PyBus& py_bus, const std::string& timestamps,
                                          std::uint32_t wait_for_readers,
                                          std::optional<double> wait_for_readers_timeout,
                                          std::optional<double> max_hold) {
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
}

}  // namespace

void register_producer(py::module_& m) {
  py::class_<PyProducer> cls(m, "Producer",
                             "The bus's one producer: publish(), publish_batch(), claim()/commit(); a context "
                             "manager (leaving it closes the stream).");
  cls.def(py::init(&make_producer), py::arg("bus"), py::kw_only(), py::arg("timestamps") = "off",
          py::arg("wait_for_readers") = 0, py::arg("wait_for_readers_timeout") = py::none(),
          py::arg("max_hold") = py::none())
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
      .def("detach", &PyProducer::detach,
           "Gives up the role without end-of-stream (consumers wait for a new producer).")
      .def_property_readonly("next_seq", [](PyProducer& p) { return p.get().next_seq(); });
  def_role_methods(cls, "Producer", "the bus's producer role", [](const PyProducer& p) {
    return p.producer ? ", next seq " + std::to_string(p.producer->next_seq()) : std::string(", closed");
  });
}

}  // namespace shmbus_py
