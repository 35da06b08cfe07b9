// shmbus — copying a payload to or from a record that another process may
// be writing at the same time (the `overwrite` policy's seqlock).
//
// A seqlock reader copies data that the writer may be overwriting, and
// throws the copy away when the commit tag changed meanwhile. With plain
// memcpy on both sides that overlap is a data race, undefined behaviour by
// the C++ memory model however the re-check turns out (and what
// ThreadSanitizer reports). So both sides move the payload with relaxed
// atomic 8-byte accesses through std::atomic_ref — on x86-64 and AArch64 the
// same plain loads and stores, only not merged into vector moves — and the
// ordering comes from one fence per side (H.-J. Boehm, "Can seqlocks get
// along with programming language memory models?", MSPC 2012):
//
//   producer                                consumer
//   tag = BUSY|seq+1        (relaxed)       t = tag                  (acquire)
//   fence(release)  ------------------.     words = payload          (relaxed)
//   payload = words         (relaxed)  '--> fence(acquire)
//   tag = seq+1             (release)       tag == t ? keep : discard (relaxed)
//
// If any word the consumer loaded came from the new occupant, its acquire
// fence synchronises with the producer's release fence, so the re-check sees
// BUSY (or later) and the copy is discarded.
//
// The payload starts 24 bytes into a 64-byte-aligned record, so it is 8-byte
// aligned, and every record's payload area is a multiple of 8 bytes: a copy
// of n bytes touches the shared side in whole words, ceil(n / 8) of them,
// never beyond the record.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sys.hpp"

namespace shmbus::detail {

// Word accesses keep up with memcpy only when the record's lines are
// already on their way: eight-byte loads (or stores) fill the CPU's load (or
// store) queue four times sooner than memcpy's vector moves, so fewer cache
// misses overlap. Both copies therefore first prefetch every line they will
// touch (for writing, on the producer's side), then copy word by word.
inline void prefetch_lines(const std::byte* p, std::size_t n, bool for_write) noexcept {
  const auto first = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{63};
  const auto end = reinterpret_cast<std::uintptr_t>(p) + n;
  for (std::uintptr_t a = first; a < end; a += 64) {
    if (for_write)
      prefetch_for_write(reinterpret_cast<const void*>(a));  // sys.hpp: a read prefetch would fetch it shared
    else
      __builtin_prefetch(reinterpret_cast<const void*>(a), 0);
  }
}

// Stores n bytes from private `src` into shared `dst` (8-byte aligned). The
// last word's bytes past n are written as zero. Out of line (as is the load
// below): inlined, the loops would push the `block` path's publish and
// try_read out of line too.
[[gnu::noinline]] inline void store_shared_words(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  prefetch_lines(dst, n, true);
  auto* out = reinterpret_cast<std::uint64_t*>(dst);
  const std::size_t full = n / 8;
  for (std::size_t i = 0; i < full; ++i) {
    std::uint64_t w;
    std::memcpy(&w, src + i * 8, 8);
    std::atomic_ref<std::uint64_t>(out[i]).store(w, std::memory_order_relaxed);
  }
  if (const std::size_t rest = n % 8; rest != 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, src + full * 8, rest);
    std::atomic_ref<std::uint64_t>(out[full]).store(w, std::memory_order_relaxed);
  }
}

// Loads n bytes from shared `src` (8-byte aligned) into private `dst`; only
// n bytes of `dst` are written.
[[gnu::noinline]] inline void load_shared_words(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  prefetch_lines(src, n, false);
  auto* in = reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(src));
  const std::size_t full = n / 8;
  for (std::size_t i = 0; i < full; ++i) {
    const std::uint64_t w = std::atomic_ref<std::uint64_t>(in[i]).load(std::memory_order_relaxed);
    std::memcpy(dst + i * 8, &w, 8);
  }
  if (const std::size_t rest = n % 8; rest != 0) {
    const std::uint64_t w = std::atomic_ref<std::uint64_t>(in[full]).load(std::memory_order_relaxed);
    std::memcpy(dst + full * 8, &w, rest);
  }
}

}  // namespace shmbus::detail
