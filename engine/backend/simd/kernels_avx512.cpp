// AVX-512 kernels (F, BW, VL, DQ; f32 arithmetic: no BF16 or VNNI instructions, see docs/backend.md §8):
// 16 lanes, up to 4 rows × 4 weight rows per tile (16 of the 32 vector registers accumulate).
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include "backend/simd/kernels.hpp"

namespace kiln::backend::simd {
namespace {

struct V {
  using T = __m512;
  static constexpr int W = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T splat(float a) { return _mm512_set1_ps(a); }
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
  static T q8(const signed char* q, float d) {
    const __m512i i = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(d));
  }
  static T q4(const unsigned char* qs, int e0, float d) {  // e0: 0 (low nibbles) or 16 (high)
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    if (e0) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(15));
    const __m512i i = _mm512_sub_epi32(_mm512_cvtepu8_epi32(b), _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(d));
  }
  static float half(const unsigned char* p) { return _cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8))); }
};
using T = V::T;
constexpr int W = V::W;
constexpr int kRows = 4, kCols = 4, kGemvCols = 4;
constexpr const char* kIsaName = "avx512";

#include "backend/simd/tile.inl"

}  // namespace

const Kernels& kernels_avx512() {
  return kTable;
}

}  // namespace kiln::backend::simd
