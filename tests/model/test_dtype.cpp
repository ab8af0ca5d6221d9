#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/checkpoint_writer.hpp"
#include "core/convert.hpp"
#include "core/half.hpp"

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
      for (size_t j = 0; j < 32; ++j) EXPECT_LE(std::fabs(back[b * 32 + j] - v[b * 32 + j]), step * (t == DType::q8_0 ? 0.51f : 1.01f) + 1e-3f);
    }
  }
  EXPECT_FALSE(dtype_bytes(DType::q8_0, 33).has_value());
}
