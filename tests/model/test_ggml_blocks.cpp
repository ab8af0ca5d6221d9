// ggml's weight block formats: kiln's dequantization (core/ggml_blocks) bit for bit against
// ggml's own reference dequantize_row_* in the libggml-base that node-llama-cpp ships, on blocks
// ggml's quantizer writes from random weights and on random bytes (every bit pattern a file may
// hold, f16 fields of any finite value, subnormals included).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/convert.hpp"
#include "core/dtype.hpp"
#include "core/ggml_blocks.hpp"
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
