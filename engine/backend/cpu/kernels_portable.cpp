// Portable kernels (any CPU, the compiler's baseline flags): 8 scalar lanes the compiler may
// vectorize, added as the reference's dot() adds them (products, then ((0+1)+(2+3))+((4+5)+(6+7))),
// so on CPUs without AVX2 this backend agrees with the reference closely.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.hpp"
#include "core/ggml_blocks.hpp"
#include "core/half.hpp"

namespace kiln::backend::simd {
namespace {

struct V {
  struct T {
    float v[8];
  };
  static constexpr int W = 8;
  static T zero() { return T{}; }
  static T load(const float* p) {
    T t;
    for (int l = 0; l < 8; ++l) t.v[l] = p[l];
    return t;
  }
  static void store(float* p, const T& t) {
    for (int l = 0; l < 8; ++l) p[l] = t.v[l];
  }
  static T splat(float a) {
    T t;
    for (float& x : t.v) x = a;
    return t;
  }
  static T mul(const T& a, const T& b) {
    T t;
    for (int l = 0; l < 8; ++l) t.v[l] = a.v[l] * b.v[l];
    return t;
  }
  static T fma(const T& a, const T& b, T c) {
    for (int l = 0; l < 8; ++l) c.v[l] += a.v[l] * b.v[l];
    return c;
  }
  static float reduce(const T& a) {
    const float* v = a.v;
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  }
  static float half(const unsigned char* p) { return kiln::f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
  static T f16(const unsigned char* p) {
    T t;
    for (int l = 0; l < 8; ++l) t.v[l] = half(p + 2 * l);
    return t;
  }
  static T bf16(const unsigned char* p) {
    T t;
    for (int l = 0; l < 8; ++l) t.v[l] = kiln::bf16_to_f32(static_cast<uint16_t>(p[2 * l] | (p[2 * l + 1] << 8)));
    return t;
  }
};
// The 8-bit activation path (tile.inl, int8_x86.inl for what it computes), in plain integers.
struct Q {
  struct B {
    int8_t v[32];
  };
  struct I {
    int32_t v[8];
  };
  struct F {
    float v[8];
  };
  static F zero() { return F{}; }
  static B load32(const unsigned char* p) {
    B b;
    __builtin_memcpy(b.v, p, 32);
    return b;
  }
  static B spread16(const unsigned char* qs) {
    B b;
    for (int j = 0; j < 16; ++j) {
      b.v[j] = static_cast<int8_t>(qs[j] & 15);
      b.v[j + 16] = static_cast<int8_t>(qs[j] >> 4);
    }
    return b;
  }
  static B bits(B v, int shift, int mask) {
    for (auto& x : v.v) x = static_cast<int8_t>((static_cast<uint8_t>(x) >> shift) & mask);
    return v;
  }
  static B shl(B v, int n) {
    for (auto& x : v.v) x = static_cast<int8_t>(static_cast<uint8_t>(x) << n);
    return v;
  }
  static B or_(B a, const B& b) {
    for (int j = 0; j < 32; ++j) a.v[j] = static_cast<int8_t>(a.v[j] | b.v[j]);
    return a;
  }
  static B add(B v, int c) {
    for (auto& x : v.v) x = static_cast<int8_t>(x + c);
    return v;
  }
  static B iq4(B idx) {
    for (auto& x : idx.v) x = kIq4Values[x];
    return idx;
  }
  static B bit_bytes(const unsigned char* p, int value) {
    B b;
    for (int j = 0; j < 32; ++j) b.v[j] = static_cast<int8_t>((p[j / 8] >> (j % 8) & 1) ? value : 0);
    return b;
  }
  static I dot(const B& x, const B& w) {
    I s;
    for (int l = 0; l < 8; ++l) {
      s.v[l] = 0;
      for (int e = 4 * l; e < 4 * l + 4; ++e) s.v[l] += x.v[e] * w.v[e];
    }
    return s;
  }
  static I dot_u(const B& x, const B& w) { return dot(x, w); }
  static F loadf(const unsigned char* p) {
    F f;
    __builtin_memcpy(f.v, p, 32);
    return f;
  }
  static F half(const unsigned char* p) {
    F f;
    for (float& x : f.v) x = V::half(p);
    return f;
  }
  static F splat(float a) {
    F f;
    for (float& x : f.v) x = a;
    return f;
  }
  static F pair(float a, float b) {
    F f;
    for (int l = 0; l < 8; ++l) f.v[l] = l < 4 ? a : b;
    return f;
  }
  static F fmaf(const F& a, const F& b, F acc) {
    for (int l = 0; l < 8; ++l) acc.v[l] += a.v[l] * b.v[l];
    return acc;
  }
  static F mul(const F& a, const F& b) {
    F f;
    for (int l = 0; l < 8; ++l) f.v[l] = a.v[l] * b.v[l];
    return f;
  }
  static F fma(const I& s, const F& scale, F acc) {
    for (int l = 0; l < 8; ++l) acc.v[l] += static_cast<float>(s.v[l]) * scale.v[l];
    return acc;
  }
  static float reduce(const F& a) {
    const float* v = a.v;
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  }
  static void quantize_block(const float* x, unsigned char* dst) {
    float amax = 0.0f;
    bool nan = false;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j])), nan |= x[j] != x[j];
    if (nan) amax = __builtin_nanf("");  // the outputs see the NaN, as through f32 arithmetic
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < 8; ++l) __builtin_memcpy(dst + 4 * l, &d, 4);
    for (int j = 0; j < 32; ++j) {  // clamped, NaN to 0: an out-of-range float-to-int conversion is undefined
      const float v = std::nearbyint(x[j] * id);
      const int q = v > 127.0f ? 127 : v < -127.0f ? -127 : v == v ? static_cast<int>(v) : 0;
      dst[64 + j] = static_cast<unsigned char>(static_cast<int8_t>(q));
    }
    for (int l = 0; l < 8; ++l) {
      int sum = 0;
      for (int e = 4 * l; e < 4 * l + 4; ++e) sum += static_cast<int8_t>(dst[64 + e]);
      const float s = static_cast<float>(sum) * d;
      __builtin_memcpy(dst + 32 + 4 * l, &s, 4);
    }
  }
};

using T = V::T;
constexpr int W = V::W;
constexpr int kRows = 4, kCols = 2, kGemvCols = 4;

#include "backend/cpu/tile.inl"

}  // namespace

const Kernels& kernels_portable() {
  return kTable;
}

}  // namespace kiln::backend::simd
