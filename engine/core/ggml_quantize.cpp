// ggml's reference quantizers, step for step (ggml-quants.c: quantize_row_*_ref and the helpers
// they call), so that a file kiln writes holds the bytes llama-quantize would. Compiled with
// -ffp-contract=off: a fused multiply-add rounds once where ggml's C rounds twice, and one changed
// rounding moves a quant.
#include "core/ggml_quantize.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/ggml_blocks.hpp"
#include "core/half.hpp"

namespace kiln {
namespace {

constexpr int kK = 256;                 // values per k-quant super-block
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS

/** ggml's nearest_int: round to nearest, ties to even, by the 1.5·2^23 trick (|f| < 2^22). */
int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void put_half(uint8_t* p, float f) {
  const uint16_t h = f32_to_f16(f);
  std::memcpy(p, &h, 2);
}

float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

/** The value of largest magnitude in x[0..n), sign kept (the first of equal magnitudes). */
float signed_max(const float* x, int n, float* amax_out) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  *amax_out = amax;
  return max;
}

// ---- The 32-value formats.

void q8_0(const float* x, uint8_t* y) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
  put_half(y, d);
  for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

void q4_0(const float* x, uint8_t* y) {
  float amax;
  const float d = signed_max(x, 32, &amax) / -8, id = d ? 1.0f / d : 0.0f;
  put_half(y, d);
  for (int j = 0; j < 16; ++j) {
    const auto lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f))));
    const auto hi = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 8.5f))));
    y[2 + j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

void q4_1(const float* x, uint8_t* y) {
  float mn, mx;
  min_max(x, 32, &mn, &mx);
  const float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
  put_half(y, d);
  put_half(y + 2, mn);
  for (int j = 0; j < 16; ++j) {
    const auto lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - mn) * id + 0.5f))));
    const auto hi =
        static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>((x[16 + j] - mn) * id + 0.5f))));
    y[4 + j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

/** The 5-bit formats' nibbles and fifth bits from the 32 values `q` (each < 32). */
void pack5(const uint8_t* q, uint8_t* qh_out, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | (q[16 + j] & 0x0F) << 4);
    qh |= ((q[j] & 0x10u) >> 4) << j;
    qh |= ((q[16 + j] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_out, &qh, 4);
}

void q5_0(const float* x, uint8_t* y) {
  float amax;
  const float d = signed_max(x, 32, &amax) / -16, id = d ? 1.0f / d : 0.0f;
  put_half(y, d);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j)
    q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
  pack5(q, y + 2, y + 6);
}

void q5_1(const float* x, uint8_t* y) {
  float mn, mx;
  min_max(x, 32, &mn, &mx);
  const float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
  put_half(y, d);
  put_half(y + 2, mn);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>((x[j] - mn) * id + 0.5f);
  pack5(q, y + 4, y + 8);
}

// ---- The k-quants' helpers.

/** make_qx_quants with rmse_type 1 and no weights (Q6_K's 16-value groups): a symmetric scale searched over 19
 * candidates. */
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.f;
  }
  float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/** make_q3_quants with do_rmse (Q3_K's 16-value groups): a symmetric scale refined value by value. */
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.f;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
        const int nl = std::max(-nmax, std::min(nmax - 1, nearest_int(x[i] * sl2 / slx)));
        if (nl != L[i]) {
          slx += w * x[i] * static_cast<float>(nl);
          sl2 += w * static_cast<float>(nl) * static_cast<float>(nl);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

/**
 * make_qkx2_quants: a scale and a min (≤ 0) for n values in [0, nmax], the weighted error (squared
 * or absolute) minimized over nstep + 1 candidate scales; returns the scale, *the_min = −min.
 */
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *the_min = -min;
    return 0.f;
  }
  const auto fn = static_cast<float>(nmax);
  float iscale = fn / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min)))));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + fn) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i], fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/** Packs eight 6-bit scales and mins into Q4_K's / Q5_K's 12 bytes (k_scales_mins reads them back). */
void pack_scales_mins(const uint8_t ls[8], const uint8_t lm[8], uint8_t* s) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = ls[j];
      s[j + 4] = lm[j];
    } else {
      s[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
      s[j - 4] = static_cast<uint8_t>(s[j - 4] | (ls[j] >> 4) << 6);
      s[j] = static_cast<uint8_t>(s[j] | (lm[j] >> 4) << 6);
    }
  }
}

/**
 * Q4_K's and Q5_K's common part: per 32-value group a scale and min (make_qkx2_quants), both
 * quantized to 6 bits against the block's largest, then every value requantized against the stored
 * scales; writes d, dmin and the 12 scale bytes at `y`, the values (0..nmax) to L.
 */
void k_scale_min_block(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* y, uint8_t L[kK]) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_scales_mins(ls, lm, y + 4);
  put_half(y, max_scale / 63.f);
  put_half(y + 2, max_min / 63.f);
  uint8_t sc[8], m[8];
  k_scales_mins(y + 4, sc, m);
  for (int j = 0; j < 8; ++j) {
    const float d = get_half(y) * static_cast<float>(sc[j]);
    if (!d) continue;
    const float dm = get_half(y + 2) * static_cast<float>(m[j]);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int((x[32 * j + i] + dm) / d))));
  }
}

// ---- The k-quants (blocks of 256).

void q2_k(const float* x, uint8_t* y) {  // scales[16], qs[64], d, dmin
  uint8_t L[kK], Laux[16];
  float weights[16], mins[16], scales[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* sc = y;
  if (max_scale > 0) {
    const float iscale = 15.f / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    put_half(y + 80, max_scale / 15.f);
  } else {
    std::fill(sc, sc + 16, uint8_t{0});
    put_half(y + 80, 0.f);
  }
  if (max_min > 0) {
    const float iscale = 15.f / max_min;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(sc[j] | nearest_int(iscale * mins[j]) << 4);
    put_half(y + 82, max_min / 15.f);
  } else {
    put_half(y + 82, 0.f);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = get_half(y + 80) * static_cast<float>(sc[j] & 0xF);
    if (!d) continue;
    const float dm = get_half(y + 82) * static_cast<float>(sc[j] >> 4);
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<uint8_t>(std::max(0, std::min(3, nearest_int((x[16 * j + i] + dm) / d))));
  }
  uint8_t* qs = y + 16;
  for (int j = 0; j < kK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

void q3_k(const float* x, uint8_t* y) {  // hmask[32], qs[64], scales[12], d
  int8_t L[kK];
  float scales[16];
  for (int j = 0; j < 16; ++j) scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
  float amax;
  const float max_scale = signed_max(scales, 16, &amax);
  uint8_t* hmask = y;
  uint8_t* qs = y + 32;
  uint8_t* sc = y + 96;
  std::fill(sc, sc + 12, uint8_t{0});
  if (max_scale) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
      l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
      if (j < 8)
        sc[j] = static_cast<uint8_t>(l & 0xF);
      else
        sc[j - 8] = static_cast<uint8_t>(sc[j - 8] | (l & 0xF) << 4);
      l = static_cast<int8_t>(l >> 4);
      sc[j % 4 + 8] = static_cast<uint8_t>(sc[j % 4 + 8] | l << (2 * (j / 4)));
    }
    put_half(y + 108, 1 / iscale);
  } else {
    put_half(y + 108, 0.f);
  }
  int8_t s16[16];
  q3_k_scales(sc, s16);
  for (int j = 0; j < 16; ++j) {
    const float d = get_half(y + 108) * static_cast<float>(s16[j] - 32);
    if (!d) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(std::max(-4, std::min(3, nearest_int(x[16 * j + i] / d))) + 4);
  }
  std::fill(hmask, hmask + 32, uint8_t{0});
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < kK; ++j) {
    if (L[j] > 3) {
      hmask[m] = static_cast<uint8_t>(hmask[m] | hm);
      L[j] = static_cast<int8_t>(L[j] - 4);
    }
    if (++m == kK / 8) {
      m = 0;
      hm = static_cast<uint8_t>(hm << 1);
    }
  }
  for (int j = 0; j < kK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

void q4_k(const float* x, uint8_t* y) {  // d, dmin, scales[12], qs[128]
  uint8_t L[kK];
  k_scale_min_block(x, 15, -1.f, 0.1f, 20, y, L);
  uint8_t* q = y + 16;
  for (int j = 0; j < kK; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 4);
}

void q5_k(const float* x, uint8_t* y) {  // d, dmin, scales[12], qh[32], qs[128]
  uint8_t L[kK];
  k_scale_min_block(x, 31, -0.5f, 0.1f, 15, y, L);
  uint8_t* qh = y + 16;
  uint8_t* ql = y + 48;
  std::fill(qh, qh + 32, uint8_t{0});
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kK; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] = static_cast<uint8_t>(qh[j] | m1);
      }
      if (l2 > 15) {
        l2 -= 16;
        qh[j] = static_cast<uint8_t>(qh[j] | m2);
      }
      ql[j] = static_cast<uint8_t>(l1 | l2 << 4);
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
  }
}

void q6_k(const float* x, uint8_t* y) {  // ql[128], qh[64], int8 scales[16], d
  int8_t L[kK];
  float scales[16];
  for (int ib = 0; ib < 16; ++ib) scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
  float max_abs_scale;
  const float max_scale = signed_max(scales, 16, &max_abs_scale);
  if (max_abs_scale < kGroupMaxEps) {
    std::fill(y, y + 210, uint8_t{0});
    return;
  }
  auto* sc = reinterpret_cast<int8_t*>(y + 192);
  const float iscale = -128.f / max_scale;
  put_half(y + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = get_half(y + 208) * static_cast<float>(sc[j]);
    if (!d) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(std::max(-32, std::min(31, nearest_int(x[16 * j + i] / d))) + 32);
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  for (int j = 0; j < kK; j += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      const auto q = [&](int o) { return static_cast<uint8_t>(L[j + l + o]); };
      ql[l] = static_cast<uint8_t>((q(0) & 0xF) | (q(64) & 0xF) << 4);
      ql[l + 32] = static_cast<uint8_t>((q(32) & 0xF) | (q(96) & 0xF) << 4);
      qh[l] = static_cast<uint8_t>(q(0) >> 4 | (q(32) >> 4) << 2 | (q(64) >> 4) << 4 | (q(96) >> 4) << 6);
    }
}

// ---- The IQ4 formats (non-linear 4-bit values, kIq4Values).

/** ggml's best_index_int8: the index of the value in the sorted `val` nearest to x (ties up). */
int best_index(const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < static_cast<float>(val[mav]))
      mu = mav;
    else
      ml = mav;
  }
  return x - static_cast<float>(val[mu - 1]) < static_cast<float>(val[mu]) - x ? mu - 1 : mu;
}

/**
 * ggml's quantize_row_iq4_nl_impl without an importance matrix (ntry 7): per 32-value block the
 * scale that best fits the 16 values, searched over 15 candidates with weights x²; for IQ4_XS (a
 * super-block of 8 blocks) those scales quantized to 6 bits against the largest and the values
 * requantized. Writes d (f16) at `dh`, the nibbles at `q4`, IQ4_XS's scale bits at `sh` / `sl`.
 */
void iq4_block(int super, const float* x, uint8_t* dh, uint8_t* q4, uint8_t* sh, uint8_t* sl) {
  const int8_t* values = kIq4Values;
  constexpr int kBlock = 32, kTry = 7;
  uint8_t L[kK] = {};
  float scales[kK / kBlock], weight[kBlock];
  std::fill(q4, q4 + super / 2, uint8_t{0});
  put_half(dh, 0.f);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < super / kBlock; ++ib) {
    const float* xb = x + ib * kBlock;
    uint8_t* Lb = L + ib * kBlock;
    for (int j = 0; j < kBlock; ++j) weight[j] = xb[j] * xb[j];
    float amax;
    const float max = signed_max(xb, kBlock, &amax);
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / static_cast<float>(values[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int l = best_index(values, id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const auto q = static_cast<float>(values[l]);
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -kTry; itry <= kTry; ++itry) {
      id = static_cast<float>(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < kBlock; ++j) {
        const auto q = static_cast<float>(values[best_index(values, id * xb[j])]);
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (super > kBlock) {  // IQ4_XS: 6-bit block scales under one f16 d
    uint16_t scales_h = 0;
    const float d = -max_scale / 32;
    put_half(dh, d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < super / kBlock; ++ib) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < kBlock; ++j)
        L[ib * kBlock + j] = static_cast<uint8_t>(best_index(values, idl * x[ib * kBlock + j]));
      l += 32;
      const auto l_l = static_cast<uint8_t>(l & 0xf), l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0)
        sl[ib / 2] = l_l;
      else
        sl[ib / 2] = static_cast<uint8_t>(sl[ib / 2] | l_l << 4);
      scales_h = static_cast<uint16_t>(scales_h | l_h << 2 * (ib % 8));
    }
    std::memcpy(sh, &scales_h, 2);
  } else {  // IQ4_NL: the block's own scale
    put_half(dh, scales[0]);
    const float id = scales[0] ? 1 / scales[0] : 0;
    for (int j = 0; j < super; ++j) L[j] = static_cast<uint8_t>(best_index(values, id * x[j]));
  }
  for (int i = 0; i < super / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

void iq4_nl(const float* x, uint8_t* y) {  // d, qs[16]
  iq4_block(32, x, y, y + 2, nullptr, nullptr);
}

void iq4_xs(const float* x, uint8_t* y) {  // d, scales_h, scales_l[4], qs[128]
  iq4_block(kK, x, y, y + 8, y + 2, y + 4);
}

using BlockFn = void (*)(const float*, uint8_t*);

BlockFn block_fn(DType t) {
  switch (t) {
    case DType::q8_0:
      return q8_0;
    case DType::q4_0:
      return q4_0;
    case DType::q4_1:
      return q4_1;
    case DType::q5_0:
      return q5_0;
    case DType::q5_1:
      return q5_1;
    case DType::q2_k:
      return q2_k;
    case DType::q3_k:
      return q3_k;
    case DType::q4_k:
      return q4_k;
    case DType::q5_k:
      return q5_k;
    case DType::q6_k:
      return q6_k;
    case DType::iq4_nl:
      return iq4_nl;
    case DType::iq4_xs:
      return iq4_xs;
    default:
      return nullptr;
  }
}

}  // namespace

bool can_quantize(DType t) {
  return block_fn(t) != nullptr;
}

bool quantize_blocks(DType t, const float* src, int64_t n, uint8_t* dst) {
  const BlockFn f = block_fn(t);
  const int64_t qk = quant_block(t), bytes = quant_block_bytes(t);
  if (!f || n < 0 || n % qk) return false;
  for (int64_t b = 0; b < n / qk; ++b) f(src + b * qk, dst + b * bytes);
  return true;
}

}  // namespace kiln
