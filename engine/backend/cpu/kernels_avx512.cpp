// AVX-512 kernels (F, BW, VL, DQ, VNNI: f32 arithmetic, and VNNI for the 8-bit activation path):
// 16 lanes, up to 4 rows × 4 weight rows per tile (16 of the 32 vector registers accumulate); a
// single row (decode) takes 8 weight rows at a time: more independent loads and accumulator chains.
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include "backend/cpu/kernels.hpp"
#include "core/ggml_blocks.hpp"

namespace kiln::backend::simd {
namespace {

struct V {
  using T = __m512;
  static constexpr int W = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T splat(float a) { return _mm512_set1_ps(a); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static float reduce(T v) {  // halves folded in a fixed order
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
  static T f16(const unsigned char* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static T bf16(const unsigned char* p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  static float half(const unsigned char* p) { return _cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8))); }
};
#include "backend/cpu/int8_x86.inl"

using T = V::T;
constexpr int W = V::W;
constexpr int kRows = 4, kCols = 4, kGemvCols = 8;

#include "backend/cpu/tile.inl"

}  // namespace

const Kernels& kernels_avx512() {
  return kTable;
}

}  // namespace kiln::backend::simd
