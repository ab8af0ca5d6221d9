// The 8-bit activation path of the x86 variants (avx2 and avx512 both run it on 256-bit vectors):
// a 32-value block of activations (f32 scale, 32 int8) against 32 weight integers decoded from any
// block format as an exact integer dot product in 8 int32 lanes, then scale_x · scale_w · lanes
// multiply-added into 8 f32 lanes. Signs move to the activation side (|w| unsigned, x · sign(w) signed), so the u8 × s8
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
  static B spread16(const unsigned char* qs) {  // 16 bytes -> 32 values: low nibbles, then high
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
  }
  static B bits(B v, int shift, int mask) {  // (v >> shift) & mask in every byte
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(static_cast<char>(mask)));
  }
  static B shl(B v, int n) { return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)); }  // bytes below 2^(8-n)
  static B or_(B a, B b) { return _mm256_or_si256(a, b); }
  static B add(B v, int c) { return _mm256_add_epi8(v, _mm256_set1_epi8(static_cast<char>(c))); }
  static B iq4(B idx) {  // kIq4Values[idx] for idx in [0, 16)
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
    return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), idx);
  }
  static B bit_bytes(const unsigned char* p, int value) {  // byte j: value where bit j of p's 32 bits is set
    int x;
    __builtin_memcpy(&x, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(  // byte j <- byte j / 8 of x (each 128-bit lane holds x)
        _mm256_set1_epi32(x), _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
    return _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(value)));
  }
  static I dot(B x, B w) {  // Σ over each 4 consecutive values of x · w
    const __m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
#if defined(__AVX512VNNI__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
#endif
  }
  static I dot_u(B x, B w) {  // the same for w in [0, 64): u8 × s8 directly (pair sums ≤ 2·63·128)
#if defined(__AVX512VNNI__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
#endif
  }
  static F loadf(const unsigned char* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
  static F half(const unsigned char* p) {  // one f16 in every lane: a 16-bit broadcast, then a widening
    short h;
    __builtin_memcpy(&h, p, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16(h));
  }
  static F splat(float a) {
    return _mm256_set1_ps(a);
  }
  static F pair(float a, float b) {
    return _mm256_set_m128(_mm_set1_ps(b), _mm_set1_ps(a));
  }  // lanes 0-3 a, 4-7 b
  static F mul(F a, F b) {
    return _mm256_mul_ps(a, b);
  }
  static F fma(I s, F scale, F acc) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc);
  }
  static F fmaf(F a, F b, F acc) {
    return _mm256_fmadd_ps(a, b, acc);
  }
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
    const __m256i p =
        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64), p);
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + 32),
                     _mm256_mul_ps(_mm256_cvtepi32_ps(dot(p, _mm256_set1_epi8(1))), _mm256_set1_ps(d)));
  }
  static float reduce_max(__m256 v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
};
