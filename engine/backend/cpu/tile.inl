// The matmul tiles and vector helpers, written once over a vector type V and included by each
// ISA's translation unit (kernels_*.cpp) after it defines V:
//   T, W (lanes), zero, load, store, splat, add, mul, fma (c + a·b), reduce (fixed order),
//   f16 / bf16 (W values from bytes), half (one f16 scalar); and Q, the 8-bit activation path
//   (B: 32 int8, I: 8 int32 lanes, F: 8 f32 lanes; load32, loadf, half (an f16 scale in every
//   lane), splat, pair, spread16, bits, shl, or_, add, iq4, bit_bytes, dot, dot_u, mul, fma, fmaf,
//   reduce, quantize_block).
// Everything here has internal linkage (the includer wraps it in an anonymous namespace), so no
// inline function compiled with one ISA's flags can be picked by the linker for another's caller.
//
// Each output element of a matmul accumulates x·w in W lanes over K in steps of W, in K order, with
// one multiply-add per step, then reduces the lanes with V::reduce: the order depends on K alone,
// never on which rows or columns share a tile, so a row's result is the same in any batch.
//
// Prefetching: while a tile streams its MT weight rows, it asks for the same offsets of the next
// tile's MT rows (into L2). A tile's rows are short (1-2 KiB at K = 1024) and read side by side, so
// the hardware prefetchers lose each tile's start; measured on a 2-vCPU EPYC (bench_ops --shape
// 151936x1024, the 0.6B model's output layer) the q8_0 GEMV went 11 -> 4 ms on the avx2 variant
// and 9 -> 3 ms on avx512, and kiln's whole q8_0 decode 23 -> 44 tok/s (bench/RESULTS.md). A
// prefetch never faults, so the last tile's reach past the weights is harmless.

// Weight rows by storage type. Unblocked: load(row, k) gives the W values from k (k a multiple of
// W), at(row, k) one value (tails).
struct RowF32 {
  static constexpr int kValueBytes = 4;
  static T load(const unsigned char* row, int64_t k) { return V::load(reinterpret_cast<const float*>(row) + k); }
  static float at(const unsigned char* row, int64_t k) { return reinterpret_cast<const float*>(row)[k]; }
};
struct RowF16 {
  static constexpr int kValueBytes = 2;
  static T load(const unsigned char* row, int64_t k) { return V::f16(row + kValueBytes * k); }
  static float at(const unsigned char* row, int64_t k) { return V::half(row + kValueBytes * k); }
};
struct RowBF16 {
  static constexpr int kValueBytes = 2;
  static T load(const unsigned char* row, int64_t k) { return V::bf16(row + kValueBytes * k); }
  static float at(const unsigned char* row, int64_t k) {
    const uint32_t bits = static_cast<uint32_t>(row[2 * k] | (row[2 * k + 1] << 8)) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

// Weight block formats (core/ggml_blocks.hpp has the layouts). A block of kBlock values and kBytes
// bytes holds kGroups groups of 32; head() reads what a block's groups share (scales, mins), then
// per group j: ints() its 32 integers q, scale() and offset() eight lanes s and m such that the
// value of element e is s[e / 4]·q[e] + m[e / 4] (formats with kOffset false have m = 0).
// kUnsigned: the integers are in [0, 64), so the dot product needs no sign moves (Q::dot_u).
struct Half {  // formats with one f16 scale per 32-value block
  Q::F d;
};
struct BlockQ8_0 {
  static constexpr int64_t kBlock = 32, kBytes = 34;
  static constexpr int kGroups = 1;
  static constexpr bool kOffset = false, kUnsigned = false;
  using Head = Half;
  static void head(const unsigned char* b, Head& h) { h.d = Q::half(b); }
  static Q::B ints(const unsigned char* b, int) { return Q::load32(b + 2); }
  static Q::F scale(const Head& h, int) { return h.d; }
  static Q::F offset(const Head&, int) { return Q::zero(); }
};
struct BlockQ4_0 : BlockQ8_0 {
  static constexpr int64_t kBytes = 18;
  static Q::B ints(const unsigned char* b, int) { return Q::add(Q::spread16(b + 2), -8); }
};
struct BlockIQ4_NL : BlockQ8_0 {
  static constexpr int64_t kBytes = 18;
  static Q::B ints(const unsigned char* b, int) { return Q::iq4(Q::spread16(b + 2)); }
};
struct BlockQ5_0 : BlockQ8_0 {
  static constexpr int64_t kBytes = 22;
  static Q::B ints(const unsigned char* b, int) {
    return Q::add(Q::or_(Q::spread16(b + 6), Q::bit_bytes(b + 2, 16)), -16);
  }
};
struct HalfMin {  // formats with an f16 scale and an f16 min per 32-value block
  Q::F d, m;
};
struct BlockQ4_1 {
  static constexpr int64_t kBlock = 32, kBytes = 20;
  static constexpr int kGroups = 1;
  static constexpr bool kOffset = true, kUnsigned = true;
  using Head = HalfMin;
  static void head(const unsigned char* b, Head& h) { h.d = Q::half(b), h.m = Q::half(b + 2); }
  static Q::B ints(const unsigned char* b, int) { return Q::spread16(b + 4); }
  static Q::F scale(const Head& h, int) { return h.d; }
  static Q::F offset(const Head& h, int) { return h.m; }
};
struct BlockQ5_1 : BlockQ4_1 {
  static constexpr int64_t kBytes = 24;
  static Q::B ints(const unsigned char* b, int) { return Q::or_(Q::spread16(b + 8), Q::bit_bytes(b + 4, 16)); }
};

// The 256-value formats: per group of 32 two lane scales (and mins), one per 16 values; formats
// with one scale per 32 values repeat it.
struct Super {
  float s[16], m[16];
};
struct BlockK {
  static constexpr int64_t kBlock = 256;
  static constexpr int kGroups = 8;
  static constexpr bool kUnsigned = false;
  using Head = Super;
  static Q::F scale(const Head& h, int j) { return Q::pair(h.s[2 * j], h.s[2 * j + 1]); }
  static Q::F offset(const Head& h, int j) { return Q::pair(h.m[2 * j], h.m[2 * j + 1]); }
};
struct Super32 {  // one scale (and min) per 32 values
  float s[8], m[8];
};
struct BlockK32 : BlockK {
  using Head = Super32;
  static Q::F scale(const Head& h, int j) { return Q::splat(h.s[j]); }
  static Q::F offset(const Head& h, int j) { return Q::splat(h.m[j]); }
};
struct BlockQ4_K
    : BlockK32 {  // f16 d, f16 dmin, scales[12], qs[128]: group j the low (even j) or high nibbles of 32 bytes
  static constexpr int64_t kBytes = 144;
  static constexpr bool kOffset = true, kUnsigned = true;
  static void head(const unsigned char* b, Head& h) {
    const float d = V::half(b), dmin = V::half(b + 2);
    uint8_t sc[8], mn[8];
    k_scales_mins(b + 4, sc, mn);
    for (int j = 0; j < 8; ++j) h.s[j] = d * static_cast<float>(sc[j]), h.m[j] = -(dmin * static_cast<float>(mn[j]));
  }
  static Q::B ints(const unsigned char* b, int j) { return Q::bits(Q::load32(b + 16 + 32 * (j / 2)), 4 * (j % 2), 15); }
};
struct BlockQ5_K : BlockQ4_K {  // then qh[32] (bit j of byte l: element l of group j's fifth bit), qs[128]
  static constexpr int64_t kBytes = 176;
  static Q::B ints(const unsigned char* b, int j) {
    const Q::B lo = Q::bits(Q::load32(b + 48 + 32 * (j / 2)), 4 * (j % 2), 15);
    return Q::or_(lo, Q::shl(Q::bits(Q::load32(b + 16), j, 1), 4));
  }
};
struct BlockQ6_K : BlockK {  // ql[128], qh[64], int8 scales[16], f16 d
  static constexpr int64_t kBytes = 210;
  static constexpr bool kOffset = false;
  static void head(const unsigned char* b, Head& h) {
    const float d = V::half(b + 208);
    for (int i = 0; i < 16; ++i) h.s[i] = d * static_cast<float>(static_cast<int8_t>(b[192 + i]));
  }
  // Group j = 4n + sub: the low (sub < 2) or high nibbles of ql[64n + 32(sub & 1) ...], the two bits
  // at 2·sub of qh[32n ...] above them, minus 32.
  static Q::B ints(const unsigned char* b, int j) {
    const int n = j / 4, sub = j % 4;
    const Q::B lo = Q::bits(Q::load32(b + 64 * n + 32 * (sub & 1)), sub < 2 ? 0 : 4, 15);
    return Q::add(Q::or_(lo, Q::shl(Q::bits(Q::load32(b + 128 + 32 * n), 2 * sub, 3), 4)), -32);
  }
};
struct BlockQ3_K : BlockK {  // hmask[32], qs[64], scales[12], f16 d
  static constexpr int64_t kBytes = 110;
  static constexpr bool kOffset = false;
  static void head(const unsigned char* b, Head& h) {
    int8_t sc[16];
    q3_k_scales(b + 96, sc);
    const float d = V::half(b + 108);
    for (int i = 0; i < 16; ++i) h.s[i] = d * static_cast<float>(sc[i] - 32);
  }
  // Group j = 4n + k: two bits at 2k of qs[32n ...], minus 4 unless bit 4n + k of hmask is set.
  static Q::B ints(const unsigned char* b, int j) {
    const int n = j / 4, k = j % 4;
    const Q::B q = Q::bits(Q::load32(b + 32 + 32 * n), 2 * k, 3);
    return Q::add(Q::or_(q, Q::shl(Q::bits(Q::load32(b), 4 * n + k, 1), 2)), -4);
  }
};
struct BlockQ2_K : BlockK {  // scales[16] (low nibble scale, high nibble min), qs[64], f16 d, f16 dmin
  static constexpr int64_t kBytes = 84;
  static constexpr bool kOffset = true, kUnsigned = true;
  static void head(const unsigned char* b, Head& h) {
    const float d = V::half(b + 80), dmin = V::half(b + 82);
    for (int i = 0; i < 16; ++i) {
      h.s[i] = d * static_cast<float>(b[i] & 15);
      h.m[i] = -(dmin * static_cast<float>(b[i] >> 4));
    }
  }
  static Q::B ints(const unsigned char* b, int j) { return Q::bits(Q::load32(b + 16 + 32 * (j / 4)), 2 * (j % 4), 3); }
};
struct BlockIQ4_XS : BlockK32 {  // f16 d, u16 scales_h, scales_l[4], qs[128]: group j in IQ4_NL's layout
  static constexpr int64_t kBytes = 136;
  static constexpr bool kOffset = false;
  static void head(const unsigned char* b, Head& h) {
    const float d = V::half(b);
    const int scales_h = b[2] | b[3] << 8;
    for (int j = 0; j < 8; ++j) {
      const int ls = ((b[4 + j / 2] >> 4 * (j % 2)) & 15) | (((scales_h >> 2 * j) & 3) << 4);
      h.s[j] = d * static_cast<float>(ls - 32);
    }
  }
  static Q::B ints(const unsigned char* b, int j) { return Q::iq4(Q::spread16(b + 8 + 16 * j)); }
};

template <class R, int RT, int MT>
void tile(const MatmulTile& t, int64_t r0, int64_t m0) {
  T acc[RT][MT];
  const float* x[RT];
  const unsigned char* w[MT];
#pragma GCC unroll 16
  for (int r = 0; r < RT; ++r) {
    x[r] = t.x + (r0 + r) * t.x_stride;
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) acc[r][m] = V::zero();
  }
#pragma GCC unroll 16
  for (int m = 0; m < MT; ++m) w[m] = t.w + static_cast<size_t>(m0 + m) * t.w_stride;
  const int64_t K = t.K, Kv = K / W * W;
  for (int64_t k = 0; k < Kv; k += W) {
    T wv[MT];
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) {
      wv[m] = R::load(w[m], k);
      if (k % (64 / R::kValueBytes) == 0)  // the next tile's rows, once per 64-byte line (above)
        __builtin_prefetch(w[m] + MT * t.w_stride + k * R::kValueBytes, 0, 2);
    }
#pragma GCC unroll 16
    for (int r = 0; r < RT; ++r) {
      const T xv = V::load(x[r] + k);
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) acc[r][m] = V::fma(xv, wv[m], acc[r][m]);
    }
  }
  if (Kv < K) {  // the last partial step, zero-padded
    float xb[W], wb[W];
    for (int m = 0; m < MT; ++m) {
      for (int l = 0; l < W; ++l) wb[l] = Kv + l < K ? R::at(w[m], Kv + l) : 0.0f;
      const T wv = V::load(wb);
      for (int r = 0; r < RT; ++r) {
        for (int l = 0; l < W; ++l) xb[l] = Kv + l < K ? x[r][Kv + l] : 0.0f;
        acc[r][m] = V::fma(V::load(xb), wv, acc[r][m]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) t.out[(r0 + r) * t.out_stride + m0 + m] = V::reduce(acc[r][m]);
}

template <class R, int RT, int MT>
void columns(const MatmulTile& t, int64_t r0) {
  int64_t m = 0;
  for (; m + MT <= t.cols; m += MT) tile<R, RT, MT>(t, r0, m);
  for (; m < t.cols; ++m) tile<R, RT, 1>(t, r0, m);
}

// Rows in groups of up to kRows sharing each weight load; a single row takes kGemvCols weight rows
// at a time (independent accumulator chains for decode), more rows kCols.
template <class R>
void matmul(const MatmulTile& t) {
  int64_t r = 0;
  for (; r + kRows <= t.rows; r += kRows) columns<R, kRows, kCols>(t, r);
  switch (t.rows - r) {
    case 1: return columns<R, 1, kGemvCols>(t, r);
    case 2: return columns<R, 2, kCols>(t, r);
    case 3: return columns<R, 3, kCols>(t, r);
    default: return;
  }
}

// Block-format weights against 8-bit activations (t.xq: per 32 values its f32 scale, lane sums and
// 32 int8, quantize_rows): per group of 32 an exact integer dot product in 8 lanes, then
// (scale_x · scale_w) · lanes multiply-added into 8 f32 lanes (and for the formats with an offset,
// the activations' lane sums · offset), groups in K order, lanes folded by Q::reduce. The order
// depends on K alone, as for the other types.
template <class R, int RT, int MT>
void tile_q(const MatmulTile& t, int64_t r0, int64_t m0) {
  Q::F acc[RT][MT];
  const unsigned char* xq[RT];
  const unsigned char* w[MT];
#pragma GCC unroll 16
  for (int r = 0; r < RT; ++r) {
    xq[r] = t.xq + static_cast<size_t>(r0 + r) * t.xq_stride;
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) acc[r][m] = Q::zero();
  }
#pragma GCC unroll 16
  for (int m = 0; m < MT; ++m) w[m] = t.w + static_cast<size_t>(m0 + m) * t.w_stride;
  for (int64_t b = 0; b < t.K / R::kBlock; ++b) {
    typename R::Head h[MT];
    const unsigned char* wb[MT];
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) {
      wb[m] = w[m] + b * R::kBytes, R::head(wb[m], h[m]);
      __builtin_prefetch(wb[m] + MT * t.w_stride, 0, 2);  // the next tile's rows (above)
    }
    for (int j = 0; j < R::kGroups; ++j) {
      Q::B wv[MT];
      Q::F sw[MT], ow[MT];
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) {
        wv[m] = R::ints(wb[m], j), sw[m] = R::scale(h[m], j);
        if constexpr (R::kOffset) ow[m] = R::offset(h[m], j);
      }
      const int64_t g = b * R::kGroups + j;
#pragma GCC unroll 16
      for (int r = 0; r < RT; ++r) {
        const unsigned char* xb = xq[r] + g * kXqBlock;
        const Q::F dx = Q::loadf(xb);
        const Q::B xv = Q::load32(xb + 64);
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const Q::I dot = R::kUnsigned ? Q::dot_u(xv, wv[m]) : Q::dot(xv, wv[m]);
          acc[r][m] = Q::fma(dot, Q::mul(dx, sw[m]), acc[r][m]);
          if constexpr (R::kOffset) acc[r][m] = Q::fmaf(Q::loadf(xb + 32), ow[m], acc[r][m]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) t.out[(r0 + r) * t.out_stride + m0 + m] = Q::reduce(acc[r][m]);
}

template <class R, int RT, int MT>
void columns_q(const MatmulTile& t, int64_t r0) {
  int64_t m = 0;
  for (; m + MT <= t.cols; m += MT) tile_q<R, RT, MT>(t, r0, m);
  for (; m < t.cols; ++m) tile_q<R, RT, 1>(t, r0, m);
}

template <class R>
void matmul_q(const MatmulTile& t) {
  int64_t r = 0;
  for (; r + kRows <= t.rows; r += kRows) columns_q<R, kRows, kCols>(t, r);
  switch (t.rows - r) {
    case 1: return columns_q<R, 1, kGemvCols>(t, r);
    case 2: return columns_q<R, 2, kCols>(t, r);
    case 3: return columns_q<R, 3, kCols>(t, r);
    default: return;
  }
}

void quantize_rows(const float* x, int64_t x_stride, int64_t rows, int64_t K, unsigned char* dst, size_t dst_stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < K / 32; ++b)
      Q::quantize_block(x + r * x_stride + b * 32, dst + static_cast<size_t>(r) * dst_stride + b * kXqBlock);
}

// Σ a[i]·row[i] over a row of an unblocked type (f32, f16, bf16), widened in registers: attention
// reads its cache rows this way (dot_rows, axpy_rows below).
template <class R>
float dot_row(const float* a, const void* row, int64_t n) {
  const auto* w = static_cast<const unsigned char*>(row);
  T acc = V::zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) acc = V::fma(V::load(a + i), R::load(w, i), acc);
  if (i < n) {
    float ab[W], bb[W];
    for (int l = 0; l < W; ++l) {
      ab[l] = i + l < n ? a[i + l] : 0.0f;
      bb[l] = i + l < n ? R::at(w, i + l) : 0.0f;
    }
    acc = V::fma(V::load(ab), V::load(bb), acc);
  }
  return V::reduce(acc);
}

// dot_row over `count` rows, four at a time (independent accumulator chains); each result is
// bit for bit dot_row's.
template <class R>
void dot_rows(const float* a, const void* const* rows, int64_t count, int64_t n, float* out) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const unsigned char* w[4];
    T acc[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) w[q] = static_cast<const unsigned char*>(rows[j + q]), acc[q] = V::zero();
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      const T av = V::load(a + i);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[q] = V::fma(av, R::load(w[q], i), acc[q]);
    }
    if (i < n) {
      float ab[W], bb[W];
      for (int l = 0; l < W; ++l) ab[l] = i + l < n ? a[i + l] : 0.0f;
      for (int q = 0; q < 4; ++q) {
        for (int l = 0; l < W; ++l) bb[l] = i + l < n ? R::at(w[q], i + l) : 0.0f;
        acc[q] = V::fma(V::load(ab), V::load(bb), acc[q]);
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) out[j + q] = V::reduce(acc[q]);
  }
  for (; j < count; ++j) out[j] = dot_row<R>(a, rows[j], n);
}

// y += c[0]·row[0], then c[1]·row[1], ...: per element the multiply-adds in row order, y loaded
// and stored once per step for all rows.
template <class R>
void axpy_rows(const float* c, const void* const* rows, int64_t count, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    T yv = V::load(y + i);
    for (int64_t j = 0; j < count; ++j)
      yv = V::fma(V::splat(c[j]), R::load(static_cast<const unsigned char*>(rows[j]), i), yv);
    V::store(y + i, yv);
  }
  for (; i < n; ++i)
    for (int64_t j = 0; j < count; ++j) y[i] += c[j] * R::at(static_cast<const unsigned char*>(rows[j]), i);
}

// One token of the gated delta rule on a head's state S [Dk, Dv] (cpu/delta_net.cpp has the
// math): S <- alpha S and u = Sᵀk in one pass over S; u <- beta (v - u); then S <- S + k uᵀ and
// o = Sᵀq in a second pass. `u` is scratch of Dv floats.
void delta_step(float* S, int64_t Dk, int64_t Dv, float alpha, float beta, const float* k, const float* v,
                const float* q, float* u, float* o) {
  const T av = V::splat(alpha);
  for (int64_t b = 0; b < Dv; ++b) u[b] = 0.0f, o[b] = 0.0f;
  for (int64_t a = 0; a < Dk; ++a) {
    float* row = S + a * Dv;
    const T ka = V::splat(k[a]);
    int64_t b = 0;
    for (; b + W <= Dv; b += W) {
      const T s = V::mul(av, V::load(row + b));
      V::store(row + b, s);
      V::store(u + b, V::fma(ka, s, V::load(u + b)));
    }
    for (; b < Dv; ++b) row[b] *= alpha, u[b] += k[a] * row[b];
  }
  for (int64_t b = 0; b < Dv; ++b) u[b] = beta * (v[b] - u[b]);
  for (int64_t a = 0; a < Dk; ++a) {
    float* row = S + a * Dv;
    const T ka = V::splat(k[a]), qa = V::splat(q[a]);
    int64_t b = 0;
    for (; b + W <= Dv; b += W) {
      const T s = V::fma(ka, V::load(u + b), V::load(row + b));
      V::store(row + b, s);
      V::store(o + b, V::fma(qa, s, V::load(o + b)));
    }
    for (; b < Dv; ++b) row[b] += k[a] * u[b], o[b] += q[a] * row[b];
  }
}

// y[c] = Σ_j w[j][c] · in[j][c] for c < C, j = 0 .. K-1 in order (CONV1D_CAUSAL across channels,
// the taps' weights transposed to rows of C).
void conv_row(const float* const* in, const float* w, int64_t K, int64_t C, float* y) {
  int64_t c = 0;
  for (; c + W <= C; c += W) {
    T acc = V::zero();
    for (int64_t j = 0; j < K; ++j) acc = V::fma(V::load(w + j * C + c), V::load(in[j] + c), acc);
    V::store(y + c, acc);
  }
  for (; c < C; ++c) {
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j) acc += w[j * C + c] * in[j][c];
    y[c] = acc;
  }
}

const Kernels kTable = {
    {&matmul<RowF32>, &matmul<RowF16>, &matmul<RowBF16>, &matmul_q<BlockQ8_0>, &matmul_q<BlockQ4_0>,
     &matmul_q<BlockQ4_1>, &matmul_q<BlockQ5_0>, &matmul_q<BlockQ5_1>, &matmul_q<BlockQ2_K>, &matmul_q<BlockQ3_K>,
     &matmul_q<BlockQ4_K>, &matmul_q<BlockQ5_K>, &matmul_q<BlockQ6_K>, &matmul_q<BlockIQ4_NL>, &matmul_q<BlockIQ4_XS>},
    &quantize_rows,
    {&dot_rows<RowF32>, &dot_rows<RowF16>, &dot_rows<RowBF16>},
    {&axpy_rows<RowF32>, &axpy_rows<RowF16>, &axpy_rows<RowBF16>},
    &delta_step,
    &conv_row,
};
