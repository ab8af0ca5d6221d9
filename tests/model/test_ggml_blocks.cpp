// ggml's weight block formats: kiln's dequantization (core/ggml_blocks) bit for bit against
// ggml's own reference dequantize_row_* in the libggml-base that node-llama-cpp ships, on blocks
// ggml's quantizer writes from random weights and on random bytes (every bit pattern a file may
// hold, f16 fields of any finite value, subnormals included); kiln's quantizers
// (core/ggml_quantize) byte for byte against ggml's reference quantizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/convert.hpp"
#include "core/dtype.hpp"
#include "core/ggml_blocks.hpp"
#include "core/ggml_quantize.hpp"
#include "llama_oracle.hpp"

using namespace kiln;

namespace {

struct Format {
  DType dtype;
  int ggml_type;            ///< ggml.h's enum ggml_type
  const char* dequant;      ///< ggml's reference dequantizer
};

const Format kFormats[] = {
    {DType::q8_0, 8, "dequantize_row_q8_0"},      {DType::q4_0, 2, "dequantize_row_q4_0"},
    {DType::q4_1, 3, "dequantize_row_q4_1"},      {DType::q5_0, 6, "dequantize_row_q5_0"},
    {DType::q5_1, 7, "dequantize_row_q5_1"},      {DType::q2_k, 10, "dequantize_row_q2_K"},
    {DType::q3_k, 11, "dequantize_row_q3_K"},     {DType::q4_k, 12, "dequantize_row_q4_K"},
    {DType::q5_k, 13, "dequantize_row_q5_K"},     {DType::q6_k, 14, "dequantize_row_q6_K"},
    {DType::iq4_nl, 20, "dequantize_row_iq4_nl"}, {DType::iq4_xs, 23, "dequantize_row_iq4_xs"},
};

using Dequantize = void (*)(const void*, float*, int64_t);
using QuantizeChunk = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);

class GgmlBlocks : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    lib_ = kiln::test::open_llama_oracle("libggml-base.so", &why);
    if (!lib_) GTEST_SKIP() << why;
  }
  template <class F>
  F sym(const char* name) {
    auto f = reinterpret_cast<F>(dlsym(lib_, name));
    EXPECT_NE(f, nullptr) << "libggml-base lacks " << name;
    return f;
  }
  /** kiln's and ggml's values of `bytes` (n values of `f`) agree bit for bit. */
  void expect_same(const Format& f, const std::vector<uint8_t>& bytes, int64_t n, const char* what) {
    const auto ggml = sym<Dequantize>(f.dequant);
    ASSERT_NE(ggml, nullptr);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
    ggml(bytes.data(), want.data(), n);
    ASSERT_TRUE(to_f32(f.dtype, bytes.data(), n, got.data())) << dtype_name(f.dtype);
    int64_t first = -1, differ = 0;
    for (int64_t i = 0; i < n; ++i)
      if (std::memcmp(&want[static_cast<size_t>(i)], &got[static_cast<size_t>(i)], 4) != 0)
        ++differ, first = first < 0 ? i : first;
    EXPECT_EQ(differ, 0) << dtype_name(f.dtype) << " (" << what << "): " << differ << " of " << n
                         << " values differ, the first at " << first << ": ggml "
                         << (first >= 0 ? want[static_cast<size_t>(first)] : 0.0f) << ", kiln "
                         << (first >= 0 ? got[static_cast<size_t>(first)] : 0.0f);
  }
  void* lib_ = nullptr;
};

}  // namespace

TEST_F(GgmlBlocks, DequantizationIsGgmlsOnWhatItsQuantizerWrites) {
  const auto quantize = sym<QuantizeChunk>("ggml_quantize_chunk");
  ASSERT_NE(quantize, nullptr);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Format& f : kFormats) {
    const int64_t rows = 3, per_row = 4 * 256;
    std::vector<float> x(static_cast<size_t>(rows * per_row));
    for (float& v : x) v = normal(rng) * (rng() % 8 == 0 ? 30.0f : 1.0f);  // some blocks with outliers
    std::vector<uint8_t> bytes(static_cast<size_t>(rows) * row_bytes(f.dtype, per_row));
    ASSERT_EQ(quantize(f.ggml_type, x.data(), bytes.data(), 0, rows, per_row, nullptr), bytes.size())
        << dtype_name(f.dtype);
    expect_same(f, bytes, rows * per_row, "quantized random weights");
  }
}

TEST_F(GgmlBlocks, DequantizationIsGgmlsOnEveryBitPattern) {
  std::mt19937 rng(11);
  for (const Format& f : kFormats) {
    const int64_t n = 64 * 256, bb = quant_block_bytes(f.dtype), blocks = n / quant_block(f.dtype);
    std::vector<uint8_t> bytes(static_cast<size_t>(blocks * bb));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int64_t b = 0; b < blocks; ++b)
      for (int at : half_fields(f.dtype)) {  // any finite f16: the exponent field is not all ones
        uint16_t h;
        do h = static_cast<uint16_t>(rng());
        while ((h & 0x7C00) == 0x7C00);
        std::memcpy(&bytes[static_cast<size_t>(b * bb + at)], &h, 2);
      }
    expect_same(f, bytes, n, "random bytes");
  }
}

/**
 * Rows that reach every branch of the quantizers: normal weights, blocks with outliers, an all-zero
 * block, a constant block (max == min), one of all-positive values (no negative min), tiny values
 * (f16 scales turn subnormal), and values on the grid of an earlier block (rounding ties).
 */
std::vector<float> hard_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 256; ++b) {
    float* v = x.data() + b * 256;
    switch (b % 7) {
      case 0:
        for (int i = 0; i < 256; ++i) v[i] = normal(rng) * 0.02f;
        break;
      case 1:
        for (int i = 0; i < 256; ++i) v[i] = normal(rng) * (rng() % 8 == 0 ? 30.0f : 1.0f);
        break;
      case 2:
        std::fill(v, v + 256, 0.0f);
        if (rng() % 2) v[rng() % 256] = 0.5f;
        break;
      case 3:
        std::fill(v, v + 256, -0.75f);
        break;
      case 4:
        for (int i = 0; i < 256; ++i) v[i] = std::fabs(normal(rng)) + 0.25f;
        break;
      case 5:
        for (int i = 0; i < 256; ++i) v[i] = normal(rng) * 1e-6f;
        break;
      default:
        for (int i = 0; i < 256; ++i) v[i] = static_cast<float>(static_cast<int>(rng() % 33) - 16) * 0.125f;
    }
  }
  return x;
}

TEST_F(GgmlBlocks, QuantizationIsGgmlsByteForByte) {
  const auto quantize = sym<QuantizeChunk>("ggml_quantize_chunk");
  ASSERT_NE(quantize, nullptr);
  int checked = 0;
  for (const Format& f : kFormats) {
    if (!can_quantize(f.dtype)) continue;
    ++checked;
    const int64_t rows = 7, per_row = 2 * 256, n = rows * per_row;
    const std::vector<float> x = hard_rows(n, 3);
    std::vector<uint8_t> want(static_cast<size_t>(rows) * row_bytes(f.dtype, per_row)), got(want.size(), 0xAA);
    ASSERT_EQ(quantize(f.ggml_type, x.data(), want.data(), 0, rows, per_row, nullptr), want.size());
    ASSERT_TRUE(quantize_blocks(f.dtype, x.data(), n, got.data())) << dtype_name(f.dtype);
    const int64_t bb = quant_block_bytes(f.dtype);
    for (int64_t b = 0; b < static_cast<int64_t>(want.size()) / bb; ++b) {
      const auto at = static_cast<size_t>(b * bb);
      if (std::memcmp(&want[at], &got[at], static_cast<size_t>(bb)) == 0) continue;
      ADD_FAILURE() << dtype_name(f.dtype) << ": block " << b << " (kind " << (b * quant_block(f.dtype) / 256) % 7
                    << ") differs from ggml's quantizer";
      break;
    }
  }
  EXPECT_EQ(checked, 12) << "every format kiln reads";
}

// Without the oracle: each format's values come back within its own step of the input (the step
// read from the stored scales), and a partial block is refused.
TEST(GgmlQuantize, ValuesComeBackWithinAStep) {
  const int64_t n = 14 * 256;
  const std::vector<float> x = hard_rows(n, 5);
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k,
                  DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_nl, DType::iq4_xs}) {
    std::vector<uint8_t> bytes(row_bytes(t, n));
    ASSERT_TRUE(quantize_blocks(t, x.data(), n, bytes.data())) << dtype_name(t);
    std::vector<float> back(static_cast<size_t>(n));
    ASSERT_TRUE(to_f32(t, bytes.data(), n, back.data()));
    double err = 0, ref = 0;
    for (size_t i = 0; i < back.size(); ++i) {
      err += (back[i] - x[i]) * (back[i] - x[i]);
      ref += x[i] * x[i];
    }
    // Relative squared error over the whole row: about 2^-2b for b bits, with margin.
    const double bound = t == DType::q8_0 ? 1e-4 : t == DType::q6_k ? 1e-3 : t == DType::q2_k ? 0.15 : 0.03;
    EXPECT_LT(err / ref, bound) << dtype_name(t);
    EXPECT_FALSE(quantize_blocks(t, x.data(), quant_block(t) + 16, bytes.data())) << dtype_name(t);
  }
  EXPECT_FALSE(can_quantize(DType::f16));
}

TEST(GgmlBlockSizes, EachFormatHasGgmlsBlockAndBytes) {
  // ggml_blck_size / ggml_type_size of each type, as ggml-common.h's static_asserts fix them.
  struct S {
    DType t;
    int64_t block, bytes;
  };
  for (S s :
       {S{DType::q8_0, 32, 34}, S{DType::q4_0, 32, 18}, S{DType::q4_1, 32, 20}, S{DType::q5_0, 32, 22},
        S{DType::q5_1, 32, 24}, S{DType::q2_k, 256, 84}, S{DType::q3_k, 256, 110}, S{DType::q4_k, 256, 144},
        S{DType::q5_k, 256, 176}, S{DType::q6_k, 256, 210}, S{DType::iq4_nl, 32, 18}, S{DType::iq4_xs, 256, 136}}) {
    EXPECT_EQ(quant_block(s.t), s.block) << dtype_name(s.t);
    EXPECT_EQ(quant_block_bytes(s.t), s.bytes) << dtype_name(s.t);
    EXPECT_EQ(dtype_bytes(s.t, 3 * s.block), static_cast<uint64_t>(3 * s.bytes)) << dtype_name(s.t);
    EXPECT_FALSE(dtype_bytes(s.t, s.block + 16).has_value()) << dtype_name(s.t) << ": a partial block";
    EXPECT_EQ(dtype_from_kiln(to_kiln(s.t)), s.t) << dtype_name(s.t) << " across the ABI";
  }
}
