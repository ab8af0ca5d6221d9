// GATED_DELTA: the gated delta rule (Qwen3.5 / Qwen3-Next linear attention) with carried state, in
// the recurrent form (one token at a time) and the chunked WY form (qwen3_5.md §2.6). Both run in
// f32 per (sequence, value head); state S is [Dk, Dv] per head, zeros for a sequence at its first
// step (kv_len == q_len). Chunks start at positions that are multiples of the chunk length, so a
// state taken at such a position and resumed later gives the bits of an uninterrupted run.
#include <tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend::reference {
namespace {

struct Head {
  const float *q, *k, *v, *g, *beta;      // token 0 of the sequence, this head
  int64_t qk_stride, v_stride, g_stride;  // floats between consecutive tokens
  float* o;
  int64_t o_stride;
  float* S;  // [Dk, Dv]
  int64_t Dk, Dv;
};

/** One token of the recurrence: S <- e^g S; u = S^T k; S <- S + k (beta (v - u))^T; o = S^T q. */
void recurrent_token(const Head& h, int64_t t, std::vector<float>& u) {
  const float *q = h.q + t * h.qk_stride, *k = h.k + t * h.qk_stride, *v = h.v + t * h.v_stride;
  const float alpha = std::exp(h.g[t * h.g_stride]), beta = h.beta[t * h.g_stride];
  for (int64_t i = 0; i < h.Dk * h.Dv; ++i) h.S[i] *= alpha;
  std::fill(u.begin(), u.end(), 0.0f);
  for (int64_t a = 0; a < h.Dk; ++a)
    for (int64_t b = 0; b < h.Dv; ++b) u[static_cast<size_t>(b)] += h.S[a * h.Dv + b] * k[a];
  for (int64_t b = 0; b < h.Dv; ++b) u[static_cast<size_t>(b)] = beta * (v[b] - u[static_cast<size_t>(b)]);
  for (int64_t a = 0; a < h.Dk; ++a)
    for (int64_t b = 0; b < h.Dv; ++b) h.S[a * h.Dv + b] += k[a] * u[static_cast<size_t>(b)];
  float* o = h.o + t * h.o_stride;
  for (int64_t b = 0; b < h.Dv; ++b) o[b] = 0.0f;
  for (int64_t a = 0; a < h.Dk; ++a)
    for (int64_t b = 0; b < h.Dv; ++b) o[b] += h.S[a * h.Dv + b] * q[a];
}

void recurrent(const Head& h, int64_t T) {
  std::vector<float> u(static_cast<size_t>(h.Dv));
  for (int64_t t = 0; t < T; ++t) recurrent_token(h, t, u);
}

/** T tokens from position p0: chunks end where the next position is a multiple of C. */
void chunked(const Head& h, int64_t T, int64_t C, int64_t p0) {
  const int64_t Dk = h.Dk, Dv = h.Dv;
  std::vector<float> gam, A, U, W, Vp, tmp(static_cast<size_t>(Dv));
  auto at = [](std::vector<float>& m, int64_t cols, int64_t r, int64_t c) -> float& {
    return m[static_cast<size_t>(r * cols + c)];
  };
  for (int64_t t0 = 0, n = 0; t0 < T; t0 += n) {
    n = std::min(C - (p0 + t0) % C, T - t0);
    // A one-token chunk is one step of the recurrence, computed as the recurrent form does: a
    // prompt resumed one token before its end (decoded recurrently) then gives the bits of the
    // same token at the end of an uninterrupted prefill.
    if (n == 1) {
      recurrent_token(h, t0, tmp);
      continue;
    }
    const float* K = h.k + t0 * h.qk_stride;
    const float* Q = h.q + t0 * h.qk_stride;
    auto krow = [&](int64_t i) { return K + i * h.qk_stride; };
    auto qrow = [&](int64_t i) { return Q + i * h.qk_stride; };
    auto beta = [&](int64_t i) { return h.beta[(t0 + i) * h.g_stride]; };
    gam.assign(static_cast<size_t>(n), 0.0f);
    float run = 0.0f;
    for (int64_t i = 0; i < n; ++i) gam[static_cast<size_t>(i)] = (run += h.g[(t0 + i) * h.g_stride]);
    auto G = [&](int64_t i) { return gam[static_cast<size_t>(i)]; };
    // A (strictly lower): β_i (k_i·k_j) e^{γ_i−γ_j}.
    A.assign(static_cast<size_t>(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) at(A, n, i, j) = beta(i) * dot(krow(i), krow(j), Dk) * std::exp(G(i) - G(j));
    // (I + A) U = β V and (I + A) W = β e^{γ} K by forward substitution.
    U.assign(static_cast<size_t>(n * Dv), 0.0f);
    W.assign(static_cast<size_t>(n * Dk), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float* v = h.v + (t0 + i) * h.v_stride;
      for (int64_t b = 0; b < Dv; ++b) at(U, Dv, i, b) = beta(i) * v[b];
      const float bk = beta(i) * std::exp(G(i));
      for (int64_t a = 0; a < Dk; ++a) at(W, Dk, i, a) = bk * krow(i)[a];
      for (int64_t j = 0; j < i; ++j) {
        const float aij = at(A, n, i, j);
        for (int64_t b = 0; b < Dv; ++b) at(U, Dv, i, b) -= aij * at(U, Dv, j, b);
        for (int64_t a = 0; a < Dk; ++a) at(W, Dk, i, a) -= aij * at(W, Dk, j, a);
      }
    }
    // V' = U − W S.
    Vp = U;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t a = 0; a < Dk; ++a) {
        const float wia = at(W, Dk, i, a);
        for (int64_t b = 0; b < Dv; ++b) at(Vp, Dv, i, b) -= wia * h.S[a * Dv + b];
      }
    // O_i = e^{γ_i} Sᵀq_i + Σ_{j≤i} (q_i·k_j) e^{γ_i−γ_j} V'_j.
    for (int64_t i = 0; i < n; ++i) {
      float* o = h.o + (t0 + i) * h.o_stride;
      std::fill(tmp.begin(), tmp.end(), 0.0f);
      for (int64_t a = 0; a < Dk; ++a)
        for (int64_t b = 0; b < Dv; ++b) tmp[static_cast<size_t>(b)] += h.S[a * Dv + b] * qrow(i)[a];
      const float e = std::exp(G(i));
      for (int64_t b = 0; b < Dv; ++b) o[b] = e * tmp[static_cast<size_t>(b)];
      for (int64_t j = 0; j <= i; ++j) {
        const float c = dot(qrow(i), krow(j), Dk) * std::exp(G(i) - G(j));
        for (int64_t b = 0; b < Dv; ++b) o[b] += c * at(Vp, Dv, j, b);
      }
    }
    // S ← e^{γ_last} S + Σ_j (k_j e^{γ_last−γ_j}) V'_jᵀ.
    const float last = G(n - 1);
    const float el = std::exp(last);
    for (int64_t i = 0; i < Dk * Dv; ++i) h.S[i] *= el;
    for (int64_t j = 0; j < n; ++j) {
      const float e = std::exp(last - G(j));
      for (int64_t a = 0; a < Dk; ++a) {
        const float ka = krow(j)[a] * e;
        for (int64_t b = 0; b < Dv; ++b) h.S[a * Dv + b] += ka * at(Vp, Dv, j, b);
      }
    }
  }
}

}  // namespace

DeltaShape check_gated_delta(const Node& n) {
  const TensorDesc &q = n.src[0].desc, &k = n.src[1].desc, &v = n.src[2].desc, &g = n.src[3].desc, &b = n.src[4].desc,
                   &st = n.src[5].desc;
  for (uint32_t i = 0; i < 6; ++i)
    if (n.src[i].desc.dtype != DType::f32) fail(n, "q, k, v, g, beta and state must be f32");
  if (q.ndim != 3 || !k.same_shape(q) || v.ndim != 3 || st.ndim != 4)
    fail(n, "expected q, k [N, Hk, Dk], v [N, Hv, Dv], state [slots, Hv, Dk, Dv]");
  DeltaShape d;
  d.N = q.ne[0], d.Hk = q.ne[1], d.Dk = q.ne[2], d.Hv = v.ne[1], d.Dv = v.ne[2];
  if (v.ne[0] != d.N || d.Hk == 0 || d.Hv % d.Hk || g.numel() != d.N * d.Hv || b.numel() != d.N * d.Hv ||
      st.ne[1] != d.Hv || st.ne[2] != d.Dk || st.ne[3] != d.Dv || n.dst.desc.numel() != d.N * d.Hv * d.Dv)
    fail(n, "shapes do not agree (Hv must be a multiple of Hk)");
  d.seqs = read_seqs(n, n.src[6], d.N, st.ne[0]);
  if (n.params.mode < KILN_DELTA_AUTO || n.params.mode > KILN_DELTA_CHUNKED) fail(n, "unknown GATED_DELTA mode");
  return d;
}

void run_gated_delta(const Node& n) {
  const DeltaShape d = check_gated_delta(n);
  const int64_t N = d.N, Hk = d.Hk, Dk = d.Dk, Hv = d.Hv, Dv = d.Dv;
  const auto& seqs = d.seqs;
  const int mode = n.params.mode;
  const int64_t C = n.params.chunk > 0 ? n.params.chunk : 64;
  const float *qp = f32_of(n.src[0]), *kp = f32_of(n.src[1]), *vp = f32_of(n.src[2]), *gp = f32_of(n.src[3]),
              *bp = f32_of(n.src[4]);
  float* sp = f32_of(n.src[5]);
  float* op = f32_of(n.dst);
  std::fill(op, op + N * Hv * Dv, 0.0f);
  const int64_t R = Hv / Hk;
  tbb::parallel_for(int64_t{0}, static_cast<int64_t>(seqs.size()) * Hv, [&](int64_t task) {
    const Seq& s = seqs[static_cast<size_t>(task / Hv)];
    const int64_t h = task % Hv, hk = h / R, t0 = s.q_start;
    Head hd{qp + (t0 * Hk + hk) * Dk,
            kp + (t0 * Hk + hk) * Dk,
            vp + (t0 * Hv + h) * Dv,
            gp + t0 * Hv + h,
            bp + t0 * Hv + h,
            Hk * Dk,
            Hv * Dv,
            Hv,
            op + (t0 * Hv + h) * Dv,
            Hv * Dv,
            sp + (static_cast<int64_t>(s.slot) * Hv + h) * Dk * Dv,
            Dk,
            Dv};
    if (s.kv_len == s.q_len) std::fill(hd.S, hd.S + Dk * Dv, 0.0f);  // first step: the slot's old state is not ours
    const bool use_chunked = mode == KILN_DELTA_CHUNKED || (mode == KILN_DELTA_AUTO && s.q_len > 1);
    if (use_chunked)
      chunked(hd, s.q_len, C, s.kv_len - s.q_len);
    else
      recurrent(hd, s.q_len);
  });
}

}  // namespace kiln::backend::reference
