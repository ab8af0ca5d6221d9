#include "core/convert.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/ggml_blocks.hpp"
#include "core/ggml_quantize.hpp"
#include "core/half.hpp"

namespace kiln {

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// kiln's KV-cache rows (dtype.hpp, kv_group): per group of G values one f16 scale, from the
// group's largest magnitude; each value is rounded to nearest even against the stored (f16) scale,
// so the error per value is at most half a step of the scale it is read back with. q8 is symmetric
// over [-127, 127]; q4 maps the largest-magnitude value to -8 exactly (llama.cpp's Q4_0 choice)
// and the rest into [-8, 7]. The Vulkan SET_ROWS shader follows these steps one for one.
float kv_scale(float d, uint16_t* stored) {
  d = std::clamp(d, -65504.0f, 65504.0f);
  *stored = f32_to_f16(d);
  return f16_to_f32(*stored);
}

int kv_round(float x, float scale, int lo, int hi) {
  if (scale == 0.0f) return 0;
  const float r = std::nearbyint(x / scale);
  return r >= static_cast<float>(hi) ? hi : r > static_cast<float>(lo) ? static_cast<int>(r) : lo;  // NaN -> lo
}

void quantize_kv(DType t, const float* src, int64_t n, uint8_t* dst) {
  const int64_t g = kv_group(n);
  uint8_t* scales = dst + (t == DType::kv_q8 ? n : n / 2);
  std::memset(dst, 0, row_bytes(t, n));
  for (int64_t b = 0; b < n / g; ++b) {
    const float* x = src + b * g;
    float amax = 0, max = 0;
    for (int64_t j = 0; j < g; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    uint16_t dh;
    if (t == DType::kv_q8) {
      const float d = kv_scale(amax / 127.0f, &dh);
      for (int64_t j = 0; j < g; ++j)
        dst[b * g + j] = static_cast<uint8_t>(static_cast<int8_t>(kv_round(x[j], d, -127, 127)));
    } else {
      const float d = kv_scale(max / -8.0f, &dh);
      for (int64_t j = 0; j < g; ++j) {
        const int64_t e = b * g + j;
        dst[e / 2] |= static_cast<uint8_t>((kv_round(x[j], d, -8, 7) + 8) << (e % 2 ? 4 : 0));
      }
    }
    std::memcpy(scales + 2 * b, &dh, 2);
  }
}

void dequantize_kv(DType t, const uint8_t* src, int64_t n, float* dst) {
  const int64_t g = kv_group(n);
  const uint8_t* scales = src + (t == DType::kv_q8 ? n : n / 2);
  for (int64_t b = 0; b < n / g; ++b) {
    const float d = f16_to_f32(load_u16(scales + 2 * b));
    float* out = dst + b * g;
    if (t == DType::kv_q8) {
      const auto* q = reinterpret_cast<const int8_t*>(src + b * g);
      for (int64_t j = 0; j < g; ++j) out[j] = d * static_cast<float>(q[j]);
    } else {
      const uint8_t* q = src + b * g / 2;
      for (int64_t j = 0; j < g / 2; ++j) {
        out[2 * j] = d * static_cast<float>((q[j] & 15) - 8);
        out[2 * j + 1] = d * static_cast<float>((q[j] >> 4) - 8);
      }
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
    case DType::kv_q8:
    case DType::kv_q4:
      if (!kv_group(n)) return false;
      dequantize_kv(t, p, n, dst);
      return true;
    default:
      return dequantize_blocks(t, p, n, dst);
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
    case DType::kv_q8:
    case DType::kv_q4:
      if (!kv_group(n)) return false;
      quantize_kv(t, src, n, p);
      return true;
    default:
      return quantize_blocks(t, src, n, p);
  }
}

}  // namespace kiln
