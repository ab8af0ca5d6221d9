// Shape inference: one block per op family, in the order of the kiln_op enum.
#include "graph/infer.hpp"

#include <fmt/format.h>

#include "backend/ops.hpp"
#include "core/error.hpp"

namespace kiln::graph {
namespace {

using backend::TensorDesc;

struct Check {
  uint32_t op;
  std::span<const TensorDesc> s;

  [[noreturn]] void fail(const std::string& what) const {
    std::string got;
    for (size_t i = 0; i < s.size(); ++i) got += (i ? ", " : "") + s[i].str();
    throw_error("[graph] {}: {} (sources: {})", op_name(op), what, got);
  }
  void require(bool ok, const std::string& what) const {
    if (!ok) fail(what);
  }
  const TensorDesc& f32(size_t i, const char* what) const {
    require(s[i].dtype == DType::f32, fmt::format("{} must be f32", what));
    return s[i];
  }
  const TensorDesc& i32(size_t i, const char* what) const {
    require(s[i].dtype == DType::i32, fmt::format("{} must be i32", what));
    return s[i];
  }
  void seqs(size_t i) const {
    require(s[i].dtype == DType::i32 && s[i].ndim == 2 && s[i].ne[1] == kSeqColumns, "seqs must be i32 [S, 4]");
  }
};

TensorDesc shape(DType t, std::initializer_list<int64_t> ne) {
  return TensorDesc(t, ne);
}

int axis_of(const Check& c, int axis, uint32_t ndim) {
  const int a = axis < 0 ? axis + static_cast<int>(ndim) : axis;
  c.require(a >= 0 && a < static_cast<int>(ndim), fmt::format("axis {} outside a {}-d tensor", axis, ndim));
  return a;
}

}  // namespace

TensorDesc infer(uint32_t op, const kiln_op_params& p, std::span<const TensorDesc> s) {
  const OpTraits tr = op_traits(op);
  if (!tr.name) throw_error("[graph] unknown op {} (this host knows ops up to {})", op, KILN_OP_COUNT - 1);
  const Check c{op, s};
  c.require(s.size() >= tr.min_src && s.size() <= tr.max_src,
            fmt::format("takes {}..{} sources, got {}", tr.min_src, tr.max_src, s.size()));
  for (const TensorDesc& d : s) c.require(d.ndim >= 1 && d.numel() > 0, "sources must be non-empty");

  if (op_is_unary(op)) {
    c.f32(0, "x");
    if (op == KILN_OP_SOFTCAP) c.require(p.cap > 0.0f, "cap must be > 0");
    return s[0];
  }
  switch (op) {
    case KILN_OP_GET_ROWS: {
      c.require(backend::is_weight_dtype(s[0].dtype), "the table must be a float or quantized type");
      c.i32(1, "ids");
      c.require(s[1].ndim == 1, "ids must be 1-d");
      TensorDesc out = s[0];
      out.dtype = DType::f32;
      out.ne[0] = s[1].ne[0];
      return out;
    }
    case KILN_OP_SET_ROWS: {
      c.require(s[0].dtype == DType::f32 || s[0].dtype == DType::f16 || s[0].dtype == DType::bf16 ||
                    (is_kv_quantized(s[0].dtype) && row_bytes(s[0].dtype, s[0].last()) > 0),
                "the destination must be f32, f16, bf16, or kv_q8 / kv_q4 with a last dim that is a multiple of 8");
      c.f32(1, "rows");
      c.i32(2, "slots");
      c.require(s[2].ndim == 1 && s[2].ne[0] == s[1].ne[0], "slots must be i32 [N] with N = rows' first dim");
      c.require(s[1].ndim <= s[0].ndim, "rows have more dims than the destination");
      for (uint32_t i = 1; i < s[1].ndim; ++i)
        c.require(s[1].ne[i] == s[0].ne[s[0].ndim - s[1].ndim + i], "rows' trailing dims must match the destination's");
      return s[0];
    }
    case KILN_OP_RESHAPE: {
      c.require(p.ndim >= 1 && p.ndim <= static_cast<uint32_t>(backend::kMaxDims), "ndim must be 1..4");
      TensorDesc out;
      out.dtype = s[0].dtype;
      out.ndim = p.ndim;
      int infer_at = -1;
      int64_t known = 1;
      for (uint32_t i = 0; i < p.ndim; ++i) {
        if (p.shape[i] == -1) {
          c.require(infer_at < 0, "at most one -1 in shape");
          infer_at = static_cast<int>(i);
        } else {
          c.require(p.shape[i] > 0, "shape entries must be > 0 or -1");
          known *= p.shape[i];
        }
        out.ne[i] = p.shape[i];
      }
      if (infer_at >= 0) {
        c.require(s[0].numel() % known == 0, "shape does not divide the element count");
        out.ne[static_cast<size_t>(infer_at)] = s[0].numel() / known;
      }
      c.require(out.numel() == s[0].numel(),
                fmt::format("cannot reshape {} elements into {}", s[0].numel(), out.str()));
      c.require(!is_packed(out.dtype) || out.last() == s[0].last(), "quantized rows cannot be re-split");
      return out;
    }
    case KILN_OP_SLICE: {
      c.require(!is_packed(s[0].dtype), "cannot slice quantized tensors");
      const int a = axis_of(c, p.axis, s[0].ndim);
      const int64_t dim = s[0].ne[static_cast<size_t>(a)];
      const int64_t end = p.end ? p.end : dim;
      c.require(p.begin >= 0 && p.begin < end && end <= dim,
                fmt::format("range [{}, {}) outside [0, {})", p.begin, end, dim));
      TensorDesc out = s[0];
      out.ne[static_cast<size_t>(a)] = end - p.begin;
      return out;
    }
    case KILN_OP_CONCAT: {
      c.require(s[0].dtype == s[1].dtype && !is_packed(s[0].dtype) && s[0].ndim == s[1].ndim,
                "sources need the same plain dtype and rank");
      const int a = axis_of(c, p.axis, s[0].ndim);
      TensorDesc out = s[0];
      for (uint32_t i = 0; i < s[0].ndim; ++i)
        if (static_cast<int>(i) != a) c.require(s[0].ne[i] == s[1].ne[i], "dims other than axis must match");
      out.ne[static_cast<size_t>(a)] += s[1].ne[static_cast<size_t>(a)];
      return out;
    }
    case KILN_OP_MATMUL: {
      c.f32(0, "x");
      c.require(backend::is_weight_dtype(s[1].dtype) && s[1].ndim == 2, "w must be a 2-d weight [M, K]");
      c.require(s[1].ne[1] == s[0].last(), fmt::format("K mismatch: x has {}, w has {}", s[0].last(), s[1].ne[1]));
      TensorDesc out = s[0];
      out.ne[out.ndim - 1] = s[1].ne[0];
      return out;
    }
    case KILN_OP_MOE_MATMUL: {
      c.f32(0, "x");
      c.require(backend::is_weight_dtype(s[1].dtype) && s[1].ndim == 3, "w must be a 3-d weight [E, M, K]");
      c.i32(2, "ids");
      c.require(s[2].ndim == 2, "ids must be [N, k]");
      const int64_t N = s[2].ne[0], k = s[2].ne[1];
      c.require((s[0].ndim == 2 && s[0].ne[0] == N) || (s[0].ndim == 3 && s[0].ne[0] == N && s[0].ne[1] == k),
                "x must be [N, K] or [N, k, K]");
      c.require(s[0].last() == s[1].ne[2], "K mismatch between x and w");
      return shape(DType::f32, {N, k, s[1].ne[1]});
    }
    case KILN_OP_ADD:
    case KILN_OP_MUL: {
      c.f32(0, "a");
      c.f32(1, "b");
      c.require(s[1].ndim <= s[0].ndim, "b has more dims than a");
      for (uint32_t i = 0; i < s[1].ndim; ++i) {
        const int64_t bd = s[1].ne[s[1].ndim - 1 - i], ad = s[0].ne[s[0].ndim - 1 - i];
        c.require(bd == 1 || bd == ad, "b does not broadcast to a (each dim must equal a's or be 1)");
      }
      return s[0];
    }
    case KILN_OP_RMS_NORM: {
      c.f32(0, "x");
      c.require(p.mode >= KILN_NORM_WEIGHT && p.mode <= KILN_NORM_GATED, "unknown mode");
      c.require(p.eps > 0.0f, "eps must be > 0");
      const size_t want = p.mode == KILN_NORM_NONE ? 1 : p.mode == KILN_NORM_GATED ? 3 : 2;
      c.require(s.size() == want, fmt::format("this mode takes {} sources", want));
      if (want >= 2) c.require(s[1].dtype == DType::f32 && s[1].numel() == s[0].last(), "w must be f32 [D]");
      if (want == 3) c.require(s[2].dtype == DType::f32 && s[2].same_shape(s[0]), "z must be f32 shaped like x");
      return s[0];
    }
    case KILN_OP_L2_NORM:
      c.f32(0, "x");
      c.require(p.eps > 0.0f, "eps must be > 0");
      return s[0];
    case KILN_OP_SOFTMAX:
      c.f32(0, "x");
      return s[0];
    case KILN_OP_ROPE: {
      c.f32(0, "x");
      c.require(s[0].ndim == 3, "x must be [N, H, D]");
      c.i32(1, "positions");
      c.require(s[1].ndim == 1 && s[1].ne[0] == s[0].ne[0], "positions must be i32 [N]");
      const int64_t D = s[0].ne[2], nd = p.n_dims ? p.n_dims : D;
      c.require(nd > 0 && nd % 2 == 0 && nd <= D, "n_dims must be even and at most the head dim");
      c.require(p.n_freq >= 0 && p.n_freq <= nd / 2, "n_freq must be within [0, n_dims/2]");
      c.require(p.theta > 0.0f, "theta must be > 0");
      c.require(p.mode == KILN_ROPE_NEOX || p.mode == KILN_ROPE_NORMAL, "unknown mode");
      return s[0];
    }
    case KILN_OP_ATTENTION: {
      c.f32(0, "q");
      c.require(s[0].ndim == 3 && s[1].ndim == 4 && s[2].ndim == 4, "q must be [N, Hq, Dk], caches [B, BS, Hkv, D]");
      for (size_t i : {1, 2})
        c.require(s[i].dtype == DType::f32 || s[i].dtype == DType::f16 || s[i].dtype == DType::bf16 ||
                      (is_kv_quantized(s[i].dtype) && row_bytes(s[i].dtype, s[i].last()) > 0),
                  "caches must be f32, f16, bf16, or kv_q8 / kv_q4 with head dims that are multiples of 8");
      c.require(s[1].ne[0] == s[2].ne[0] && s[1].ne[1] == s[2].ne[1] && s[1].ne[2] == s[2].ne[2],
                "k and v caches need the same blocks, block size and heads");
      c.require(s[1].ne[3] == s[0].ne[2], "q and k head dims differ");
      c.require(s[0].ne[1] % s[1].ne[2] == 0, "query heads must be a multiple of kv heads");
      c.i32(3, "block_table");
      c.require(s[3].ndim == 2, "block_table must be [S, MB]");
      c.seqs(4);
      c.require(s[3].ne[0] == s[4].ne[0], "block_table needs one row per sequence");
      c.require(p.window >= 0 && p.cap >= 0.0f, "window and cap must be >= 0");
      return shape(DType::f32, {s[0].ne[0], s[0].ne[1], s[2].ne[3]});
    }
    case KILN_OP_CONV1D_CAUSAL: {
      c.f32(0, "x");
      c.f32(1, "w");
      c.f32(2, "state");
      c.require(s[0].ndim == 2 && s[1].ndim == 2 && s[2].ndim == 3, "x [N, C], w [C, K], state [slots, K-1, C]");
      c.require(s[1].ne[0] == s[0].ne[1] && s[2].ne[2] == s[0].ne[1], "channel counts differ");
      c.require(s[2].ne[1] == s[1].ne[1] - 1, "state must hold K-1 rows");
      c.seqs(3);
      return s[0];
    }
    case KILN_OP_GATED_DELTA: {
      const char* names[] = {"q", "k", "v", "g", "beta", "state"};
      for (size_t i = 0; i < 6; ++i) c.f32(i, names[i]);
      c.require(s[0].ndim == 3 && s[0].same_shape(s[1]), "q and k must be [N, Hk, Dk]");
      c.require(s[2].ndim == 3 && s[2].ne[0] == s[0].ne[0], "v must be [N, Hv, Dv]");
      const int64_t N = s[0].ne[0], Hk = s[0].ne[1], Hv = s[2].ne[1];
      c.require(Hv % Hk == 0, "value heads must be a multiple of key heads");
      c.require(s[3].numel() == N * Hv && s[4].numel() == N * Hv, "g and beta must be [N, Hv]");
      c.require(s[5].ndim == 4 && s[5].ne[1] == Hv && s[5].ne[2] == s[0].ne[2] && s[5].ne[3] == s[2].ne[2],
                "state must be [slots, Hv, Dk, Dv]");
      c.seqs(6);
      c.require(p.mode >= KILN_DELTA_AUTO && p.mode <= KILN_DELTA_CHUNKED && p.chunk >= 0, "unknown mode or bad chunk");
      return s[2];
    }
    case KILN_OP_TOP_K:
      c.f32(0, "x");
      c.require(p.k >= 1 && p.k <= s[0].last(), fmt::format("k = {} outside [1, {}]", p.k, s[0].last()));
      c.require(p.mode == 0 || p.mode == kTopKValues, "unknown mode (0, or kTopKValues for ids and values)");
      return shape(DType::i32, {s[0].rows(), p.mode == kTopKValues ? 2 * int64_t{p.k} : p.k});
    case KILN_OP_MOE_WEIGHTS:
      c.f32(0, "logits");
      c.i32(1, "ids");
      c.require(s[1].ndim == 2 && s[1].ne[0] == s[0].rows(), "ids must be [N, k]");
      if (s.size() == 3) c.require(s[2].dtype == DType::f32 && s[2].numel() == s[0].last(), "scale must be f32 [E]");
      return shape(DType::f32, {s[1].ne[0], s[1].ne[1]});
    case KILN_OP_MOE_SUM:
      c.f32(0, "y");
      c.f32(1, "w");
      c.require(s[0].ndim == 3 && s[1].numel() == s[0].ne[0] * s[0].ne[1], "y must be [N, k, M], w [N, k]");
      return shape(DType::f32, {s[0].ne[0], s[0].ne[2]});
    default:
      c.fail("has no shape rule (a bug)");
  }
}

}  // namespace kiln::graph
