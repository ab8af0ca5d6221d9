// The instruction-set-specific kernels of the native CPU backend, as plain function tables: one
// table per ISA, each compiled in its own translation unit with that ISA's compiler flags
// (kernels_portable.cpp, kernels_avx2.cpp, kernels_avx512.cpp, all from tile.inl). This header
// holds only plain structs and declarations: nothing inline that a flagged translation unit could
// emit with instructions the running CPU lacks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::backend::simd {

/** Weight storage types the matmul kernels read, as table indices (kQ8_0 on: ggml's block formats). */
enum WeightType : int {
  kF32 = 0,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kIQ4_NL,
  kIQ4_XS,
  kWeightTypes
};

/**
 * out[r·out_stride + m] = Σ_k x[r·x_stride + k] · w_m[k] for r < rows and m < cols, where w_m is the
 * weight row at w + m·w_stride bytes. The block formats (K a whole number of their blocks) read the
 * activations as 8-bit blocks instead (xq, row r at xq + r·xq_stride, from quantize_rows), as
 * llama.cpp does: integer dot products per 32 values. Each output element is reduced in an order that
 * depends only on K and the ISA: which rows and columns share a call never changes a value (batch
 * invariance).
 */
struct MatmulTile {  // a plain aggregate (no inline constructor to share with flagged code): `MatmulTile t{};`
  const float* x;
  int64_t x_stride;
  const unsigned char* w;
  size_t w_stride;
  float* out;
  int64_t out_stride;
  int64_t K, rows, cols;
  const unsigned char* xq;  ///< 8-bit activations for the block formats
  size_t xq_stride;
};

/** Bytes of one 32-value block of 8-bit activations: its f32 scale d (largest magnitude / 127)
    eight times (a vector the kernels load as is), then eight f32 sums d·(q[4l] + … + q[4l+3]) (the
    formats with an offset, value = s·q + m, add m times these), then the 32 int8 q. */
constexpr int64_t kXqBlock = 96;

struct Kernels {
  void (*matmul[kWeightTypes])(const MatmulTile& t);
  /** Rows of K (a multiple of 32) f32 values as 8-bit blocks (kXqBlock bytes per 32 values), each
      value rounded to nearest even against its block's scale. */
  void (*quantize_rows)(const float* x, int64_t x_stride, int64_t rows, int64_t K, unsigned char* dst,
                        size_t dst_stride);
  /** out[j] = Σ_i a[i]·rows[j][i] for `count` rows of n f32, f16 or bf16 values (index kF32, kF16,
      kBF16), each in an order that depends only on n. */
  void (*dot[3])(const float* a, const void* const* rows, int64_t count, int64_t n, float* out);
  /** y[i] += c[j] · rows[j][i] for j = 0, 1, ... count - 1 in that order. */
  void (*axpy[3])(const float* c, const void* const* rows, int64_t count, float* y, int64_t n);
  /** One token of the gated delta rule on a head's state S [Dk, Dv] (alpha = e^g): S <- alpha S;
      u = beta (v - Sᵀk); S <- S + k uᵀ; o = Sᵀq. u: scratch of Dv floats. */
  void (*delta_step)(float* S, int64_t Dk, int64_t Dv, float alpha, float beta, const float* k, const float* v,
                     const float* q, float* u, float* o);
  /** y[c] = Σ_j w[j·C + c] · in[j][c] for c < C, taps j = 0 .. K-1 in order. */
  void (*conv_row)(const float* const* in, const float* w, int64_t K, int64_t C, float* y);
};

const Kernels& kernels_portable();
#if defined(KILN_SIMD_X86)
const Kernels& kernels_avx2();    ///< AVX2 + FMA + F16C
const Kernels& kernels_avx512();  ///< AVX-512 F/BW/VL/DQ/VNNI
#endif

}  // namespace kiln::backend::simd
