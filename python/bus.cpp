// shmbus.Bus: create, open or remove a bus, its geometry and state, and the
// administration of reader names and slots by bus name; also bus_dir() and
// set_bus_dir(), and the checks of the Python values these take.
#include <limits>

#include "module.hpp"

namespace shmbus_py {
namespace {

using namespace pybind11::literals;

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
    throw py::value_error(std::string(what) + " must be between 0 and 2**64 - 1, not " +
                          py::str(o).cast<std::string>());
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

// Bus.open (ready_timeout is the library's OpenOptions::ready_timeout).
PyBus open_bus(const std::string& name, double ready_timeout, const std::optional<std::string>& dir) {
  shmbus::OpenOptions o;
  o.ready_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(ready_timeout * 1000));
  o.dir = dir.value_or("");
  py::gil_scoped_release unlocked;
  return PyBus(shmbus::Bus::open(name, o));
}

// Bus.remove: with end_streams, the stream of every consumer still attached
// ends and the producer is closed.
bool remove_bus(const std::string& name, bool end_streams, const std::optional<std::string>& dir_arg) {
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
}

// Bus.move_reader_name: exactly one of `to` ('earliest', 'latest' or a
// sequence) and `time_ns`; None if no such name is remembered.
py::object move_reader_name(const std::string& name, const std::string& reader, const py::object& to,
                            const py::object& time_ns, const std::optional<std::string>& dir) {
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
  return py::dict("from"_a = done->from, "to"_a = done->to, "oldest"_a = done->oldest, "head"_a = done->head,
                  "timestamp_ns"_a = done->timestamp_ns, "unstamped"_a = done->unstamped);
}

// The class methods of Bus: what is done to a bus by name.
void def_bus_by_name(py::class_<PyBus>& cls) {
  cls.def_static("create", bus_factory(&shmbus::Bus::create), bus_doc, py::arg("name"), py::kw_only(),
                 py::arg("capacity") = 0, py::arg("record_size") = 256, py::arg("policy") = "block",
                 py::arg("max_readers") = 16, py::arg("mode") = 0600, py::arg("dir") = py::none())
      .def_static("open_or_create", &open_or_create, bus_doc, py::arg("name"), py::kw_only(),
                  py::arg("capacity") = 0, py::arg("record_size") = 256, py::arg("policy") = "block",
                  py::arg("max_readers") = 16, py::arg("mode") = 0600, py::arg("dir") = py::none(),
                  py::arg("as_is") = false)
      .def_static("open", &open_bus, py::arg("name"), py::arg("ready_timeout") = 2.0, py::kw_only(),
                  py::arg("dir") = py::none())
      .def_static(
          "remove", &remove_bus,
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
          "move_reader_name", &move_reader_name,
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
          py::arg("name"), py::arg("slot"), py::kw_only(), py::arg("dir") = py::none());
}

// What a Bus handle tells of its bus, and the handle's own life.
void def_bus_handle(py::class_<PyBus>& cls) {
  cls.def_property_readonly("dir", [](const PyBus& b) { return b.get().info().dir; },
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
      .def("close", &PyBus::close,
           "Lets go of this handle on the bus (again: nothing). Producers, Consumers and views made from it keep "
           "the bus mapped until they go; the bus itself stays (Bus.remove removes it).")
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
  def_context_manager(cls);
}

}  // namespace

void register_bus(py::module_& m) {
  m.def("bus_dir", &shmbus::bus_dir,
        "The directory a bus without dir= lives in: the one set_bus_dir() set, else $SHMBUS_DIR, else /dev/shm.");
  m.def("set_bus_dir", [](const std::string& dir) { shmbus::set_bus_dir(dir); },
        "Makes dir (a tmpfs or hugetlbfs directory; checked) the default of this process; '' goes back to "
        "$SHMBUS_DIR or /dev/shm.",
        py::arg("dir"));

  py::class_<PyBus> cls(m, "Bus",
                        "A named bus (DIR/shmbus.NAME, DIR /dev/shm unless set): create, open or remove it; pickles "
                        "by name and directory. A context manager: leaving it closes this handle (Producers and "
                        "Consumers made from it carry on).");
  def_bus_by_name(cls);
  def_bus_handle(cls);
}

}  // namespace shmbus_py
