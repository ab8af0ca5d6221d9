#version 450
// y[r, m] = sum_k x[r, k] * w[m, k] for every weight dtype (one WT_* define per variant), and the
// grouped expert product (MOE != 0: row r uses expert ids[r]).
//
// One workgroup = one subgroup computes a TM x TN tile of outputs; lane l owns the K-chunks
// l, l+SG, l+2SG, ... (8 elements per chunk, one 32-block for quantized weights). Every output's
// reduction order is therefore fixed by K and the subgroup size alone: a chain of FMAs over the
// lane's chunks in order (per 32-block for quantized weights, or per 16-value half for the formats
// with a scale per half, then scaled), the K%8 tail, then
// subgroupAdd. Accumulators are scalars (one per output):
// vec4 accumulators quadruple register pressure and spill badly on lavapipe's 8-wide SIMD. The ALIGNED path (vec4 texel reads) and
// the scalar path perform the same arithmetic, and TM/TN only choose which outputs share loads, so
// a row's result is bitwise the same alone or in any batch (docs/backend.md §5).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 1;
layout(constant_id = 2) const uint TN = 4;
layout(constant_id = 3) const bool ALIGNED = false;
layout(constant_id = 4) const uint MOE = 0;  // 0: plain; 1: MoE, x row = r / kslots; 2: MoE, x row = r
// f16 only: the weights went through Buffer::upload_weights and hold neither subnormals (flushed
// there) nor inf/NaN, so f16x2 skips both checks: ~12% of f16 GEMV time on lavapipe. The bits are
// those of the checked path on the same weights.
layout(constant_id = 5) const bool CLEAN = false;

layout(set = 0, binding = 0) uniform samplerBuffer X;  // RGBA32F
#define WLOAD_BINDING 1
#include "wload.glsl"
layout(std430, set = 0, binding = 2) readonly buffer Ids { int ids[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 4) buffer Err { uint err[]; };  // err[2]: a bad MoE expert id
#if defined(WT_F16)
// Two f16 in one word -> f32 in ~6 ops per pair: this conversion is the cost of f16 GEMV on
// lavapipe (unpackHalf2x16 and RGBA16F views were both slower). An arithmetic shift by 3 moves a
// half's exponent and mantissa into the low bits of an f32's and copies its sign into bits
// 31..28; the mask keeps the sign in bit 31. The result is the half times 2^-112 (exact for
// normals); the 2^112 is folded into the activations instead (see chunk()), which saves a multiply
// per weight and changes no product: (w·2^-112)·(x·2^112) is w·x exactly, so the FMAs round as
// the exact path's do. Subnormal halves (|w| < 6.1e-5) are flushed to 0 first: as f32 they would be
// denormal operands of the FMA, which cost a microcode assist per vector on Intel CPUs (lavapipe
// offers no flush-to-zero mode) and made GEMV 2.4x slower with 1% subnormal weights, a share real
// f16 checkpoints have. Exponent 31 (inf/NaN) comes out finite here, so every word also sets bit
// 15 / 31 of `f16_special` when its low / high half has exponent 31, and tile() redoes such a lane
// exactly (as it does a lane whose scaled activations overflowed).
uint f16_special = 0u;
vec2 f16x2(uint w) {
  uvec2 b = uvec2(ivec2(int(w << 16), int(w)) >> 3) & 0x8fffe000u;
  if (!CLEAN) {
    f16_special |= (w & 0x7c007c00u) + 0x04000400u;
    b = mix(b, uvec2(0u), equal(b & 0x0f800000u, uvec2(0u)));  // subnormal -> 0
  }
  return uintBitsToFloat(b);  // w · 2^-112
}
// The same with exponent 31 mapped to the f32 exponent 255 (inf/NaN kept), times 2^112 here
// (the redo reads unscaled activations): ~4 more ops per half. Subnormals are flushed exactly as
// in f16x2, so a redone lane gives the fast path's bits wherever both are finite: a redo caused by
// one row's activations must not change another row of the tile (batch invariance).
vec2 f16x2_exact(uint w) {
  uvec2 b = uvec2(ivec2(int(w << 16), int(w)) >> 3) & 0x8fffe000u;
  b = mix(b, uvec2(0u), equal(b & 0x0f800000u, uvec2(0u)));  // subnormal -> 0, as f16x2
  b |= mix(uvec2(0u), uvec2(0x7f800000u), equal(b & 0x0f800000u, uvec2(0x0f800000u)));
  return uintBitsToFloat(b) * uintBitsToFloat(0x77800000u);
}
#endif

layout(push_constant) uniform PC {
  uint R;        // output rows
  uint M;        // output features (weight rows)
  uint K;
  uint x_off;    // elements
  uint w_off;    // elements (f32/f16/bf16) or bytes (quantized)
  uint y_off;    // elements
  uint w_row;    // bytes per weight row (quantized)
  uint kslots;   // MoE: experts per token
  uint ids_off;  // elements
  uint ldy;      // elements per output row (M, or the full width when w is a row block)
  uint ms;       // weight-row stride within a tile (MatmulPlan::row_stride)
  // Sibling matmuls (same x, K and dtype; weights in one binding) fused into one dispatch: the
  // workgroups from g1 (and g2) on compute a second (third) product with its own weight offset,
  // rows and output (ldy = its rows). g = 0: absent.
  uint g1, M1, w_off1, y_off1;
  uint g2, M2, w_off2, y_off2;
  uint n_experts;  // MoE: experts in w (ids outside [0, n_experts) are reported, then read as 0)
} pc;

// This workgroup's product (set in main from pc and the segment it falls in).
uint sM, sWoff, sYoff, sLdy;

float x1(uint i) { return texelFetch(X, int(i >> 2))[i & 3u]; }


vec4 x4(uint row, uint e) {
  uint i = pc.x_off + row * pc.K + e;
  if (ALIGNED) return texelFetch(X, int(i >> 2));
  return vec4(x1(i), x1(i + 1u), x1(i + 2u), x1(i + 3u));
}

#if !defined(WT_QUANT)
// 8 weights of row `wr` starting at element e (e % 8 == 0).
// exact: the f16 redo of lanes that met inf/NaN (see f16x2).
void w8(uint wr, uint e, bool exact, out vec4 lo, out vec4 hi) {
  uint i = sWoff + wr * pc.K + e;
#if defined(WT_F32)
  if (ALIGNED) {
    lo = texelFetch(W, int(i >> 2));
    hi = texelFetch(W, int((i >> 2) + 1u));
    return;
  }
#elif defined(WT_F16)
  if (ALIGNED) {  // 8 halves per RGBA32UI texel, widened with integer ops (see f16x2)
    uvec4 t = texelFetch(W, int(i >> 3));
    vec2 a, b, c, d;
    if (exact) {
      a = f16x2_exact(t.x), b = f16x2_exact(t.y), c = f16x2_exact(t.z), d = f16x2_exact(t.w);
    } else {
      a = f16x2(t.x), b = f16x2(t.y), c = f16x2(t.z), d = f16x2(t.w);
    }
    lo = vec4(a, b);
    hi = vec4(c, d);
    return;
  }
#else
  if (ALIGNED) {
    uvec4 t = texelFetch(W, int(i >> 3));  // bf16: 8 per RGBA32UI texel, widened by shifts
    lo = vec4(uintBitsToFloat(t.x << 16), uintBitsToFloat(t.x & 0xffff0000u), uintBitsToFloat(t.y << 16),
              uintBitsToFloat(t.y & 0xffff0000u));
    hi = vec4(uintBitsToFloat(t.z << 16), uintBitsToFloat(t.z & 0xffff0000u), uintBitsToFloat(t.w << 16),
              uintBitsToFloat(t.w & 0xffff0000u));
    return;
  }
#endif
  lo = vec4(w_scalar(i), w_scalar(i + 1u), w_scalar(i + 2u), w_scalar(i + 3u));
  hi = vec4(w_scalar(i + 4u), w_scalar(i + 5u), w_scalar(i + 6u), w_scalar(i + 7u));
}
#endif

float acc[TM * TN];  // the tile's outputs, row-major (TM x TN)

#if !defined(WT_QUANT)
// a + w·x over one 8-element chunk: 8 chained FMAs (not 15 ops as two dot products), the one
// chain every path uses, so the fast path, the redo and every tile give the same bits.
float fma8(vec4 wl, vec4 wh, vec4 xl, vec4 xh, float a) {
  a = fma(wl.x, xl.x, a);
  a = fma(wl.y, xl.y, a);
  a = fma(wl.z, xl.z, a);
  a = fma(wl.w, xl.w, a);
  a = fma(wh.x, xh.x, a);
  a = fma(wh.y, xh.y, a);
  a = fma(wh.z, xh.z, a);
  return fma(wh.w, xh.w, a);
}

// One 8-element K-chunk of every output in the tile, added to acc in a fixed order.
void chunk(uint c, uint xrow[TM], uint wr[TN], bool exact) {
  // Hold the TN weight chunks, stream the TM activation chunks: 8·TN + 8 + TM·TN live floats.
  vec4 wl[TN], wh[TN];
  [[unroll]] for (uint n = 0u; n < TN; ++n) w8(wr[n], c * 8u, exact, wl[n], wh[n]);
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
    vec4 xl = x4(xrow[t], c * 8u), xh = x4(xrow[t], c * 8u + 4u);
#if defined(WT_F16)
    if (ALIGNED && !exact) {  // f16x2's 2^112, once per activation chunk instead of per weight
      xl *= uintBitsToFloat(0x77800000u);
      xh *= uintBitsToFloat(0x77800000u);
    }
#endif
    [[unroll]] for (uint n = 0u; n < TN; ++n) acc[t * TN + n] = fma8(wl[n], wh[n], xl, xh, acc[t * TN + n]);
  }
}
#endif

// One TM x TN tile of outputs: rows r0.., weight rows m0, m0 + ms, m0 + 2·ms, ...
void tile(uint lane, uint SG, uint r0, uint m0, uint ms, uint xrow[TM], uint wbase) {
  uint wr[TN];
  [[unroll]] for (uint n = 0u; n < TN; ++n) wr[n] = wbase + min(m0 + n * ms, sM - 1u);

  [[unroll]] for (uint i = 0u; i < TM * TN; ++i) acc[i] = 0.0;

#if defined(WT_QUANT)
  uint nblocks = pc.K / 32u;
  for (uint c = lane; c < nblocks; c += SG) {
    vec4 xv[TM * 8];
    [[unroll]] for (uint t = 0u; t < TM; ++t)
      [[unroll]] for (uint s = 0u; s < 8u; ++s) xv[t * 8u + s] = x4(xrow[t], c * 32u + s * 4u);
#if defined(WT_SPLIT)
    // Per 16-value half: the integers' dot product, times the half's scale, then (formats with an
    // offset) the offset times the half's activation sum, which every weight row of the tile shares.
#if defined(WT_OFFSET)
    float sx[TM * 2];
    [[unroll]] for (uint t = 0u; t < TM; ++t)
      [[unroll]] for (uint h = 0u; h < 2u; ++h) {
        float a = 0.0;
        [[unroll]] for (uint s = 4u * h; s < 4u * h + 4u; ++s) a += (xv[t * 8u + s].x + xv[t * 8u + s].y) + (xv[t * 8u + s].z + xv[t * 8u + s].w);
        sx[t * 2u + h] = a;
      }
#endif
    [[unroll]] for (uint n = 0u; n < TN; ++n) {
      vec4 q[8];
      vec2 dl, off;
      load_split(sWoff + wr[n] * pc.w_row, c, q, dl, off);
      [[unroll]] for (uint t = 0u; t < TM; ++t) {
        float b[2] = float[2](0.0, 0.0);
        [[unroll]] for (uint s = 0u; s < 8u; ++s) {
          vec4 xs = xv[t * 8u + s];
          uint h = s >> 2;
          b[h] = fma(q[s].x, xs.x, b[h]);
          b[h] = fma(q[s].y, xs.y, b[h]);
          b[h] = fma(q[s].z, xs.z, b[h]);
          b[h] = fma(q[s].w, xs.w, b[h]);
        }
        float a = fma(dl.y, b[1], fma(dl.x, b[0], acc[t * TN + n]));
#if defined(WT_OFFSET)
        a = fma(off.y, sx[t * 2u + 1u], fma(off.x, sx[t * 2u], a));
#endif
        acc[t * TN + n] = a;
      }
    }
#else
    [[unroll]] for (uint n = 0u; n < TN; ++n) {
      vec4 q[8];
      float d = load_block(sWoff + wr[n] * pc.w_row + c * BLOCK_BYTES, q);
      [[unroll]] for (uint t = 0u; t < TM; ++t) {
        float b = 0.0;
        [[unroll]] for (uint s = 0u; s < 8u; ++s) {
          vec4 xs = xv[t * 8u + s];
          b = fma(q[s].x, xs.x, b);
          b = fma(q[s].y, xs.y, b);
          b = fma(q[s].z, xs.z, b);
          b = fma(q[s].w, xs.w, b);
        }
        acc[t * TN + n] = fma(d, b, acc[t * TN + n]);
      }
    }
#endif
  }
#else
  uint nchunks = pc.K / 8u;
  for (uint c = lane; c < nchunks; c += SG) chunk(c, xrow, wr, false);
#if defined(WT_F16)
  // A lane that met an inf/NaN half redoes its chunks with the exact converter and unscaled
  // activations (rare: only broken weights have them, so the branch is almost always uniformly
  // skipped).
  // So does a lane whose sums went non-finite: |x| >= 2^16 overflows x·2^112 where the exact path
  // stays finite (a lane that is non-finite either way recomputes the same values).
  bool redo = (f16_special & 0x80008000u) != 0u;
  [[unroll]] for (uint i = 0u; i < TM * TN; ++i) redo = redo || (floatBitsToUint(acc[i]) & 0x7f800000u) == 0x7f800000u;
  f16_special = 0u;
  // The redo walks one weight row at a time in a loop that is not unrolled: an unrolled redo
  // (chunk() over the whole tile) doubled the kernel's code and cost ~5 % of a short-K GEMV
  // (16384x1024) even though it never runs. Each output gets the same fma8 chain as in chunk(); the
  // row index is recomputed as wr[n] was (indexing wr by a loop variable would move it to memory).
  if (subgroupAny(redo)) {
    float racc[TM * TN];
    for (uint n = 0u; n < TN; ++n) {
      uint wrn = wbase + min(m0 + n * ms, sM - 1u);
      float a[TM];
      [[unroll]] for (uint t = 0u; t < TM; ++t) a[t] = 0.0;
      for (uint c = redo ? lane : nchunks; c < nchunks; c += SG) {
        vec4 wl, wh;
        w8(wrn, c * 8u, true, wl, wh);
        [[unroll]] for (uint t = 0u; t < TM; ++t)
          a[t] = fma8(wl, wh, x4(xrow[t], c * 8u), x4(xrow[t], c * 8u + 4u), a[t]);
      }
      [[unroll]] for (uint t = 0u; t < TM; ++t) racc[t * TN + n] = a[t];
    }
    [[unroll]] for (uint i = 0u; i < TM * TN; ++i) acc[i] = redo ? racc[i] : acc[i];
  }
#endif
#endif

  [[unroll]] for (uint t = 0u; t < TM; ++t) {
    [[unroll]] for (uint n = 0u; n < TN; ++n) {
      float s = acc[t * TN + n];
#if !defined(WT_QUANT)
      // The K % 8 tail: element j goes to lane j % SG, in order. (ALIGNED implies K % 8 == 0;
      // compiling the empty loop out matters: lavapipe runs a masked first iteration anyway.)
      if (!ALIGNED)
        for (uint e = nchunks * 8u + lane; e < pc.K; e += SG)
          s = fma(w_scalar(sWoff + wr[n] * pc.K + e), x1(pc.x_off + xrow[t] * pc.K + e), s);
#endif
      acc[t * TN + n] = subgroupAdd(s);
    }
  }
  // Lane j stores outputs j, j + SG, ...: lavapipe runs an SSBO store as a loop over the lanes,
  // so one store by every lane costs what one by lane 0 did, and the tile's TM·TN stores become
  // ceil(TM·TN / SG) (no measurable change in bench_ops on its own). The values are the
  // subgroupAdd totals above, unchanged; the lane picks its own with a static select chain.
  const uint SGC = gl_WorkGroupSize.x;
  [[unroll]] for (uint i0 = 0u; i0 < TM * TN; i0 += SGC) {
    float v = 0.0;
    [[unroll]] for (uint j = 0u; j < SGC; ++j)
      if (i0 + j < TM * TN) v = lane == j ? acc[i0 + j] : v;
    uint i = i0 + lane, t = i / TN, n = i % TN;
    uint r = r0 + t, m = m0 + n * ms;
    if (i < TM * TN && r < pc.R && m < sM) y[sYoff + r * sLdy + m] = v;
  }
}

void main() {
  const uint SG = gl_WorkGroupSize.x;
  uint lane = gl_LocalInvocationID.x;
  uint gx = gl_WorkGroupID.x;
  sM = pc.M;
  sWoff = pc.w_off;
  sYoff = pc.y_off;
  sLdy = pc.ldy;
  if (pc.g1 != 0u && gx >= pc.g1) {
    bool two = pc.g2 != 0u && gx >= pc.g2;
    sM = two ? pc.M2 : pc.M1;
    sWoff = two ? pc.w_off2 : pc.w_off1;
    sYoff = two ? pc.y_off2 : pc.y_off1;
    sLdy = sM;
    gx -= two ? pc.g2 : pc.g1;
  }
  uint r0 = (gl_WorkGroupID.y + gl_WorkGroupID.z * gl_NumWorkGroups.y) * TM;
  if (r0 >= pc.R) return;

  uint xrow[TM];
  [[unroll]] for (uint t = 0u; t < TM; ++t) {
    uint r = min(r0 + t, pc.R - 1u);
    xrow[t] = MOE == 1u ? r / pc.kslots : r;
  }
  uint wbase = 0u;  // first weight row of this tile's expert
  if (MOE != 0u) {
    int id = ids[pc.ids_off + r0];
    if (id < 0 || uint(id) >= pc.n_experts) {
      if (lane == 0u) err[2] = 1u;
      id = 0;
    }
    wbase = uint(id) * sM;
  }

  // Workgroups x = b·ms + g (g < ms) share a block of TN·ms weight rows: tile g takes rows
  // g, g + ms, ..., g + (TN-1)·ms of it (MatmulPlan::row_stride).
  uint m0 = (gx / pc.ms) * TN * pc.ms + gx % pc.ms;
  if (m0 >= sM) return;
  tile(lane, SG, r0, m0, pc.ms, xrow, wbase);
}
