// shmbus — setup-time errors.
//
// Two error channels (see README "Errors"):
//  * Setup calls (create, open, attach a producer or consumer) throw
//    shmbus::Error, a std::system_error whose code() is in shmbus::category()
//    and whose what() names the bus and the problem in one line.
//  * Hot-path calls (publish, claim, next, poll) are noexcept and return small
//    [[nodiscard]] status enums (see producer.hpp and consumer.hpp).
#pragma once

#include <string>
#include <system_error>

namespace shmbus {

enum class Errc : int {
  invalid_name = 1,     // empty, too long, contains '/' or "..", starts with '.' or '-', ...
  invalid_options,      // capacity not a power of two, record size not a multiple of 8, ...
  already_exists,       // create() on a bus that exists
  not_found,            // open() on a bus that does not exist
  permission_denied,    // the segment exists but we may not open or map it
  no_space,             // the bus directory (/dev/shm) cannot hold the segment (reserved at creation)
  not_a_bus,            // the segment's magic number is not shmbus's
  version_mismatch,     // the segment has another layout version
  truncated,            // the segment is smaller than its header says
  corrupt,              // a header field or offset is impossible
  not_ready,            // the creator never finished initialising the segment
  producer_active,      // another live process is the producer
  reader_table_full,    // every reader slot holds a live reader
  not_retained,         // the requested start sequence is no longer (or not yet) in the ring
  system,               // an operating-system call failed (see the message)
  timeout,              // a setup wait (e.g. for readers to attach) ran out
  foreign_owner,        // the segment belongs to a user (or group) this process does not trust
  insecure_mode,        // open_or_create found the bus with a more permissive mode than asked
  not_allocated,        // the segment is sparse: mapping it would fill /dev/shm, then SIGBUS
  name_in_use,          // a live durable reader already holds this name (the message names its pid)
  bookmarks_full,       // every bookmark holds a durable reader name (shmbus-inspect gc --forget)
  unsafe_file,          // the bus path is a FIFO, device, symlink or a file with more than one link
  bad_directory,        // the bus directory is missing, not a directory, or not on tmpfs/hugetlbfs
  options_differ,       // open_or_create found the bus with other options than asked (Existing::same)
};

// The std::error_category of shmbus::Errc ("shmbus").
const std::error_category& category() noexcept;

inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), category()};
}

// Thrown by every setup call. what() is one line: "bus 'NAME': what is wrong".
class Error : public std::system_error {
 public:
  Error(Errc code, const std::string& message)
      : std::system_error(make_error_code(code), message), message_(message) {}
  Errc errc() const noexcept { return static_cast<Errc>(code().value()); }
  // Just the message (std::system_error would append the category's text).
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

}  // namespace shmbus

template <>
struct std::is_error_code_enum<shmbus::Errc> : std::true_type {};
