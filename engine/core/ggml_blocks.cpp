// Compiled with -ffp-contract=off (engine/CMakeLists.txt): `s·q − m` must round twice, as ggml's
// reference does, never fuse into one multiply-add.
#include "core/ggml_blocks.hpp"

#include <cstring>

#include "core/half.hpp"

namespace kiln {
namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The 32-value formats: `out` gets 32 values from one block.
void q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}

/** q5_0 (with_min false) and q5_1: the fifth bit of element j is bit j of the 32-bit qh. */
void q5(const uint8_t* b, float* y, bool with_min) {
  const float d = half_at(b), m = with_min ? half_at(b + 2) : 0.0f;
  const uint8_t* p = b + (with_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const uint8_t* qs = p + 4;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    if (with_min) {
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    } else {
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void iq4_nl(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[b[2 + j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Values[b[2 + j] >> 4]);
  }
}

// The 256-value formats: `y` gets 256 values from one super-block.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int part = 0; part < 2; ++part) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
      }
}

void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  int8_t scales[16];
  q3_k_scales(b + 96, scales);
  const float d = half_at(b + 108);
  int is = 0;
  uint8_t bit = 1;
  for (int half = 0; half < 2; ++half, q += 32)
    for (int shift = 0; shift < 8; shift += 2, bit = static_cast<uint8_t>(bit << 1))
      for (int part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * part; l < 16 * part + 16; ++l)
          *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hmask[l] & bit) ? 0 : 4));
      }
}

/** q4_K (qh null) and q5_K. */
void q45_k(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  uint8_t sc[8], mn[8];
  k_scales_mins(b + 4, sc, mn);
  for (int j = 0; j < 8; ++j) {  // group j: the low (even j) or high nibbles of 32 bytes
    const float dl = d * static_cast<float>(sc[j]), ml = dmin * static_cast<float>(mn[j]);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0xF) + (qh && (qh[l] >> j & 1) ? 16 : 0);
      *y++ = dl * static_cast<float>(v) - ml;
    }
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
}

void iq4_xs(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const int scales_h = b[2] | b[3] << 8;
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4Values[qs[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(kIq4Values[qs[j] >> 4]);
    }
  }
}

}  // namespace

void q3_k_scales(const uint8_t* packed, int8_t out[16]) {
  // Scale i: its low 4 bits in the low (i < 8) or high nibble of byte i % 8, its high 2 bits in
  // byte 8 + i % 4 at bit 2·(i / 4).
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? packed[i] & 0xF : packed[i - 8] >> 4;
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = static_cast<int8_t>(low | high << 4);
  }
}

std::vector<int> half_fields(DType t) {
  switch (t) {
    case DType::q8_0:
    case DType::q4_0:
    case DType::q5_0:
    case DType::iq4_nl:
    case DType::iq4_xs:
      return {0};
    case DType::q4_1:
    case DType::q5_1:
    case DType::q4_k:
    case DType::q5_k:
      return {0, 2};
    case DType::q2_k:
      return {80, 82};
    case DType::q3_k:
      return {108};
    case DType::q6_k:
      return {208};
    default:
      return {};
  }
}

bool dequantize_blocks(DType t, const uint8_t* src, int64_t n, float* dst) {
  const int64_t block = quant_block(t), bytes = quant_block_bytes(t);
  if (!bytes || n % block) return false;
  for (int64_t i = 0; i < n / block; ++i) {
    const uint8_t* b = src + i * bytes;
    float* y = dst + i * block;
    switch (t) {
      case DType::q8_0:
        q8_0(b, y);
        break;
      case DType::q4_0:
        q4_0(b, y);
        break;
      case DType::q4_1:
        q4_1(b, y);
        break;
      case DType::q5_0:
        q5(b, y, false);
        break;
      case DType::q5_1:
        q5(b, y, true);
        break;
      case DType::iq4_nl:
        iq4_nl(b, y);
        break;
      case DType::q2_k:
        q2_k(b, y);
        break;
      case DType::q3_k:
        q3_k(b, y);
        break;
      case DType::q4_k:
        q45_k(b, nullptr, b + 16, y);
        break;
      case DType::q5_k:
        q45_k(b, b + 16, b + 48, y);
        break;
      case DType::q6_k:
        q6_k(b, y);
        break;
      case DType::iq4_xs:
        iq4_xs(b, y);
        break;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace kiln
