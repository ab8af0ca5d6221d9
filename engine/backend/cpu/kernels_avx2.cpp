// AVX2 + FMA + F16C kernels (the x86-64 baseline this backend asks for): 8 lanes, up to 4 rows ×
// 2 weight rows per tile, 4 weight rows for a single row (16 vector registers in all).
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include "backend/cpu/kernels.hpp"
#include "core/ggml_blocks.hpp"

namespace kiln::backend::simd {
namespace {

struct V {
  using T = __m256;
  static constexpr int W = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T splat(float a) { return _mm256_set1_ps(a); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static float reduce(T v) {  // halves folded in a fixed order
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
  static T f16(const unsigned char* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static T bf16(const unsigned char* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static float half(const unsigned char* p) { return _cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8))); }
};
#include "backend/cpu/int8_x86.inl"

using T = V::T;
constexpr int W = V::W;
constexpr int kRows = 4, kCols = 2, kGemvCols = 4;

#include "backend/cpu/tile.inl"

}  // namespace

const Kernels& kernels_avx2() {
  return kTable;
}

}  // namespace kiln::backend::simd
