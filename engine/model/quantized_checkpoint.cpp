#include "model/quantized_checkpoint.hpp"

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace kiln::model {

float fp8_e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);  // subnormal: m/8 · 2^-6
  return sign * std::ldexp(static_cast<float>(8 + m), e - 10);      // (1 + m/8) · 2^(e-7)
}

namespace {

using json = nlohmann::json;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/** What a method's quantized linears have in common while they are unpacked. */
struct Unpacker {
  std::string method;  ///< for messages: "awq", "gptq", "fp8", "compressed-tensors"
  DType wide = DType::bf16;
  const std::vector<TensorInfo>& in;
  std::unordered_map<std::string, size_t> pos;
  std::unordered_set<std::string> dropped;  ///< side tensors folded into a weight
  std::vector<TensorInfo> made;
  OwnedBytes* owned;
  size_t exact = 0, exact4 = 0, rounded = 0;

  Unpacker(std::string m, DType w, const std::vector<TensorInfo>& t, OwnedBytes* o)
      : method(std::move(m)), wide(w), in(t), owned(o) {
    for (size_t i = 0; i < in.size(); ++i) pos.emplace(in[i].name, i);
  }
  const TensorInfo* find(const std::string& name) const {
    auto it = pos.find(name);
    return it == pos.end() ? nullptr : &in[it->second];
  }
  [[noreturn]] void bad(const TensorInfo& t, const std::string& what) const {
    throw_error("[model] {} checkpoint: tensor '{}' ({} {}) in {}: {}; the checkpoint is not laid out as {} writes it",
                method, t.name, t.stored.empty() ? dtype_name(t.dtype) : t.stored, shape_str(t.shape), t.file, what,
                method);
  }
  const TensorInfo& side(const std::string& name, const TensorInfo& of) {
    const TensorInfo* t = find(name);
    if (!t) bad(of, fmt::format("'{}' is missing beside it", name));
    dropped.insert(name);
    return *t;
  }
  std::vector<int32_t> ints(const TensorInfo& t) const {
    if (t.dtype != DType::i32) bad(t, "expected I32 (packed integers)");
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
  }
  std::vector<float> floats(const TensorInfo& t) const {
    if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16) bad(t, "expected F32, F16 or BF16");
    return tensor_to_f32(t);
  }
  void add(const TensorInfo& from, std::string name, DType dt, int64_t M, int64_t K, std::vector<std::byte> bytes) {
    auto buf = std::make_shared<std::vector<std::byte>>(std::move(bytes));
    owned->push_back(buf);
    TensorInfo t;
    t.name = std::move(name);
    t.dtype = dt;
    t.shape = {M, K};
    t.data = buf->data();
    t.nbytes = buf->size();
    t.file = from.file;
    made.push_back(std::move(t));
    if (dt == DType::q4_0) ++exact4;
    ++(dt == DType::q8_0 || dt == DType::q4_0 ? exact : rounded);
  }

  /** Writes q − z of one integer-quantized weight as [M, K] (run once to choose the weight's
   *  format, once to write it: nothing the size of the model is held between the two). */
  using Fill = std::function<void(std::vector<int16_t>& qz)>;
  struct IntJob {
    const TensorInfo* from;
    std::string name;
    int64_t M, K;
    Fill fill;
    std::vector<int32_t> group;  ///< each input column's group
    const TensorInfo* scales;    ///< [G, M], or [M, G] when by_row
    bool by_row;
  };
  std::vector<IntJob> jobs;

  /**
   * An integer-quantized [M, K] weight: w[c, k] = (q − z) · scale[group(k), c]. Shapes and group
   * indices are checked now; the weight is written by finish_integers().
   */
  void integer_weight(const TensorInfo& from, std::string name, int64_t M, int64_t K, Fill fill,
                      std::vector<int32_t> group, const TensorInfo& scales_t, bool by_row = false) {
    const int64_t G = scales_t.shape.size() == 2 ? scales_t.shape[by_row ? 1 : 0] : 0;
    if (scales_t.shape.size() != 2 || scales_t.shape[by_row ? 0 : 1] != M)
      bad(scales_t, by_row ? fmt::format("expected [{}, groups]", M) : fmt::format("expected [groups, {}]", M));
    floats(scales_t);  // its dtype, checked here
    for (int32_t g : group)
      if (g < 0 || g >= G) bad(scales_t, fmt::format("a group index {} is outside its {} groups", g, G));
    jobs.push_back({&from, std::move(name), M, K, std::move(fill), std::move(group), &scales_t, by_row});
  }

  /** Stacked pieces must share a format: experts.<n> of one projection are one family. */
  static std::string family(const std::string& name) {
    const size_t at = name.find(".experts.");
    if (at == std::string::npos) return name;
    size_t end = at + 9;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    return name.substr(0, at + 9) + "*" + name.substr(end);
  }

  enum Format { kWide = 0, kQ8 = 1, kQ4 = 2 };  ///< worse to better; a family takes its worst

  /** The block formats' f16 scales: every scale exactly an f16 (else empty). */
  static std::vector<uint16_t> f16_scales(const TensorInfo& st, const std::vector<float>& s) {
    std::vector<uint16_t> h(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (st.dtype == DType::f16)
        std::memcpy(&h[i], st.data + 2 * i, 2);
      else
        h[i] = f32_to_f16(s[i]);
      if (f16_to_f32(h[i]) != s[i]) return {};
    }
    return h;
  }

  static Format best_format(const IntJob& j, const std::vector<int16_t>& qz, bool f16_ok) {
    if (!f16_ok || j.K % kQuantBlock) return kWide;
    for (int64_t b = 0; b < j.K; b += kQuantBlock)
      for (int64_t i = 1; i < kQuantBlock; ++i)
        if (j.group[static_cast<size_t>(b + i)] != j.group[static_cast<size_t>(b)]) return kWide;
    Format f = kQ4;  // symmetric int4 (q − z within [−8, 7]) is q4_0 at half q8_0's bytes
    for (int16_t v : qz) {
      if (v < -128 || v > 127) return kWide;
      if (v < -8 || v > 7) f = kQ8;
    }
    return f;
  }

  /** Writes every deferred integer weight in its family's format (q4_0, q8_0: exact; else `wide`). */
  void finish_integers() {
    std::unordered_map<std::string, int> worst;
    std::vector<int16_t> qz;
    for (const IntJob& j : jobs) {
      qz.assign(static_cast<size_t>(j.M * j.K), 0);
      j.fill(qz);
      const Format f = best_format(j, qz, !f16_scales(*j.scales, floats(*j.scales)).empty());
      auto [it, fresh] = worst.emplace(family(j.name), f);
      if (!fresh) it->second = std::min(it->second, static_cast<int>(f));
    }
    for (const IntJob& j : jobs) {
      qz.assign(static_cast<size_t>(j.M * j.K), 0);
      j.fill(qz);
      write_integer(j, qz, static_cast<Format>(worst.at(family(j.name))));
    }
    jobs.clear();
  }

  void write_integer(const IntJob& j, const std::vector<int16_t>& qz, Format f) {
    const int64_t M = j.M, K = j.K;
    const std::vector<float> scales = floats(*j.scales);
    const int64_t G = j.scales->shape[j.by_row ? 1 : 0];
    const auto at = [&](int64_t g, int64_t c) { return static_cast<size_t>(j.by_row ? c * G + g : g * M + c); };
    const auto rows = static_cast<size_t>(M);
    const std::vector<uint16_t> h = f == kWide ? std::vector<uint16_t>() : f16_scales(*j.scales, scales);
    if (f == kQ4) {  // nibble = q − z + 8, element i low and i + 16 high in byte i
      const int64_t nb = K / kQuantBlock;
      std::vector<std::byte> out(rows * static_cast<size_t>(nb) * 18);
      tbb::parallel_for(int64_t{0}, M, [&](int64_t c) {
        std::byte* row = out.data() + static_cast<size_t>(c * nb) * 18;
        for (int64_t b = 0; b < nb; ++b) {
          std::memcpy(row + b * 18, &h[at(j.group[static_cast<size_t>(b * kQuantBlock)], c)], 2);
          const int16_t* v = qz.data() + static_cast<size_t>(c * K + b * kQuantBlock);
          for (int64_t i = 0; i < 16; ++i)
            row[b * 18 + 2 + i] = static_cast<std::byte>((v[i] + 8) | ((v[i + 16] + 8) << 4));
        }
      });
      add(*j.from, j.name, DType::q4_0, M, K, std::move(out));
    } else if (f == kQ8) {
      const int64_t nb = K / kQuantBlock;
      std::vector<std::byte> out(rows * static_cast<size_t>(nb) * 34);
      tbb::parallel_for(int64_t{0}, M, [&](int64_t c) {
        std::byte* row = out.data() + static_cast<size_t>(c * nb) * 34;
        for (int64_t b = 0; b < nb; ++b) {
          std::memcpy(row + b * 34, &h[at(j.group[static_cast<size_t>(b * kQuantBlock)], c)], 2);
          for (int64_t i = 0; i < kQuantBlock; ++i)
            row[b * 34 + 2 + i] =
                static_cast<std::byte>(static_cast<int8_t>(qz[static_cast<size_t>(c * K + b * kQuantBlock + i)]));
        }
      });
      add(*j.from, j.name, DType::q8_0, M, K, std::move(out));
    } else {
      std::vector<std::byte> out(rows * static_cast<size_t>(K) * (wide == DType::f32 ? 4 : 2));
      tbb::parallel_for(int64_t{0}, M, [&](int64_t c) {
        for (int64_t k = 0; k < K; ++k)
          put(out, static_cast<size_t>(c * K + k),
              static_cast<float>(qz[static_cast<size_t>(c * K + k)]) * scales[at(j.group[static_cast<size_t>(k)], c)]);
      });
      add(*j.from, j.name, wide, M, K, std::move(out));
    }
  }

  void put(std::vector<std::byte>& out, size_t i, float v) const {
    if (wide == DType::f32) {
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = wide == DType::f16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }

  std::vector<TensorInfo> result() const {
    std::vector<TensorInfo> out;
    std::unordered_set<std::string> replaced;
    for (const auto& t : made) replaced.insert(t.name);
    for (const auto& t : in)
      if (!dropped.count(t.name) && !replaced.count(t.name)) out.push_back(t);
    out.insert(out.end(), made.begin(), made.end());
    return out;
  }
};

int config_int(const json& q, std::initializer_list<const char*> keys, int def) {
  for (const char* k : keys)
    if (auto it = q.find(k); it != q.end() && it->is_number_integer()) return it->get<int>();
  return def;
}

std::string config_str(const json& q, const char* key, const std::string& def) {
  auto it = q.find(key);
  return it != q.end() && it->is_string() ? it->get<std::string>() : def;
}

/**
 * Each input column's group: tensor `g_idx` when the checkpoint has it (act-order; dropped from the
 * tensors), else k / group_size with ⌈K / group_size⌉ groups (a last partial group counts);
 * group_size ≤ 0 (per channel, or not in the config): K / G with G dividing K.
 */
std::vector<int32_t> column_groups(Unpacker& u, const std::string& g_idx, const TensorInfo& scales, int64_t K,
                                   int64_t G, int64_t group_size) {
  if (const TensorInfo* gi = u.find(g_idx)) {
    u.dropped.insert(gi->name);
    if (gi->shape != std::vector<int64_t>{K}) u.bad(*gi, fmt::format("expected [{}]", K));
    return u.ints(*gi);
  }
  if (group_size <= 0) {
    if (G <= 0 || K % G) u.bad(scales, fmt::format("{} groups do not divide {} input columns", G, K));
    group_size = K / G;
  } else if (G != (K + group_size - 1) / group_size) {
    u.bad(scales, fmt::format("{} groups; group_size {} over {} input columns makes {}", G, group_size, K,
                              (K + group_size - 1) / group_size));
  }
  std::vector<int32_t> group(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) group[static_cast<size_t>(k)] = static_cast<int32_t>(k / group_size);
  return group;
}

// ---- AWQ (AutoAWQ's GEMM packing): qweight I32 [K, M/8], qzeros I32 [K/g, M/8], scales F16 [K/g, M].
// Nibble i of a packed word holds output column 8j + order[i], order = 0 2 4 6 1 3 5 7: column 8j + c
// sits in nibble kAwqNibble[c].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

void unpack_awq(Unpacker& u, const json& q) {
  const int bits = config_int(q, {"bits", "w_bit"}, 4);
  const std::string version = config_str(q, "version", "gemm");
  if (bits != 4) throw_error("[model] awq checkpoint: bits {} is not read (AWQ checkpoints are 4-bit)", bits);
  if (version != "gemm" && version != "GEMM")
    throw_error(
        "[model] awq checkpoint: version '{}' is not read (only the GEMM packing, AutoAWQ's default); use a "
        "GEMM export",
        version);
  if (auto zp = q.find("zero_point"); zp != q.end() && zp->is_boolean() && !zp->get<bool>())
    throw_error("[model] awq checkpoint: zero_point false is not read (AWQ checkpoints carry zero points)");
  const int64_t group_size = config_int(q, {"group_size", "q_group_size"}, 0);
  for (const TensorInfo& t : u.in) {
    if (!ends_with(t.name, ".qweight")) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - 8);
    u.dropped.insert(t.name);
    const TensorInfo& zt = u.side(prefix + ".qzeros", t);
    const TensorInfo& st = u.side(prefix + ".scales", t);
    if (t.shape.size() != 2) u.bad(t, "expected [in, out / 8]");
    const int64_t K = t.shape[0], M8 = t.shape[1], M = M8 * 8;
    const int64_t G = st.shape.empty() ? 0 : st.shape[0];
    if (zt.shape != std::vector<int64_t>{G, M8}) u.bad(zt, fmt::format("expected [{}, {}]", G, M8));
    std::vector<int32_t> group = column_groups(u, prefix + ".g_idx", st, K, G, group_size);
    u.ints(t), u.ints(zt);  // their dtypes, checked here
    Unpacker::Fill fill = [&u, tp = &t, zp = &zt, K, M8, g = group](std::vector<int16_t>& qz) {
      const std::vector<int32_t> w = u.ints(*tp), z = u.ints(*zp);
      tbb::parallel_for(int64_t{0}, M8, [&](int64_t j) {
        for (int64_t k = 0; k < K; ++k) {
          const auto word = static_cast<uint32_t>(w[static_cast<size_t>(k * M8 + j)]);
          const auto zword = static_cast<uint32_t>(z[static_cast<size_t>(g[static_cast<size_t>(k)] * M8 + j)]);
          for (int c = 0; c < 8; ++c) {
            const int sh = 4 * kAwqNibble[c];
            qz[static_cast<size_t>((8 * j + c) * K + k)] =
                static_cast<int16_t>(static_cast<int>((word >> sh) & 15) - static_cast<int>((zword >> sh) & 15));
          }
        }
      });
    };
    u.integer_weight(t, prefix + ".weight", M, K, std::move(fill), std::move(group), st);
  }
}

// ---- GPTQ: qweight I32 [K·bits/32, M] (input rows packed low bits first), qzeros I32
// [G, M·bits/32] (output columns packed low bits first), scales [G, M], g_idx I32 [K] (the group of
// each input row; absent or k / group_size without act-order). Format v1 stores zero − 1.
void unpack_gptq(Unpacker& u, const json& q) {
  const int bits = config_int(q, {"bits", "w_bit"}, 4);
  if (bits != 4 && bits != 8)
    throw_error("[model] gptq checkpoint: bits {} is not read (4 and 8 are); use a 4- or 8-bit export", bits);
  std::string format = config_str(q, "checkpoint_format", "gptq");
  if (format == "gptq" && config_str(q, "format", "") == "gptq_v2") format = "gptq_v2";
  if (format != "gptq" && format != "gptq_v2")
    throw_error("[model] gptq checkpoint: checkpoint_format '{}' is not read (gptq and gptq_v2 are)", format);
  const int zero_offset = format == "gptq" ? 1 : 0;
  const int64_t group_size = config_int(q, {"group_size"}, 0);
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (const TensorInfo& t : u.in) {
    if (!ends_with(t.name, ".qweight")) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - 8);
    u.dropped.insert(t.name);
    const TensorInfo& zt = u.side(prefix + ".qzeros", t);
    const TensorInfo& st = u.side(prefix + ".scales", t);
    if (t.shape.size() != 2) u.bad(t, fmt::format("expected [in / {}, out]", per_word));
    const int64_t K = t.shape[0] * per_word, M = t.shape[1];
    const int64_t G = st.shape.empty() ? 0 : st.shape[0];
    if (G <= 0) u.bad(st, fmt::format("expected [groups, {}]", M));
    if (M % per_word || zt.shape != std::vector<int64_t>{G, M / per_word})
      u.bad(zt, fmt::format("expected [{}, {}]", G, M / per_word));
    std::vector<int32_t> group = column_groups(u, prefix + ".g_idx", st, K, G, group_size);
    u.ints(t), u.ints(zt);  // their dtypes, checked here
    Unpacker::Fill fill = [&u, tp = &t, zp = &zt, K, M, G, bits, per_word, mask, zero_offset,
                           g = group](std::vector<int16_t>& qz) {
      const std::vector<int32_t> w = u.ints(*tp), z = u.ints(*zp);
      const int64_t MW = M / per_word;
      tbb::parallel_for(int64_t{0}, M, [&](int64_t c) {
        for (int64_t k = 0; k < K; ++k) {
          const auto word = static_cast<uint32_t>(w[static_cast<size_t>((k / per_word) * M + c)]);
          const int qv = static_cast<int>((word >> (bits * (k % per_word))) & mask);
          const int32_t gk = g[static_cast<size_t>(k)];
          if (gk < 0 || gk >= G) return;  // integer_weight refused the tensor already
          const auto zword = static_cast<uint32_t>(z[static_cast<size_t>(gk * MW + c / per_word)]);
          const int zv = static_cast<int>((zword >> (bits * (c % per_word))) & mask) + zero_offset;
          qz[static_cast<size_t>(c * K + k)] = static_cast<int16_t>(qv - zv);
        }
      });
    };
    u.integer_weight(t, prefix + ".weight", M, K, std::move(fill), std::move(group), st);
  }
}

// ---- compressed-tensors pack-quantized (llm-compressor's W4A16 / W8A16): weight_packed I32
// [M, ⌈K·bits/32⌉] (input columns packed low bits first, stored as q + 2^(bits−1)), weight_scale
// [M, G] ([M, 1] per channel), weight_shape [2], and for asymmetric schemes weight_zero_point I32
// [⌈M·bits/32⌉, G] (rows packed, offset likewise); weight_g_idx I32 [K] with act-order.
// w = (q − zero) · scale.
void unpack_packed(Unpacker& u, int bits, int64_t group_size) {
  const int per_word = 32 / bits, offset = 1 << (bits - 1);
  const uint32_t mask = (1u << bits) - 1;
  for (const TensorInfo& t : u.in) {
    if (!ends_with(t.name, ".weight_packed")) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - 14);
    u.dropped.insert(t.name);
    const TensorInfo& st = u.side(prefix + ".weight_scale", t);
    const TensorInfo& sh = u.side(prefix + ".weight_shape", t);
    std::vector<int64_t> shape;
    if (sh.numel() == 2 && (sh.dtype == DType::i32 || sh.dtype == DType::i64))
      for (int i = 0; i < 2; ++i) {
        int64_t v = 0;
        if (sh.dtype == DType::i32) {
          int32_t x;
          std::memcpy(&x, sh.data + 4 * i, 4);
          v = x;
        } else {
          std::memcpy(&v, sh.data + 8 * i, 8);
        }
        shape.push_back(v);
      }
    if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0) u.bad(sh, "expected the weight's [rows, columns]");
    const int64_t M = shape[0], K = shape[1], KW = (K + per_word - 1) / per_word;
    if (t.shape != std::vector<int64_t>{M, KW})
      u.bad(t, fmt::format("expected [{}, {}] for a [{}, {}] weight", M, KW, M, K));
    const int64_t G = st.shape.size() == 2 ? st.shape[1] : 0;
    if (G <= 0) u.bad(st, fmt::format("expected [{}, groups]", M));
    std::vector<int32_t> group = column_groups(u, prefix + ".weight_g_idx", st, K, G, group_size);
    const TensorInfo* zt = u.find(prefix + ".weight_zero_point");  // [⌈M / per_word⌉, G], rows packed
    if (zt) {
      u.dropped.insert(zt->name);
      if (zt->shape != std::vector<int64_t>{(M + per_word - 1) / per_word, G})
        u.bad(*zt, fmt::format("expected [{}, {}]", (M + per_word - 1) / per_word, G));
      u.ints(*zt);
    }
    u.ints(t);
    Unpacker::Fill fill = [&u, tp = &t, zt, K, KW, G, bits, per_word, offset, mask, M,
                           g = group](std::vector<int16_t>& qz) {
      const std::vector<int32_t> w = u.ints(*tp), zero = zt ? u.ints(*zt) : std::vector<int32_t>();
      tbb::parallel_for(int64_t{0}, M, [&](int64_t c) {
        for (int64_t k = 0; k < K; ++k) {
          const auto word = static_cast<uint32_t>(w[static_cast<size_t>(c * KW + k / per_word)]);
          const int qv = static_cast<int>((word >> (bits * (k % per_word))) & mask) - offset;
          int zv = 0;
          const int32_t gk = g[static_cast<size_t>(k)];
          if (!zero.empty() && gk >= 0 && gk < G) {
            const auto zword = static_cast<uint32_t>(zero[static_cast<size_t>((c / per_word) * G + gk)]);
            zv = static_cast<int>((zword >> (bits * (c % per_word))) & mask) - offset;
          }
          qz[static_cast<size_t>(c * K + k)] = static_cast<int16_t>(qv - zv);
        }
      });
    };
    u.integer_weight(t, prefix + ".weight", M, K, std::move(fill), std::move(group), st, true);
  }
}

// ---- FP8 e4m3 weights [M, K] with scales: block-wise ([ceil(M/bm), ceil(K/bk)], "weight_scale_inv"
// in the fp8 method, "weight_scale" in compressed-tensors), per output channel ([M] or [M, 1]) or
// per tensor ([] or [1]). w = fp8 · scale, rounded once to the checkpoint's dtype.
void unpack_fp8(Unpacker& u, std::pair<int64_t, int64_t> block) {
  for (const TensorInfo& t : u.in) {
    if (t.stored != "F8_E4M3") continue;
    if (!ends_with(t.name, ".weight") || t.shape.size() != 2) u.bad(t, "an FP8 tensor that is not a 2-D weight");
    const std::string prefix = t.name.substr(0, t.name.size() - 7);
    const TensorInfo* sp = u.find(prefix + ".weight_scale_inv");
    if (!sp) sp = u.find(prefix + ".weight_scale");
    if (!sp) u.bad(t, "no weight_scale_inv or weight_scale beside it");
    const TensorInfo& st = *sp;
    u.dropped.insert(st.name);
    const int64_t M = t.shape[0], K = t.shape[1];
    const std::vector<float> s = u.floats(st);
    int64_t bm = 0, bk = 0;  // 0: per tensor; bk 0 with bm 1: per row
    if (st.numel() == 1) {
    } else if (st.numel() == M && (st.shape.size() == 1 || (st.shape.size() == 2 && st.shape[1] == 1))) {
      bm = 1;
    } else if (st.shape.size() == 2) {
      auto [m, k] = block;
      if (st.shape[0] != (M + m - 1) / m || st.shape[1] != (K + k - 1) / k)
        u.bad(st, fmt::format("block scales for blocks of [{}, {}] over [{}, {}] would be [{}, {}]", m, k, M, K,
                              (M + m - 1) / m, (K + k - 1) / k));
      bm = m, bk = k;
    } else {
      u.bad(st, fmt::format("expected a scalar, [{}] or block scales", M));
    }
    const auto* w = reinterpret_cast<const uint8_t*>(t.data);
    std::vector<std::byte> out(static_cast<size_t>(M * K) * (u.wide == DType::f32 ? 4 : 2));
    const int64_t sk = bk ? (K + bk - 1) / bk : 0;
    tbb::parallel_for(int64_t{0}, M, [&](int64_t r) {
      for (int64_t k = 0; k < K; ++k) {
        const float sc = bm == 0   ? s[0]
                         : bk == 0 ? s[static_cast<size_t>(r)]
                                   : s[static_cast<size_t>((r / bm) * sk + k / bk)];
        u.put(out, static_cast<size_t>(r * K + k), fp8_e4m3_to_f32(w[r * K + k]) * sc);
      }
    });
    u.add(t, t.name, u.wide, M, K, std::move(out));
  }
  // Activation and KV-cache scales serve FP8 matmuls and caches kiln does not run; they go.
  for (const TensorInfo& t : u.in)
    if (ends_with(t.name, ".input_scale") || ends_with(t.name, ".k_scale") || ends_with(t.name, ".v_scale") ||
        ends_with(t.name, ".output_scale"))
      u.dropped.insert(t.name);
}

/** A [rows, cols] block size from the config, or 128 × 128 (the FP8 releases' and what fits their scales). */
std::pair<int64_t, int64_t> block_size(const json* v) {
  if (!v || !v->is_array() || v->size() != 2 || !(*v)[0].is_number_integer() || !(*v)[1].is_number_integer() ||
      (*v)[0].get<int64_t>() <= 0 || (*v)[1].get<int64_t>() <= 0)
    return {128, 128};
  return {(*v)[0].get<int64_t>(), (*v)[1].get<int64_t>()};
}

}  // namespace

std::vector<TensorInfo> unpack_quantized(const std::string& quantization_config_json, const std::string& torch_dtype,
                                         std::vector<TensorInfo> tensors, OwnedBytes* owned, std::string* summary) {
  const json q = json::parse(quantization_config_json, nullptr, false);
  if (q.is_discarded() || !q.is_object()) throw_error("[model] config.json: quantization_config is not an object");
  const std::string method = config_str(q, "quant_method", "");
  const DType wide = torch_dtype == "float16" ? DType::f16 : torch_dtype == "float32" ? DType::f32 : DType::bf16;
  Unpacker u(method, wide, tensors, owned);
  std::string detail;
  if (method == "awq") {
    unpack_awq(u, q);
    detail = fmt::format("int4 group {}", config_int(q, {"group_size", "q_group_size"}, 128));
  } else if (method == "gptq") {
    unpack_gptq(u, q);
    const auto da = q.find("desc_act");
    detail = fmt::format("int{} group {}{}", config_int(q, {"bits"}, 4), config_int(q, {"group_size"}, 128),
                         da != q.end() && da->is_boolean() && da->get<bool>() ? " act-order" : "");
  } else if (method == "fp8") {
    const std::string fmt_name = config_str(q, "fmt", "e4m3");
    if (fmt_name != "e4m3")
      throw_error("[model] fp8 checkpoint: fmt '{}' is not read (e4m3 is); use an e4m3 release", fmt_name);
    auto bs = q.find("weight_block_size");
    unpack_fp8(u, block_size(bs != q.end() ? &*bs : nullptr));
    detail = "e4m3";
  } else if (method == "compressed-tensors") {
    const std::string format = config_str(q, "format", "");
    if (format != "float-quantized" && format != "pack-quantized")
      throw_error(
          "[model] compressed-tensors checkpoint: format '{}' is not read (float-quantized FP8 and "
          "pack-quantized int4 / int8 are); use the model's AWQ, GPTQ or GGUF release",
          format);
    const bool packed = format == "pack-quantized";
    std::pair<int64_t, int64_t> block = block_size(nullptr);
    int bits = 0;
    int64_t group_size = 0;
    if (auto groups = q.find("config_groups"); groups != q.end() && groups->is_object())
      for (const auto& [name, g] : groups->items()) {
        const auto w = g.find("weights");
        if (w == g.end() || !w->is_object()) continue;
        const std::string type = w->value("type", packed ? "int" : "float");
        const int nb = w->value("num_bits", packed ? 4 : 8);
        const bool ok =
            packed ? type == "int" && (nb == 4 || nb == 8) && (!bits || bits == nb) : type == "float" && nb == 8;
        if (!ok)
          throw_error(
              "[model] compressed-tensors checkpoint: group '{}' quantizes weights as {} {}-bit under format "
              "'{}', which kiln does not read ({})",
              name, type, nb, format, packed ? "int 4 or 8, one width for all groups" : "float 8");
        bits = nb;
        if (auto gs = w->find("group_size"); gs != w->end() && gs->is_number_integer()) group_size = gs->get<int64_t>();
        if (auto bs = w->find("block_structure"); bs != w->end()) block = block_size(&*bs);
      }
    if (packed) {
      unpack_packed(u, bits ? bits : 4, group_size);
      detail = fmt::format("pack-quantized int{}", bits ? bits : 4);
    } else {
      unpack_fp8(u, block);
      detail = "float-quantized e4m3";
    }
  } else {
    throw_error(
        "[model] config.json: quantization_config.quant_method '{}' is not read (awq, gptq, fp8 and "
        "compressed-tensors are); use the model's bf16, AWQ, GPTQ, FP8 or GGUF release",
        method);
  }
  u.finish_integers();
  for (const TensorInfo& t : tensors)
    if (!t.stored.empty() && t.stored == "F8_E4M3" && u.dropped.count(t.name) == 0) {
      bool made = false;
      for (const auto& m : u.made) made = made || m.name == t.name;
      if (!made) u.bad(t, "an FP8 tensor the quantization_config does not explain");
    }
  if (summary) {
    *summary = fmt::format("{} {}: {} weights", method, detail, u.exact + u.rounded);
    if (u.exact4) *summary += fmt::format(", {} as q4_0 (exact)", u.exact4);
    if (u.exact > u.exact4) *summary += fmt::format(", {} as q8_0 (exact)", u.exact - u.exact4);
    if (u.rounded) *summary += fmt::format(", {} dequantized to {}", u.rounded, dtype_name(wide));
  }
  return u.result();
}

}  // namespace kiln::model
