// The graph builder behind kiln_host_ops (lookups, shape errors through the C table), the arena
// planner (reuse without overlap of live tensors), lowering, and the registry's selection and
// error messages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "graph/allocator.hpp"
#include "graph/lower.hpp"
#include "op_harness.hpp"

namespace kiln::test {
namespace {

using graph::TensorKind;

class FakeBindings : public graph::Bindings {
 public:
  std::optional<TensorDesc> weight(std::string_view name) override {
    if (name == "embed") return TensorDesc(DType::q8_0, {100, 64});
    if (name == "norm") return TensorDesc(DType::f32, {64});
    if (name == "lm_head") return TensorDesc(DType::bf16, {100, 64});
    return std::nullopt;
  }
  std::optional<TensorDesc> input(std::string_view name) override {
    if (name == "tokens") return TensorDesc(DType::i32, {5});
    if (name == "positions") return TensorDesc(DType::i32, {5});
    return std::nullopt;
  }
  std::optional<TensorDesc> cache(uint32_t layer, std::string_view name) override {
    if (layer == 0 && name == "k") return TensorDesc(DType::f16, {4, 16, 2, 32});
    return std::nullopt;
  }
};

TEST(GraphBuilder, BuildsThroughTheCTableAndInfersShapes) {
  FakeBindings b;
  graph::Builder builder(b);
  const kiln_host_ops* ops = builder.host_ops();
  ASSERT_EQ(ops->struct_size, sizeof(kiln_host_ops));
  const kiln_tensor embed = ops->weight(ops->ctx, "embed"), tokens = ops->input(ops->ctx, "tokens");
  ASSERT_NE(embed, 0u);
  EXPECT_EQ(ops->weight(ops->ctx, "embed"), embed) << "repeated lookups return the same handle";
  EXPECT_EQ(ops->weight(ops->ctx, "missing"), 0u);
  EXPECT_EQ(ops->input(ops->ctx, "nope"), 0u);
  EXPECT_NE(ops->cache(ops->ctx, 0, "k"), 0u);
  EXPECT_EQ(ops->cache(ops->ctx, 1, "k"), 0u);

  kiln_error err{};
  const kiln_tensor srcs[] = {embed, tokens};
  const kiln_tensor h = ops->op(ops->ctx, KILN_OP_GET_ROWS, srcs, 2, nullptr, &err);
  ASSERT_NE(h, 0u) << err.message;
  int64_t shape[KILN_MAX_DIMS];
  ASSERT_EQ(ops->shape(ops->ctx, h, shape), 2u);
  EXPECT_EQ(shape[0], 5);
  EXPECT_EQ(shape[1], 64);
  EXPECT_EQ(ops->dtype(ops->ctx, h), static_cast<uint32_t>(KILN_DTYPE_F32));

  kiln_op_params p{};
  p.eps = 1e-6f;
  const kiln_tensor norm_srcs[] = {h, ops->weight(ops->ctx, "norm")};
  const kiln_tensor n = ops->op(ops->ctx, KILN_OP_RMS_NORM, norm_srcs, 2, &p, &err);
  const kiln_tensor mm_srcs[] = {n, ops->weight(ops->ctx, "lm_head")};
  const kiln_tensor logits = ops->op(ops->ctx, KILN_OP_MATMUL, mm_srcs, 2, nullptr, &err);
  ASSERT_NE(logits, 0u) << err.message;
  ops->name(ops->ctx, logits, "logits");
  ops->output(ops->ctx, logits);
  EXPECT_EQ(builder.graph().outputs(), std::vector<uint32_t>{logits});
  EXPECT_EQ(builder.graph().find("logits"), logits);
}

TEST(GraphBuilder, ShapeErrorsNameTheOpAndTheShapes) {
  FakeBindings b;
  graph::Builder builder(b);
  const kiln_host_ops* ops = builder.host_ops();
  kiln_error err{};
  const kiln_tensor bad[] = {ops->input(ops->ctx, "tokens"), ops->weight(ops->ctx, "lm_head")};
  EXPECT_EQ(ops->op(ops->ctx, KILN_OP_MATMUL, bad, 2, nullptr, &err), 0u);
  EXPECT_EQ(err.status, KILN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("[graph] MATMUL: x must be f32"), std::string::npos) << err.message;
  EXPECT_NE(std::string(err.message).find("i32[5]"), std::string::npos) << err.message;

  err = {};
  EXPECT_EQ(ops->op(ops->ctx, 999, bad, 2, nullptr, &err), 0u);
  EXPECT_EQ(err.status, KILN_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(err.message).find("unknown op 999"), std::string::npos) << err.message;

  err = {};
  const kiln_tensor invalid[] = {12345};
  EXPECT_EQ(ops->op(ops->ctx, KILN_OP_SILU, invalid, 1, nullptr, &err), 0u);
  EXPECT_NE(std::string(err.message).find("invalid tensor handle"), std::string::npos) << err.message;

  err = {};  // a 1-d tensor is not [N, H, D]
  const kiln_tensor w = ops->weight(ops->ctx, "norm");
  kiln_op_params rp{};
  rp.mode = KILN_ROPE_NEOX;
  rp.theta = 10000;
  const kiln_tensor rope_bad[] = {w, ops->input(ops->ctx, "positions")};
  EXPECT_EQ(ops->op(ops->ctx, KILN_OP_ROPE, rope_bad, 2, &rp, &err), 0u);
  EXPECT_NE(std::string(err.message).find("ROPE"), std::string::npos) << err.message;
}

TEST(GraphBuilder, OpsThatWriteInPlaceRefuseReadOnlySources) {
  graph::Graph g;
  const uint32_t w = g.add_external(TensorKind::weight, "w", TensorDesc(DType::f32, {8, 4}));
  const uint32_t rows = g.add_external(TensorKind::input, "rows", TensorDesc(DType::f32, {2, 4}));
  const uint32_t slots = g.add_external(TensorKind::input, "slots", TensorDesc(DType::i32, {2}));
  const uint32_t srcs[] = {w, rows, slots};
  EXPECT_THROW(g.add_op(KILN_OP_SET_ROWS, srcs, {}), HostError);
}

// ------------------------------------------------------------------------------------------------

TEST(GraphAllocator, ReusesMemoryWithoutOverlappingLiveTensors) {
  OpGraph og;
  const uint32_t x = og.f32({16, 64});
  uint32_t h = x;
  for (int i = 0; i < 12; ++i) h = og.op(i % 2 ? KILN_OP_SILU : KILN_OP_SIGMOID, {h});
  const uint32_t keep = og.op(KILN_OP_EXP, {x});  // a long-lived tensor...
  for (int i = 0; i < 6; ++i) h = og.op(KILN_OP_SILU, {h});
  const uint32_t out = og.op(KILN_OP_ADD, {h, keep});  // ...used at the very end
  og.output(out);
  const graph::Graph& g = og.graph();
  const graph::Plan plan = graph::plan_memory(g, 256);
  EXPECT_LT(plan.arena_bytes, plan.unshared_bytes / 4) << "a chain of 20 intermediates needs ~3 live at once";

  // Interval check: tensors whose live ranges intersect never share bytes.
  std::map<uint32_t, std::pair<size_t, size_t>> live;  // tensor -> [def node, last use]
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    live[g.nodes()[i].dst] = {i, i};
    for (uint32_t s : g.nodes()[i].srcs)
      if (live.count(s)) live[s].second = i;
  }
  live[out].second = g.nodes().size();
  for (auto& [a, ra] : live)
    for (auto& [b, rb] : live) {
      if (a >= b || ra.second < rb.first || rb.second < ra.first) continue;
      const size_t oa = plan.offset[a], ob = plan.offset[b], sa = g.tensor(a).desc.bytes(),
                   sb = g.tensor(b).desc.bytes();
      EXPECT_TRUE(oa + sa <= ob || ob + sb <= oa) << "tensors " << a << " and " << b << " overlap while both live";
    }
  // And the result is still right.
  const auto res = og.run(backend::Registry::instance().reference());
  EXPECT_TRUE(std::isfinite(res[0].f[0]));
}

TEST(GraphAllocator, ReshapeAliasesItsSourceAndLowersToNothing) {
  OpGraph og;
  const uint32_t x = og.f32({4, 6});
  const uint32_t s = og.op(KILN_OP_SILU, {x});
  kiln_op_params p{};
  p.ndim = 3;
  p.shape[0] = 2, p.shape[1] = -1, p.shape[2] = 3;
  const uint32_t r = og.op(KILN_OP_RESHAPE, {s}, p);
  EXPECT_EQ(og.graph().tensor(r).desc.str(), "f32[2, 4, 3]");
  og.output(og.op(KILN_OP_SCALE, {r}, [] {
    kiln_op_params q{};
    q.scale = 2;
    return q;
  }()));
  const graph::Plan plan = graph::plan_memory(og.graph());
  EXPECT_EQ(plan.offset[r], graph::Plan::kNone);
  auto arena = backend::Registry::instance().reference().allocate(plan.arena_bytes, backend::BufferUsage::activations);
  const auto bound = graph::bind(og.graph(), plan, *arena, [](uint32_t, const graph::Tensor& t) {
    static std::vector<std::unique_ptr<backend::Buffer>> keep;
    keep.push_back(
        backend::Registry::instance().reference().allocate(t.desc.bytes(), backend::BufferUsage::activations));
    return backend::TensorRef{keep.back().get(), 0, t.desc};
  });
  ASSERT_EQ(bound.nodes.size(), 2u);
  EXPECT_EQ(bound.nodes[1].src[0].offset, plan.offset[s]) << "SCALE reads the SILU result through the reshape";
  const auto xs = og.data_f32(x);
  const auto res = og.run(backend::Registry::instance().reference());
  EXPECT_NEAR(res[0].f[5], 2 * xs[5] / (1 + std::exp(-xs[5])), 1e-6);
}

// ------------------------------------------------------------------------------------------------

TEST(Registry, CpuIsAlwaysThereAndSelectionFollowsTheRules) {
  auto& reg = backend::Registry::instance();
  Device& cpu = reg.cpu();
  Device& ref = reg.reference();
  EXPECT_EQ(cpu.info().id, "cpu");
  EXPECT_EQ(ref.info().id, "reference");
  EXPECT_NE(&cpu, &ref);
  EXPECT_EQ(reg.find("cpu"), &cpu);
  EXPECT_EQ(reg.find("reference"), &ref);
  EXPECT_EQ(reg.find("no-such-device"), nullptr);
  EXPECT_GT(cpu.memory().total, 0u);
  unsetenv("KILN_DEVICE");
  EXPECT_EQ(&reg.select({"cpu", false}), &cpu);
  EXPECT_EQ(&reg.select({"reference", false}), &ref);
  try {
    reg.select({"no-such-device", false});
    ADD_FAILURE() << "expected an error";
  } catch (const HostError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu : cpu"), std::string::npos) << "lists devices: " << e.what();
  }
  // auto: a hardware GPU, else the native CPU backend; never lavapipe or the reference unasked.
  bool has_gpu = false;
  for (Device* d : reg.devices())
    has_gpu |=
        d->info().kind == backend::DeviceKind::discrete_gpu || d->info().kind == backend::DeviceKind::integrated_gpu;
  if (!has_gpu) {
    EXPECT_THROW(reg.select({"auto", false}), HostError) << "no CPU without allow_cpu_fallback";
    EXPECT_EQ(&reg.select({"auto", true}), &cpu);
    EXPECT_EQ(&reg.select({"", true}), &cpu);
  } else {
    const auto kind = reg.select({"auto", false}).info().kind;
    EXPECT_TRUE(kind == backend::DeviceKind::discrete_gpu || kind == backend::DeviceKind::integrated_gpu);
  }
  setenv("KILN_DEVICE", "reference", 1);
  EXPECT_EQ(&reg.select({"auto", false}), &ref) << "KILN_DEVICE overrides";
  unsetenv("KILN_DEVICE");
}

TEST(Registry, OutOfMemorySaysAskedAndFree) {
  Device& cpu = backend::Registry::instance().cpu();
  try {
    cpu.allocate(size_t{1} << 62, backend::BufferUsage::weights);
    ADD_FAILURE() << "expected out of memory";
  } catch (const backend::BackendError& e) {
    EXPECT_EQ(e.kind(), backend::BackendError::Kind::out_of_memory);
    const std::string m = e.what();
    EXPECT_NE(m.find("[backend cpu] out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("asked 4294967296.0 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
  }
}

TEST(Registry, UnsupportedOpNamesOpDtypeAndDevice) {
  Device& cpu = backend::Registry::instance().cpu();
  auto buf = cpu.allocate(4096, backend::BufferUsage::activations);
  backend::Node n;
  n.op = KILN_OP_MATMUL;
  n.n_src = 2;
  n.src[0] = {buf.get(), 0, TensorDesc(DType::f32, {1, 4})};
  n.src[1] = {buf.get(), 0, TensorDesc(DType::i32, {2, 4})};
  n.dst = {buf.get(), 0, TensorDesc(DType::f32, {1, 2})};
  EXPECT_FALSE(cpu.supports_op(n));
  backend::BoundGraph g;
  g.nodes.push_back(n);
  try {
    cpu.compute(g);
    ADD_FAILURE() << "expected unsupported";
  } catch (const backend::BackendError& e) {
    EXPECT_EQ(e.kind(), backend::BackendError::Kind::unsupported);
    const std::string m = e.what();
    for (const char* part : {"MATMUL", "i32", "device 'cpu ("}) EXPECT_NE(m.find(part), std::string::npos) << m;
  }
  // Buffer ranges are checked too.
  EXPECT_THROW(buf->upload(4000, std::vector<char>(200).data(), 200), backend::BackendError);
}

TEST(Registry, MalformedGraphsAreErrorsNotCrashes) {
  Device& cpu = backend::Registry::instance().reference();
  OpGraph og;
  // Attention whose block table points outside the cache.
  const uint32_t k = og.cache(DType::f32, {2, 4, 1, 8}, false, "k"), v = og.cache(DType::f32, {2, 4, 1, 8}, false, "v");
  og.output(og.op(KILN_OP_ATTENTION, {og.f32({1, 1, 8}), k, v, og.i32({1, 2}, {0, 7}), og.i32({1, 4}, {0, 1, 6, 0})}));
  try {
    og.run(cpu);
    ADD_FAILURE() << "expected an error";
  } catch (const backend::BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("maps to 7 outside [0, 2)"), std::string::npos) << e.what();
  }
  // Two sequences claiming the same rows of a conv1d.
  OpGraph og2;
  const uint32_t st = og2.cache(DType::f32, {2, 3, 4}, true, "state");
  og2.output(
      og2.op(KILN_OP_CONV1D_CAUSAL, {og2.f32({5, 4}), og2.f32({4, 4}), st, og2.i32({2, 4}, {0, 3, 3, 0, 2, 3, 3, 1})}));
  try {
    og2.run(cpu);
    ADD_FAILURE() << "expected an error";
  } catch (const backend::BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("sequences overlap"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------------------------------------------
// The harness itself: NaN never passes, and an output a device forgot to write is caught.

TEST(Harness, NanNeverPasses) {
  EXPECT_EQ(nmse({NAN}, {1.0f}), INFINITY);
  EXPECT_EQ(nmse({1.0f}, {NAN}), INFINITY);
  EXPECT_EQ(nmse({INFINITY}, {1.0f}), INFINITY);
  EXPECT_EQ(nmse({1.0f, 2.0f}, {1.0f}), INFINITY);
  EXPECT_EQ(nmse({1.0f, 2.0f}, {1.0f, 2.0f}), 0.0);
}

/** A device that forwards to the CPU but drops the last node: its result stays poisoned. */
class ForgetfulDevice : public Device {
 public:
  const backend::DeviceInfo& info() const override { return cpu().info(); }
  backend::MemoryInfo memory() const override { return cpu().memory(); }
  std::unique_ptr<backend::Buffer> allocate(size_t b, backend::BufferUsage u) override { return cpu().allocate(b, u); }
  backend::Support supports_op(const backend::Node& n) const override { return cpu().supports_op(n); }
  std::unique_ptr<backend::Executable> prepare(const backend::BoundGraph& g) override {
    backend::BoundGraph shorter = g;
    shorter.nodes.pop_back();
    return cpu().prepare(shorter);
  }
  void submit(backend::Executable& e) override { cpu().submit(e); }
  void wait(backend::Executable& e) override { cpu().wait(e); }
  void copy(const std::vector<backend::CopyRegion>& r) override { cpu().copy(r); }
  void sync() override { cpu().sync(); }

 private:
  static Device& cpu() { return backend::Registry::instance().reference(); }
};

TEST(Harness, AnUnwrittenOutputIsCaughtByThePoison) {
  OpGraph g;
  g.output(g.op(KILN_OP_SILU, {g.op(KILN_OP_EXP, {g.f32({3, 5})})}));
  ForgetfulDevice bad;
  const auto ref = g.run(backend::Registry::instance().reference());
  const auto got = g.run(bad);
  EXPECT_EQ(nmse(got[0].f, ref[0].f), INFINITY);
}

}  // namespace
}  // namespace kiln::test
