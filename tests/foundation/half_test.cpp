// f16/bf16 conversions: exhaustive over every f16 bit pattern, nearest-even rounding checked against
// the neighbouring f16 values, and against the compiler's _Float16 where it has one (g++ 12; clang
// 14 lacks it on x86).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "core/half.hpp"

namespace kiln {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Half, EveryF16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << "f16 bits " << h;
#ifdef __FLT16_MAX__
    EXPECT_EQ(f, static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)))) << h;
#endif
  }
}

TEST(Half, F32ToF16MatchesIeeeRounding) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = any(rng);
    if (i % 2) u = (u & 0x807fffffu) | ((103u + u % 40u) << 23);  // half the draws near f16's range
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const uint16_t h = f32_to_f16(f);
#ifdef __FLT16_MAX__
    ASSERT_EQ(h, std::bit_cast<uint16_t>(static_cast<_Float16>(f))) << "f32 bits " << u;
#endif
    // Nearest: no neighbour of the same sign is closer; on a tie the mantissa is even.
    const double err = std::fabs(double(f16_to_f32(h)) - f);
    const uint16_t mag = h & 0x7fff;
    if (mag == 0x7c00) {
      ASSERT_GE(std::fabs(f), 65520.0f) << u;
      continue;
    }
    for (int d : {-1, 1}) {
      if ((mag == 0 && d < 0) || mag + d >= 0x7c00) continue;
      const double nerr = std::fabs(double(f16_to_f32(static_cast<uint16_t>((h & 0x8000) | (mag + d)))) - f);
      ASSERT_TRUE(err < nerr || (err == nerr && (h & 1) == 0)) << "f32 bits " << u;
    }
  }
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // ties to even: rounds up to infinity
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(5.96046448e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(2.98023224e-8f), 0x0000);  // exactly half of it: ties to even (zero)
  EXPECT_EQ(f32_to_f16(2.98023255e-8f), 0x0001);  // just above half
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(Half, Bf16RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bits(bf16_to_f32(f32_to_bf16(1.00390625f))), bits(1.0f));     // tie -> even (down)
  EXPECT_EQ(bits(bf16_to_f32(f32_to_bf16(1.01171875f))), bits(1.015625f)); // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), h);
    }
  }
}

}  // namespace
}  // namespace kiln
