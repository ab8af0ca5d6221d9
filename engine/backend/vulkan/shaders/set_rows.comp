#version 450
// dst_row[slots[n]] = convert(rows[n]) for f32 / f16 / bf16 destinations (DT 0/1/2), rounding to
// nearest even like the CPU reference. slot -1 skips. One invocation per element.
// PAIR: a second SET_ROWS with the same slots and destination dtype (a layer's K and V cache
// writes) runs in the same dispatch: invocations from N·D on write rows2 into dst2.
// A destination beyond one storage binding's reach (a large KV cache on lavapipe: 128 MiB) is
// written in windows of rows [row_lo, row_hi), one dispatch each bound at its window; slots
// outside the window are left to the other dispatches.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint DT = 0;
layout(constant_id = 1) const bool PAIR = false;

layout(std430, set = 0, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, set = 0, binding = 1) readonly buffer Slots { int slots[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Dst32 { float d32[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Dst16 { uint16_t d16[]; };
layout(std430, set = 0, binding = 4) buffer Err { uint flags[]; };  // flags[1]: a slot was out of range
layout(std430, set = 0, binding = 5) readonly buffer Rows2 { float rows2[]; };
layout(std430, set = 0, binding = 6) writeonly buffer Dst32b { float e32[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Dst16b { uint16_t e16[]; };
layout(push_constant) uniform PC {
  uint N, D, R;
  uint rows_off, slots_off, dst_off;  // dst_off in elements of the destination dtype
  uint D2, R2, rows_off2, dst_off2;   // PAIR: the second write
  uint row_lo, row_hi;                // rows of dst this dispatch writes (dst_off is row_lo's)
} pc;

uint f32_to_f16(float f) {  // the CPU reference's conversion, bit for bit
  uint x = floatBitsToUint(f);
  uint sign = (x >> 16) & 0x8000u;
  uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax < 0x38800000u) return sign | uint(roundEven(uintBitsToFloat(ax) * 16777216.0));
  uint rounded = ax + 0xfffu + ((ax >> 13) & 1u);
  return sign | (((rounded - (112u << 23)) >> 13) & 0xffffu);
}

uint f32_to_bf16(float f) {
  uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;  // quiet NaN
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  bool second = PAIR && i >= pc.N * pc.D;
  if (second) i -= pc.N * pc.D;
  uint D = second ? pc.D2 : pc.D, R = second ? pc.R2 : pc.R;
  if (i >= pc.N * D) return;
  uint n = i / D, e = i % D;
  int slot = slots[pc.slots_off + n];
  if (slot < 0) return;
  if (uint(slot) >= R) {
    flags[1] = 1u;
    return;
  }
  if (second) {
    float v = rows2[pc.rows_off2 + i];
    uint at = pc.dst_off2 + uint(slot) * D + e;
    if (DT == 0u) e32[at] = v;
    else e16[at] = uint16_t(DT == 1u ? f32_to_f16(v) : f32_to_bf16(v));
    return;
  }
  if (uint(slot) < pc.row_lo || uint(slot) >= pc.row_hi) return;
  float v = rows[pc.rows_off + i];
  uint at = pc.dst_off + (uint(slot) - pc.row_lo) * D + e;
  if (DT == 0u) d32[at] = v;
  else d16[at] = uint16_t(DT == 1u ? f32_to_f16(v) : f32_to_bf16(v));
}
