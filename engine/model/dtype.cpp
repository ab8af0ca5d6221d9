#include "model/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::model {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::q8_0: return "Q8_0";
    case DType::q4_0: return "Q4_0";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::i16: return "I16";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
    case DType::f64: return "F64";
  }
  return "?";
}

bool is_quantized(DType t) { return t == DType::q8_0 || t == DType::q4_0; }

std::optional<uint64_t> dtype_bytes(DType t, int64_t n) {
  if (n < 0) return std::nullopt;
  const uint64_t u = static_cast<uint64_t>(n);
  switch (t) {
    case DType::f64:
    case DType::i64: return u * 8;
    case DType::f32:
    case DType::i32: return u * 4;
    case DType::f16:
    case DType::bf16:
    case DType::i16: return u * 2;
    case DType::i8:
    case DType::u8:
    case DType::boolean: return u;
    case DType::q8_0:
      if (n % kQuantBlock) return std::nullopt;
      return u / kQuantBlock * 34;
    case DType::q4_0:
      if (n % kQuantBlock) return std::nullopt;
      return u / kQuantBlock * 18;
  }
  return std::nullopt;
}

kiln_dtype to_kiln_dtype(DType t) {
  switch (t) {
    case DType::f32: return KILN_DTYPE_F32;
    case DType::f16: return KILN_DTYPE_F16;
    case DType::bf16: return KILN_DTYPE_BF16;
    case DType::q8_0: return KILN_DTYPE_I8;
    case DType::q4_0: return KILN_DTYPE_Q4;
    case DType::i32: return KILN_DTYPE_I32;
    default: return KILN_DTYPE_ANY;
  }
}

const char* kiln_dtype_name(uint32_t t) {
  switch (t) {
    case KILN_DTYPE_F32: return "F32";
    case KILN_DTYPE_F16: return "F16";
    case KILN_DTYPE_BF16: return "BF16";
    case KILN_DTYPE_I32: return "I32";
    case KILN_DTYPE_I8: return "Q8_0";
    case KILN_DTYPE_Q4: return "Q4_0";
    case KILN_DTYPE_ANY: return "any";
  }
  return "?";
}

static uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

bool to_f32(DType t, const void* src, int64_t n, float* dst) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::f32: std::memcpy(dst, p, static_cast<size_t>(n) * 4); return true;
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
    default: return false;
  }
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

}  // namespace kiln::model
