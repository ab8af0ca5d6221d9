#include "core/convert.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.hpp"

namespace kiln {

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void quantize_q8_0(const float* src, int64_t n, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    uint8_t* blk = out + b * 34;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(blk, &dh, 2);
    for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[j] * id)));
  }
}

void quantize_q4_0(const float* src, int64_t n, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * 32;
    float amax = 0, max = 0;  // the value with the largest magnitude, sign kept (llama.cpp's choice)
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f;
    const float id = d ? 1.0f / d : 0.0f;
    uint8_t* blk = out + b * 18;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(blk, &dh, 2);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      blk[2 + j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

}  // namespace

bool to_f32(DType t, const void* src, int64_t n, float* dst) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::f32:
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
      return true;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(p + 2 * i));
      return true;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(p + 2 * i));
      return true;
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return true;
    case DType::q8_0:
      if (n % kQuantBlock) return false;
      for (int64_t b = 0; b < n / kQuantBlock; ++b) {
        const uint8_t* blk = p + b * 34;
        const float d = f16_to_f32(load_u16(blk));
        const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = d * q[j];
      }
      return true;
    case DType::q4_0:
      if (n % kQuantBlock) return false;
      for (int64_t b = 0; b < n / kQuantBlock; ++b) {
        const uint8_t* blk = p + b * 18;
        const float d = f16_to_f32(load_u16(blk));
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = d * static_cast<float>((blk[2 + j] & 0x0f) - 8);
          dst[b * 32 + j + 16] = d * static_cast<float>((blk[2 + j] >> 4) - 8);
        }
      }
      return true;
    default:
      return false;
  }
}

bool from_f32(DType t, const float* src, int64_t n, void* dst) {
  auto* p = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::f32:
      std::memcpy(p, src, static_cast<size_t>(n) * 4);
      return true;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return true;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return true;
    case DType::q8_0:
      if (n % kQuantBlock) return false;
      quantize_q8_0(src, n, dst);
      return true;
    case DType::q4_0:
      if (n % kQuantBlock) return false;
      quantize_q4_0(src, n, dst);
      return true;
    default:
      return false;
  }
}

}  // namespace kiln
