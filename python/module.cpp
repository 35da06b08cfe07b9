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
//
// The module's parts: module.hpp (what they share), errors.cpp, views.cpp,
// bus.cpp, producer.cpp, consumer.cpp, wait_set.cpp and inspect.cpp, each
// registering its classes from PYBIND11_MODULE below.
#include <pthread.h>

#include "module.hpp"

namespace shmbus_py {

unsigned g_forks = 0;

void check_same_process(unsigned born, const char* what, const std::string& bus) {
  if (born != g_forks) [[unlikely]]
    throw std::runtime_error("bus '" + bus + "': this " + what +
                             " was made in the parent process before a fork; make a new one in the child");
}

std::chrono::nanoseconds to_timeout(std::optional<double> seconds) {
  if (!seconds) return shmbus::forever;
  if (!(*seconds >= 0)) throw py::value_error("timeout must be >= 0 seconds or None");
  if (*seconds > 1e9) return shmbus::forever;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(*seconds * 1e9));
}

namespace {

void after_fork_in_child() { ++g_forks; }

// The stub's type names that are not classes exist at run time too (`from
// shmbus import Policy`).
void register_type_names(py::module_& m) {
  const py::module_ typing = py::module_::import("typing");
  const py::module_ builtins = py::module_::import("builtins");
  m.attr("Policy") = typing.attr("Literal")[py::make_tuple("block", "overwrite")];
  const py::module_ abc = py::module_::import("collections.abc");
  m.attr("Buffer") = py::hasattr(abc, "Buffer")
                         ? py::object(abc.attr("Buffer"))  // Python 3.12+
                         : py::object(typing.attr("Union")[py::make_tuple(
                               builtins.attr("bytes"), builtins.attr("bytearray"), builtins.attr("memoryview"))]);
}

}  // namespace
}  // namespace shmbus_py

// shmbus._shmbus: the package shmbus (shmbus/__init__.py) re-exports it.
PYBIND11_MODULE(_shmbus, m) {
  m.doc() = "shmbus: a shared-memory message bus (one producer, many consumers, each reading "
            "every message). The stubs, shmbus/__init__.pyi, type the API.";
  m.attr("__version__") = SHMBUS_VERSION;
  ::pthread_atfork(nullptr, nullptr, shmbus_py::after_fork_in_child);
  shmbus_py::register_errors(m);
  shmbus_py::register_views(m);
  shmbus_py::register_type_names(m);
  // In this order: a signature shows a class by its Python name once that class is registered.
  shmbus_py::register_bus(m);
  shmbus_py::register_producer(m);
  shmbus_py::register_consumer(m);
  shmbus_py::register_wait_set(m);
  shmbus_py::register_inspector(m);
}
