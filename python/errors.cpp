// The module's exceptions: shmbus.Error (an OSError) and the errors built
// on it that are also the built-in errors a Python program catches,
// EndOfStream, and the translation of the library's shmbus::Error.
#include <cerrno>

#include "module.hpp"

namespace shmbus_py {
namespace {

using namespace pybind11::literals;

struct EndOfStreamTag {};

PyObject* g_end_of_stream = nullptr;  // the type EndOfStream, kept for the life of the process

// shmbus.NAME: a subclass of shmbus.Error and of the built-in error `builtin`.
py::handle error_type(const char* name, const py::handle& error, PyObject* builtin, const char* doc) {
  const py::object type = py::module_::import("builtins").attr("type");
  return type(name, py::make_tuple(error, py::handle(builtin)), py::dict("__module__"_a = "shmbus", "__doc__"_a = doc))
      .release();
}

}  // namespace

[[noreturn]] void raise_end_of_stream(const std::string& bus, shmbus::EndReason end_reason) {
  const char* reason = shmbus::to_string(end_reason);
  py::object exc = py::reinterpret_borrow<py::object>(g_end_of_stream)(
      py::str("bus '" + bus + "': end of stream (" + reason + ")"));
  exc.attr("reason") = reason;
  PyErr_SetObject(g_end_of_stream, exc.ptr());
  throw py::error_already_set();
}

void register_errors(py::module_& m) {
  static py::exception<shmbus::Error> error(m, "Error", PyExc_OSError);
  static py::exception<EndOfStreamTag> end_of_stream(m, "EndOfStream", PyExc_Exception);
  g_end_of_stream = end_of_stream.ptr();
  // Errors that are also the built-in OSError a Python program catches:
  // `except FileNotFoundError` sees a missing bus. errno is set to match.
  // Handles, kept for the life of the process (no destructor runs after
  // the interpreter is gone).
  static const py::handle not_found = error_type("BusNotFound", error, PyExc_FileNotFoundError, "No bus of that name.");
  static const py::handle exists = error_type("BusExists", error, PyExc_FileExistsError, "A bus of that name exists.");
  static const py::handle denied = error_type("BusPermissionError", error, PyExc_PermissionError,
                                              "The bus exists but may not be opened.");
  static const py::handle differ = error_type("OptionsDiffer", error, PyExc_ValueError,
                                              "Bus.open_or_create found the bus with other options than asked.");
  m.attr("OptionsDiffer") = differ;
  m.attr("BusNotFound") = not_found;
  m.attr("BusExists") = exists;
  m.attr("BusPermissionError") = denied;

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
}

}  // namespace shmbus_py
