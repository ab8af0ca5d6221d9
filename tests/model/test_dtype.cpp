#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/convert.hpp"
#include "core/half.hpp"
#include "model/checkpoint_writer.hpp"

using namespace kiln;
using namespace kiln::model;

TEST(DType, F16RoundTripsExactlyRepresentableValues) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 0.333251953125f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f) << f;
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(DType, F16AllBitPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.0f)), -3.0f);
  EXPECT_NEAR(bf16_to_f32(f32_to_bf16(0.1f)), 0.1f, 1e-3);
}

TEST(DType, QuantizedRoundTripWithinBlockError) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> v(256);
  for (float& x : v) x = nd(rng);
  for (DType t : {DType::q8_0, DType::q4_0}) {
    auto bytes = encode_f32(v, t);
    EXPECT_EQ(bytes.size(), *dtype_bytes(t, 256));
    std::vector<float> back(256);
    ASSERT_TRUE(to_f32(t, bytes.data(), 256, back.data()));
    for (size_t b = 0; b < 8; ++b) {
      float amax = 0;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b * 32 + j]));
      const float step = t == DType::q8_0 ? amax / 127 : amax / 8;
      for (size_t j = 0; j < 32; ++j)
        EXPECT_LE(std::fabs(back[b * 32 + j] - v[b * 32 + j]), step * (t == DType::q8_0 ? 0.51f : 1.01f) + 1e-3f);
    }
  }
  EXPECT_FALSE(dtype_bytes(DType::q8_0, 33).has_value());
}

TEST(DType, KvFormatsGroupAlongTheRowAndPadToFourBytes) {
  EXPECT_EQ(kv_group(8), 8);
  EXPECT_EQ(kv_group(80), 16);
  EXPECT_EQ(kv_group(96), 32);
  EXPECT_EQ(kv_group(512), 32);
  EXPECT_EQ(kv_group(4), 0);
  EXPECT_EQ(kv_group(36), 0);
  // D values (q8) or D/2 bytes (q4), then D/G f16 scales, padded to 4 bytes.
  EXPECT_EQ(row_bytes(DType::kv_q8, 128), 128u + 8);
  EXPECT_EQ(row_bytes(DType::kv_q4, 128), 64u + 8);
  EXPECT_EQ(row_bytes(DType::kv_q8, 8), 12u);  // 8 + 2, padded
  EXPECT_EQ(row_bytes(DType::kv_q4, 8), 8u);   // 4 + 2, padded
  EXPECT_EQ(row_bytes(DType::kv_q8, 80), 92u);
  EXPECT_EQ(row_bytes(DType::kv_q4, 96), 56u);
  EXPECT_FALSE(dtype_bytes(DType::kv_q8, 36).has_value());
  EXPECT_EQ(*kv_dtype_from_name("q8"), DType::kv_q8);
  EXPECT_FALSE(kv_dtype_from_name("q8_0").has_value());
}

TEST(DType, KvRowsRoundTripWithinHalfAStepOfTheStoredScale) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  for (int64_t D : {8, 16, 64, 80, 96, 128, 256, 512})
    for (DType t : {DType::kv_q8, DType::kv_q4}) {
      std::vector<float> v(static_cast<size_t>(D));
      for (float& x : v) x = nd(rng) * (1 + static_cast<float>(D % 7));
      v[3] = 0.0f;
      std::vector<uint8_t> bytes(row_bytes(t, D), 0xAB);
      ASSERT_TRUE(from_f32(t, v.data(), D, bytes.data()));
      std::vector<float> back(static_cast<size_t>(D));
      ASSERT_TRUE(to_f32(t, bytes.data(), D, back.data()));
      const int64_t G = kv_group(D);
      for (int64_t g = 0; g < D / G; ++g) {
        float amax = 0, max = 0;
        for (int64_t j = 0; j < G; ++j)
          if (std::fabs(v[g * G + j]) > amax) amax = std::fabs(v[g * G + j]), max = v[g * G + j];
        uint16_t sh;
        std::memcpy(&sh, bytes.data() + (t == DType::kv_q8 ? D : D / 2) + 2 * g, 2);
        const float scale = f16_to_f32(sh);
        EXPECT_NEAR(scale, t == DType::kv_q8 ? amax / 127 : max / -8, std::fabs(scale) * 1e-3) << D;
        if (t == DType::kv_q4) {  // the largest magnitude is stored exactly as -8 steps
          const auto at = std::find(v.begin() + g * G, v.begin() + (g + 1) * G, max) - v.begin();
          EXPECT_EQ(back[static_cast<size_t>(at)], scale * -8) << D;
        }
        for (int64_t j = 0; j < G; ++j) {
          const size_t e = static_cast<size_t>(g * G + j);
          // Half a step, plus the one-step clamp at q4's positive end (+8 is not representable).
          const float tol = std::fabs(scale) * (t == DType::kv_q4 && v[e] * scale > 0 ? 1.0f : 0.5f) * 1.001f;
          EXPECT_NEAR(back[e], v[e], tol) << dtype_name(t) << " D " << D << " element " << e;
        }
      }
      EXPECT_EQ(back[3], 0.0f);
      // Padding is zero, so identical rows are identical bytes whatever the buffer held before.
      for (size_t b = (t == DType::kv_q8 ? D : D / 2) + 2 * (D / G); b < bytes.size(); ++b) EXPECT_EQ(bytes[b], 0) << b;
    }
}

TEST(DType, KvRowOfZerosHasZeroScalesAndValues) {
  std::vector<float> v(64, 0.0f), back(64, 1.0f);
  std::vector<uint8_t> bytes(row_bytes(DType::kv_q4, 64), 0xFF);
  ASSERT_TRUE(from_f32(DType::kv_q4, v.data(), 64, bytes.data()));
  ASSERT_TRUE(to_f32(DType::kv_q4, bytes.data(), 64, back.data()));
  for (float x : back) EXPECT_EQ(x, 0.0f);
}
