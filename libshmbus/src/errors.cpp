#include "shmbus/errors.hpp"

namespace shmbus {
namespace {

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "shmbus"; }
  std::string message(int code) const override {
    switch (static_cast<Errc>(code)) {
      case Errc::invalid_name: return "invalid bus name";
      case Errc::invalid_options: return "invalid bus options";
      case Errc::already_exists: return "bus already exists";
      case Errc::not_found: return "bus not found";
      case Errc::permission_denied: return "permission denied";
      case Errc::no_space: return "not enough space in the bus directory";
      case Errc::not_a_bus: return "not a shmbus segment";
      case Errc::version_mismatch: return "segment has another layout version";
      case Errc::truncated: return "segment is truncated";
      case Errc::corrupt: return "segment is corrupt";
      case Errc::not_ready: return "segment was never fully initialised";
      case Errc::producer_active: return "another producer is attached";
      case Errc::reader_table_full: return "reader table is full";
      case Errc::not_retained: return "sequence is not retained";
      case Errc::timeout: return "timed out";
      case Errc::foreign_owner: return "segment belongs to an untrusted user";
      case Errc::insecure_mode: return "segment mode is more permissive than requested";
      case Errc::not_allocated: return "segment is not fully allocated";
      case Errc::name_in_use: return "reader name is held by a live reader";
      case Errc::bookmarks_full: return "every bookmark is in use";
      case Errc::unsafe_file: return "not a regular file with a single link";
      case Errc::bad_directory: return "unusable bus directory";
      case Errc::options_differ: return "the bus exists with other options";
      case Errc::system: return "system call failed";
    }
    return "unknown shmbus error";
  }
};

}  // namespace

const std::error_category& category() noexcept {
  static const Category c;
  return c;
}

}  // namespace shmbus
