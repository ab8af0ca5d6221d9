// Portable kernels (any CPU, the compiler's baseline flags): 8 scalar lanes the compiler may
// vectorize, added as the reference's dot() adds them (products, then ((0+1)+(2+3))+((4+5)+(6+7))),
// so on CPUs without AVX2 this backend agrees with the reference closely.
#include "backend/simd/kernels.hpp"
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
  static T q8(const signed char* q, float d) {
    T t;
    for (int l = 0; l < 8; ++l) t.v[l] = d * static_cast<float>(q[l]);
    return t;
  }
  static T q4(const unsigned char* qs, int e0, float d) {
    T t;
    for (int l = 0; l < 8; ++l) {
      const int j = e0 + l;
      const int q = (j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4)) - 8;
      t.v[l] = d * static_cast<float>(q);
    }
    return t;
  }
};
using T = V::T;
constexpr int W = V::W;
constexpr int kRows = 4, kCols = 2, kGemvCols = 4;
constexpr const char* kIsaName = "portable";

#include "backend/simd/tile.inl"

}  // namespace

const Kernels& kernels_portable() {
  return kTable;
}

}  // namespace kiln::backend::simd
