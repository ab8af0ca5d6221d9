// Vulkan-specific behaviour: device choice, clear errors (unsupported op/dtype, out of memory, bad
// ids, no driver), validation-clean kernels, barrier placement, zero-copy import, profiling and
// the pipeline cache. Every test skips (with a message) when no Vulkan device exists.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>

#include "../op_harness.hpp"
#include "backend/backend.hpp"
#include "backend/ops.hpp"
#include "backend/reference/common.hpp"
#include "backend/vulkan/device.hpp"
#include "core/ggml_blocks.hpp"
#include "core/half.hpp"

namespace kiln::test {
namespace {

using backend::BackendError;

/** A second device created with the given environment variables set (the knobs are read once,
 *  when a device is created), then unset again. */
std::unique_ptr<vk::VulkanDevice> device_with_env(std::initializer_list<std::pair<const char*, const char*>> env) {
  for (const auto& [name, value] : env) setenv(name, value, 1);
  auto d = std::make_unique<vk::VulkanDevice>(vk::ContextOptions{});
  for (const auto& [name, value] : env) unsetenv(name);
  return d;
}

vk::VulkanDevice* registry_device() {
  for (Device* d : backend::Registry::instance().devices())
    if (auto* v = dynamic_cast<vk::VulkanDevice*>(d)) return v;
  return nullptr;
}

#define REQUIRE_VULKAN(dev)                  \
  vk::VulkanDevice* dev = registry_device(); \
  if (!dev) GTEST_SKIP() << "no Vulkan device (install mesa-vulkan-drivers for lavapipe); skipping"

/** Buffers for hand-built bound graphs (kept alive for the test). */
struct Bufs {
  std::vector<std::unique_ptr<backend::Buffer>> keep;
  backend::TensorRef make(Device& d, const TensorDesc& desc, const void* data = nullptr) {
    keep.push_back(d.allocate(std::max<size_t>(desc.bytes(), 16), backend::BufferUsage::activations));
    if (data) keep.back()->upload(0, data, desc.bytes());
    return {keep.back().get(), 0, desc};
  }
};

backend::Node node(kiln_op op, std::initializer_list<backend::TensorRef> srcs, backend::TensorRef dst) {
  backend::Node n;
  n.op = op;
  for (const auto& s : srcs) n.src[n.n_src++] = s;
  n.dst = dst;
  return n;
}

TEST(Vulkan, DeviceInfoNamesTheDevice) {
  REQUIRE_VULKAN(dev);
  EXPECT_EQ(dev->info().backend, "vulkan");
  EXPECT_FALSE(dev->info().name.empty());
  EXPECT_EQ(dev->info().id.rfind("vulkan:", 0), 0u);
  if (dev->context().info().is_lavapipe) {
    EXPECT_EQ(dev->info().kind, backend::DeviceKind::software_gpu);
  }
  EXPECT_GT(dev->memory().total, 0u);
  EXPECT_GE(dev->context().info().subgroup_size, 4u);
}

TEST(Vulkan, UnsupportedOpNamesOpDtypeAndDevice) {
  REQUIRE_VULKAN(dev);
  Bufs b;
  std::vector<int32_t> w(8 * 16, 1);
  std::vector<float> x(16, 1.0f);
  backend::BoundGraph g;
  g.nodes.push_back(node(KILN_OP_MATMUL,
                         {b.make(*dev, TensorDesc(DType::f32, {1, 16}), x.data()),
                          b.make(*dev, TensorDesc(DType::i32, {8, 16}), w.data())},
                         b.make(*dev, TensorDesc(DType::f32, {1, 8}))));
  try {
    dev->compute(g);
    FAIL() << "expected an unsupported-op error";
  } catch (const BackendError& e) {
    EXPECT_EQ(e.kind(), BackendError::Kind::unsupported);
    std::string m = e.what();
    EXPECT_NE(m.find("MATMUL"), std::string::npos) << m;
    EXPECT_NE(m.find("i32"), std::string::npos) << m;
    EXPECT_NE(m.find(dev->info().name), std::string::npos) << m;
  }
}

TEST(Vulkan, OutOfMemorySaysAskedAndFree) {
  REQUIRE_VULKAN(dev);
  try {
    dev->allocate(size_t{1} << 50, backend::BufferUsage::weights);
    FAIL() << "expected out of memory";
  } catch (const BackendError& e) {
    EXPECT_EQ(e.kind(), BackendError::Kind::out_of_memory);
    std::string m = e.what();
    EXPECT_NE(m.find("asked 1048576.0 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
  }
  // Within the device's allocation limit but over the accounting limit.
  dev->allocator().set_limit(dev->allocator().stats().used + (8u << 20));
  try {
    dev->allocate(64u << 20, backend::BufferUsage::weights);
    ADD_FAILURE() << "expected out of memory";
  } catch (const BackendError& e) {
    EXPECT_EQ(e.kind(), BackendError::Kind::out_of_memory);
    const std::string m = e.what();
    EXPECT_NE(m.find("asked 64.0 MiB"), std::string::npos) << m;
    EXPECT_EQ(m.find("asked"), m.rfind("asked")) << "said twice: " << m;
    EXPECT_EQ(m.find("[vulkan]"), std::string::npos) << m;
  }
  dev->allocator().set_limit(0);
  auto ok = dev->allocate(1u << 20, backend::BufferUsage::weights);  // still usable afterwards
  EXPECT_EQ(ok->size(), 1u << 20);
}

TEST(Vulkan, GetRowsWithABadIdIsAnError) {
  REQUIRE_VULKAN(dev);
  Bufs b;
  std::vector<float> table(4 * 8, 1.0f);
  std::vector<int32_t> ids = {0, 7};
  backend::BoundGraph g;
  g.nodes.push_back(node(KILN_OP_GET_ROWS,
                         {b.make(*dev, TensorDesc(DType::f32, {4, 8}), table.data()),
                          b.make(*dev, TensorDesc(DType::i32, {2}), ids.data())},
                         b.make(*dev, TensorDesc(DType::f32, {2, 8}))));
  EXPECT_THROW(dev->compute(g), BackendError);
  ids[1] = 3;
  g.nodes[0].src[1].buffer->upload(0, ids.data(), 8);
  EXPECT_NO_THROW(dev->compute(g));  // the device recovers
}

TEST(Vulkan, MoeMatmulWithABadExpertIdIsAnError) {
  REQUIRE_VULKAN(dev);
  Bufs b;
  const int64_t E = 3, M = 8, K = 32;
  std::vector<float> w(static_cast<size_t>(E * M * K), 0.25f), x(2 * K, 1.0f);
  std::vector<int32_t> ids = {0, 2, 1, 3};  // [2 tokens, 2 slots]: 3 is out of range
  backend::BoundGraph g;
  g.nodes.push_back(node(KILN_OP_MOE_MATMUL,
                         {b.make(*dev, TensorDesc(DType::f32, {2, K}), x.data()),
                          b.make(*dev, TensorDesc(DType::f32, {E, M, K}), w.data()),
                          b.make(*dev, TensorDesc(DType::i32, {2, 2}), ids.data())},
                         b.make(*dev, TensorDesc(DType::f32, {2, 2, M}))));
  try {
    dev->compute(g);
    ADD_FAILURE() << "an expert id of 3 with 3 experts was accepted";
  } catch (const BackendError& ex) {
    EXPECT_NE(std::string(ex.what()).find("expert id"), std::string::npos) << ex.what();
  }
  ids[3] = -1;
  g.nodes[0].src[2].buffer->upload(0, ids.data(), 16);
  EXPECT_THROW(dev->compute(g), BackendError);
  ids[3] = 2;
  g.nodes[0].src[2].buffer->upload(0, ids.data(), 16);
  EXPECT_NO_THROW(dev->compute(g));  // the device recovers
  std::vector<float> y(2 * 2 * M);
  g.nodes[0].dst.buffer->download(0, y.data(), y.size() * 4);
  for (float v : y) EXPECT_FLOAT_EQ(v, 8.0f);  // 32 x 0.25 x 1
}

TEST(Vulkan, ATensorPastItsBufferIsAClearError) {
  REQUIRE_VULKAN(dev);
  Bufs b;
  std::vector<float> x(64, 1.0f);
  auto a = b.make(*dev, TensorDesc(DType::f32, {64}), x.data());
  auto y = b.make(*dev, TensorDesc(DType::f32, {64}));
  y.offset = 128;  // 64 floats from byte 128 of a 256-byte buffer
  backend::BoundGraph g;
  g.nodes.push_back(node(KILN_OP_SILU, {a}, y));
  try {
    dev->compute(g);
    ADD_FAILURE() << "a tensor past the end of its buffer was accepted";
  } catch (const BackendError& ex) {
    EXPECT_NE(std::string(ex.what()).find("runs past the end of its 256-byte buffer"), std::string::npos) << ex.what();
  }
}

TEST(Vulkan, SetRowsWithABadSlotIsAnError) {
  REQUIRE_VULKAN(dev);
  Bufs b;
  std::vector<float> rows(2 * 8, 2.0f);
  std::vector<int32_t> slots = {1, 9};
  auto cache = b.make(*dev, TensorDesc(DType::f16, {4, 8}));
  backend::BoundGraph g;
  g.nodes.push_back(node(KILN_OP_SET_ROWS,
                         {cache, b.make(*dev, TensorDesc(DType::f32, {2, 8}), rows.data()),
                          b.make(*dev, TensorDesc(DType::i32, {2}), slots.data())},
                         cache));
  try {
    dev->compute(g);
    FAIL() << "expected an error";
  } catch (const BackendError& e) {
    EXPECT_EQ(e.kind(), BackendError::Kind::invalid);
    EXPECT_NE(std::string(e.what()).find("SET_ROWS"), std::string::npos) << e.what();
  }
}

TEST(Vulkan, TensorsDeepInsideALargeBufferAreReachable) {
  // Bindings start at each tensor's offset (rounded down), so a tensor 150 MiB into a buffer works
  // although lavapipe's maxStorageBufferRange is 128 MiB.
  REQUIRE_VULKAN(dev);
  const size_t big = 160u << 20, at = (150u << 20) + 4096;
  auto buf = dev->allocate(big, backend::BufferUsage::activations);
  std::vector<float> x(64 * 32), w(16 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) * 0.5f;
  buf->upload(at, x.data(), x.size() * 4);
  buf->upload(at + 65536, w.data(), w.size() * 4);
  backend::TensorRef xr{buf.get(), at, TensorDesc(DType::f32, {2, 64})};
  backend::TensorRef wr{buf.get(), at + 65536, TensorDesc(DType::f32, {16, 64})};
  backend::TensorRef yr{buf.get(), at + 131072, TensorDesc(DType::f32, {2, 16})};
  backend::TensorRef zr{buf.get(), at + 196608, TensorDesc(DType::f32, {2, 16})};
  backend::BoundGraph g;
  g.nodes.push_back(node(KILN_OP_MATMUL, {xr, wr}, yr));
  g.nodes.push_back(node(KILN_OP_SILU, {yr}, zr));
  dev->compute(g);
  std::vector<float> y(2 * 16);
  buf->download(at + 131072, y.data(), y.size() * 4);
  for (int r : {0, 1})
    for (int m : {0, 15}) {
      float ref = 0;
      for (int k = 0; k < 64; ++k) ref += x[static_cast<size_t>(r * 64 + k)] * w[static_cast<size_t>(m * 64 + k)];
      EXPECT_NEAR(y[static_cast<size_t>(r * 16 + m)], ref, 1e-3f * std::max(1.0f, std::fabs(ref)));
    }
}

TEST(Vulkan, WeightsBeyondTheTexelReachRunInRowBlocks) {
  // Real case: a 262144-row bf16 LM head exceeds one texel binding (2 GiB). Lower the reach so
  // small weights take the same row-block path, and compare with the CPU reference.
  REQUIRE_VULKAN(dev);
  auto small = device_with_env({{"KILN_VULKAN_TEXEL_REACH", "8192"}});
  ASSERT_EQ(small->policy().texel_reach, 8192u);
  Device& cpu = backend::Registry::instance().reference();
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    OpGraph g(11);
    uint32_t w = g.weight(t, {203, 64});
    g.output(g.op(KILN_OP_MATMUL, {g.f32({3, 64}), w}));
    std::vector<int32_t> ids = {0, 202, 101, 57};
    g.output(g.op(KILN_OP_GET_ROWS, {w, g.i32({4}, ids)}));
    auto got = g.run(*small), ref = g.run(cpu);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LT(nmse(got[0].f, ref[0].f), 5e-7) << dtype_name(t);
    EXPECT_EQ(nmse(got[1].f, ref[1].f), 0.0) << dtype_name(t);
  }
}

// The block formats at every even byte offset of a texel and past it (a tensor of a fused or stacked
// upload may start at any; the fields of 18-, 22-, 110- and 210-byte blocks straddle words and
// texels wherever they start): MATMUL gives the bits of the same weights at offset 0, and GET_ROWS
// the values of the format's definition (core/ggml_blocks.hpp) bit for bit, signed zeros included.
TEST(Vulkan, BlockFormatsReadTheSameAtEveryEvenOffset) {
  REQUIRE_VULKAN(dev);
  std::mt19937 rng(5);
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::iq4_nl, DType::q2_k,
                  DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_xs}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t K = quant_block(t) == 256 ? 512 : 96, M = 9, R = 3, N = 4;
    const TensorDesc wd(t, {M, K});
    const std::vector<std::byte> w = random_blocks(t, M * K, rng);
    std::vector<float> x(static_cast<size_t>(R * K));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
    const std::vector<int32_t> ids = {8, 0, 5, 8};
    std::vector<float> table(static_cast<size_t>(M * K)), r0;
    ASSERT_TRUE(dequantize_blocks(t, reinterpret_cast<const uint8_t*>(w.data()), M * K, table.data()));
    for (int32_t id : ids) r0.insert(r0.end(), table.begin() + id * K, table.begin() + (id + 1) * K);
    std::vector<float> y0;
    for (size_t at : {0, 2, 4, 6, 8, 10, 12, 14, 18}) {
      Bufs b;
      auto wb = dev->allocate(wd.bytes() + 32, backend::BufferUsage::weights);
      wb->upload(at, w.data(), w.size());
      const backend::TensorRef wr{wb.get(), at, wd};
      const backend::TensorRef xr = b.make(*dev, TensorDesc(DType::f32, {R, K}), x.data());
      const backend::TensorRef ir = b.make(*dev, TensorDesc(DType::i32, {N}), ids.data());
      const backend::TensorRef yr = b.make(*dev, TensorDesc(DType::f32, {R, M}));
      const backend::TensorRef rr = b.make(*dev, TensorDesc(DType::f32, {N, K}));
      backend::BoundGraph g;
      g.nodes.push_back(node(KILN_OP_MATMUL, {xr, wr}, yr));
      g.nodes.push_back(node(KILN_OP_GET_ROWS, {wr, ir}, rr));
      dev->compute(g);
      std::vector<float> y(static_cast<size_t>(R * M)), r(static_cast<size_t>(N * K));
      yr.buffer->download(0, y.data(), y.size() * 4);
      rr.buffer->download(0, r.data(), r.size() * 4);
      EXPECT_TRUE(bitwise_equal(r, r0)) << "get_rows at byte offset " << at;
      if (at == 0) y0 = y;
      EXPECT_TRUE(bitwise_equal(y, y0)) << "matmul at byte offset " << at;
    }
  }
}

/** Expert ids of 9 tokens x 2 slots over 4 experts. */
uint32_t ids_of(OpGraph& g) {
  return g.i32({9, 2}, {0, 3, 1, 1, 2, 0, 3, 2, 1, 0, 0, 0, 2, 3, 3, 1, 2, 2});
}

TEST(Vulkan, MatmulOutputsBeyondTheStorageReachRunInRowWindows) {
  // Real case: the logits of every position of a 300-token prompt (300 x 151936 floats, 182 MB)
  // exceed one storage binding on lavapipe (128 MiB). Lower the reach so small products take the
  // same path: windows of whole rows, each row bitwise what the unsplit product gives, for every
  // weight dtype and for MoE rows (whole tokens per window, with their expert ids).
  REQUIRE_VULKAN(dev);
  auto small = device_with_env({{"KILN_VULKAN_STORAGE_REACH", "4096"}});
  ASSERT_EQ(small->policy().storage_reach, 4096u);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    OpGraph g(13);
    // 37 rows of 160 bytes: windows of 24 rows. MoE: 9 tokens x 2 slots of 288 bytes: 8 rows.
    g.output(g.op(KILN_OP_MATMUL, {g.f32({37, 64}), g.weight(t, {40, 64})}));
    g.output(g.op(KILN_OP_MOE_MATMUL, {g.f32({9, 64}), g.weight(t, {4, 72, 64}), ids_of(g)}));
    auto got = g.run(*small);
    EXPECT_EQ(small->last_dispatches(), 2u + 3u) << "37 rows in 2 windows, 18 MoE rows in 3";
    // MoE with one x row per slot (x [N, k, K]: row r reads x row r).
    OpGraph g2(14);
    g2.output(g2.op(KILN_OP_MOE_MATMUL, {g2.f32({9, 2, 64}), g2.weight(t, {4, 72, 64}), ids_of(g2)}));
    auto ref = g.run(*dev);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TRUE(bitwise_equal(got[0].f, ref[0].f)) << dtype_name(t);
    EXPECT_TRUE(bitwise_equal(got[1].f, ref[1].f)) << dtype_name(t) << " MoE";
    EXPECT_TRUE(bitwise_equal(g2.run(*small)[0].f, g2.run(*dev)[0].f)) << dtype_name(t) << " MoE per slot";
  }
  // Output windows and weight row blocks together (a large LM head over many rows).
  auto tiny = device_with_env({{"KILN_VULKAN_STORAGE_REACH", "4096"}, {"KILN_VULKAN_TEXEL_REACH", "8192"}});
  for (DType t : {DType::f16, DType::q8_0}) {
    OpGraph g(15);
    g.output(g.op(KILN_OP_MATMUL, {g.f32({37, 64}), g.weight(t, {203, 64})}));
    EXPECT_TRUE(bitwise_equal(g.run(*tiny)[0].f, g.run(*dev)[0].f)) << dtype_name(t);
  }
}

TEST(Vulkan, ElementwiseOpsBeyondTheStorageReachRunInWindows) {
  // Real case: Gemma 4's logit softcap over a batch of 262144-wide rows passes 128 MiB at 128
  // rows. With the reach lowered to 4096 bytes (960-element windows), unary ops, same-shaped and
  // broadcast binary ops and a unary fused into a binary split into windows (broadcast ones at
  // whole b-periods), each element bitwise what one dispatch gives.
  REQUIRE_VULKAN(dev);
  auto small = device_with_env({{"KILN_VULKAN_STORAGE_REACH", "4096"}});
  OpGraph g(17);
  kiln_op_params cap{};
  cap.cap = 30.0f;
  g.output(g.op(KILN_OP_SOFTCAP, {g.f32({75, 40}, -90.0f, 90.0f)}, cap));
  g.output(g.op(KILN_OP_MUL, {g.f32({75, 40}), g.f32({75, 40})}));
  g.output(g.op(KILN_OP_ADD, {g.f32({75, 40}), g.f32({40})}));
  g.output(g.op(KILN_OP_MUL, {g.op(KILN_OP_SILU, {g.f32({75, 40})}), g.f32({75, 40})}));
  g.output(g.op(KILN_OP_MUL, {g.f32({4, 5, 3, 40}), g.f32({4, 1, 3, 40})}));
  auto got = g.run(*small), ref = g.run(*dev);
  ASSERT_EQ(got.size(), 5u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(bitwise_equal(got[i].f, ref[i].f)) << "output " << i;
  EXPECT_GE(small->last_dispatches(), 4u * 4 + 4) << "3000-element ops in 4 windows, 2400 in 4";
  // One b-period (a dim-0 slice of 3 x 40 x 40 elements here) must fit in a window.
  OpGraph big(3);
  big.output(big.op(KILN_OP_MUL, {big.f32({2, 3, 40, 40}), big.f32({2, 1, 40, 40})}));
  EXPECT_THROW(big.run(*small), BackendError);
}

TEST(Vulkan, GatedDeltaStateBeyondTheStorageReachRunsInWindowsOfSlots) {
  // Real case: a Qwen3.5 layer's recurrent state is 2 MiB a slot, so 64 sequences fill lavapipe's
  // 128 MiB binding. With the reach lowered to 4096 bytes (512 / 384-byte slots: windows of 7 / 10), three
  // sequences in slots of different windows (one of them a prefill) give bitwise the outputs and
  // final states of one dispatch, and untouched slots stay as they were. Both forms: the chunked
  // one (chunks of 4, so its scratch fits) runs pass 1 once, pass 2 per window, and the recurrent
  // kernel (one-token chunks) per window before and after.
  REQUIRE_VULKAN(dev);
  for (const char* form : {"recurrent", "chunked"}) {
    auto small = device_with_env({{"KILN_VULKAN_STORAGE_REACH", "4096"}, {"KILN_VULKAN_DELTA", form}});
    auto whole = device_with_env({{"KILN_VULKAN_DELTA", form}});
    const bool chunked = std::string(form) == "chunked";
    for (int64_t dv : {8, 6}) {  // recurrent: 4 value columns per invocation, state read as texels; 2
      OpGraph g(19);
      const int64_t n = 1 + 6 + 1, hv = 2, dk = 8;
      const uint32_t state = g.cache(DType::f32, {20, hv, dk, dv}, false, "ssm state");
      const std::vector<int32_t> seqs = {0, 1, 5, 9, 1, 6, 6, 0, 7, 1, 3, 19};  // {q_start, q_len, kv_len, slot}
      kiln_op_params p{};
      p.mode = KILN_DELTA_CHUNKED, p.chunk = 4;
      g.output(g.op(KILN_OP_GATED_DELTA,
                    {g.f32({n, 1, dk}, -0.3f, 0.3f), g.f32({n, 1, dk}, -0.3f, 0.3f), g.f32({n, hv, dv}),
                     g.f32({n, hv}, -1.0f, 0.0f), g.f32({n, hv}, 0.0f, 1.0f), state, g.i32({3, 4}, seqs)},
                    p));
      auto got = g.run(*small), ref = g.run(*whole);
      ASSERT_EQ(got.size(), 2u);
      EXPECT_TRUE(bitwise_equal(got[0].f, ref[0].f)) << "output, Dv " << dv << ", " << form;
      EXPECT_TRUE(bitwise_equal(got[1].f, ref[1].f)) << "state, Dv " << dv << ", " << form;
      const uint32_t windows = dv == 8 ? 3u : 2u;
      EXPECT_EQ(small->last_dispatches(), chunked ? 1u + 3u * windows : windows) << "windows of 7 / 10 slots, " << form;
    }
  }
}

namespace {

/** One GATED_DELTA call (Hk 1, Hv 2, Dk 16, Dv 12) over tokens [t0, t0 + len) of fixed random
 *  inputs, on `d`, from `state`, which it updates; returns the output rows. */
std::vector<float> delta_call(Device& d, int64_t t0, int64_t len, int mode, int chunk, std::vector<float>& state) {
  const int64_t T = 200, hv = 2, dk = 16, dv = 12;
  static const auto q = random(static_cast<size_t>(T * dk), 1, -0.25f, 0.25f),
                    k = random(static_cast<size_t>(T * dk), 2, -0.25f, 0.25f),
                    v = random(static_cast<size_t>(T * hv * dv), 3),
                    gate = random(static_cast<size_t>(T * hv), 4, -0.3f, 0.0f),
                    beta = random(static_cast<size_t>(T * hv), 5, 0.0f, 1.0f);
  auto rows = [&](const std::vector<float>& x, int64_t w) {
    return std::vector<float>(x.begin() + t0 * w, x.begin() + (t0 + len) * w);
  };
  OpGraph g;
  kiln_op_params p{};
  p.mode = mode, p.chunk = chunk;
  const uint32_t st = g.cache_values(DType::f32, {1, hv, dk, dv}, state, "state");
  g.output(g.op(KILN_OP_GATED_DELTA,
                {g.f32_values({len, 1, dk}, rows(q, dk)), g.f32_values({len, 1, dk}, rows(k, dk)),
                 g.f32_values({len, hv, dv}, rows(v, hv * dv)), g.f32_values({len, hv}, rows(gate, hv)),
                 g.f32_values({len, hv}, rows(beta, hv)), st,
                 g.i32({1, 4}, {0, static_cast<int32_t>(len), static_cast<int32_t>(t0 + len), 0})},
                p));
  auto out = g.run(d);
  state = out[1].f;
  return out[0].f;
}

/** GATED_DELTA layers over a ragged batch of `lens` (one state slot per sequence, slot = index),
 *  each layer a node with its own state and inputs, in one graph; q/k heads 1, value heads 2. */
std::vector<Output> delta_layers(Device& d, const std::vector<int>& lens, int layers, int64_t dk, int64_t dv, int chunk,
                                 uint32_t seed) {
  OpGraph g(seed);
  int64_t n = 0;
  std::vector<int32_t> seqs;
  for (size_t s = 0; s < lens.size(); ++s) {
    seqs.insert(seqs.end(), {static_cast<int32_t>(n), lens[s], lens[s], static_cast<int32_t>(s)});
    n += lens[s];
  }
  kiln_op_params p{};
  p.mode = KILN_DELTA_CHUNKED, p.chunk = chunk;
  const auto S = static_cast<int64_t>(lens.size());
  for (int l = 0; l < layers; ++l) {
    const uint32_t state = g.cache(DType::f32, {S, 2, dk, dv}, false, "ssm state");
    g.output(g.op(KILN_OP_GATED_DELTA,
                  {g.f32({n, 1, dk}, -0.3f, 0.3f), g.f32({n, 1, dk}, -0.3f, 0.3f), g.f32({n, 2, dv}),
                   g.f32({n, 2}, -0.5f, 0.0f), g.f32({n, 2}, 0.0f, 1.0f), state, g.i32({S, 4}, seqs)},
                  p));
  }
  return g.run(d);
}

}  // namespace

TEST(Vulkan, GatedDeltaChunkedFormMatchesTheRecurrentFormWithCarriedState) {
  // The chunked kernels (forced on lavapipe, whose policy keeps the recurrent kernel) against the
  // recurrent kernel: one call over 200 tokens, and calls of 50 / 81 / 1 / 68 tokens carrying the
  // state (chunks of 16, 64 (one longer than a call) and 7, crossing chunk and call boundaries).
  REQUIRE_VULKAN(dev);
  auto chunked = device_with_env({{"KILN_VULKAN_DELTA", "chunked"}});
  std::vector<float> s_rec(2 * 16 * 12, 0.0f);
  const auto rec = delta_call(*dev, 0, 200, KILN_DELTA_RECURRENT, 0, s_rec);
  EXPECT_EQ(dev->last_dispatches(), 1u) << "the recurrent kernel";
  for (int chunk : {16, 64, 7}) {
    std::vector<float> s(2 * 16 * 12, 0.0f), out;
    for (auto [t0, len] : std::vector<std::pair<int64_t, int64_t>>{{0, 50}, {50, 81}, {131, 1}, {132, 68}}) {
      auto y = delta_call(*chunked, t0, len, KILN_DELTA_CHUNKED, chunk, s);
      EXPECT_EQ(chunked->last_dispatches(), 4u)
          << "pass 1 and pass 2 ran, the recurrent kernel around them, chunk " << chunk;
      out.insert(out.end(), y.begin(), y.end());
    }
    EXPECT_LT(nmse(out, rec), 1e-10) << "chunk " << chunk;
    EXPECT_LT(nmse(s, s_rec), 1e-10) << "chunk " << chunk;
    std::vector<float> s1(2 * 16 * 12, 0.0f);
    EXPECT_LT(nmse(delta_call(*chunked, 0, 200, KILN_DELTA_CHUNKED, chunk, s1), rec), 1e-10)
        << "one call, chunk " << chunk;
  }
}

TEST(Vulkan, GatedDeltaChunkedRunsAtQwen35HeadSizes) {
  // Key and value heads of 128 (Qwen3.5): the chunked kernels must take them (shared memory, scratch
  // and loop budget fit), not fall back to the recurrent kernel, and match the CPU reference.
  REQUIRE_VULKAN(dev);
  auto chunked = device_with_env({{"KILN_VULKAN_DELTA", "chunked"}});
  Device& cpu = backend::Registry::instance().reference();
  const auto got = delta_layers(*chunked, {70, 1, 130}, 1, 128, 128, 0, 31);
  EXPECT_EQ(chunked->last_dispatches(), 4u) << "pass 1 and pass 2, the recurrent kernel around them";
  const auto ref = delta_layers(cpu, {70, 1, 130}, 1, 128, 128, 0, 31);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(nmse(got[i].f, ref[i].f), 1e-9) << got[i].what;
}

TEST(Vulkan, GatedDeltaChunkedLongPrefillAtTheRealLoopBudget) {
  // The pass-2 round size comes from counted loop iterations; a count below what the shader runs
  // would let llvmpipe cut the loops short (65535 a call) and the output would be wrong. At the
  // real budget (60000), a key head of 126 (not a multiple of 4: the scalar path, whose loops the
  // count models pass for pass) and chunks of 64, a 1900-token prefill (30 chunks; 19 a round with
  // 8 lanes per column, ~59000 counted iterations) takes two rounds, and must match the CPU
  // reference.
  REQUIRE_VULKAN(dev);
  if (!dev->policy().loop_budget) GTEST_SKIP() << "no loop budget on this device";
  auto chunked = device_with_env({{"KILN_VULKAN_DELTA", "chunked"}, {"KILN_VULKAN_DELTA_TB", "8"}});
  Device& cpu = backend::Registry::instance().reference();
  const auto got = delta_layers(*chunked, {1900}, 1, 126, 16, 64, 51);
  EXPECT_EQ(chunked->last_dispatches(), 5u) << "pass 1 and two rounds of pass 2, the recurrent kernel around them";
  const auto ref = delta_layers(cpu, {1900}, 1, 126, 16, 64, 51);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(nmse(got[i].f, ref[i].f), 1e-9) << got[i].what;
}

TEST(Vulkan, GatedDeltaChunkRoundsUnderALoopBudgetGiveTheBitsOfOneRound) {
  // llvmpipe ends a shader's loops after 65535 iterations, so a long prefill's chunks run in
  // rounds of dispatches carrying the state. With the budget lowered to 600 iterations (300 of them
  // reserved for the sequence scans) a 200-token call in chunks of 8 (25 chunk slots, and one spare
  // for a sequence starting inside a chunk;
  // 94 counted iterations per chunk with Dk 16 and 8 lanes per column: 2 a round) takes pass 1 and
  // 13 rounds of pass 2, and gives the bits of one round.
  REQUIRE_VULKAN(dev);
  auto one = device_with_env({{"KILN_VULKAN_DELTA", "chunked"}, {"KILN_VULKAN_DELTA_TB", "8"}});
  auto tight = device_with_env(
      {{"KILN_VULKAN_LOOP_BUDGET", "600"}, {"KILN_VULKAN_DELTA", "chunked"}, {"KILN_VULKAN_DELTA_TB", "8"}});
  std::vector<float> s_one(2 * 16 * 12, 0.0f), s_rounds(2 * 16 * 12, 0.0f);
  const auto whole = delta_call(*one, 0, 200, KILN_DELTA_CHUNKED, 8, s_one);
  EXPECT_EQ(one->last_dispatches(), 4u) << "pass 1 and one round of pass 2, the recurrent kernel around them";
  const auto rounds = delta_call(*tight, 0, 200, KILN_DELTA_CHUNKED, 8, s_rounds);
  EXPECT_EQ(tight->last_dispatches(), 16u) << "pass 1 and 13 rounds of pass 2, the recurrent kernel around them";
  EXPECT_TRUE(bitwise_equal(rounds, whole));
  EXPECT_TRUE(bitwise_equal(s_rounds, s_one));
}

TEST(Vulkan, GatedDeltaChunkGroupsAndSharedScratchGiveTheBitsOfOneGroup) {
  // The chunked form's scratch holds a group of chunks (as many as fit 256 MiB and a binding); a
  // batch with more runs group after group. With groups capped at 5 chunks, three sequences of
  // 40 / 1 / 23 tokens in chunks of 4 (17 chunks, 20 slots reserved) take 4 groups, and two layers
  // in one graph share the scratch (the second's pass 1 must wait for the first's pass 2). Every
  // output and state is bitwise what one group gives. (backend_batch_invariance_test runs under
  // the same cap in ctest: a sequence alone and in a batch split differently give the same bits.)
  REQUIRE_VULKAN(dev);
  auto whole = device_with_env({{"KILN_VULKAN_DELTA", "chunked"}});
  auto grouped = device_with_env({{"KILN_VULKAN_DELTA", "chunked"}, {"KILN_VULKAN_DELTA_GROUP", "5"}});
  const std::vector<int> lens = {40, 1, 23};
  // Per layer the recurrent kernel (one-token first chunks), pass 1, pass 2, the recurrent kernel
  // (one-token last chunks). Every dispatch depends on the one before (pass 2 reads pass 1's
  // scratch; the next pass 1 overwrites what the last pass 2 read; the state carries between groups
  // and kernels) but each layer's pass 1 on its first recurrent dispatch: one barrier each but those.
  const auto ref = delta_layers(*whole, lens, 2, 8, 8, 4, 41);
  EXPECT_EQ(whole->last_dispatches(), 2u * 4) << "per layer: recurrent, pass 1, pass 2, recurrent";
  EXPECT_EQ(whole->last_barriers(), whole->last_dispatches() - 2);
  const auto got = delta_layers(*grouped, lens, 2, 8, 8, 4, 41);
  EXPECT_EQ(grouped->last_dispatches(), 2u * (1 + 4 + 4 + 1)) << "per layer: 4 groups of pass 1 + pass 2";
  EXPECT_EQ(grouped->last_barriers(), grouped->last_dispatches() - 2);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(bitwise_equal(got[i].f, ref[i].f)) << got[i].what;
}

TEST(Vulkan, RecurrentStateSlotOutsideTheStateIsAnError) {
  // A sequence whose state slot is past the state (or negative) is reported, as the CPU backend
  // does, instead of reading and writing outside the tensor; the other sequences still run.
  REQUIRE_VULKAN(dev);
  for (int32_t bad : {2, -1}) {
    OpGraph gd(21);
    const uint32_t state = gd.cache(DType::f32, {2, 2, 8, 8}, false, "ssm state");
    gd.output(gd.op(KILN_OP_GATED_DELTA, {gd.f32({2, 1, 8}, -0.3f, 0.3f), gd.f32({2, 1, 8}, -0.3f, 0.3f),
                                          gd.f32({2, 2, 8}), gd.f32({2, 2}, -1.0f, 0.0f), gd.f32({2, 2}, 0.0f, 1.0f),
                                          state, gd.i32({2, 4}, {0, 1, 3, 0, 1, 1, 4, bad})}));
    try {
      gd.run(*dev);
      ADD_FAILURE() << "GATED_DELTA slot " << bad;
    } catch (const BackendError& e) {
      EXPECT_NE(std::string(e.what()).find("state slot"), std::string::npos) << e.what();
    }
    OpGraph cv(22);
    const uint32_t cstate = cv.cache(DType::f32, {2, 3, 8}, false, "conv state");
    cv.output(cv.op(KILN_OP_CONV1D_CAUSAL,
                    {cv.f32({2, 8}), cv.f32({8, 4}), cstate, cv.i32({2, 4}, {0, 1, 3, 0, 1, 1, 4, bad})}));
    try {
      cv.run(*dev);
      ADD_FAILURE() << "CONV1D_CAUSAL slot " << bad;
    } catch (const BackendError& e) {
      EXPECT_NE(std::string(e.what()).find("state slot"), std::string::npos) << e.what();
    }
  }
}

TEST(Vulkan, StagingUploadsAndDownloadsWork) {
  // The discrete-GPU path (device memory not mappable) forced on this device.
  REQUIRE_VULKAN(dev);
  auto sdev = device_with_env({{"KILN_VULKAN_STAGING", "1"}});
  ASSERT_FALSE(sdev->allocator().device_is_host_visible());
  Device& cpu = backend::Registry::instance().reference();
  OpGraph g(5);
  uint32_t y = g.op(KILN_OP_MATMUL, {g.f32({3, 40}), g.weight(DType::f16, {9, 40})});
  g.output(g.op(KILN_OP_SILU, {y}));
  auto got = g.run(*sdev), ref = g.run(cpu);
  EXPECT_LT(nmse(got[0].f, ref[0].f), 1e-7);
  auto buf = sdev->allocate(1000, backend::BufferUsage::activations);
  EXPECT_EQ(buf->host_ptr(), nullptr);
  std::vector<uint8_t> in(1000), out(1000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  buf->upload(0, in.data(), in.size());
  buf->download(0, out.data(), out.size());
  EXPECT_EQ(in, out);
}

TEST(Vulkan, MatmulRowsAreBitwiseTheSameInEveryTile) {
  // Decode (TM=1), small batches (TM=4) and prefill (TM=8) tiles must give identical bits per row
  // (docs/backend.md §5), on the aligned and the scalar read paths (f32 only: each prefill tile
  // costs seconds of cold lavapipe JIT; the other dtypes share the code and the shared
  // batch-invariance test covers them).
  REQUIRE_VULKAN(dev);
  for (DType t : {DType::f32}) {
    for (int64_t K : {160, 45}) {
      if (is_quantized(t) && K % 32) continue;
      const int64_t N = 20, M = 19;
      std::vector<float> x(static_cast<size_t>(N * K));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
      auto run = [&](int64_t r0, int64_t n) {
        OpGraph g(3);  // same seed: same weights
        uint32_t w = g.weight(t, {M, K});
        std::vector<float> xs(x.begin() + r0 * K, x.begin() + (r0 + n) * K);
        g.output(g.op(KILN_OP_MATMUL, {g.f32_values({n, K}, xs), w}));
        return g.run(*dev)[0].f;
      };
      auto all = run(0, N);
      for (int64_t r : {0, 7, 19}) {
        auto one = run(r, 1);
        std::vector<float> ref(all.begin() + r * M, all.begin() + (r + 1) * M);
        EXPECT_TRUE(bitwise_equal(one, ref)) << dtype_name(t) << " K=" << K << " row " << r;
      }
      auto four = run(3, 5);  // TM=4 tile
      std::vector<float> ref4(all.begin() + 3 * M, all.begin() + 8 * M);
      EXPECT_TRUE(bitwise_equal(four, ref4)) << dtype_name(t) << " K=" << K << " rows 3..7";
    }
  }
}

TEST(Vulkan, MatmulKeepsInfAndNanOfHalfWeights) {
  // matmul.comp converts f16 with a fast path that turns exponent-31 halves into finite values
  // and redoes only the lanes that met one: inf/NaN must come out exactly as IEEE says, and the
  // other outputs of the same tile (and lane) must be unaffected. Also the largest/smallest normal.
  REQUIRE_VULKAN(dev);
  Device* cpu_dev = backend::Registry::instance().find("reference");
  ASSERT_NE(cpu_dev, nullptr);
  Device& cpu = *cpu_dev;
  for (DType t : {DType::f16, DType::bf16}) {
    for (int64_t K : {136, 45}) {  // the aligned (texel) and the scalar read paths
      const int64_t M = 24;
      std::vector<float> w(static_cast<size_t>(M * K)), x(static_cast<size_t>(K));
      for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(static_cast<float>(i) * 0.61f) * 0.25f;
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f + 0.25f * std::sin(static_cast<float>(i));  // > 0
      w[3 * K + 10] = INFINITY;
      w[7 * K + 20] = -INFINITY;
      w[11 * K + 30] = NAN;
      w[12 * K + 5] = INFINITY;  // +inf and -inf in one row: NaN
      w[12 * K + 40] = -INFINITY;
      w[13 * K + 1] = 65504.0f;  // largest normal half (f16 exponent 30)
      w[13 * K + 2] = -65504.0f;
      w[14 * K + 3] = 6.103515625e-05f;  // smallest normal half
      w[15 * K + 4] = 5.9604645e-08f;    // subnormal halves (flushed to 0 by the fast path)
      w[15 * K + 5] = -3.0e-05f;
      auto run = [&](Device& d) {
        OpGraph g;
        g.output(g.op(KILN_OP_MATMUL, {g.f32_values({1, K}, x), g.weight_values(t, {M, K}, w)}));
        return g.run(d)[0].f;
      };
      auto got = run(*dev), ref = run(cpu);
      ASSERT_EQ(got.size(), static_cast<size_t>(M));
      std::string what = std::string(dtype_name(t)) + " K=" + std::to_string(K);
      EXPECT_EQ(got[3], INFINITY) << what;
      EXPECT_EQ(got[7], -INFINITY) << what;
      EXPECT_TRUE(std::isnan(got[11])) << what;
      EXPECT_TRUE(std::isnan(got[12])) << what;
      for (int64_t m = 0; m < M; ++m) {
        if (m == 3 || m == 7 || m == 11 || m == 12) continue;
        ASSERT_TRUE(std::isfinite(got[static_cast<size_t>(m)])) << what << " row " << m;
        EXPECT_NEAR(got[static_cast<size_t>(m)], ref[static_cast<size_t>(m)],
                    1e-5 * (1 + std::fabs(ref[static_cast<size_t>(m)])))
            << what << " row " << m;
      }
    }
  }
}

TEST(Vulkan, PreparedHalfWeightsGiveTheBitsOfRawOnes) {
  // upload_weights flushes f16 subnormals and marks ranges without inf/NaN, and matmul.comp then
  // skips its per-weight checks (CLEAN). The results must be bitwise those of the same weights
  // uploaded raw (checked path), for decode and batched tiles, aligned and scalar reads.
  REQUIRE_VULKAN(dev);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t K : {136, 45, 1024}) {
    for (int64_t R : {1, 3, 9}) {
      const int64_t M = 37;
      std::vector<float> w(static_cast<size_t>(M * K)), x(static_cast<size_t>(R * K));
      for (float& v : w) v = u(rng) * 0.1f;
      for (size_t i = 0; i < w.size(); i += 29) w[i] = u(rng) * 5.0e-5f;  // subnormal halves (~3%)
      for (float& v : x) v = u(rng);
      auto run = [&](bool prepared) {
        OpGraph g;
        g.prepared_weights = prepared;
        g.output(g.op(KILN_OP_MATMUL, {g.f32_values({R, K}, x), g.weight_values(DType::f16, {M, K}, w)}));
        return g.run(*dev)[0].f;
      };
      EXPECT_TRUE(bitwise_equal(run(true), run(false))) << "K=" << K << " R=" << R;
    }
  }
  // The prepared runs took the CLEAN variant (its specialization constant is the last one).
  bool clean_variant = false;
  for (const std::string& l : dev->pipelines().labels())
    clean_variant |= l.rfind("matmul_f16<", 0) == 0 && l.size() > 3 && l.substr(l.size() - 3) == ",1>";
  EXPECT_TRUE(clean_variant);
  // Tables read through GET_ROWS: the stored (flushed) subnormals read as the raw ones do.
  const int64_t V = 50, D = 72;
  std::vector<float> table(static_cast<size_t>(V * D));
  for (float& v : table) v = u(rng) * 0.1f;
  for (size_t i = 0; i < table.size(); i += 7) table[i] = u(rng) * 5.0e-5f;
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  auto gather = [&](bool prepared) {
    OpGraph g;
    g.prepared_weights = prepared;
    g.output(g.op(KILN_OP_GET_ROWS, {g.weight_values(DType::f16, {V, D}, table), g.i32({5}, ids)}));
    return g.run(*dev)[0].f;
  };
  EXPECT_TRUE(bitwise_equal(gather(true), gather(false)));
}

TEST(Vulkan, PreparedHalfWeightRangesAreTracked) {
  // Which bytes hold prepared f16 weights: only what upload_weights wrote without inf/NaN, and
  // no longer once upload() or a kernel writes there. The stored form has subnormals flushed.
  REQUIRE_VULKAN(dev);
  auto buf = dev->allocate(4096, backend::BufferUsage::weights);
  auto* vb = static_cast<vk::VulkanBuffer*>(buf.get());
  std::vector<uint16_t> h(512, 0x3c00);  // 1.0
  h[3] = 0x0001;                         // the smallest subnormal
  h[4] = 0x83ff;                         // the largest negative subnormal
  vb->upload_weights(0, h.data(), 1024, DType::f16);
  vb->upload_weights(1024, h.data(), 1024, DType::f16);
  EXPECT_TRUE(vb->half_clean(0, 2048));  // two uploads, one range
  std::vector<uint16_t> back(512);
  vb->download(0, back.data(), 1024);
  EXPECT_EQ(back[3], 0x0000);
  EXPECT_EQ(back[4], 0x8000);
  EXPECT_EQ(back[5], 0x3c00);
  h[100] = 0x7c00;  // +inf: this range keeps the checked path
  vb->upload_weights(2048, h.data(), 1024, DType::f16);
  EXPECT_FALSE(vb->half_clean(2048, 1024));
  EXPECT_FALSE(vb->half_clean(1024, 2048));
  vb->upload_weights(3072, h.data(), 1024, DType::bf16);  // other dtypes are stored as given
  EXPECT_FALSE(vb->half_clean(3072, 1024));
  vb->upload(512, h.data(), 2);  // a raw write splits the range
  EXPECT_TRUE(vb->half_clean(0, 512));
  EXPECT_FALSE(vb->half_clean(0, 1024));
  EXPECT_TRUE(vb->half_clean(514, 1534));
  // A kernel writing into the range (here an f32 ADD's output) voids the mark too.
  Bufs b;
  std::vector<float> ones(16, 1.0f);
  auto a = b.make(*dev, TensorDesc(DType::f32, {16}), ones.data());
  backend::BoundGraph g;
  g.nodes.push_back(node(KILN_OP_ADD, {a, a}, {buf.get(), 1024, TensorDesc(DType::f32, {16})}));
  dev->compute(g);
  EXPECT_FALSE(vb->half_clean(1024, 64));
  EXPECT_TRUE(vb->half_clean(1088, 960));
}

TEST(Vulkan, MatmulKBeyondTheLoopBudgetIsAnError) {
  // matmul.comp's f16 redo walks the lane's K chunks once per tile row, so on llvmpipe (loops end
  // after 65535 passes) a very long K would silently stop early: it is refused instead, and a K
  // just inside runs and matches the CPU reference.
  REQUIRE_VULKAN(dev);
  const uint32_t budget = dev->policy().loop_budget;
  if (!budget) GTEST_SKIP() << "no loop budget on this device";
  Device* cpu = backend::Registry::instance().find("reference");
  ASSERT_NE(cpu, nullptr);
  const uint64_t sg = dev->context().info().subgroup_size, tn = 16;
  const int64_t k_max = static_cast<int64_t>((budget - tn - 8) / (tn + 2) * sg * 8);  // passes within budget
  for (int64_t K : {k_max / 64 * 64, k_max + 64 * static_cast<int64_t>(sg)}) {
    std::vector<float> w(static_cast<size_t>(K)), x(static_cast<size_t>(K));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = std::sin(static_cast<float>(i) * 0.01f) * 0.1f, x[i] = std::cos(static_cast<float>(i) * 0.013f);
    auto run = [&](Device& d) {
      OpGraph g;
      g.output(g.op(KILN_OP_MATMUL, {g.f32_values({1, K}, x), g.weight_values(DType::f16, {1, K}, w)}));
      return g.run(d)[0].f;
    };
    if (K > k_max) {
      try {
        run(*dev);
        FAIL() << "K " << K << " should exceed the loop budget";
      } catch (const BackendError& e) {
        EXPECT_NE(std::string(e.what()).find("loop passes"), std::string::npos) << e.what();
      }
    } else {
      const float got = run(*dev)[0], ref = run(*cpu)[0];
      EXPECT_NEAR(got, ref, 1e-3 * (1 + std::fabs(ref))) << "K " << K;
    }
  }
}

TEST(Vulkan, AttentionKeyLimitOfTheLoopBudget) {
  // llvmpipe ends a shader's loops after 65535 iterations per invocation, silently. Attention
  // computes how many keys an invocation can visit (attention_max_keys): a sequence of exactly
  // that many keys must still see its last key, one more must be an error, not a softmax over a
  // truncated key range. The last key's score dominates and its value is 7, so the output is ~7
  // only if it was visited. Blocks of 16 and of 1 (the limit is one loop pass per subgroup of
  // keys either way). With the real budget (~223000 keys) by default; ctest
  // vulkan_loop_budget_attention reruns it with a budget of 256 (416 keys). Skips on devices
  // without a budget (GPUs).
  REQUIRE_VULKAN(dev);
  const uint32_t budget = dev->policy().loop_budget;
  if (budget == 0) GTEST_SKIP() << "no loop budget on " << dev->info().name;
  const int64_t D = 8;
  for (int64_t bs : {16, 1}) {
    const int64_t limit = vk::attention_max_keys(dev->policy(), bs);
    auto run = [&](int64_t kv) {
      const int64_t nblocks = (kv + bs - 1) / bs;
      std::vector<float> q(2 * D, 0.25f), k(static_cast<size_t>(nblocks * bs * D)), v(k.size());
      for (size_t i = 0; i < k.size(); ++i) k[i] = 0.01f * static_cast<float>(i % 7), v[i] = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        k[static_cast<size_t>((kv - 1) * D + d)] = 40.0f;  // the last key: score 40·0.25·8/√8 ≈ 28
        v[static_cast<size_t>((kv - 1) * D + d)] = 7.0f;
      }
      std::vector<int32_t> table(static_cast<size_t>(nblocks));
      std::iota(table.begin(), table.end(), 0);
      OpGraph g;
      const uint32_t kc = g.cache_values(DType::f32, {nblocks, bs, 1, D}, k);
      const uint32_t vc = g.cache_values(DType::f32, {nblocks, bs, 1, D}, v);
      const uint32_t seqs = g.i32({1, 4}, {0, 1, static_cast<int32_t>(kv), 0});
      g.output(g.op(KILN_OP_ATTENTION, {g.f32_values({1, 2, D}, q), kc, vc, g.i32({1, nblocks}, table), seqs}));
      return g.run(*dev)[0].f;
    };
    const auto out = run(limit);
    ASSERT_EQ(out.size(), static_cast<size_t>(2 * D));
    for (float o : out)
      EXPECT_NEAR(o, 7.0f, 1e-3f) << "bs " << bs << ", " << limit << " keys: the last key was not seen";
    try {
      run(limit + 1);
      FAIL() << "expected an error for " << limit + 1 << " keys with blocks of " << bs;
    } catch (const BackendError& e) {
      EXPECT_EQ(e.kind(), BackendError::Kind::invalid);
      EXPECT_NE(std::string(e.what()).find("attends to more keys"), std::string::npos) << e.what();
    }
  }
}

TEST(Vulkan, HalfMatmulSurvivesActivationsAbove2To16) {
  // The f16 fast path folds the 2^112 of its half->f32 widening into the activations, which
  // overflows for |x| >= 2^16 where w·x itself is finite. Such lanes must be redone exactly:
  // results finite and equal to the CPU reference, in decode (1 row) and batched (9 row) tiles,
  // on the aligned and the scalar read paths; a row of ordinary activations in the same batch
  // keeps its bits, also when its weights have subnormal halves (which the fast path flushes: the
  // redo must flush them too, or one row's activations would change another row's result).
  REQUIRE_VULKAN(dev);
  Device* cpu_dev = backend::Registry::instance().find("reference");
  ASSERT_NE(cpu_dev, nullptr);
  for (int64_t K : {136, 45}) {
    for (int64_t R : {1, 9}) {
      const int64_t M = 20;
      std::vector<float> w(static_cast<size_t>(M * K)), x(static_cast<size_t>(R * K));
      for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(static_cast<float>(i) * 0.37f) * 0.5f;
      for (int64_t m = 0; m < M; ++m) w[static_cast<size_t>(m * K + 5)] = 3.0e-5f;  // a subnormal half per row
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.9f);
      x[7] = 70000.0f;  // row 0: 2^16 < |x|, and far above it
      x[20] = -3.0e37f;
      if (R > 1) x[static_cast<size_t>(4 * K + 3)] = 65536.0f;  // row 4: exactly 2^16
      auto run = [&](Device& d, int64_t rows) {
        OpGraph g;
        std::vector<float> xs(x.begin(), x.begin() + rows * K);
        g.output(g.op(KILN_OP_MATMUL, {g.f32_values({rows, K}, xs), g.weight_values(DType::f16, {M, K}, w)}));
        return g.run(d)[0].f;
      };
      auto got = run(*dev, R), ref = run(*cpu_dev, R);
      ASSERT_EQ(got.size(), static_cast<size_t>(R * M));
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << "K=" << K << " R=" << R << " output " << i;
        // + the flushed subnormal: |w| < 6.1e-5 against |x[5]| <= 1 (the CPU reference keeps it)
        EXPECT_NEAR(got[i], ref[i], 1e-5 * (1 + std::fabs(ref[i])) + 6.2e-5)
            << "K=" << K << " R=" << R << " output " << i;
      }
      if (R > 1) {  // row 1 has ordinary activations: bitwise what it gives alone
        OpGraph g;
        std::vector<float> x1(x.begin() + K, x.begin() + 2 * K);
        g.output(g.op(KILN_OP_MATMUL, {g.f32_values({1, K}, x1), g.weight_values(DType::f16, {M, K}, w)}));
        auto alone = g.run(*dev)[0].f;
        for (int64_t m = 0; m < M; ++m)
          EXPECT_EQ(got[static_cast<size_t>(M + m)], alone[static_cast<size_t>(m)]) << "K=" << K << " m=" << m;
      }
    }
  }
}

TEST(Vulkan, SiblingMatmulsRunAsOneDispatchWithTheSameBits) {
  // Up to three consecutive MATMULs reading the same x with weights in one buffer (a layer's
  // q/k/v or gate/up, as the model host packs them) are one dispatch (ops/matmul.cpp). Each
  // output must be bitwise what the matmul gives alone, for decode and batched tiles, plain and
  // quantized weights; a fourth sibling starts a second dispatch.
  REQUIRE_VULKAN(dev);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {
    for (int64_t R : {1, 5}) {
      const int64_t K = 96;
      const std::vector<int64_t> Ms = {40, 24, 24, 16};
      std::mt19937 rng(11);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(R * K));
      for (float& v : x) v = u(rng);
      std::vector<std::vector<std::byte>> wbytes;
      std::vector<size_t> woff, yoff;
      size_t wtotal = 0, ytotal = 0;
      for (int64_t M : Ms) {
        std::vector<float> w(static_cast<size_t>(M * K));
        for (float& v : w) v = u(rng);
        std::vector<std::byte> bytes;
        if (is_quantized(t)) {
          bytes = quantize(t, w);
        } else {
          bytes.resize(static_cast<size_t>(M) * row_bytes(t, K));
          backend::reference::row_from_f32(t, w.data(), M * K, bytes.data());
        }
        woff.push_back(wtotal);
        wtotal = (wtotal + bytes.size() + 255) / 256 * 256;
        wbytes.push_back(std::move(bytes));
        yoff.push_back(ytotal);
        ytotal = (ytotal + static_cast<size_t>(R * M) * 4 + 255) / 256 * 256;
      }
      auto wbuf = dev->allocate(wtotal, backend::BufferUsage::weights);
      for (size_t i = 0; i < Ms.size(); ++i)  // f16: as the model host does (the CLEAN matmul path)
        wbuf->upload_weights(woff[i], wbytes[i].data(), wbytes[i].size(), t);
      Bufs b;
      auto xr = b.make(*dev, TensorDesc(DType::f32, {R, K}), x.data());
      auto ybuf = dev->allocate(ytotal, backend::BufferUsage::activations);
      auto mm = [&](size_t i) {
        return node(KILN_OP_MATMUL, {xr, {wbuf.get(), woff[i], TensorDesc(t, {Ms[i], K})}},
                    {ybuf.get(), yoff[i], TensorDesc(DType::f32, {R, Ms[i]})});
      };
      auto read = [&](size_t i) {
        std::vector<float> y(static_cast<size_t>(R * Ms[i]));
        ybuf->download(yoff[i], y.data(), y.size() * 4);
        return y;
      };
      std::string what = std::string(dtype_name(t)) + " R=" + std::to_string(R);
      backend::BoundGraph all;
      for (size_t i = 0; i < Ms.size(); ++i) all.nodes.push_back(mm(i));
      dev->compute(all);
      EXPECT_EQ(dev->last_dispatches(), 2u) << what;  // 3 siblings + 1
      std::vector<std::vector<float>> fused;
      for (size_t i = 0; i < Ms.size(); ++i) fused.push_back(read(i));
      for (size_t i = 0; i < Ms.size(); ++i) {
        backend::BoundGraph one;
        one.nodes.push_back(mm(i));
        dev->compute(one);
        EXPECT_TRUE(bitwise_equal(fused[i], read(i))) << what << " matmul " << i;
        // And the values: against a double-precision product of the stored weights.
        std::vector<float> wf = is_quantized(t) ? dequantize(t, wbytes[i], Ms[i] * K) : std::vector<float>();
        if (!is_quantized(t)) {
          wf.resize(static_cast<size_t>(Ms[i] * K));
          backend::reference::row_to_f32(t, wbytes[i].data(), Ms[i] * K, wf.data());
        }
        for (int64_t r = 0; r < R; ++r)
          for (int64_t m = 0; m < Ms[i]; ++m) {
            double ref = 0;
            for (int64_t k = 0; k < K; ++k)
              ref += static_cast<double>(x[static_cast<size_t>(r * K + k)]) * wf[static_cast<size_t>(m * K + k)];
            ASSERT_NEAR(fused[i][static_cast<size_t>(r * Ms[i] + m)], ref, 1e-4 * (1 + std::fabs(ref)))
                << what << " matmul " << i;
          }
      }
    }
  }
}

TEST(Vulkan, AddThenRmsNormRunAsOneDispatchWithTheSameBits) {
  // The residual ADD and the RMS_NORM of its result (every transformer layer, twice) are one
  // dispatch (ops/basic.cpp): the sum and the norm must be bitwise what the two ops give alone,
  // also when the sum is written in place over an operand.
  REQUIRE_VULKAN(dev);
  const int64_t rows = 3, D = 200;
  std::vector<float> a(rows * D), b(rows * D), w(D);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = std::sin(static_cast<float>(i) * 0.3f), b[i] = std::cos(static_cast<float>(i) * 0.7f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.01f * static_cast<float>(i);
  for (int mode : {KILN_NORM_WEIGHT, KILN_NORM_ONE_PLUS, KILN_NORM_NONE}) {
    for (int alias : {0, 1, 2}) {  // 1: the sum over a (in place); 2: the norm output over b
      const bool in_place = alias == 1;
      Bufs bufs;
      const TensorDesc d(DType::f32, {rows, D});
      auto ta = bufs.make(*dev, d, a.data()), tb = bufs.make(*dev, d, b.data());
      auto tw = bufs.make(*dev, TensorDesc(DType::f32, {D}), w.data());
      auto ts = in_place ? ta : bufs.make(*dev, d);
      auto to = alias == 2 ? tb : bufs.make(*dev, d);
      backend::Node add = node(KILN_OP_ADD, {ta, tb}, ts);
      backend::Node norm = node(KILN_OP_RMS_NORM, {ts, tw}, to);
      if (mode == KILN_NORM_NONE) norm.n_src = 1;
      norm.params.mode = mode;
      norm.params.eps = 1e-6f;
      auto read = [&](const backend::TensorRef& t) {
        std::vector<float> v(static_cast<size_t>(rows * D));
        t.buffer->download(t.offset, v.data(), v.size() * 4);
        return v;
      };
      backend::BoundGraph fused;
      fused.nodes = {add, norm};
      dev->compute(fused);
      std::string what = "mode " + std::to_string(mode) + " alias " + std::to_string(alias);
      EXPECT_EQ(dev->last_dispatches(), 1u) << what;
      const auto sum = read(ts), out = read(to);
      ta.buffer->upload(0, a.data(), a.size() * 4);  // undo an in-place sum
      tb.buffer->upload(0, b.data(), b.size() * 4);  // and a norm written over b
      backend::BoundGraph g1, g2;
      g1.nodes = {add};
      g2.nodes = {norm};
      dev->compute(g1);
      dev->compute(g2);
      EXPECT_TRUE(bitwise_equal(sum, read(ts))) << what;
      EXPECT_TRUE(bitwise_equal(out, read(to))) << what;
      // And the values (row 1): the sum and its norm.
      double ss = 0;
      for (int64_t d0 = 0; d0 < D; ++d0) ss += std::pow(static_cast<double>(a[D + d0]) + b[D + d0], 2);
      const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
      for (int64_t d0 = 0; d0 < D; ++d0) {
        const double v = (static_cast<double>(a[D + d0]) + b[D + d0]) * inv;
        const double ref = mode == KILN_NORM_WEIGHT ? v * w[d0] : mode == KILN_NORM_ONE_PLUS ? v * (1 + w[d0]) : v;
        ASSERT_NEAR(out[D + d0], ref, 1e-5 * (1 + std::fabs(ref))) << what << " d " << d0;
      }
    }
  }
}

TEST(Vulkan, RmsNormThenRopeRunAsOneDispatchWithTheSameBits) {
  // Qwen3's per-head q/k RMS norm followed by RoPE of its output is one dispatch (ops/basic.cpp):
  // the norm output and the rotated heads must be bitwise what the two ops give alone, for both
  // rotation layouts, partial rotary spans with zero-frequency pairs, head dims off the subgroup
  // size, and the rope written in place over the norm output or over the norm input.
  REQUIRE_VULKAN(dev);
  struct Case {
    int64_t N, H, D, n_dims, n_freq;
  };
  for (Case c : {Case{3, 4, 64, 0, 0}, Case{2, 3, 100, 60, 20}, Case{1, 16, 128, 0, 0}}) {
    for (int rope_mode : {KILN_ROPE_NEOX, KILN_ROPE_NORMAL}) {
      for (int norm_mode : {KILN_NORM_WEIGHT, KILN_NORM_ONE_PLUS, KILN_NORM_NONE}) {
        for (int alias : {0, 1, 2}) {  // 1: rope over the norm output; 2: rope over the norm input
          const int64_t total = c.N * c.H * c.D;
          std::vector<float> x(static_cast<size_t>(total)), w(static_cast<size_t>(c.D));
          for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f) * 3.0f;
          for (size_t i = 0; i < w.size(); ++i) w[i] = 0.75f + 0.01f * static_cast<float>(i);
          std::vector<int32_t> pos(static_cast<size_t>(c.N));
          for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(5 + 977 * i);
          Bufs bufs;
          const TensorDesc d3(DType::f32, {c.N, c.H, c.D});
          auto tx = bufs.make(*dev, d3, x.data());
          auto tw = bufs.make(*dev, TensorDesc(DType::f32, {c.D}), w.data());
          auto tp = bufs.make(*dev, TensorDesc(DType::i32, {c.N}), pos.data());
          auto to = bufs.make(*dev, d3);
          auto tr = alias == 1 ? to : alias == 2 ? tx : bufs.make(*dev, d3);
          backend::Node norm = node(KILN_OP_RMS_NORM, {tx, tw}, to);
          if (norm_mode == KILN_NORM_NONE) norm.n_src = 1;
          norm.params.mode = norm_mode;
          norm.params.eps = 1e-6f;
          backend::Node rope = node(KILN_OP_ROPE, {to, tp}, tr);
          rope.params.mode = rope_mode;
          rope.params.theta = 10000.0f;
          rope.params.n_dims = static_cast<int32_t>(c.n_dims);
          rope.params.n_freq = static_cast<int32_t>(c.n_freq);
          auto read = [&](const backend::TensorRef& t) {
            std::vector<float> v(static_cast<size_t>(total));
            t.buffer->download(t.offset, v.data(), v.size() * 4);
            return v;
          };
          backend::BoundGraph fused;
          fused.nodes = {norm, rope};
          dev->compute(fused);
          std::string what = "D " + std::to_string(c.D) + " n_dims " + std::to_string(c.n_dims) + " rope " +
                             std::to_string(rope_mode) + " norm " + std::to_string(norm_mode) + " alias " +
                             std::to_string(alias);
          EXPECT_EQ(dev->last_dispatches(), 1u) << what;
          const auto normed = alias == 1 ? std::vector<float>{} : read(to), rotated = read(tr);
          tx.buffer->upload(tx.offset, x.data(), x.size() * 4);  // undo a rope written over x
          backend::BoundGraph g1, g2;
          g1.nodes = {norm};
          g2.nodes = {rope};
          dev->compute(g1);
          if (alias != 1) {
            EXPECT_TRUE(bitwise_equal(normed, read(to))) << what;
          }
          dev->compute(g2);
          EXPECT_TRUE(bitwise_equal(rotated, read(tr))) << what;
          // And the values: token 1 (or 0), head 1, against a double-precision reference.
          const int64_t t = c.N > 1 ? 1 : 0, h = 1, base = (t * c.H + h) * c.D;
          double ss = 0;
          for (int64_t e = 0; e < c.D; ++e) ss += std::pow(static_cast<double>(x[static_cast<size_t>(base + e)]), 2);
          const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.D) + 1e-6);
          auto nv = [&](int64_t e) {
            const double v = x[static_cast<size_t>(base + e)] * inv;
            const double wv = w[static_cast<size_t>(e)];
            return norm_mode == KILN_NORM_WEIGHT ? v * wv : norm_mode == KILN_NORM_ONE_PLUS ? v * (1 + wv) : v;
          };
          const int64_t nd = c.n_dims ? c.n_dims : c.D, nf = c.n_freq ? c.n_freq : nd / 2;
          for (int64_t j = 0; j < nd / 2; ++j) {
            const int64_t a = rope_mode == KILN_ROPE_NEOX ? j : 2 * j,
                          b = rope_mode == KILN_ROPE_NEOX ? j + nd / 2 : 2 * j + 1;
            const double ang = j < nf ? pos[static_cast<size_t>(t)] * std::pow(10000.0, -2.0 * j / nd) : 0.0;
            const double ra = nv(a) * std::cos(ang) - nv(b) * std::sin(ang),
                         rb = nv(a) * std::sin(ang) + nv(b) * std::cos(ang);
            ASSERT_NEAR(rotated[static_cast<size_t>(base + a)], ra, 2e-4 * (1 + std::fabs(ra))) << what << " j " << j;
            ASSERT_NEAR(rotated[static_cast<size_t>(base + b)], rb, 2e-4 * (1 + std::fabs(rb))) << what << " j " << j;
          }
          for (int64_t e = nd; e < c.D; ++e)
            ASSERT_NEAR(rotated[static_cast<size_t>(base + e)], nv(e), 1e-5 * (1 + std::fabs(nv(e)))) << what;
        }
      }
    }
  }
}

TEST(Vulkan, SetRowsIntoACacheBeyondOneStorageBinding) {
  // A KV cache larger than one storage binding (128 MiB on lavapipe: a few sequences of long
  // context) is written in windows of rows (ops/data.cpp): rows on both sides of every window
  // edge land where they belong, nothing else changes, and a slot past the end is still an error.
  // With a V write behind it the pair is not fused, and both writes happen.
  REQUIRE_VULKAN(dev);
  const uint64_t reach = dev->policy().storage_reach;
  if (reach > (uint64_t{512} << 20)) GTEST_SKIP() << "storage bindings reach " << reach << " bytes here";
  // f16 rows of 2000 bytes at offset 512: windows start off the 256-byte binding bases.
  const int64_t D = 1000, R = static_cast<int64_t>((reach + (uint64_t{8} << 20)) / (D * 2));
  const size_t at0 = 512;
  auto cache = dev->allocate(at0 + static_cast<size_t>(R * D * 2), backend::BufferUsage::state);
  const int64_t per = static_cast<int64_t>((reach - 256) / (D * 2));  // rows per window
  const std::vector<int32_t> slot_ids = {0, static_cast<int32_t>(per - 1), static_cast<int32_t>(per), -1,
                                         static_cast<int32_t>(R - 1)};
  const int64_t N = static_cast<int64_t>(slot_ids.size());
  std::vector<float> rows(static_cast<size_t>(N * D));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 1000) * 0.25f - 100.0f;  // exact in f16
  Bufs b;
  auto tr = b.make(*dev, TensorDesc(DType::f32, {N, D}), rows.data());
  auto ts = b.make(*dev, TensorDesc(DType::i32, {N}), slot_ids.data());
  const backend::TensorRef kc{cache.get(), at0, TensorDesc(DType::f16, {R, D})};
  std::vector<float> vrows(static_cast<size_t>(N * 8), 3.0f);
  auto tv = b.make(*dev, TensorDesc(DType::f32, {N, 8}), vrows.data());
  auto vc = b.make(*dev, TensorDesc(DType::f16, {R, 8}));
  std::vector<uint16_t> marker(static_cast<size_t>(D), 0x7777);
  for (int64_t r : {int64_t{1}, per - 2, per + 1, R - 2})
    cache->upload(at0 + static_cast<size_t>(r * D * 2), marker.data(), D * 2);
  backend::BoundGraph g;
  g.nodes = {node(KILN_OP_SET_ROWS, {kc, tr, ts}, kc), node(KILN_OP_SET_ROWS, {vc, tv, ts}, vc)};
  dev->compute(g);
  EXPECT_GE(dev->last_dispatches(), 3u);  // two K windows and the V write
  std::vector<uint16_t> got(static_cast<size_t>(D));
  for (size_t k = 0; k < slot_ids.size(); ++k) {
    if (slot_ids[k] < 0) continue;
    cache->download(at0 + static_cast<size_t>(slot_ids[k]) * D * 2, got.data(), D * 2);
    for (int64_t e = 0; e < D; ++e)
      ASSERT_EQ(f16_to_f32(got[static_cast<size_t>(e)]), rows[static_cast<size_t>(static_cast<int64_t>(k) * D + e)])
          << "slot " << slot_ids[k] << " element " << e;
  }
  for (int64_t r : {int64_t{1}, per - 2, per + 1, R - 2}) {
    cache->download(at0 + static_cast<size_t>(r * D * 2), got.data(), D * 2);
    EXPECT_EQ(got, marker) << "row " << r << " changed";
  }
  std::vector<uint16_t> v(8);
  vc.buffer->download(vc.offset + static_cast<size_t>(R - 1) * 16, v.data(), 16);
  EXPECT_EQ(f16_to_f32(v[7]), 3.0f);
  const std::vector<int32_t> bad_ids = {0, static_cast<int32_t>(R), -1, 5, 6};
  auto tb = b.make(*dev, TensorDesc(DType::i32, {N}), bad_ids.data());
  backend::BoundGraph gb;
  gb.nodes = {node(KILN_OP_SET_ROWS, {kc, tr, tb}, kc)};
  EXPECT_THROW(dev->compute(gb), BackendError);
}

TEST(Vulkan, QAndKNormRopePairsRunAsOneDispatchWithTheSameBits) {
  // Qwen3's q heads (norm + RoPE) and k heads (norm + RoPE) with their tensors in shared
  // buffers, as a graph arena and the weight arenas place them, are one dispatch
  // (fuses_norm_rope_pair): every output bitwise what the four ops give one by one, for weighted
  // and unweighted norms and with the RoPE written over the norm output. A pair with other
  // positions, or whose k input is what the q RoPE writes, is not fused and still gives the
  // sequential result.
  REQUIRE_VULKAN(dev);
  const int64_t N = 3, Hq = 4, Hk = 2, D = 64;
  const size_t nq = static_cast<size_t>(N * Hq * D), nk = static_cast<size_t>(N * Hk * D);
  std::vector<float> init(6 * 1024 + 2 * nq + 2 * nk + nq);
  for (size_t i = 0; i < init.size(); ++i) init[i] = std::sin(static_cast<float>(i) * 0.37f) * 2.0f;
  std::vector<float> w(2 * 64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.01f * static_cast<float>(i);
  std::vector<int32_t> pos = {7, 300, 4095};
  Bufs bufs;
  auto act = dev->allocate(init.size() * 4, backend::BufferUsage::activations);
  auto tw = bufs.make(*dev, TensorDesc(DType::f32, {128}), w.data());
  auto tp = bufs.make(*dev, TensorDesc(DType::i32, {N}), pos.data());
  auto tp2 = bufs.make(*dev, TensorDesc(DType::i32, {N}), pos.data());
  const TensorDesc dq(DType::f32, {N, Hq, D}), dk(DType::f32, {N, Hk, D});
  // Layout in `act` (floats): xq, xk, oq, ok, rq, rk, each 1024-aligned.
  auto at = [&](size_t i, const TensorDesc& d) { return backend::TensorRef{act.get(), i * 1024 * 4, d}; };
  const backend::TensorRef xq = at(0, dq), xk = at(1, dk), oq = at(2, dq), ok = at(3, dk), rq0 = at(4, dq),
                           rk0 = at(5, dk);
  for (int norm_mode : {KILN_NORM_WEIGHT, KILN_NORM_NONE}) {
    for (bool in_place : {false, true}) {
      const backend::TensorRef rq = in_place ? oq : rq0, rk = in_place ? ok : rk0;
      auto norm = [&](const backend::TensorRef& x, size_t woff, const backend::TensorRef& o) {
        backend::Node n = node(KILN_OP_RMS_NORM, {x, {tw.buffer, woff * 4, TensorDesc(DType::f32, {D})}}, o);
        if (norm_mode == KILN_NORM_NONE) n.n_src = 1;
        n.params.mode = norm_mode;
        n.params.eps = 1e-6f;
        return n;
      };
      auto rope = [&](const backend::TensorRef& x, const backend::TensorRef& p, const backend::TensorRef& r) {
        backend::Node n = node(KILN_OP_ROPE, {x, p}, r);
        n.params.mode = KILN_ROPE_NEOX;
        n.params.theta = 1000000.0f;
        return n;
      };
      auto run = [&](std::vector<std::vector<backend::Node>> graphs) {
        act->upload(0, init.data(), init.size() * 4);
        uint64_t dispatches = 0;
        for (auto& nodes : graphs) {
          backend::BoundGraph g;
          g.nodes = std::move(nodes);
          dev->compute(g);
          dispatches += dev->last_dispatches();
        }
        std::vector<float> out(init.size());
        act->download(0, out.data(), out.size() * 4);
        return std::make_pair(out, dispatches);
      };
      std::string what = "norm " + std::to_string(norm_mode) + (in_place ? " in place" : "");
      const std::vector<backend::Node> four = {norm(xq, 0, oq), rope(oq, tp, rq), norm(xk, 64, ok), rope(ok, tp, rk)};
      const auto fused = run({four});
      EXPECT_EQ(fused.second, 1u) << what;
      const auto apart = run({{four[0]}, {four[1]}, {four[2]}, {four[3]}});
      EXPECT_TRUE(bitwise_equal(fused.first, apart.first)) << what;
      // Other positions tensor: two fused norm+rope dispatches, same bits.
      const auto other = run({{four[0], four[1], norm(xk, 64, ok), rope(ok, tp2, rk)}});
      EXPECT_EQ(other.second, 2u) << what;
      EXPECT_TRUE(bitwise_equal(other.first, apart.first)) << what;
      // k's input is the q RoPE's output: not fused, computed in order.
      const backend::TensorRef xk_dep{act.get(), rq.offset, dk};
      const std::vector<backend::Node> dep = {four[0], four[1], norm(xk_dep, 64, ok), rope(ok, tp, rk)};
      const auto dep_fused = run({dep});
      EXPECT_EQ(dep_fused.second, 2u) << what;
      const auto dep_apart = run({{dep[0]}, {dep[1]}, {dep[2]}, {dep[3]}});
      EXPECT_TRUE(bitwise_equal(dep_fused.first, dep_apart.first)) << what;
    }
  }
}

TEST(Vulkan, GateThenMulRunAsOneDispatchWithTheSameBits) {
  // A unary op and the ADD/MUL that reads its result (SiLU/GELU gates of an MLP) are one
  // dispatch (ops/basic.cpp): both outputs must be bitwise what the two ops give alone, with a
  // broadcast b and with the product written in place over the gate.
  REQUIRE_VULKAN(dev);
  const int64_t rows = 3, D = 100;
  std::vector<float> x(rows * D), b(rows * D);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 3.0f * std::sin(static_cast<float>(i) * 0.37f), b[i] = std::cos(static_cast<float>(i));
  struct Case {
    kiln_op un, bin;
    bool broadcast, in_place;
  };
  for (Case c : {Case{KILN_OP_SILU, KILN_OP_MUL, false, false}, Case{KILN_OP_GELU_TANH, KILN_OP_MUL, false, true},
                 Case{KILN_OP_SCALE, KILN_OP_ADD, true, false}, Case{KILN_OP_SOFTCAP, KILN_OP_MUL, true, true}}) {
    Bufs bufs;
    const TensorDesc d(DType::f32, {rows, D});
    auto tx = bufs.make(*dev, d, x.data());
    auto tb = c.broadcast ? bufs.make(*dev, TensorDesc(DType::f32, {D}), b.data()) : bufs.make(*dev, d, b.data());
    auto tu = bufs.make(*dev, d);
    auto to = c.in_place ? tu : bufs.make(*dev, d);
    backend::Node un = node(c.un, {tx}, tu);
    un.params.scale = 0.75f;
    un.params.bias = -0.5f;
    un.params.cap = 2.0f;
    backend::Node bin = node(c.bin, {tu, tb}, to);
    auto read = [&](const backend::TensorRef& t) {
      std::vector<float> v(static_cast<size_t>(rows * D));
      t.buffer->download(t.offset, v.data(), v.size() * 4);
      return v;
    };
    std::string what = std::string(op_name(c.un)) + "+" + op_name(c.bin);
    backend::BoundGraph fused;
    fused.nodes = {un, bin};
    dev->compute(fused);
    EXPECT_EQ(dev->last_dispatches(), 1u) << what;
    const auto u = read(tu), o = read(to);
    backend::BoundGraph g1, g2;
    g1.nodes = {un};
    g2.nodes = {bin};
    dev->compute(g1);
    if (!c.in_place) {
      EXPECT_TRUE(bitwise_equal(u, read(tu))) << what;
    }
    dev->compute(g2);
    EXPECT_TRUE(bitwise_equal(o, read(to))) << what;
    // The values: row 2, against double precision.
    for (int64_t j = 0; j < D; ++j) {
      const double v = x[static_cast<size_t>(2 * D + j)];
      const double g = c.un == KILN_OP_SILU ? v / (1 + std::exp(-v))
                       : c.un == KILN_OP_GELU_TANH
                           ? 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
                       : c.un == KILN_OP_SCALE ? v * 0.75 - 0.5
                                               : 2.0 * std::tanh(v / 2.0);
      const double bv = b[static_cast<size_t>(c.broadcast ? j : 2 * D + j)];
      const double ref = c.bin == KILN_OP_MUL ? g * bv : g + bv;
      ASSERT_NEAR(o[static_cast<size_t>(2 * D + j)], ref, 1e-5 * (1 + std::fabs(ref))) << what << " j " << j;
    }
  }
}

TEST(Vulkan, KAndVCacheWritesRunAsOneDispatchWithTheSameBits) {
  // Two SET_ROWS with the same slots (a layer's K and V cache writes) are one dispatch
  // (ops/data.cpp): the caches must hold bitwise what the two writes give alone, for every cache
  // dtype, with rows of different sizes and a skipped slot (-1). Writes that share slots only by
  // value, or where the second reads what the first writes, stay two dispatches; a bad slot in
  // either half is still the SET_ROWS error.
  REQUIRE_VULKAN(dev);
  const int64_t N = 3, Dk = 40, Dv = 24, R = 10;
  std::vector<float> k(N * Dk), v(N * Dv);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::sin(static_cast<float>(i) * 0.7f) * 3.0f;
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(static_cast<float>(i) * 0.3f) * 1e-3f;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Bufs b;
    const size_t kbytes = static_cast<size_t>(R * Dk) * row_bytes(t, 1);
    const size_t vbytes = static_cast<size_t>(R * Dv) * row_bytes(t, 1);
    std::vector<std::byte> init(kbytes + 256 + vbytes);
    for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<std::byte>(i * 37 % 251);
    auto cache = dev->allocate(init.size(), backend::BufferUsage::state);  // K and V caches in one buffer
    backend::TensorRef kc{cache.get(), 0, TensorDesc(t, {R, Dk})},
        vc{cache.get(), kbytes + 256, TensorDesc(t, {R, Dv})};
    std::vector<int32_t> slot_ids = {4, -1, 9};
    auto slots = b.make(*dev, TensorDesc(DType::i32, {N}), slot_ids.data());
    auto tk = b.make(*dev, TensorDesc(DType::f32, {N, Dk}), k.data());
    auto tv = b.make(*dev, TensorDesc(DType::f32, {N, Dv}), v.data());
    backend::Node wk = node(KILN_OP_SET_ROWS, {kc, tk, slots}, kc), wv = node(KILN_OP_SET_ROWS, {vc, tv, slots}, vc);
    auto run = [&](std::vector<backend::Node> nodes, uint64_t dispatches) {
      cache->upload(0, init.data(), init.size());
      backend::BoundGraph g;
      g.nodes = std::move(nodes);
      dev->compute(g);
      EXPECT_EQ(dev->last_dispatches(), dispatches) << dtype_name(t);
      std::vector<std::byte> out(init.size());
      cache->download(0, out.data(), out.size());
      return out;
    };
    const auto fused = run({wk, wv}, 1);
    const auto one = run({wk}, 1);
    cache->upload(0, one.data(), one.size());
    backend::BoundGraph g2;
    g2.nodes = {wv};
    dev->compute(g2);
    std::vector<std::byte> apart(init.size());
    cache->download(0, apart.data(), apart.size());
    EXPECT_EQ(std::memcmp(fused.data(), apart.data(), fused.size()), 0) << dtype_name(t);
    EXPECT_EQ(std::memcmp(fused.data(), init.data(), static_cast<size_t>(4 * Dk) * row_bytes(t, 1)), 0);
    if (t == DType::f32) {  // row 4 of K is token 0, row 9 of V is token 2
      EXPECT_EQ(std::memcmp(fused.data() + 4 * Dk * 4, k.data(), Dk * 4), 0);
      EXPECT_EQ(std::memcmp(fused.data() + kbytes + 256 + 9 * Dv * 4, v.data() + 2 * Dv, Dv * 4), 0);
    }
    // Slots equal by value but another tensor: two dispatches.
    auto slots2 = b.make(*dev, TensorDesc(DType::i32, {N}), slot_ids.data());
    run({wk, node(KILN_OP_SET_ROWS, {vc, tv, slots2}, vc)}, 2);
    // The second write's rows are the first's destination: two dispatches, in order.
    const backend::TensorRef krows{cache.get(), 0, TensorDesc(DType::f32, {N, Dv})};
    if (t == DType::f32) run({wk, node(KILN_OP_SET_ROWS, {vc, krows, slots}, vc)}, 2);
    // A slot past the V cache's rows, in the fused dispatch.
    std::vector<int32_t> bad_ids = {4, -1, 10};
    auto bad = b.make(*dev, TensorDesc(DType::i32, {N}), bad_ids.data());
    backend::BoundGraph gb;
    gb.nodes = {node(KILN_OP_SET_ROWS, {kc, tk, bad}, kc), node(KILN_OP_SET_ROWS, {vc, tv, bad}, vc)};
    EXPECT_THROW(dev->compute(gb), BackendError) << dtype_name(t);
  }
}

TEST(Vulkan, QuantizedCacheWritesAreTheCpuBytesFusedAndInWindows) {
  // SET_ROWS into kv_q8 / kv_q4 (set_rows_kv.comp) writes the bytes the CPU reference writes,
  // for values the rounding can get wrong: ties x / scale = k + 1/2 (to even), scales that are 0,
  // f16 subnormals or clamped to 65504, infinities, and q4's largest value -8·scale. K (head dim
  // 96: groups of 32) and V (40: 5 groups of 8 and a 2-byte pad) with the same slots are one
  // dispatch; with a 4 KiB storage reach each is written in windows of slots. Untouched rows keep
  // their bytes, the pad is zeroed, and caches at offsets off 16 bytes are addressed right.
  REQUIRE_VULKAN(dev);
  Device& cpu = backend::Registry::instance().reference();
  auto small = device_with_env({{"KILN_VULKAN_STORAGE_REACH", "4096"}});
  const int64_t Hkv = 2, Dk = 96, Dv = 40, R = 40;
  const std::vector<int32_t> slot_ids = {5, 17, 18, -1, 39, 0};
  const auto N = static_cast<int64_t>(slot_ids.size());
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto rows_of_kind = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i0 = 0; i0 < v.size(); i0 += 8) {
      const unsigned kind = rng() % 8;
      const float s = 0.0625f * static_cast<float>(1 + rng() % 32);
      for (size_t j = 0; j < 8; ++j) {
        const float r = u(rng);
        v[i0 + j] = kind == 0   ? r
                    : kind == 1 ? 0.0f
                    : kind == 2 ? (std::floor(r * 127.0f) + 0.5f) * s
                    : kind == 3 ? r * 2e-6f
                    : kind == 4 ? r * 3e7f
                    : kind == 5 ? (j == 5 ? -8.0f * s : (std::floor(r * 8.0f) + 0.5f) * s)
                    : kind == 6 ? (j == 2   ? -INFINITY
                                   : j == 6 ? INFINITY
                                            : r)
                                : r * 1e3f;
      }
    }
    return v;
  };
  const auto k = rows_of_kind(N * Hkv * Dk), v = rows_of_kind(N * Hkv * Dv);
  for (DType t : {DType::kv_q8, DType::kv_q4}) {
    SCOPED_TRACE(dtype_name(t));
    const TensorDesc kd(t, {R, Hkv, Dk}), vd(t, {R, Hkv, Dv});
    const size_t at_k = 4, at_v = at_k + kd.bytes() + 20;  // 4-byte aligned, not 16
    std::vector<std::byte> init(at_v + vd.bytes());
    for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<std::byte>(i * 37 % 251);
    auto run = [&](Device& d, bool pair) {
      Bufs b;
      auto cache = d.allocate(init.size(), backend::BufferUsage::state);
      cache->upload(0, init.data(), init.size());
      const backend::TensorRef kc{cache.get(), at_k, kd}, vc{cache.get(), at_v, vd};
      auto ts = b.make(d, TensorDesc(DType::i32, {N}), slot_ids.data());
      auto tk = b.make(d, TensorDesc(DType::f32, {N, Hkv, Dk}), k.data());
      auto tv = b.make(d, TensorDesc(DType::f32, {N, Hkv, Dv}), v.data());
      const backend::Node wk = node(KILN_OP_SET_ROWS, {kc, tk, ts}, kc), wv = node(KILN_OP_SET_ROWS, {vc, tv, ts}, vc);
      std::vector<std::vector<backend::Node>> graphs = pair ? std::vector<std::vector<backend::Node>>{{wk, wv}}
                                                            : std::vector<std::vector<backend::Node>>{{wk}, {wv}};
      uint64_t dispatches = 0;
      for (auto& nodes : graphs) {
        backend::BoundGraph g;
        g.nodes = std::move(nodes);
        d.compute(g);
        if (&d != &cpu) dispatches += static_cast<vk::VulkanDevice&>(d).last_dispatches();
      }
      std::vector<std::byte> out(init.size());
      cache->download(0, out.data(), out.size());
      return std::make_pair(out, dispatches);
    };
    const auto want = run(cpu, true).first;
    ASSERT_NE(std::memcmp(want.data(), init.data(), want.size()), 0);
    const auto fused = run(*dev, true);
    EXPECT_EQ(fused.second, 1u) << "K and V in one dispatch";
    EXPECT_EQ(fused.first, want) << "fused";
    EXPECT_EQ(run(*dev, false).first, want) << "apart";
    const auto windows = run(*small, true);
    EXPECT_GE(windows.second, 3u) << "the K cache in windows of slots (2 or more), then V";
    EXPECT_EQ(windows.first, want) << "in windows";
  }
}

TEST(Vulkan, QuantizedCachesNeedWholeGroupsAndWordAlignedRows) {
  // supports_op takes kv_q8 / kv_q4 caches whose head dim is a multiple of 8 (one scale per 8-dim
  // read) at 4-byte aligned offsets (word addressing), and SET_ROWS rows that are whole head rows;
  // anything else is refused with the reason, never run.
  REQUIRE_VULKAN(dev);
  const TensorDesc rows(DType::f32, {3, 64}), slots(DType::i32, {3});
  auto set_rows = [&](const TensorDesc& dst, size_t at, const TensorDesc& r) {
    const backend::TensorRef d{nullptr, at, dst};
    return dev->supports_op(node(KILN_OP_SET_ROWS, {d, {nullptr, 0, r}, {nullptr, 0, slots}}, d));
  };
  EXPECT_TRUE(set_rows(TensorDesc(DType::kv_q8, {8, 2, 32}), 4, rows));
  const auto odd = set_rows(TensorDesc(DType::kv_q4, {8, 2, 32}), 2, rows);
  EXPECT_FALSE(odd.ok);
  EXPECT_NE(odd.reason.find("multiple of 4 bytes"), std::string::npos) << odd.reason;
  const auto d12 = set_rows(TensorDesc(DType::kv_q8, {8, 12}), 0, TensorDesc(DType::f32, {3, 12}));
  EXPECT_FALSE(d12.ok);
  EXPECT_NE(d12.reason.find("multiple of 8"), std::string::npos) << d12.reason;
  const auto part = set_rows(TensorDesc(DType::kv_q8, {8, 2, 32}), 0, TensorDesc(DType::f32, {3, 48}));
  EXPECT_FALSE(part.ok);
  EXPECT_NE(part.reason.find("not whole"), std::string::npos) << part.reason;
  auto attention = [&](DType kt, size_t k_at, DType vt, size_t v_at) {
    const backend::TensorRef q{nullptr, 0, TensorDesc(DType::f32, {2, 4, 64})},
        k{nullptr, k_at, TensorDesc(kt, {4, 8, 2, 64})}, v{nullptr, v_at, TensorDesc(vt, {4, 8, 2, 64})},
        bt{nullptr, 0, TensorDesc(DType::i32, {1, 4})}, seqs{nullptr, 0, TensorDesc(DType::i32, {1, 4})},
        o{nullptr, 0, TensorDesc(DType::f32, {2, 4, 64})};
    return dev->supports_op(node(KILN_OP_ATTENTION, {q, k, v, bt, seqs}, o));
  };
  EXPECT_TRUE(attention(DType::kv_q8, 0, DType::f16, 0));
  EXPECT_TRUE(attention(DType::bf16, 0, DType::kv_q4, 260));
  const auto misaligned = attention(DType::kv_q4, 6, DType::kv_q4, 0);
  EXPECT_FALSE(misaligned.ok);
  EXPECT_NE(misaligned.reason.find("kv_q4 cache at offset 6"), std::string::npos) << misaligned.reason;
}

TEST(Vulkan, AFenceTimeoutIsADeviceErrorAndLosesTheDevice) {
  REQUIRE_VULKAN(dev);
  auto tdev = device_with_env({{"KILN_VULKAN_TIMEOUT_S", "0.000001"}});
  OpGraph g;
  g.output(g.op(KILN_OP_MATMUL, {g.f32({64, 512}), g.weight(DType::f32, {512, 512})}));
  try {
    g.run(*tdev);
    GTEST_SKIP() << "the device finished within 1 us; nothing to test";
  } catch (const BackendError& e) {
    EXPECT_EQ(e.kind(), BackendError::Kind::device);
    EXPECT_NE(std::string(e.what()).find("did not finish"), std::string::npos) << e.what();
  }
  try {
    g.run(*tdev);
    ADD_FAILURE() << "a lost device must refuse work";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("unusable"), std::string::npos) << e.what();
  }
}

TEST(Vulkan, BarriersOnlyBetweenDependentOps) {
  REQUIRE_VULKAN(dev);
  Bufs b;
  std::vector<float> x(64, 0.5f);
  auto a = b.make(*dev, TensorDesc(DType::f32, {64}), x.data());
  auto y1 = b.make(*dev, TensorDesc(DType::f32, {64})), y2 = b.make(*dev, TensorDesc(DType::f32, {64}));
  backend::BoundGraph independent;
  independent.nodes.push_back(node(KILN_OP_SILU, {a}, y1));
  independent.nodes.push_back(node(KILN_OP_SIGMOID, {a}, y2));
  dev->compute(independent);
  EXPECT_EQ(dev->last_dispatches(), 2u);
  EXPECT_EQ(dev->last_barriers(), 0u);
  backend::BoundGraph chain;
  chain.nodes.push_back(node(KILN_OP_SILU, {a}, y1));
  chain.nodes.push_back(node(KILN_OP_SIGMOID, {y1}, y2));
  dev->compute(chain);
  EXPECT_EQ(dev->last_barriers(), 1u);
  std::vector<float> out(64);
  y2.buffer->download(0, out.data(), 256);
  float s = 0.5f / (1.0f + std::exp(-0.5f));
  EXPECT_NEAR(out[3], 1.0f / (1.0f + std::exp(-s)), 1e-6f);
}

TEST(Vulkan, ImportedHostMemoryIsReadZeroCopy) {
  REQUIRE_VULKAN(dev);
  if (!dev->context().info().host_import) GTEST_SKIP() << "device lacks VK_EXT_external_memory_host";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), bytes = 4 * page;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* f = static_cast<float*>(p);
  for (size_t i = 0; i < bytes / 4; ++i) f[i] = static_cast<float>(i);
  {
    auto buf = dev->import_host(p, bytes);
    ASSERT_NE(buf, nullptr);
    Bufs b;
    std::vector<int32_t> ids = {5, 0};
    backend::BoundGraph g;
    g.nodes.push_back(
        node(KILN_OP_GET_ROWS,
             {backend::TensorRef{buf.get(), 0, TensorDesc(DType::f32, {static_cast<int64_t>(bytes / 64), 16})},
              b.make(*dev, TensorDesc(DType::i32, {2}), ids.data())},
             b.make(*dev, TensorDesc(DType::f32, {2, 16}))));
    dev->compute(g);
    std::vector<float> out(32);
    g.nodes[0].dst.buffer->download(0, out.data(), 128);
    EXPECT_EQ(out[0], 80.0f);
    EXPECT_EQ(out[16], 0.0f);
  }
  munmap(p, bytes);
}

TEST(Vulkan, ValidationLayerReportsNothing) {
  REQUIRE_VULKAN(dev);
  std::unique_ptr<vk::VulkanDevice> vdev;
  try {
    vk::ContextOptions o;
    o.validation = true;
    vdev = std::make_unique<vk::VulkanDevice>(o);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "validation layer unavailable: " << e.what();
  }
  ASSERT_TRUE(vdev->validation_enabled());
  // A mixed graph: aligned and unaligned matmuls over every weight dtype, norms, rope, attention.
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    OpGraph g(static_cast<uint32_t>(t) + 1);
    uint32_t x = g.f32({9, 64});
    uint32_t y = g.op(KILN_OP_MATMUL, {x, g.weight(t, {24, 64})});
    kiln_op_params p{};
    p.eps = 1e-6f;
    p.mode = KILN_NORM_ONE_PLUS;
    uint32_t n = g.op(KILN_OP_RMS_NORM, {y, g.f32({24})}, p);
    g.output(g.op(KILN_OP_SILU, {n}));
    EXPECT_NO_THROW(g.run(*vdev)) << dtype_name(t);
  }
  EXPECT_EQ(vdev->validation_messages(), 0u) << vdev->context().last_validation_message();
}

TEST(Vulkan, ProfileTableListsOps) {
  REQUIRE_VULKAN(dev);
  setenv("KILN_PROFILE", "1", 1);
  std::unique_ptr<vk::VulkanDevice> pdev;
  pdev = std::make_unique<vk::VulkanDevice>(vk::ContextOptions{});
  unsetenv("KILN_PROFILE");
  if (!pdev->context().info().timestamps) GTEST_SKIP() << "queue has no timestamps";
  OpGraph g;
  g.output(g.op(KILN_OP_MATMUL, {g.f32({2, 32}), g.weight(DType::f16, {8, 32})}));
  g.run(*pdev);
  std::string table = pdev->profile_table();
  EXPECT_NE(table.find("MATMUL f16"), std::string::npos) << table;
  EXPECT_NE(table.find("total"), std::string::npos) << table;
}

TEST(Vulkan, PipelineCacheIsWrittenAtExit) {
  REQUIRE_VULKAN(dev);
  auto path = std::filesystem::temp_directory_path() / ("kiln-vk-cache-" + std::to_string(getpid()) + ".bin");
  setenv("KILN_VULKAN_PIPELINE_CACHE", path.c_str(), 1);
  {
    vk::VulkanDevice d{vk::ContextOptions{}};
    OpGraph g;
    g.output(g.op(KILN_OP_SILU, {g.f32({4, 4})}));
    g.run(d);
  }
  unsetenv("KILN_VULKAN_PIPELINE_CACHE");
  EXPECT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove(path);
}

TEST(Vulkan, NoDriverIsAClearMessage) {
  REQUIRE_VULKAN(dev);
  const char* old = std::getenv("VK_DRIVER_FILES");
  std::string saved = old ? old : "";
  setenv("VK_DRIVER_FILES", "/nonexistent/kiln_no_icd.json", 1);
  try {
    vk::Context c;
    ADD_FAILURE() << "expected no device";
  } catch (const std::exception& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[vulkan]"), std::string::npos) << m;
    EXPECT_TRUE(m.find("driver") != std::string::npos || m.find("device") != std::string::npos) << m;
  }
  if (old)
    setenv("VK_DRIVER_FILES", saved.c_str(), 1);
  else
    unsetenv("VK_DRIVER_FILES");
}

TEST(Vulkan, UnknownDeviceNameListsDevices) {
  REQUIRE_VULKAN(dev);
  vk::ContextOptions o;
  o.device = "no-such-gpu-xyz";
  const char* env = std::getenv("KILN_VULKAN_DEVICE");
  if (env && *env) GTEST_SKIP() << "KILN_VULKAN_DEVICE overrides the option";
  try {
    vk::Context c(o);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no-such-gpu-xyz"), std::string::npos) << m;
    EXPECT_NE(m.find(dev->info().name), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kiln::test
