// f16 and bf16 <-> f32 conversions, used by the CPU backend, the checkpoint readers and the tests.
// Pure integer arithmetic: the result never depends on the FPU's rounding mode.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln {

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  ///< round to nearest even; overflow -> inf; NaN stays (quiet) NaN

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_bf16(float f);  ///< round to nearest even; NaN stays (quiet) NaN

}  // namespace kiln
