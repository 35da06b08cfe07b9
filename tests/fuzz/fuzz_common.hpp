// What the fuzz targets share: a bus name of this process's own, the path
// of its segment, and writing bytes to that path as the segment file.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace shmbus::fuzz {

inline std::string own_name(const char* what) { return std::string("fuzz-") + what + "-" + std::to_string(::getpid()); }
inline std::string segment_path(const std::string& name) { return "/dev/shm/shmbus." + name; }

// Creates the segment file `name` holding exactly `data` (mode 0600, ours).
inline void write_segment(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = segment_path(name);
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

// A broken promise of the library: crash, so the fuzzer keeps the input.
[[noreturn]] inline void violated(const char* what) {
  ::write(2, what, __builtin_strlen(what));
  ::write(2, "\n", 1);
  std::abort();
}

}  // namespace shmbus::fuzz
