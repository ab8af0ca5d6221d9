#version 450
// dst_row[slots[n]] = convert(rows[n]) for f32 / f16 / bf16 destinations (DT 0/1/2), rounding to
// nearest even like the CPU reference. slot -1 skips. One invocation per element.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint DT = 0;

layout(std430, set = 0, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, set = 0, binding = 1) readonly buffer Slots { int slots[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Dst32 { float d32[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Dst16 { uint16_t d16[]; };
layout(std430, set = 0, binding = 4) buffer Err { uint flags[]; };  // flags[1]: a slot was out of range
layout(push_constant) uniform PC {
  uint N, D, R;
  uint rows_off, slots_off, dst_off;  // dst_off in elements of the destination dtype
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
  if (i >= pc.N * pc.D) return;
  uint n = i / pc.D, e = i % pc.D;
  int slot = slots[pc.slots_off + n];
  if (slot < 0) return;
  if (uint(slot) >= pc.R) {
    flags[1] = 1u;
    return;
  }
  float v = rows[pc.rows_off + i];
  uint at = pc.dst_off + uint(slot) * pc.D + e;
  if (DT == 0u) d32[at] = v;
  else d16[at] = uint16_t(DT == 1u ? f32_to_f16(v) : f32_to_bf16(v));
}
