// The 8-bit activation path of the x86 variants (avx2 and avx512 both run it on 256-bit vectors):
// a 32-value block of activations (f32 scale, 32 int8) against a weight block (q8_0 or q4_0) as an
// exact integer dot product in 8 int32 lanes, then scale_x · scale_w · lanes multiply-added into
// 8 f32 lanes. Signs move to the activation side (|w| unsigned, x · sign(w) signed), so the u8 × s8
// instructions apply: AVX-512 VNNI's vpdpbusd where compiled in, else AVX2's vpmaddubsw +
// vpmaddwd. A weight of -128 (legal in a q8_0 file) reads as 128 unsigned, and the activations
// stay within [-127, 127], so every product is right and each pair sum (≤ 2 · 128 · 127) fits
// int16.
// Included inside the includer's anonymous namespace.
struct Q {
  using B = __m256i;  // 32 int8
  using I = __m256i;  // 8 int32
  using F = __m256;   // 8 f32
  static F zero() { return _mm256_setzero_ps(); }
  static B load32(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static B nibbles(const unsigned char* qs) {  // 16 bytes -> 32 values: low nibbles, then high, minus 8
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), m = _mm_set1_epi8(15);
    const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
  }
  static I dot(B x, B w) {  // Σ over each 4 consecutive values of x · w
    const __m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
#if defined(__AVX512VNNI__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
#endif
  }
  static F loadf(const unsigned char* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static F half(const unsigned char* p) {  // one f16 in every lane: a 16-bit broadcast, then a widening
    short h;
    __builtin_memcpy(&h, p, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16(h));
  }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(I s, F scale, F acc) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc); }
  static float reduce(F v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
  /** One 32-value block (kernels.hpp kXqBlock): scale amax / 127, values rounded to nearest even. */
  static void quantize_block(const float* x, unsigned char* dst) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], mx = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
    }
    // A NaN makes the scale NaN, so it reaches the outputs as it would through f32 arithmetic.
    const float amax = _mm256_movemask_ps(nan) ? __builtin_nanf("") : reduce_max(mx);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    _mm256_storeu_ps(reinterpret_cast<float*>(dst), _mm256_set1_ps(d));
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));
    // packs interleave 128-bit lanes; the permute puts the 32 values back in order
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  static float reduce_max(__m256 v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
};
