// Quantized linears packed as AutoAWQ (GEMM) and GPTQ (v1 / v2) write them, from integer weights,
// zero points and f16 scales: the tests' independent writers of those layouts.
#pragma once

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "model/checkpoint_writer.hpp"

namespace kiln::test::quant {

using model::WriterTensor;

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/** Integer weights of an [M, K] linear: q, per-group zeros and f16 scales, and each row's group. */
struct IntQuant {
  int64_t M, K, G;
  int bits;
  std::vector<int> q;         // [M, K]
  std::vector<int> z;         // [G, M]
  std::vector<uint16_t> s;    // [G, M] f16
  std::vector<int32_t> gidx;  // [K]
  float expect(int64_t c, int64_t k) const {
    const size_t g = static_cast<size_t>(gidx[static_cast<size_t>(k)]);
    return static_cast<float>(q[static_cast<size_t>(c * K + k)] -
                              z[g * static_cast<size_t>(M) + static_cast<size_t>(c)]) *
           f16_to_f32(s[g * static_cast<size_t>(M) + static_cast<size_t>(c)]);
  }
};

inline IntQuant random_quant(int64_t M, int64_t K, int64_t group, int bits, bool act_order, uint32_t seed,
                             int zmin = 0) {
  std::mt19937 rng(seed);
  IntQuant w{M, K, K / group, bits, {}, {}, {}, {}};
  const int levels = 1 << bits;
  for (int64_t i = 0; i < M * K; ++i) w.q.push_back(static_cast<int>(rng() % static_cast<uint32_t>(levels)));
  for (int64_t i = 0; i < w.G * M; ++i) {
    w.z.push_back(zmin + static_cast<int>(rng() % static_cast<uint32_t>(levels - zmin)));
    w.s.push_back(f32_to_f16(0.001f + 0.02f * static_cast<float>(rng() % 1000) / 1000.0f));
  }
  for (int64_t k = 0; k < K; ++k) w.gidx.push_back(static_cast<int32_t>(k / group));
  if (act_order) std::shuffle(w.gidx.begin(), w.gidx.end(), rng);  // GPTQ with desc_act: any row in any group
  return w;
}

/** AutoAWQ's GEMM packing: qweight [K, M/8] with nibble i of word (k, j) = column 8j + order[i]. */
inline std::vector<WriterTensor> awq_tensors(const std::string& p, const IntQuant& w) {
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const int64_t M8 = w.M / 8;
  std::vector<int32_t> qw(static_cast<size_t>(w.K * M8), 0), qz(static_cast<size_t>(w.G * M8), 0);
  for (int64_t k = 0; k < w.K; ++k)
    for (int64_t j = 0; j < M8; ++j)
      for (int i = 0; i < 8; ++i)
        qw[static_cast<size_t>(k * M8 + j)] |= static_cast<int32_t>(
            static_cast<uint32_t>(w.q[static_cast<size_t>((8 * j + order[i]) * w.K + k)]) << (4 * i));
  for (int64_t g = 0; g < w.G; ++g)
    for (int64_t j = 0; j < M8; ++j)
      for (int i = 0; i < 8; ++i)
        qz[static_cast<size_t>(g * M8 + j)] |= static_cast<int32_t>(
            static_cast<uint32_t>(w.z[static_cast<size_t>(g * w.M + 8 * j + order[i])]) << (4 * i));
  return {{p + ".qweight", kiln::DType::i32, {w.K, M8}, raw(qw)},
          {p + ".qzeros", kiln::DType::i32, {w.G, M8}, raw(qz)},
          {p + ".scales", kiln::DType::f16, {w.G, w.M}, raw(w.s)}};
}

/** GPTQ: qweight [K·bits/32, M] packing input rows, qzeros [G, M·bits/32] packing columns; v1 stores zero − 1. */
inline std::vector<WriterTensor> gptq_tensors(const std::string& p, const IntQuant& w, bool v1, bool with_gidx) {
  const int per = 32 / w.bits;
  std::vector<int32_t> qw(static_cast<size_t>(w.K / per * w.M), 0), qz(static_cast<size_t>(w.G * w.M / per), 0);
  for (int64_t k = 0; k < w.K; ++k)
    for (int64_t c = 0; c < w.M; ++c)
      qw[static_cast<size_t>((k / per) * w.M + c)] |=
          static_cast<int32_t>(static_cast<uint32_t>(w.q[static_cast<size_t>(c * w.K + k)]) << (w.bits * (k % per)));
  for (int64_t g = 0; g < w.G; ++g)
    for (int64_t c = 0; c < w.M; ++c)
      qz[static_cast<size_t>(g * (w.M / per) + c / per)] |= static_cast<int32_t>(
          static_cast<uint32_t>(w.z[static_cast<size_t>(g * w.M + c)] - (v1 ? 1 : 0)) << (w.bits * (c % per)));
  std::vector<WriterTensor> ts = {{p + ".qweight", kiln::DType::i32, {w.K / per, w.M}, raw(qw)},
                                  {p + ".qzeros", kiln::DType::i32, {w.G, w.M / per}, raw(qz)},
                                  {p + ".scales", kiln::DType::f16, {w.G, w.M}, raw(w.s)}};
  if (with_gidx) ts.push_back({p + ".g_idx", kiln::DType::i32, {w.K}, raw(w.gidx)});
  return ts;
}

/** compressed-tensors pack-quantized: weight_packed [M, K·bits/32] packing input columns (stored as
 *  q + 2^(bits−1), i.e. the unsigned q here), weight_scale [M, G], weight_shape, and when `asym`
 *  weight_zero_point [M·bits/32, G] packing rows; symmetric checkpoints have zero 2^(bits−1). */
inline std::vector<WriterTensor> ct_packed_tensors(const std::string& p, const IntQuant& w, bool asym) {
  const int per = 32 / w.bits;
  std::vector<int32_t> qw(static_cast<size_t>(w.M * (w.K / per)), 0);
  for (int64_t c = 0; c < w.M; ++c)
    for (int64_t k = 0; k < w.K; ++k)
      qw[static_cast<size_t>(c * (w.K / per) + k / per)] |=
          static_cast<int32_t>(static_cast<uint32_t>(w.q[static_cast<size_t>(c * w.K + k)]) << (w.bits * (k % per)));
  std::vector<uint16_t> s(static_cast<size_t>(w.M * w.G));
  for (int64_t g = 0; g < w.G; ++g)
    for (int64_t c = 0; c < w.M; ++c) s[static_cast<size_t>(c * w.G + g)] = w.s[static_cast<size_t>(g * w.M + c)];
  std::vector<WriterTensor> ts = {{p + ".weight_packed", kiln::DType::i32, {w.M, w.K / per}, raw(qw)},
                                  {p + ".weight_scale", kiln::DType::f16, {w.M, w.G}, raw(s)},
                                  {p + ".weight_shape", kiln::DType::i64, {2}, raw(std::vector<int64_t>{w.M, w.K})}};
  if (asym) {
    std::vector<int32_t> zp(static_cast<size_t>((w.M / per) * w.G), 0);
    for (int64_t c = 0; c < w.M; ++c)
      for (int64_t g = 0; g < w.G; ++g)
        zp[static_cast<size_t>((c / per) * w.G + g)] |=
            static_cast<int32_t>(static_cast<uint32_t>(w.z[static_cast<size_t>(g * w.M + c)]) << (w.bits * (c % per)));
    ts.push_back({p + ".weight_zero_point", kiln::DType::i32, {w.M / per, w.G}, raw(zp)});
  }
  return ts;
}

/** Asymmetric min/max quantization of an [M, K] f32 weight in groups of `group` input rows. */
inline IntQuant quantize(const std::vector<float>& w, int64_t M, int64_t K, int64_t group, int bits = 4) {
  IntQuant q{M, K, K / group, bits, std::vector<int>(static_cast<size_t>(M * K)), {}, {}, {}};
  const int top = (1 << bits) - 1;
  q.z.resize(static_cast<size_t>(q.G * M));
  q.s.resize(static_cast<size_t>(q.G * M));
  for (int64_t g = 0; g < q.G; ++g)
    for (int64_t c = 0; c < M; ++c) {
      float lo = 0, hi = 0;
      for (int64_t k = g * group; k < (g + 1) * group; ++k) {
        lo = std::min(lo, w[static_cast<size_t>(c * K + k)]);
        hi = std::max(hi, w[static_cast<size_t>(c * K + k)]);
      }
      const uint16_t sh = f32_to_f16(std::max(hi - lo, 1e-3f) / static_cast<float>(top));
      const float s = f16_to_f32(sh);
      const int z = std::clamp(static_cast<int>(std::lround(-lo / s)), 0, top);
      q.s[static_cast<size_t>(g * M + c)] = sh;
      q.z[static_cast<size_t>(g * M + c)] = z;
      for (int64_t k = g * group; k < (g + 1) * group; ++k)
        q.q[static_cast<size_t>(c * K + k)] =
            std::clamp(static_cast<int>(std::lround(w[static_cast<size_t>(c * K + k)] / s)) + z, 0, top);
    }
  for (int64_t k = 0; k < K; ++k) q.gidx.push_back(static_cast<int32_t>(k / group));
  return q;
}

}  // namespace kiln::test::quant
