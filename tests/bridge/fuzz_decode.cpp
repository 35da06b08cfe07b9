// libFuzzer target: the bridge's frame and handshake decoder on arbitrary
// bytes (bridge/protocol.hpp decode_stream). It must never read out of
// bounds, loop, or abort; decode_stream itself traps if a batch it accepted
// iterates differently from what it validated.
#include <cstddef>
#include <cstdint>
#include <span>

#include "bridge/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)shmbus::bridge::decode_stream(std::as_bytes(std::span<const std::uint8_t>(data, size)));
  return 0;
}
