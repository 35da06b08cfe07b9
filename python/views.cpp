// The memory Python is handed: the View type behind every memoryview of a
// payload or a claim (its own buffer slots count the exports), ViewSlot,
// which hands such memoryviews out and revokes them, and the struct
// sequence shmbus.Message.
#include "module.hpp"

namespace shmbus_py {
namespace {

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

// memoryview.release(): refused (BufferError, cleared here) while the
// memoryview is exported further; see the note at the top of module.cpp.
void release(const py::object& mv) {
  PyObject* r = PyObject_CallMethod(mv.ptr(), "release", nullptr);
  if (r == nullptr) PyErr_Clear();
  Py_XDECREF(r);
}

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

}  // namespace

py::memoryview ViewSlot::make(const shmbus::Bus& bus, const std::byte* data, std::size_t size, bool writable) {
  py::object view = py::cast(View{bus, const_cast<std::byte*>(data), size, writable, true});
  py::memoryview mv = py::reinterpret_steal<py::memoryview>(PyMemoryView_FromObject(view.ptr()));
  if (!mv) throw py::error_already_set();
  handed_.push_back({view, mv});
  return mv;
}

void ViewSlot::revoke() {
  for (auto& [view, mv] : handed_) {
    view.cast<View&>().valid = false;  // a new memoryview of it is empty
    release(mv);
  }
  handed_.clear();  // keeps its capacity: a batch of the same size allocates nothing here
}

std::size_t ViewSlot::release_and_count() {
  std::size_t n = 0;
  for (auto& [view, mv] : handed_) {
    release(mv);
    n += view.cast<View&>().exports;
  }
  return n;
}

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

void register_views(py::module_& m) {
  g_message_type = PyStructSequence_NewType(&g_message_desc);
  if (g_message_type == nullptr) throw py::error_already_set();
  m.attr("Message") = py::handle(reinterpret_cast<PyObject*>(g_message_type));

  // Our own buffer slots (pybind11's def_buffer cannot count releases).
  const py::class_<View> view_type(m, "_View", py::buffer_protocol());
  auto* t = reinterpret_cast<PyTypeObject*>(view_type.ptr());
  t->tp_as_buffer->bf_getbuffer = view_getbuffer;
  t->tp_as_buffer->bf_releasebuffer = view_releasebuffer;
  PyType_Modified(t);
}

}  // namespace shmbus_py
