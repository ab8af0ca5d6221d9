// Tiny models (an attention block; a gated delta-net block) built the way a model plugin builds it (through the kiln_host_ops C table,
// with the layer's cache tensors from ops->cache), run by a minimal host with persistent weights,
// paged KV cache and recurrent state. Checks, on every device: attention prefill in one step, in
// chunks, or token by token gives bitwise-identical logits (batch invariance through a whole
// layer); the delta-net block agrees across chunked/recurrent forms with state carried between
// steps; sequences batched together equal each run alone.
#include "op_harness.hpp"

#include "graph/allocator.hpp"
#include "graph/lower.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>

namespace kiln::test {
namespace {

constexpr int64_t V = 50, H = 32, Hq = 4, Hkv = 2, D = 16, B = 16, BS = 4, MB = 6;

/** The "plugin": builds one pre-norm attention block + LM head through the C table. */
kiln_tensor build(const kiln_host_ops* ops) {
  auto w = [&](const char* n) { return ops->weight(ops->ctx, n); };
  auto in = [&](const char* n) { return ops->input(ops->ctx, n); };
  auto op = [&](kiln_op o, std::initializer_list<kiln_tensor> s, kiln_op_params p = {}) {
    kiln_error err{};
    const kiln_tensor t = ops->op(ops->ctx, o, s.begin(), static_cast<uint32_t>(s.size()), &p, &err);
    if (!t) throw std::runtime_error(err.message);
    return t;
  };
  auto reshape = [&](kiln_tensor t, std::initializer_list<int64_t> shape) {
    kiln_op_params p{};
    p.ndim = static_cast<uint32_t>(shape.size());
    uint32_t i = 0;
    for (int64_t d : shape) p.shape[i++] = d;
    return op(KILN_OP_RESHAPE, {t}, p);
  };
  kiln_op_params norm{};
  norm.eps = 1e-6f;
  norm.mode = KILN_NORM_ONE_PLUS;
  kiln_op_params rope{};
  rope.theta = 10000;
  rope.n_dims = 8;  // partial rotary
  const kiln_tensor x = op(KILN_OP_GET_ROWS, {w("embed"), in("tokens")});
  const kiln_tensor h = op(KILN_OP_RMS_NORM, {x, w("norm1")}, norm);
  const kiln_tensor q = op(KILN_OP_ROPE, {reshape(op(KILN_OP_MATMUL, {h, w("wq")}), {-1, Hq, D}), in("positions")}, rope);
  const kiln_tensor k = op(KILN_OP_ROPE, {reshape(op(KILN_OP_MATMUL, {h, w("wk")}), {-1, Hkv, D}), in("positions")}, rope);
  const kiln_tensor v = reshape(op(KILN_OP_MATMUL, {h, w("wv")}), {-1, Hkv, D});
  auto cache = [&](const char* n) { return ops->cache(ops->ctx, 0, n); };
  const kiln_tensor kc = op(KILN_OP_SET_ROWS, {cache("k"), k, cache("slots")});
  const kiln_tensor vc = op(KILN_OP_SET_ROWS, {cache("v"), v, cache("slots")});
  const kiln_tensor a = op(KILN_OP_ATTENTION, {q, kc, vc, cache("block_table"), in("seqs")});
  const kiln_tensor x2 = op(KILN_OP_ADD, {x, op(KILN_OP_MATMUL, {reshape(a, {-1, Hq * D}), w("wo")})});
  const kiln_tensor logits = op(KILN_OP_MATMUL, {op(KILN_OP_RMS_NORM, {x2, w("norm2")}, norm), w("lm_head")});
  ops->output(ops->ctx, logits);
  return logits;
}


constexpr int64_t Hk = 1, Hv = 2, Dk = 16, Dv = 8, KW = 4, C = 2 * Hk * Dk + Hv * Dv;

/** The "plugin", hybrid flavour: one Qwen3.5-style gated delta-net block + LM head. */
kiln_tensor build_gdn(const kiln_host_ops* ops) {
  auto w = [&](const char* n) { return ops->weight(ops->ctx, n); };
  auto in = [&](const char* n) { return ops->input(ops->ctx, n); };
  auto op = [&](kiln_op o, std::initializer_list<kiln_tensor> s, kiln_op_params p = {}) {
    kiln_error err{};
    const kiln_tensor t = ops->op(ops->ctx, o, s.begin(), static_cast<uint32_t>(s.size()), &p, &err);
    if (!t) throw std::runtime_error(err.message);
    return t;
  };
  auto reshape = [&](kiln_tensor t, std::initializer_list<int64_t> shape) {
    kiln_op_params p{};
    p.ndim = static_cast<uint32_t>(shape.size());
    uint32_t i = 0;
    for (int64_t d : shape) p.shape[i++] = d;
    return op(KILN_OP_RESHAPE, {t}, p);
  };
  auto slice = [&](kiln_tensor t, int64_t b, int64_t e) {
    kiln_op_params p{};
    p.axis = -1, p.begin = b, p.end = e;
    return op(KILN_OP_SLICE, {t}, p);
  };
  auto scale = [&](kiln_tensor t, float f) {
    kiln_op_params p{};
    p.scale = f;
    return op(KILN_OP_SCALE, {t}, p);
  };
  kiln_op_params norm{}, l2{}, gated{};
  norm.eps = l2.eps = gated.eps = 1e-6f;
  norm.mode = KILN_NORM_ONE_PLUS;
  gated.mode = KILN_NORM_GATED;
  const kiln_tensor x = op(KILN_OP_GET_ROWS, {w("embed"), in("tokens")});
  const kiln_tensor h = op(KILN_OP_RMS_NORM, {x, w("norm1")}, norm);
  const kiln_tensor qkv = op(KILN_OP_SILU, {op(KILN_OP_CONV1D_CAUSAL, {op(KILN_OP_MATMUL, {h, w("w_qkv")}), w("conv"),
                                                                        ops->cache(ops->ctx, 0, "state0"), in("seqs")})});
  const kiln_tensor q = scale(op(KILN_OP_L2_NORM, {reshape(slice(qkv, 0, Hk * Dk), {-1, Hk, Dk})}, l2), 0.25f);
  const kiln_tensor k = op(KILN_OP_L2_NORM, {reshape(slice(qkv, Hk * Dk, 2 * Hk * Dk), {-1, Hk, Dk})}, l2);
  const kiln_tensor v = reshape(slice(qkv, 2 * Hk * Dk, 0), {-1, Hv, Dv});
  const kiln_tensor z = reshape(op(KILN_OP_MATMUL, {h, w("w_z")}), {-1, Hv, Dv});
  const kiln_tensor beta = op(KILN_OP_SIGMOID, {op(KILN_OP_MATMUL, {h, w("w_b")})});
  const kiln_tensor g = op(KILN_OP_MUL, {op(KILN_OP_SOFTPLUS, {op(KILN_OP_ADD, {op(KILN_OP_MATMUL, {h, w("w_a")}), w("dt_bias")})}),
                                          scale(op(KILN_OP_EXP, {w("A_log")}), -1.0f)});
  const kiln_tensor o = op(KILN_OP_GATED_DELTA, {q, k, v, g, beta, ops->cache(ops->ctx, 0, "state1"), in("seqs")});
  const kiln_tensor on = op(KILN_OP_RMS_NORM, {o, w("gnorm"), z}, gated);
  const kiln_tensor x2 = op(KILN_OP_ADD, {x, op(KILN_OP_MATMUL, {reshape(on, {-1, Hv * Dv}), w("w_out")})});
  const kiln_tensor logits = op(KILN_OP_MATMUL, {op(KILN_OP_RMS_NORM, {x2, w("norm2")}, norm), w("lm_head")});
  ops->output(ops->ctx, logits);
  return logits;
}

/** The "host": weights and KV cache live on the device across steps; one block per 4 tokens. */
class Host : public graph::Bindings {
 public:
  explicit Host(Device& d, bool gdn = false) : dev_(d), gdn_(gdn) {
    OpGraph w(77);  // only used to generate weight bytes
    if (gdn) {
      add_weight("w_qkv", w, w.weight(DType::q8_0, {C, H}, 0.4f));
      add_weight("conv", w, w.f32({C, KW}, -0.5f, 0.5f));
      add_weight("w_z", w, w.weight(DType::bf16, {Hv * Dv, H}, 0.3f));
      add_weight("w_b", w, w.weight(DType::f32, {Hv, H}, 0.3f));
      add_weight("w_a", w, w.weight(DType::f32, {Hv, H}, 0.3f));
      add_weight("dt_bias", w, w.f32({Hv}, -0.5f, 0.5f));
      add_weight("A_log", w, w.f32({Hv}, 0.0f, 1.5f));
      add_weight("gnorm", w, w.f32({Dv}, 0.8f, 1.2f));
      add_weight("w_out", w, w.weight(DType::f16, {H, Hv * Dv}, 0.3f));
      // Recurrent state for 4 sequence slots, zeroed (fresh sequences).
      for (auto [name, d] : {std::pair{"state0", TensorDesc(DType::f32, {4, KW - 1, C})},
                             std::pair{"state1", TensorDesc(DType::f32, {4, Hv, Dk, Dv})}}) {
        caches_[name] = {d, dev_.allocate(d.bytes(), backend::BufferUsage::state)};
        const std::vector<std::byte> zero(d.bytes());
        caches_[name].second->upload(0, zero.data(), zero.size());
      }
    }
    add_weight("embed", w, w.weight(DType::f16, {V, H}, 1.0f));
    add_weight("norm1", w, w.f32({H}, -0.2f, 0.2f));
    add_weight("norm2", w, w.f32({H}, -0.2f, 0.2f));
    add_weight("wq", w, w.weight(DType::q8_0, {Hq * D, H}, 0.3f));
    add_weight("wk", w, w.weight(DType::bf16, {Hkv * D, H}, 0.3f));
    add_weight("wv", w, w.weight(DType::f32, {Hkv * D, H}, 0.3f));
    add_weight("wo", w, w.weight(DType::q4_0, {H, Hq * D}, 0.3f));
    add_weight("lm_head", w, w.weight(DType::f16, {V, H}, 0.5f));
    for (const char* n : {"k", "v"}) {
      TensorDesc d(DType::f16, {B, BS, Hkv, D});
      caches_[n] = {d, dev_.allocate(d.bytes(), backend::BufferUsage::state)};
    }
  }

  /** One step: per sequence (id, tokens this step); returns logits [N, V]. */
  std::vector<float> step(const std::vector<std::pair<int, std::vector<int32_t>>>& batch) {
    std::vector<int32_t> tokens, positions, seqs, slots, table;
    for (const auto& [id, toks] : batch) {
      int32_t& len = len_[id];
      seqs.insert(seqs.end(), {static_cast<int32_t>(tokens.size()), static_cast<int32_t>(toks.size()),
                               len + static_cast<int32_t>(toks.size()), id});  // state slot = id
      for (int32_t t : toks) {
        if (len % BS == 0) blocks_[id].push_back(next_block_++);  // grow the sequence's table
        tokens.push_back(t);
        positions.push_back(len);
        slots.push_back(blocks_[id][static_cast<size_t>(len / BS)] * BS + len % BS);
        ++len;
      }
      std::vector<int32_t> row(MB, -1);
      std::copy(blocks_[id].begin(), blocks_[id].end(), row.begin());
      table.insert(table.end(), row.begin(), row.end());
    }
    const auto N = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(batch.size());
    step_.clear();
    put("tokens", TensorDesc(DType::i32, {N}), tokens);
    put("positions", TensorDesc(DType::i32, {N}), positions);
    put("seqs", TensorDesc(DType::i32, {S, 4}), seqs);
    put("slots", TensorDesc(DType::i32, {N}), slots);
    put("block_table", TensorDesc(DType::i32, {S, MB}), table);

    graph::Builder b(*this);
    const kiln_tensor logits = gdn_ ? build_gdn(b.host_ops()) : build(b.host_ops());
    const graph::Plan plan = graph::plan_memory(b.graph());
    auto arena = dev_.allocate(plan.arena_bytes, backend::BufferUsage::activations);
    const graph::ExternalResolver ext = [&](uint32_t, const graph::Tensor& t) {
      backend::Buffer* buf = t.kind == graph::TensorKind::weight ? weights_.at(t.name).second.get()
                             : caches_.count(t.name)               ? caches_.at(t.name).second.get()
                                                                   : step_.at(t.name).second.get();
      return backend::TensorRef{buf, 0, t.desc};
    };
    dev_.compute(graph::bind(b.graph(), plan, *arena, ext));
    const backend::TensorRef out = graph::locate(b.graph(), plan, *arena, ext, logits);
    std::vector<float> v(static_cast<size_t>(out.desc.numel()));
    out.buffer->download(out.offset, v.data(), v.size() * 4);
    return v;
  }

  std::optional<TensorDesc> weight(std::string_view n) override {
    auto it = weights_.find(std::string(n));
    return it == weights_.end() ? std::nullopt : std::optional(it->second.first);
  }
  std::optional<TensorDesc> input(std::string_view n) override {
    auto it = step_.find(std::string(n));
    return it == step_.end() ? std::nullopt : std::optional(it->second.first);
  }
  std::optional<TensorDesc> cache(uint32_t layer, std::string_view n) override {
    if (layer != 0) return std::nullopt;
    if (auto it = caches_.find(std::string(n)); it != caches_.end()) return it->second.first;
    if (n == "slots" || n == "block_table") return input(n);  // per-step, host-made
    return std::nullopt;
  }

 private:
  using Slot = std::pair<TensorDesc, std::unique_ptr<backend::Buffer>>;
  void add_weight(const std::string& name, const OpGraph& g, uint32_t t) {
    const TensorDesc d = g.graph().tensor(t).desc;
    weights_[name] = {d, dev_.allocate(d.bytes(), backend::BufferUsage::weights)};
    weights_[name].second->upload(0, g.data(t).data(), g.data(t).size());
  }
  void put(const std::string& name, const TensorDesc& d, const std::vector<int32_t>& v) {
    step_[name] = {d, dev_.allocate(d.bytes(), backend::BufferUsage::activations)};
    step_[name].second->upload(0, v.data(), v.size() * 4);
  }
  Device& dev_;
  bool gdn_;
  std::map<std::string, Slot> weights_, caches_, step_;
  std::map<int, int32_t> len_;
  std::map<int, std::vector<int32_t>> blocks_;
  int32_t next_block_ = 0;
};

std::vector<float> row(const std::vector<float>& logits, int64_t r) {
  return std::vector<float>(logits.begin() + r * V, logits.begin() + (r + 1) * V);
}

class ModelGraph : public ::testing::TestWithParam<Device*> {};

TEST_P(ModelGraph, PrefillChunksAndDecodeGiveBitwiseIdenticalLogits) {
  const std::vector<int32_t> prompt = {3, 14, 15, 9, 26, 5, 35, 8, 49, 7, 1};
  Host one(*GetParam());
  const auto whole = one.step({{0, prompt}});

  Host chunked(*GetParam());
  std::vector<float> pieces;
  size_t at = 0;
  for (size_t len : {size_t{5}, size_t{3}, size_t{1}, size_t{1}, size_t{1}}) {
    const auto l = chunked.step({{0, std::vector<int32_t>(prompt.begin() + static_cast<long>(at), prompt.begin() + static_cast<long>(at + len))}});
    pieces.insert(pieces.end(), l.begin(), l.end());
    at += len;
  }
  EXPECT_TRUE(bitwise_equal(whole, pieces));
  for (float f : whole) ASSERT_TRUE(std::isfinite(f));
}

TEST_P(ModelGraph, BatchedSequencesEqualSequencesAlone) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7}, b = {40, 30, 20};
  Host alone_a(*GetParam()), alone_b(*GetParam()), both(*GetParam());
  const auto la = alone_a.step({{0, a}}), lb = alone_b.step({{0, b}});
  const auto lab = both.step({{1, b}, {0, a}});  // b first: a's rows move
  EXPECT_TRUE(bitwise_equal(std::vector<float>(lab.begin(), lab.begin() + 3 * V), lb));
  EXPECT_TRUE(bitwise_equal(std::vector<float>(lab.begin() + 3 * V, lab.end()), la));
  // Then decode both together vs alone: still identical.
  const auto da = alone_a.step({{0, {9}}}), dab = both.step({{0, {9}}, {1, {11}}});
  EXPECT_TRUE(bitwise_equal(row(dab, 0), da));
}

TEST_P(ModelGraph, DeltaNetStateCarriesAcrossPrefillChunksAndDecode) {
  // Chunked prefill (WY form) vs chunks vs token-by-token recurrence: equal to fp32 rounding.
  const std::vector<int32_t> prompt = {3, 14, 15, 9, 26, 5, 35, 8, 49, 7, 1, 4, 33, 21, 2, 17, 44, 0, 12, 30};
  Host one(*GetParam(), true);
  const auto whole = one.step({{0, prompt}});
  for (const std::vector<size_t>& split : {std::vector<size_t>{2, 1, 9, 8}, std::vector<size_t>(prompt.size(), 1)}) {
    Host host(*GetParam(), true);
    std::vector<float> pieces;
    size_t at = 0;
    for (size_t len : split) {
      const auto l = host.step({{0, std::vector<int32_t>(prompt.begin() + static_cast<long>(at), prompt.begin() + static_cast<long>(at + len))}});
      pieces.insert(pieces.end(), l.begin(), l.end());
      at += len;
    }
    EXPECT_LT(nmse(pieces, whole), 1e-10) << split.size() << " steps";
  }
  // Two sequences in their own state slots, batched, equal each alone (bitwise: same forms).
  Host alone(*GetParam(), true), both(*GetParam(), true);
  const std::vector<int32_t> a = {5, 6, 7, 8, 9}, b = {1, 2, 3};
  const auto la = alone.step({{2, a}});
  const auto lab = both.step({{1, b}, {2, a}});
  EXPECT_TRUE(bitwise_equal(std::vector<float>(lab.begin() + 3 * V, lab.end()), la));
}

INSTANTIATE_TEST_SUITE_P(, ModelGraph, ::testing::ValuesIn(devices_under_test()), [](const auto& i) {
  std::string n = i.param->info().id;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

}  // namespace
}  // namespace kiln::test
