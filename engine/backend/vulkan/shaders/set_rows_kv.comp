#version 450
// SET_ROWS into kiln's quantized KV-cache formats (DT 3 kv_q8, 4 kv_q4; docs/backend.md "Quantized
// KV cache"): each row of HD values (one token, one KV head) is quantized on its own, as the CPU
// reference's quantize_kv (engine/core/convert.cpp) does, bit for bit. One invocation per (slot
// row, head, group of G values): it writes its group's whole words of values (a q8 group is G/4
// words, a q4 group G/8, both word aligned) and its f16 scale with a 16-bit store, so no two
// invocations share a word; the last group of a row also zeroes the 2-byte pad when there is one.
// A group's bits depend on its own G values alone (batch invariant).
// PAIR and the row windows [row_lo, row_hi) are as in set_rows.comp (one dtype for both writes).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint DT = 3;
layout(constant_id = 1) const bool PAIR = false;

layout(std430, set = 0, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, set = 0, binding = 1) readonly buffer Slots { int slots[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Dst32 { uint d32[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Dst16 { uint16_t d16[]; };
layout(std430, set = 0, binding = 4) buffer Err { uint flags[]; };  // flags[1]: a slot was out of range
layout(std430, set = 0, binding = 5) readonly buffer Rows2 { float rows2[]; };
layout(std430, set = 0, binding = 6) writeonly buffer Dst32b { uint e32[]; };
layout(std430, set = 0, binding = 7) writeonly buffer Dst16b { uint16_t e16[]; };
layout(push_constant) uniform PC {
  uint N, E, R;                       // E: values per slot (E / HD rows of HD)
  uint rows_off, slots_off, dst_off;  // dst_off in 4-byte words
  uint E2, R2, rows_off2, dst_off2;   // PAIR: the second write
  uint row_lo, row_hi;                // slots of dst this dispatch writes (dst_off is row_lo's)
  uint HD, HD2;                       // values per quantized row (head dims)
} pc;

uint f32_to_f16(float f) {  // the CPU reference's conversion, bit for bit (as set_rows.comp)
  uint x = floatBitsToUint(f);
  uint sign = (x >> 16) & 0x8000u;
  uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax < 0x38800000u) return sign | uint(roundEven(uintBitsToFloat(ax) * 16777216.0));
  uint rounded = ax + 0xfffu + ((ax >> 13) & 1u);
  return sign | (((rounded - (112u << 23)) >> 13) & 0xffffu);
}

// amax / 127 rounded to nearest as IEEE division rounds it. A shader's division may be off by a
// few ulp (Vulkan allows 2.5), and the scale's f16 rounding would then differ from the CPU's now
// and then; so the quotient r is corrected against its exact remainder amax - 127·r, computed as
// (amax - 128·r) + r: both steps are exact (Sterbenz), 128·r is exact, and `precise` keeps the
// compiler from fusing or reordering them. Outside (2^-20, 8.4e6) the f16 scale is 0 or clamped
// to 65504 whatever r's last bits.
float div127(float amax) {
  precise float r = amax / 127.0;
  if (!(amax > 9.5367431640625e-7 && amax < 8.4e6)) return r;
  [[unroll]] for (int it = 0; it < 3; ++it) {
    precise float rho = (amax - r * 128.0) + r;
    precise float up = uintBitsToFloat(floatBitsToUint(r) + 1u), dn = uintBitsToFloat(floatBitsToUint(r) - 1u);
    precise float ulp_up = up - r, ulp_dn = r - dn;
    // The true quotient is r + rho/127; no ties (amax would need more than 24 bits).
    if (rho > 63.5 * ulp_up) r = up;
    else if (rho < -63.5 * ulp_dn) r = dn;
  }
  return r;
}

// clamp(roundEven(x / ds), lo, hi) as the CPU computes it from the IEEE quotient (NaN -> lo),
// without trusting the division's last bits: the estimate k is checked against the exact half-way
// points (k ± 0.5)·|ds| (|k| <= 128 and ds an f16 value: the products are exact in f32), and a
// quotient exactly at a half-way point goes to the even neighbour. The IEEE quotient itself is at
// a half-way point only when the true one is (x has 24 bits, ds 11), so this is the CPU's result.
int kv_round(float x, float ds, int lo, int hi) {
  if (ds == 0.0) return 0;
  precise float ads = abs(ds), xs = ds < 0.0 ? -x : x;
  precise float r = xs / ads;
  if (r >= float(hi) + 1.0) return hi;
  if (!(r > float(lo) - 1.0)) return lo;  // also NaN
  precise float k = roundEven(r);
  precise float above = xs - (k + 0.5) * ads, below = xs - (k - 0.5) * ads;
  bool k_odd = (int(k) & 1) != 0;
  if (above > 0.0 || (above == 0.0 && k_odd)) k += 1.0;
  else if (below < 0.0 || (below == 0.0 && k_odd)) k -= 1.0;
  return clamp(int(k), lo, hi);
}

void main() {
  uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  // Groups per row: G = the largest power of two dividing HD, at most 32 (kv_group).
  uint G1 = 1u << min(5, findLSB(pc.HD)), G2 = PAIR ? 1u << min(5, findLSB(pc.HD2)) : 1u;
  uint per1 = pc.E / G1;  // groups per slot row
  bool second = PAIR && i >= pc.N * per1;
  if (second) i -= pc.N * per1;
  uint E = second ? pc.E2 : pc.E, HD = second ? pc.HD2 : pc.HD, G = second ? G2 : G1, per = E / G;
  if (i >= pc.N * per) return;
  uint n = i / per, j = i % per, h = j / (HD / G), b = j % (HD / G);
  int slot = slots[pc.slots_off + n];
  if (slot < 0) return;
  if (uint(slot) >= (second ? pc.R2 : pc.R)) {
    flags[1] = 1u;
    return;
  }
  if (!second && (uint(slot) < pc.row_lo || uint(slot) >= pc.row_hi)) return;

  // Bytes: values (HD or HD/2), then HD/G f16 scales, padded to 4 (row_bytes).
  uint vbytes = DT == 3u ? HD : HD / 2u, rb = (vbytes + 2u * (HD / G) + 3u) & ~3u;
  uint row_word = (second ? pc.dst_off2 + uint(slot) * (E / HD) * (rb / 4u)
                          : pc.dst_off + (uint(slot) - pc.row_lo) * (E / HD) * (rb / 4u)) +
                  h * (rb / 4u);
  uint src = (second ? pc.rows_off2 : pc.rows_off) + n * E + h * HD + b * G;

  float amax = 0.0, m = 0.0;  // the first value of the largest magnitude (q4's scale)
  for (uint e = 0u; e < G; ++e) {
    float x = second ? rows2[src + e] : rows[src + e];
    if (abs(x) > amax) amax = abs(x), m = x;
  }
  float d = DT == 3u ? div127(amax) : m * -0.125;  // m / -8: exact
  uint dh = f32_to_f16(clamp(d, -65504.0, 65504.0));
  float ds = unpackHalf2x16(dh).x;
  uint16_t sh = uint16_t(dh);
  uint sidx = row_word * 2u + vbytes / 2u + b;  // the scale's 16-bit index
  bool pad = b == HD / G - 1u && (vbytes + 2u * (HD / G)) % 4u != 0u;
  if (second) {
    e16[sidx] = sh;
    if (pad) e16[sidx + 1u] = uint16_t(0u);
  } else {
    d16[sidx] = sh;
    if (pad) d16[sidx + 1u] = uint16_t(0u);
  }

  // Values: q8 a byte each (4 per word), q4 a nibble each (8 per word), element order.
  uint per_word = DT == 3u ? 4u : 8u, w0 = row_word + b * G / per_word;
  for (uint w = 0u; w < G / per_word; ++w) {
    uint word = 0u;
    for (uint k = 0u; k < per_word; ++k) {
      uint e = src + w * per_word + k;
      float x = second ? rows2[e] : rows[e];
      if (DT == 3u) word |= (uint(kv_round(x, ds, -127, 127)) & 0xffu) << (8u * k);
      else word |= uint(kv_round(x, ds, -8, 7) + 8) << (4u * k);
    }
    if (second) e32[w0 + w] = word;
    else d32[w0 + w] = word;
  }
}
