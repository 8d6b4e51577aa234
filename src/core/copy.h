/*
 * Copying into memory that will not be read again before it leaves the
 * caches: the result of a call too large for them (comm->cold_bytes).
 */
#ifndef HOOP_COPY_H
#define HOOP_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/*
 * memcpy with non-temporal stores, unordered: they skip reading each
 * destination line in before overwriting it (a third of the memory
 * traffic of a plain copy) and leave the caches to data that is read
 * again.  A run of these ends with hoop__cold_fence, which orders them
 * before whatever tells another thread the data is there.  Plain memcpy
 * where SSE2 is missing.
 */
static inline void hoop__stream_cold(char *dst, const char *src, size_t n) {
#if defined(__SSE2__)
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (n >= head + 64) {
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
      __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
      __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
      _mm_stream_si128((__m128i *)(dst + i), a);
      _mm_stream_si128((__m128i *)(dst + i + 16), b);
      _mm_stream_si128((__m128i *)(dst + i + 32), c);
      _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    dst += i;
    src += i;
    n -= i;
  }
#endif
  memcpy(dst, src, n);
}

static inline void hoop__cold_fence(void) {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

static inline void hoop__copy_cold(char *dst, const char *src, size_t n) {
  hoop__stream_cold(dst, src, n);
  hoop__cold_fence();
}

#endif /* HOOP_COPY_H */
