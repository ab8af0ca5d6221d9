// OpGraph: building, running on a device with poisoned intermediates, and comparing.
#include "op_harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/reference/common.hpp"
#include "core/ggml_blocks.hpp"
#include "graph/allocator.hpp"
#include "graph/lower.hpp"

namespace kiln::test {
namespace {

template <class T>
std::vector<std::byte> as_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TensorDesc desc_of(DType t, std::initializer_list<int64_t> shape) {
  return TensorDesc(t, shape);
}

float half_to_float(uint16_t h) {  // independent of the backend's converter
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0    ? std::ldexp(static_cast<float>(m), -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : std::ldexp(static_cast<float>(1024 + m), e - 25);
  return s ? -v : v;
}

/** kiln's KV-cache rows (kv_q8 / kv_q4, dtype.hpp) read back independently of the backend: per
 *  row of `d` values, the int8 values or nibbles, then one f16 scale per kv_group(d) values. */
std::vector<float> kv_to_floats(DType t, const std::vector<std::byte>& b, int64_t n, int64_t d) {
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t g = kv_group(d);
  const size_t rb = row_bytes(t, d), vals = static_cast<size_t>(t == DType::kv_q8 ? d : d / 2);
  for (int64_t r = 0; r < n / d; ++r) {
    const std::byte* row = b.data() + static_cast<size_t>(r) * rb;
    for (int64_t e = 0; e < d; ++e) {
      uint16_t h;
      std::memcpy(&h, row + vals + 2 * static_cast<size_t>(e / g), 2);
      const auto byte = static_cast<uint8_t>(row[static_cast<size_t>(t == DType::kv_q8 ? e : e / 2)]);
      const int q = t == DType::kv_q8 ? static_cast<int8_t>(byte) : ((byte >> (e % 2 ? 4 : 0)) & 15) - 8;
      out[static_cast<size_t>(r * d + e)] = static_cast<float>(q) * half_to_float(h);
    }
  }
  return out;
}

/** The f32 values of a tensor stored as d.dtype (the KV formats row by row of the last dim). */
std::vector<float> to_floats(const TensorDesc& d, const std::vector<std::byte>& b) {
  const DType t = d.dtype;
  const int64_t n = d.numel();
  if (is_kv_quantized(t)) return kv_to_floats(t, b, n, d.last());
  std::vector<float> out(static_cast<size_t>(n));
  if (t == DType::f32) {
    std::memcpy(out.data(), b.data(), out.size() * 4);
  } else if (t == DType::f16 || t == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      out[static_cast<size_t>(i)] = t == DType::f16 ? half_to_float(h) : backend::reference::bf16_to_f32(h);
    }
  } else {
    out = dequantize(t, b, n);
  }
  return out;
}

/** `v` (d.numel() values) stored as d.dtype: the KV formats quantize each last-dim row on its own. */
std::vector<std::byte> from_floats(const TensorDesc& d, const std::vector<float>& v) {
  std::vector<std::byte> bytes(d.bytes());
  const int64_t row = is_kv_quantized(d.dtype) ? d.last() : d.numel();
  for (int64_t r = 0; row && r < d.numel() / row; ++r)
    backend::reference::row_from_f32(d.dtype, v.data() + r * row, row,
                                     bytes.data() + static_cast<size_t>(r) * row_bytes(d.dtype, row));
  return bytes;
}

}  // namespace

uint32_t OpGraph::external(graph::TensorKind kind, std::string name, const TensorDesc& d,
                           std::vector<std::byte> bytes) {
  if (bytes.size() != d.bytes()) throw std::runtime_error("test bug: data size does not match " + d.str());
  const uint32_t t = graph_.add_external(kind, std::move(name), d);
  data_.resize(t + 1);
  data_[t] = std::move(bytes);
  return t;
}

uint32_t OpGraph::f32(std::initializer_list<int64_t> shape, float lo, float hi) {
  const TensorDesc d = desc_of(DType::f32, shape);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(d.numel()));
  for (float& x : v) x = u(rng_);
  return external(graph::TensorKind::input, "x", d, as_bytes(v));
}

uint32_t OpGraph::f32_values(std::initializer_list<int64_t> shape, const std::vector<float>& values) {
  return external(graph::TensorKind::input, "x", desc_of(DType::f32, shape), as_bytes(values));
}

uint32_t OpGraph::i32(std::initializer_list<int64_t> shape, const std::vector<int32_t>& values) {
  return external(graph::TensorKind::input, "ids", desc_of(DType::i32, shape), as_bytes(values));
}

uint32_t OpGraph::weight(DType t, std::initializer_list<int64_t> shape, float sd) {
  const TensorDesc d = desc_of(t, shape);
  const float a = sd * std::sqrt(3.0f);
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<float> v(static_cast<size_t>(d.numel()));
  for (float& x : v) x = u(rng_);
  std::vector<std::byte> bytes;
  if (t == DType::f32) {
    bytes = as_bytes(v);
  } else if (t == DType::f16 || t == DType::bf16) {
    bytes.resize(v.size() * 2);
    backend::reference::row_from_f32(t, v.data(), d.numel(), bytes.data());
  } else if (t == DType::q8_0 || t == DType::q4_0) {
    bytes = quantize(t, v);
  } else {
    bytes = random_blocks(t, d.numel(), rng_);
  }
  return external(graph::TensorKind::weight, "w", d, std::move(bytes));
}

uint32_t OpGraph::weight_bytes(DType t, std::initializer_list<int64_t> shape, std::vector<std::byte> bytes) {
  const TensorDesc d = desc_of(t, shape);
  if (bytes.size() != d.bytes()) throw std::invalid_argument("weight_bytes: wrong byte count");
  return external(graph::TensorKind::weight, "w", d, std::move(bytes));
}

uint32_t OpGraph::weight_values(DType t, std::initializer_list<int64_t> shape, const std::vector<float>& values) {
  const TensorDesc d = desc_of(t, shape);
  if (static_cast<int64_t>(values.size()) != d.numel() || is_quantized(t))
    throw std::invalid_argument("weight_values: wrong count, or a quantized dtype");
  std::vector<std::byte> bytes(d.bytes());
  backend::reference::row_from_f32(t, values.data(), d.numel(), bytes.data());
  return external(graph::TensorKind::weight, "w", d, std::move(bytes));
}

uint32_t OpGraph::cache(DType t, std::initializer_list<int64_t> shape, bool zero, std::string name) {
  const TensorDesc d = desc_of(t, shape);
  std::vector<float> v(static_cast<size_t>(d.numel()), 0.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (!zero)
    for (float& x : v) x = u(rng_);
  return external(graph::TensorKind::cache, std::move(name), d, from_floats(d, v));
}

uint32_t OpGraph::cache_values(DType t, std::initializer_list<int64_t> shape, const std::vector<float>& values,
                               std::string name) {
  const TensorDesc d = desc_of(t, shape);
  if (static_cast<int64_t>(values.size()) != d.numel()) throw std::runtime_error("test bug: cache_values size");
  return external(graph::TensorKind::cache, std::move(name), d, from_floats(d, values));
}

uint32_t OpGraph::op(kiln_op op, std::initializer_list<uint32_t> srcs, const kiln_op_params& p) {
  return graph_.add_op(op, std::span<const uint32_t>(srcs.begin(), srcs.size()), p);
}

std::vector<float> OpGraph::data_f32(uint32_t t) const {
  const TensorDesc& d = graph_.tensor(t).desc;
  return to_floats(d, data_.at(t));
}

std::vector<Output> OpGraph::run(Device& device) const {
  const graph::Plan plan = graph::plan_memory(graph_);
  auto arena = device.allocate(std::max<size_t>(plan.arena_bytes, 1), backend::BufferUsage::activations);
  {
    const std::vector<std::byte> poison(arena->size(), std::byte{0xff});  // NaN as f32, -1 as i32
    arena->upload(0, poison.data(), poison.size());
  }
  std::vector<std::unique_ptr<backend::Buffer>> externals(graph_.tensor_count());
  for (uint32_t t = 1; t < graph_.tensor_count(); ++t) {
    const graph::Tensor& x = graph_.tensor(t);
    if (x.kind == graph::TensorKind::intermediate) continue;
    const auto usage = x.kind == graph::TensorKind::weight  ? backend::BufferUsage::weights
                       : x.kind == graph::TensorKind::cache ? backend::BufferUsage::state
                                                            : backend::BufferUsage::activations;
    externals[t] = device.allocate(std::max<size_t>(x.desc.bytes(), 1), usage);
    if (x.kind == graph::TensorKind::weight && prepared_weights)  // as the model host loads them
      externals[t]->upload_weights(0, data_[t].data(), data_[t].size(), x.desc.dtype);
    else
      externals[t]->upload(0, data_[t].data(), data_[t].size());
  }
  const graph::ExternalResolver ext = [&](uint32_t id, const graph::Tensor& x) {
    return backend::TensorRef{externals[id].get(), 0, x.desc};
  };
  device.compute(graph::bind(graph_, plan, *arena, ext));

  std::vector<Output> out;
  auto fetch = [&](uint32_t t, std::string what) {
    const backend::TensorRef ref = graph::locate(graph_, plan, *arena, ext, t);
    std::vector<std::byte> bytes(ref.desc.bytes());
    ref.buffer->download(ref.offset, bytes.data(), bytes.size());
    Output o;
    o.what = std::move(what);
    o.dtype = ref.desc.dtype;
    if (ref.desc.dtype == DType::i32) {
      o.i.resize(static_cast<size_t>(ref.desc.numel()));
      std::memcpy(o.i.data(), bytes.data(), bytes.size());
    } else {
      o.f = to_floats(ref.desc, bytes);
    }
    out.push_back(std::move(o));
  };
  int k = 0;
  for (uint32_t t : graph_.outputs()) fetch(t, "output " + std::to_string(k++));
  for (uint32_t t = 1; t < graph_.tensor_count(); ++t)
    if (graph_.tensor(t).kind == graph::TensorKind::cache) fetch(t, graph_.tensor(t).name);
  return out;
}

std::vector<float> random(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(ref[i])) return INFINITY;
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return num / std::max(den, 1e-30);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

std::vector<std::byte> quantize(DType t, const std::vector<float>& x) {
  const size_t blocks = x.size() / 32;
  const size_t bb = t == DType::q8_0 ? 34 : 18;
  std::vector<std::byte> out(blocks * bb);
  for (size_t b = 0; b < blocks; ++b) {
    const float* v = x.data() + b * 32;
    std::byte* dst = out.data() + b * bb;
    uint16_t dh;
    if (t == DType::q8_0) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
      dh = backend::reference::f32_to_f16(d);
      for (int j = 0; j < 32; ++j) dst[2 + j] = static_cast<std::byte>(static_cast<int8_t>(std::lround(v[j] * id)));
    } else {
      float amax = 0, mx = 0;
      for (int j = 0; j < 32; ++j)
        if (std::fabs(v[j]) > amax) amax = std::fabs(v[j]), mx = v[j];
      const float d = mx / -8.0f, id = d ? 1.0f / d : 0.0f;
      dh = backend::reference::f32_to_f16(d);
      for (int j = 0; j < 16; ++j) {
        const int lo = std::min(15, static_cast<int>(v[j] * id + 8.5f));
        const int hi = std::min(15, static_cast<int>(v[j + 16] * id + 8.5f));
        dst[2 + j] = static_cast<std::byte>(lo | (hi << 4));
      }
    }
    std::memcpy(dst, &dh, 2);
  }
  return out;
}

std::vector<std::byte> random_blocks(DType t, int64_t n, std::mt19937& rng) {
  const std::vector<int> halves = half_fields(t);  // the f16 scale (and min) fields get sane values
  const int64_t bb = quant_block_bytes(t), blocks = n / quant_block(t);
  std::vector<std::byte> out(static_cast<size_t>(blocks * bb));
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xFF);
  std::uniform_real_distribution<float> u(0.2f, 1.0f);
  for (int64_t b = 0; b < blocks; ++b)
    for (int at : halves) {
      const uint16_t h = backend::reference::f32_to_f16(u(rng) * 0.015625f);
      std::memcpy(out.data() + b * bb + at, &h, 2);
    }
  return out;
}

std::vector<float> dequantize(DType t, const std::vector<std::byte>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (t != DType::q8_0 && t != DType::q4_0) {  // the formats core/ggml_blocks checks against libggml
    backend::reference::row_to_f32(t, bytes.data(), n, out.data());
    return out;
  }
  const size_t bb = t == DType::q8_0 ? 34 : 18;
  for (int64_t b = 0; b < n / 32; ++b) {
    const auto* blk = reinterpret_cast<const uint8_t*>(bytes.data()) + b * static_cast<int64_t>(bb);
    const float d = half_to_float(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
    for (int j = 0; j < 32; ++j) {
      const int q = t == DType::q8_0 ? static_cast<int8_t>(blk[2 + j])
                                     : (j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4)) - 8;
      out[static_cast<size_t>(b * 32 + j)] = static_cast<float>(q) * d;
    }
  }
  return out;
}

std::vector<Device*> devices_under_test() {
  auto& reg = backend::Registry::instance();
  std::vector<Device*> out = reg.devices();
  if (const char* env = std::getenv("KILN_DEVICE"); env && *env) {
    out.clear();
    if (Device* d = reg.find(env)) out.push_back(d);
  }
  // KILN_CPU_ISA forces a kernel variant of the native CPU backend; when this CPU cannot run it
  // the backend runs its best instead, which this run must not pass off as the forced one.
  if (const char* isa = std::getenv("KILN_CPU_ISA"); isa && *isa && reg.cpu().info().driver.rfind(isa, 0) != 0) {
    std::printf("KILN_CPU_ISA=%s: this CPU cannot run those kernels; the cpu device is not tested\n", isa);
    std::erase(out, &reg.cpu());
  }
  return out;
}

std::string device_test_name(const Device* d) {
  std::string n = d->info().id;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

bool long_mode() {
  const char* env = std::getenv("KILN_BACKEND_OPS_LONG");
  return env && *env && std::string(env) != "0";
}

}  // namespace kiln::test
