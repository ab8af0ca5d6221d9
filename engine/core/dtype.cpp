#include "core/dtype.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace kiln {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::q8_0:
      return "q8_0";
    case DType::q4_0:
      return "q4_0";
    case DType::kv_q8:
      return "kv_q8";
    case DType::kv_q4:
      return "kv_q4";
    case DType::q4_1:
      return "q4_1";
    case DType::q5_0:
      return "q5_0";
    case DType::q5_1:
      return "q5_1";
    case DType::q2_k:
      return "q2_K";
    case DType::q3_k:
      return "q3_K";
    case DType::q4_k:
      return "q4_K";
    case DType::q5_k:
      return "q5_K";
    case DType::q6_k:
      return "q6_K";
    case DType::iq4_nl:
      return "iq4_nl";
    case DType::iq4_xs:
      return "iq4_xs";
    case DType::i64:
      return "i64";
    case DType::i16:
      return "i16";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
    case DType::f64:
      return "f64";
  }
  return "?";
}

int64_t quant_block_bytes(DType t) {
  switch (t) {  // ggml-common.h's block structs
    case DType::q8_0:
      return 34;
    case DType::q4_0:
    case DType::iq4_nl:
      return 18;
    case DType::q4_1:
      return 20;
    case DType::q5_0:
      return 22;
    case DType::q5_1:
      return 24;
    case DType::q2_k:
      return 84;
    case DType::q3_k:
      return 110;
    case DType::q4_k:
      return 144;
    case DType::q5_k:
      return 176;
    case DType::q6_k:
      return 210;
    case DType::iq4_xs:
      return 136;
    default:
      return 0;
  }
}

bool is_quantized(DType t) {
  return quant_block_bytes(t) != 0;
}

int64_t quant_block(DType t) {
  switch (t) {
    case DType::q2_k:
    case DType::q3_k:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k:
    case DType::iq4_xs:
      return 256;
    default:
      return is_quantized(t) ? 32 : 1;
  }
}

bool is_kv_quantized(DType t) {
  return t == DType::kv_q8 || t == DType::kv_q4;
}

int64_t kv_group(int64_t n) {
  if (n <= 0 || n % 8) return 0;
  return std::min<int64_t>(32, n & -n);
}

std::optional<uint64_t> dtype_bytes(DType t, int64_t n) {
  if (n < 0) return std::nullopt;
  const auto u = static_cast<uint64_t>(n);
  if (is_quantized(t)) {
    const int64_t block = quant_block(t);
    if (n % block) return std::nullopt;
    return u / static_cast<uint64_t>(block) * static_cast<uint64_t>(quant_block_bytes(t));
  }
  switch (t) {
    case DType::f64:
    case DType::i64:
      return u * 8;
    case DType::f32:
    case DType::i32:
      return u * 4;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
      return u * 2;
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      return u;
    case DType::kv_q8:
    case DType::kv_q4: {
      const int64_t g = kv_group(n);
      if (!g) return std::nullopt;
      const uint64_t bytes = (t == DType::kv_q8 ? u : u / 2) + 2 * (u / static_cast<uint64_t>(g));
      return (bytes + 3) / 4 * 4;
    }
    default:  // the weight block formats, above
      return std::nullopt;
  }
}

size_t row_bytes(DType t, int64_t n) {
  return static_cast<size_t>(dtype_bytes(t, n).value_or(0));
}

std::optional<DType> kv_dtype_from_name(std::string_view name) {
  if (name == "f32") return DType::f32;
  if (name == "f16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  if (name == "q8") return DType::kv_q8;
  if (name == "q4") return DType::kv_q4;
  return std::nullopt;
}

const char* kv_dtype_yaml_name(DType t) {
  return t == DType::kv_q8 ? "q8" : t == DType::kv_q4 ? "q4" : dtype_name(t);
}

DType dtype_from_kiln(uint32_t t) {
  switch (t) {
    case KILN_DTYPE_F32:
    case KILN_DTYPE_F16:
    case KILN_DTYPE_BF16:
    case KILN_DTYPE_I32:
    case KILN_DTYPE_Q8_0:
    case KILN_DTYPE_Q4_0:
    case KILN_DTYPE_KV_Q8:
    case KILN_DTYPE_KV_Q4:
      return static_cast<DType>(t);
    default:
      if (t >= KILN_DTYPE_Q4_1 && t <= KILN_DTYPE_IQ4_XS) return static_cast<DType>(t);
      throw_error(
          "dtype {} is not a tensor element type (f32, f16, bf16, i32, kv_q8, kv_q4 or one of ggml's weight "
          "block formats)",
          t);
  }
}

kiln_dtype to_kiln(DType t) {
  return static_cast<uint8_t>(t) <= KILN_DTYPE_IQ4_XS ? static_cast<kiln_dtype>(t) : KILN_DTYPE_ANY;
}

const char* kiln_dtype_name(uint32_t t) {
  if (t == KILN_DTYPE_ANY) return "any";
  return t <= KILN_DTYPE_IQ4_XS ? dtype_name(static_cast<DType>(t)) : "?";
}

}  // namespace kiln
