#include "span_marks.hpp"

#include <atomic>

// ThreadSanitizer, as GCC and as Clang say it.
#if defined(__SANITIZE_THREAD__)
#define SHMBUS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHMBUS_TSAN 1
#endif
#endif

#if defined(__x86_64__) && !defined(SHMBUS_TSAN)
#include <immintrin.h>
#define SHMBUS_VECTOR_MARKS 1
#endif

namespace shmbus::detail {

namespace {

void store_one_by_one(layout::SpanMark* m, std::uint64_t p, std::uint64_t end) noexcept {
  for (; p < end; ++p, ++m) m->store(p + 1, std::memory_order_relaxed);
}

#if SHMBUS_VECTOR_MARKS
// The vector stores below are aligned to their width, and an aligned 8-byte
// part of an aligned vector store is single-copy atomic on x86-64: a reader
// loading one mark (relaxed or acquire) sees it whole, as it would a
// relaxed store's. ThreadSanitizer cannot see them as atomic: under it the
// marks go one by one.

// Stores one by one until `m` is aligned to `align` bytes (or the run ends).
layout::SpanMark* align_run(layout::SpanMark* m, std::uint64_t& p, std::uint64_t end, std::uintptr_t align) noexcept {
  while (p < end && (reinterpret_cast<std::uintptr_t>(m) & (align - 1)) != 0) {
    m->store(p + 1, std::memory_order_relaxed);
    ++m;
    ++p;
  }
  return m;
}

void store_sse2(layout::SpanMark* m, std::uint64_t p, std::uint64_t end) noexcept {
  m = align_run(m, p, end, 16);
  __m128i v = _mm_set_epi64x(static_cast<long long>(p + 2), static_cast<long long>(p + 1));
  const __m128i step = _mm_set1_epi64x(2);
  for (; p + 2 <= end; p += 2, m += 2) {
    _mm_store_si128(reinterpret_cast<__m128i*>(m), v);
    v = _mm_add_epi64(v, step);
  }
  store_one_by_one(m, p, end);
}

[[gnu::target("avx2")]] void store_avx2(layout::SpanMark* m, std::uint64_t p, std::uint64_t end) noexcept {
  m = align_run(m, p, end, 32);
  __m256i v = _mm256_set_epi64x(static_cast<long long>(p + 4), static_cast<long long>(p + 3),
                                static_cast<long long>(p + 2), static_cast<long long>(p + 1));
  const __m256i step = _mm256_set1_epi64x(4);
  for (; p + 4 <= end; p += 4, m += 4) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(m), v);
    v = _mm256_add_epi64(v, step);
  }
  store_one_by_one(m, p, end);
}

[[gnu::target("avx512f")]] void store_avx512(layout::SpanMark* m, std::uint64_t p, std::uint64_t end) noexcept {
  m = align_run(m, p, end, 64);
  __m512i v = _mm512_set_epi64(static_cast<long long>(p + 8), static_cast<long long>(p + 7),
                               static_cast<long long>(p + 6), static_cast<long long>(p + 5),
                               static_cast<long long>(p + 4), static_cast<long long>(p + 3),
                               static_cast<long long>(p + 2), static_cast<long long>(p + 1));
  const __m512i step = _mm512_set1_epi64(8);
  for (; p + 8 <= end; p += 8, m += 8) {
    _mm512_store_si512(reinterpret_cast<void*>(m), v);
    v = _mm512_add_epi64(v, step);
  }
  store_one_by_one(m, p, end);
}

using StoreRun = void (*)(layout::SpanMark*, std::uint64_t, std::uint64_t) noexcept;

StoreRun widest() noexcept {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return store_avx512;
  if (__builtin_cpu_supports("avx2")) return store_avx2;
  return store_sse2;
}
#endif

}  // namespace

void store_mark_run(layout::SpanMark* marks, std::uint64_t first, std::uint64_t count) noexcept {
#if SHMBUS_VECTOR_MARKS
  static const StoreRun run = widest();
  run(marks, first, first + count);
#else
  store_one_by_one(marks, first, first + count);
#endif
}

}  // namespace shmbus::detail
