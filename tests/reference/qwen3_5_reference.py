#!/usr/bin/python3
"""Plain-PyTorch float64 reference forward pass of the Qwen3.5 / Qwen3.5-MoE / Qwen3-Next text models
(hybrid Gated DeltaNet + gated full attention + dense or sparse-MoE MLPs), for golden logits.

Written independently of the kiln engine from Hugging Face transformers' models/qwen3_5/modeling_qwen3_5.py,
models/qwen3_5_moe/modeling_qwen3_5_moe.py, models/qwen3_next/modeling_qwen3_next.py, their configuration
files, and docs/models/qwen3_5.md. Deliberately simple: explicit loop over layers, full T x T attention,
token-by-token delta-rule recurrence (HF torch_recurrent_gated_delta_rule), no cache, everything in float64.

Usage:
  /usr/bin/python3 tests/reference/qwen3_5_reference.py --model DIR --ids 1,17,5 [--ids ...] --out FILE
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

F64 = torch.float64
IGNORED_PREFIXES = ("model.visual.", "mtp.")  # vision tower (wrapper checkpoints), multi-token-prediction head
# top-level / text model_type -> family
FAMILIES = {"qwen3_5": "qwen3_5", "qwen3_5_text": "qwen3_5", "qwen3_5_moe": "qwen3_5_moe",
            "qwen3_5_moe_text": "qwen3_5_moe", "qwen3_next": "qwen3_next"}


def fail(msg):
    sys.exit("qwen3_5_reference: error: " + msg)


# safetensors reader (own implementation: 8-byte LE header length, JSON header, raw data)
class SafeTensors:
    def __init__(self, model_dir):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
            files = ["model.safetensors"]
        else:
            fail(f"no model.safetensors or model.safetensors.index.json in {model_dir}")
        self.entries = {}  # name -> (path, dtype, shape, absolute byte offset)
        for fn in files:
            path = os.path.join(model_dir, fn)
            with open(path, "rb") as f:
                (hlen,) = np.frombuffer(f.read(8), dtype="<u8")
                header = json.loads(f.read(int(hlen)))
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                b, e = info["data_offsets"]
                if e - b != int(np.prod(info["shape"])) * {"F32": 4, "F16": 2, "BF16": 2}.get(info["dtype"], 0):
                    fail(f"tensor {name}: dtype {info['dtype']} unsupported (F32/F16/BF16) or size mismatch")
                self.entries[name] = (path, info["dtype"], tuple(info["shape"]), 8 + int(hlen) + b)

    def get(self, name, rows=None):
        """float64 torch tensor; `rows` selects entries along dim 0 (embedding gather, chosen experts)."""
        path, dt, shape, off = self.entries[name]
        np_dt = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[dt]
        arr = np.memmap(path, dtype=np_dt, mode="r", offset=off, shape=shape if shape else (1,))
        arr = np.asarray(arr[np.asarray(rows)] if rows is not None else arr)
        if dt == "BF16":  # bf16 bits are the high half of an f32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return torch.from_numpy(arr.astype(np.float64)).reshape(arr.shape if shape else ())


# config
def need(cfg, key, where="text config"):
    if key not in cfg or cfg[key] is None:
        fail(f"config.json ({where}) lacks required key '{key}'")
    return cfg[key]


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    top_type = need(raw, "model_type", "top level")
    if "text_config" in raw:  # Qwen3_5(Moe)ForConditionalGeneration wrapper: LM keys live in text_config
        cfg = raw["text_config"]
        family = FAMILIES.get(top_type)
        if family not in ("qwen3_5", "qwen3_5_moe"):
            fail(f"wrapper config with model_type {top_type!r} is not qwen3_5 / qwen3_5_moe")
        if cfg.get("model_type", family + "_text") != family + "_text":
            fail(f"text_config.model_type {cfg.get('model_type')!r} does not match {top_type!r}")
        # HF ties lm_head via self.config.tie_word_embeddings, i.e. the TOP-LEVEL key of the wrapper
        tie = bool(need(raw, "tie_word_embeddings", "top level"))
        if "tie_word_embeddings" in cfg and bool(cfg["tie_word_embeddings"]) != tie:
            print("qwen3_5_reference: warning: text_config.tie_word_embeddings differs from the top-level "
                  "value; using the top-level one (as HF ForConditionalGeneration does)", file=sys.stderr)
    else:
        cfg, family = raw, FAMILIES.get(top_type)
        if family is None:
            fail(f"unsupported model_type {top_type!r} (qwen3_5[_text], qwen3_5_moe[_text], qwen3_next)")
        tie = bool(need(cfg, "tie_word_embeddings"))
    c = {k: need(cfg, k) for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "rms_norm_eps", "hidden_act", "linear_num_key_heads", "linear_num_value_heads",
        "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim")}
    c.update(family=family, wrapper="text_config" in raw, tie_word_embeddings=tie)
    if c["hidden_act"] != "silu":
        fail(f"hidden_act {c['hidden_act']!r} unsupported (only silu; it is also the GDN conv activation)")
    if cfg.get("attention_bias", False):
        fail("attention_bias=true is not supported")
    if cfg.get("attn_output_gate", True) is not True:
        fail("attn_output_gate=false: HF always applies the output gate (q_proj has 2*heads*head_dim rows)")
    L = c["num_hidden_layers"]
    if cfg.get("layer_types") is not None:  # HF remap_legacy_layer_types: mamba / attention are old names
        lt = [{"mamba": "linear_attention", "attention": "full_attention"}.get(t, t) for t in cfg["layer_types"]]
    else:  # HF __post_init__: layer i is full attention iff (i + 1) % full_attention_interval == 0
        n = need(cfg, "full_attention_interval", "text config, needed because layer_types is absent")
        lt = ["linear_attention" if (i + 1) % n else "full_attention" for i in range(L)]
    if len(lt) != L or any(t not in ("linear_attention", "full_attention") for t in lt):
        fail(f"layer_types must list {L} entries of linear_attention/full_attention: {lt}")
    c["layer_types"] = lt
    # RoPE: HF convert_rope_params_to_dict: rope_scaling or rope_parameters; legacy top-level rope_theta /
    # partial_rotary_factor fill missing entries (HF would default them to 10000 / 0.25; we require them)
    rp = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if rope_type != "default":
        fail(f"rope_type {rope_type!r} unsupported (only default)")
    for key in ("rope_theta", "partial_rotary_factor"):
        val = rp.get(key, cfg.get(key))
        c[key] = float(val if val is not None else need({}, f"rope_parameters.{key} (or legacy top-level {key})"))
    c["rotary_dim"] = int(c["head_dim"] * c["partial_rotary_factor"])  # HF: int(head_dim * factor)
    if c["rotary_dim"] % 2 or not 0 < c["rotary_dim"] <= c["head_dim"]:
        fail(f"rotary_dim {c['rotary_dim']} must be even and in (0, head_dim]")
    # Qwen3.5 MRoPE: text positions are identical on the T/H/W axes, so the section split is irrelevant
    c["mrope_section_unused"] = rp.get("mrope_section")
    # MLP kind per layer
    if family == "qwen3_5":
        c["intermediate_size"] = need(cfg, "intermediate_size")
        c["mlp_types"] = ["dense"] * L
    else:
        for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"):
            c[k] = need(cfg, k)
        if family == "qwen3_5_moe":  # every layer sparse; the router always renormalises (no norm_topk_prob)
            c["norm_topk_prob"] = True
            c["mlp_types"] = ["moe"] * L
        else:  # Qwen3NextDecoderLayer
            c["norm_topk_prob"] = bool(need(cfg, "norm_topk_prob"))
            step, only = need(cfg, "decoder_sparse_step"), list(need(cfg, "mlp_only_layers"))
            c.update(decoder_sparse_step=step, mlp_only_layers=only)
            c["mlp_types"] = ["moe" if i not in only and c["num_experts"] > 0 and (i + 1) % step == 0 else "dense"
                              for i in range(L)]
            if "dense" in c["mlp_types"]:
                c["intermediate_size"] = need(cfg, "intermediate_size")
        if "moe" in c["mlp_types"] and not 0 < c["num_experts_per_tok"] <= c["num_experts"]:
            fail("num_experts_per_tok must be in [1, num_experts]")
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        fail("num_attention_heads must be a multiple of num_key_value_heads")
    if c["linear_num_value_heads"] % c["linear_num_key_heads"]:
        fail("linear_num_value_heads must be a multiple of linear_num_key_heads")
    return c


# building blocks (float64)
def rms_norm_zc(x, w, eps):  # Qwen3_5RMSNorm / Qwen3NextRMSNorm: zero-centred weight, x * (1 + w)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def rms_norm_gated(x, z, w, eps):  # Qwen3_5RMSNormGated: plain weight, norm before the silu(z) gate
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * F.silu(z)


def l2norm(x, eps=1e-6):  # HF/FLA l2norm: x / sqrt(sum(x^2) + eps)
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def apply_rope(x, inv_freq):  # x [T, heads, D]; NeoX rotate-half on the first 2*len(inv_freq) dims only
    T, rot = x.shape[0], 2 * inv_freq.numel()
    freqs = torch.arange(T, dtype=F64)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    rotated = torch.cat([-xr[..., rot // 2:], xr[..., : rot // 2]], dim=-1)
    return torch.cat([xr * emb.cos() + rotated * emb.sin(), xp], dim=-1)


def gated_delta_rule(q, k, v, g, beta):
    """HF torch_recurrent_gated_delta_rule, one token at a time, zero initial state.
    q, k [T, Hv, dk] (already l2-normalised, q scaled); v [T, Hv, dv]; g, beta [T, Hv] -> out [T, Hv, dv]."""
    T, Hv, dk = k.shape
    S = torch.zeros(Hv, dk, v.shape[-1], dtype=F64)  # state [head, d_k, d_v]
    out = torch.zeros_like(v)
    for t in range(T):
        S = S * g[t].exp()[:, None, None]                      # decay
        kv_mem = (S * k[t][:, :, None]).sum(dim=1)             # S^T k
        delta = (v[t] - kv_mem) * beta[t][:, None]
        S = S + k[t][:, :, None] * delta[:, None, :]           # delta-rule write
        out[t] = (S * q[t][:, :, None]).sum(dim=1)             # read with the updated state
    return out


# model
class Qwen35Reference:
    def __init__(self, model_dir):
        self.c = c = load_config(model_dir)
        self.st = SafeTensors(model_dir)
        names = self.st.entries
        if "model.language_model.embed_tokens.weight" in names:
            self.prefix = "model.language_model."
        elif "model.embed_tokens.weight" in names:
            self.prefix = "model."
        else:
            fail("no embed_tokens.weight under model.language_model. or model.")
        rot = c["rotary_dim"]
        self.inv_freq = 1.0 / c["rope_theta"] ** (torch.arange(0, rot, 2, dtype=F64) / rot)
        self.expert_layout = {}  # layer -> "fused" | "per_expert"
        self.expected = self.expected_tensors()
        for name, shape in self.expected.items():
            if name not in names:
                fail(f"missing tensor {name}")
            if names[name][2] != shape:
                fail(f"tensor {name} has shape {names[name][2]}, expected {shape}")
        for name in names:
            if name.startswith(IGNORED_PREFIXES) or name in self.expected:
                continue
            if name == "lm_head.weight" and c["tie_word_embeddings"]:
                continue  # tied: HF overwrites lm_head with embed_tokens
            fail(f"unexpected tensor {name} in checkpoint")

    def expected_tensors(self):
        """Exact names (with prefix) and shapes of every tensor this reference reads."""
        c, P = self.c, self.prefix
        H, V, D = c["hidden_size"], c["vocab_size"], c["head_dim"]
        nH, nKV = c["num_attention_heads"], c["num_key_value_heads"]
        Hk, Hv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"],
                          c["linear_key_head_dim"], c["linear_value_head_dim"])
        kd, vd = Hk * dk, Hv * dv
        e = {P + "embed_tokens.weight": (V, H), P + "norm.weight": (H,)}
        if not c["tie_word_embeddings"]:
            e["lm_head.weight"] = (V, H)
        for i in range(c["num_hidden_layers"]):
            L = f"{P}layers.{i}."
            e[L + "input_layernorm.weight"] = (H,)
            e[L + "post_attention_layernorm.weight"] = (H,)
            if c["layer_types"][i] == "linear_attention":
                a = L + "linear_attn."
                if c["family"] == "qwen3_next":  # fused projections, grouped per key head
                    e[a + "in_proj_qkvz.weight"] = (2 * kd + 2 * vd, H)
                    e[a + "in_proj_ba.weight"] = (2 * Hv, H)
                else:
                    e[a + "in_proj_qkv.weight"] = (2 * kd + vd, H)
                    e[a + "in_proj_z.weight"] = (vd, H)
                    e[a + "in_proj_b.weight"] = (Hv, H)
                    e[a + "in_proj_a.weight"] = (Hv, H)
                e[a + "conv1d.weight"] = (2 * kd + vd, 1, c["linear_conv_kernel_dim"])
                e[a + "A_log"] = (Hv,)
                e[a + "dt_bias"] = (Hv,)
                e[a + "norm.weight"] = (dv,)
                e[a + "out_proj.weight"] = (H, vd)
            else:
                a = L + "self_attn."
                e[a + "q_proj.weight"] = (2 * nH * D, H)  # per head: [query D | gate D]
                e[a + "k_proj.weight"] = (nKV * D, H)
                e[a + "v_proj.weight"] = (nKV * D, H)
                e[a + "o_proj.weight"] = (H, nH * D)
                e[a + "q_norm.weight"] = (D,)
                e[a + "k_norm.weight"] = (D,)
            m = L + "mlp."
            if c["mlp_types"][i] == "dense":
                I = c["intermediate_size"]
                e.update({m + "gate_proj.weight": (I, H), m + "up_proj.weight": (I, H), m + "down_proj.weight": (H, I)})
                continue
            E, I, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            e[m + "gate.weight"] = (E, H)
            if m + "experts.gate_up_proj" in self.st.entries:  # fused 3-D (Qwen3.5-MoE release), gate rows first
                self.expert_layout[i] = "fused"
                e[m + "experts.gate_up_proj"] = (E, 2 * I, H)
                e[m + "experts.down_proj"] = (E, H, I)
            else:  # one nn.Linear per expert (Qwen3-Next release; HF fuses them on load)
                self.expert_layout[i] = "per_expert"
                for x in range(E):
                    e.update({f"{m}experts.{x}.gate_proj.weight": (I, H), f"{m}experts.{x}.up_proj.weight": (I, H),
                              f"{m}experts.{x}.down_proj.weight": (H, I)})
            e.update({m + "shared_expert.gate_proj.weight": (Is, H), m + "shared_expert.up_proj.weight": (Is, H),
                      m + "shared_expert.down_proj.weight": (H, Is), m + "shared_expert_gate.weight": (1, H)})
        return e

    def w(self, name, rows=None):
        full = name[1:] if name.startswith("/") else self.prefix + name  # "/x": un-prefixed name
        return self.st.get(full, rows)

    def gdn(self, p, x):  # Qwen3_5GatedDeltaNet / Qwen3NextGatedDeltaNet, no cache
        c, T = self.c, x.shape[0]
        Hk, Hv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"],
                          c["linear_key_head_dim"], c["linear_value_head_dim"])
        R, kd, vd, K = Hv // Hk, Hk * dk, Hv * dv, c["linear_conv_kernel_dim"]
        a_ = p + "linear_attn."
        if c["family"] == "qwen3_next":  # fix_query_key_value_ordering: per key head g: q_g k_g v_{gR..} z_{gR..}
            qkvz = (x @ self.w(a_ + "in_proj_qkvz.weight").T).reshape(T, Hk, 2 * dk + 2 * R * dv)
            q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
            v = qkvz[..., 2 * dk:2 * dk + R * dv].reshape(T, vd)
            z = qkvz[..., 2 * dk + R * dv:].reshape(T, Hv, dv)
            ba = (x @ self.w(a_ + "in_proj_ba.weight").T).reshape(T, Hk, 2 * R)  # per group: b (R) then a (R)
            b, a = ba[..., :R].reshape(T, Hv), ba[..., R:].reshape(T, Hv)
            mixed = torch.cat([q.reshape(T, kd), k.reshape(T, kd), v], dim=-1)  # -> [all q | all k | all v]
        else:
            mixed = x @ self.w(a_ + "in_proj_qkv.weight").T  # [all q | all k | all v], heads contiguous
            z = (x @ self.w(a_ + "in_proj_z.weight").T).reshape(T, Hv, dv)
            b = x @ self.w(a_ + "in_proj_b.weight").T
            a = x @ self.w(a_ + "in_proj_a.weight").T
        # causal depthwise conv1d (cross-correlation, zero left padding, w[:, K-1] hits the current token) + SiLU
        cw = self.w(a_ + "conv1d.weight")[:, 0, :]  # [conv_dim, K]
        padded = torch.cat([torch.zeros(K - 1, mixed.shape[1], dtype=F64), mixed], dim=0)
        conv = torch.stack([(padded[t:t + K].T * cw).sum(-1) for t in range(T)])
        conv = F.silu(conv)
        q = conv[:, :kd].reshape(T, Hk, dk)
        k = conv[:, kd:2 * kd].reshape(T, Hk, dk)
        v = conv[:, 2 * kd:].reshape(T, Hv, dv)
        beta = torch.sigmoid(b)
        g = -self.w(a_ + "A_log").exp() * F.softplus(a + self.w(a_ + "dt_bias"))
        q = l2norm(q) * dk ** -0.5  # use_qk_l2norm_in_kernel=True, then q / sqrt(d_k)
        k = l2norm(k)
        q, k = q.repeat_interleave(R, dim=1), k.repeat_interleave(R, dim=1)  # value head h uses key head h // R
        o = gated_delta_rule(q, k, v, g, beta)
        o = rms_norm_gated(o, z, self.w(a_ + "norm.weight"), c["rms_norm_eps"])
        return o.reshape(T, vd) @ self.w(a_ + "out_proj.weight").T

    def attention(self, p, x):  # Qwen3_5Attention: gated, q/k norm, partial RoPE, GQA, causal
        c, T = self.c, x.shape[0]
        nH, nKV, D, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
        a_ = p + "self_attn."
        qg = (x @ self.w(a_ + "q_proj.weight").T).reshape(T, nH, 2 * D)  # per head [query | gate]
        q, gate = qg[..., :D], qg[..., D:].reshape(T, nH * D)
        k = (x @ self.w(a_ + "k_proj.weight").T).reshape(T, nKV, D)
        v = (x @ self.w(a_ + "v_proj.weight").T).reshape(T, nKV, D)
        q = apply_rope(rms_norm_zc(q, self.w(a_ + "q_norm.weight"), eps), self.inv_freq)
        k = apply_rope(rms_norm_zc(k, self.w(a_ + "k_norm.weight"), eps), self.inv_freq)
        k = k.repeat_interleave(nH // nKV, dim=1)  # == HF repeat_kv: query head h uses KV head h // group
        v = v.repeat_interleave(nH // nKV, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * D ** -0.5
        causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
        scores = scores.masked_fill(~causal, float("-inf"))
        o = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v).reshape(T, nH * D)
        return (o * torch.sigmoid(gate)) @ self.w(a_ + "o_proj.weight").T

    def mlp(self, m, x):  # SwiGLU: down(silu(gate x) * up x)
        return (F.silu(x @ self.w(m + "gate_proj.weight").T) * (x @ self.w(m + "up_proj.weight").T)) @ \
            self.w(m + "down_proj.weight").T

    def moe(self, i, p, x, margins):  # Qwen3_5MoeSparseMoeBlock / Qwen3NextSparseMoeBlock
        c, T = self.c, x.shape[0]
        E, K, I = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        m = p + "mlp."
        router_logits = x @ self.w(m + "gate.weight").T
        probs = torch.softmax(router_logits, dim=-1)  # softmax over all experts
        top_w, top_i = torch.topk(probs, k=K, dim=-1)
        if K < E:  # gap between the k-th and (k+1)-th router LOGIT (selection robustness; softmax is monotone)
            srt = torch.sort(router_logits, dim=-1, descending=True)[0]
            margins.append(float((srt[:, K - 1] - srt[:, K]).min()))
        if c["norm_topk_prob"]:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        hit = sorted(set(top_i.flatten().tolist()))  # load only the experts that were selected
        if self.expert_layout[i] == "fused":
            gu = dict(zip(hit, self.w(m + "experts.gate_up_proj", rows=hit)))
            dn = dict(zip(hit, self.w(m + "experts.down_proj", rows=hit)))
        else:
            gu = {e: torch.cat([self.w(f"{m}experts.{e}.gate_proj.weight"),
                                self.w(f"{m}experts.{e}.up_proj.weight")]) for e in hit}
            dn = {e: self.w(f"{m}experts.{e}.down_proj.weight") for e in hit}
        out = torch.zeros_like(x)
        for t in range(T):
            for s in range(K):
                e = int(top_i[t, s])
                h = gu[e] @ x[t]  # gate rows first, then up rows
                out[t] += top_w[t, s] * (dn[e] @ (F.silu(h[:I]) * h[I:]))
        shared = self.mlp(m + "shared_expert.", x)
        return out + torch.sigmoid(x @ self.w(m + "shared_expert_gate.weight").T) * shared

    def forward(self, ids):
        c = self.c
        V, eps = c["vocab_size"], c["rms_norm_eps"]
        if len(ids) == 0 or min(ids) < 0 or max(ids) >= V:
            fail(f"token ids must be non-empty and in [0, {V})")
        x = self.w("embed_tokens.weight", rows=ids)  # no embedding scale
        margins = []
        for i in range(c["num_hidden_layers"]):
            p = f"layers.{i}."
            h = rms_norm_zc(x, self.w(p + "input_layernorm.weight"), eps)
            x = x + (self.gdn(p, h) if c["layer_types"][i] == "linear_attention" else self.attention(p, h))
            h = rms_norm_zc(x, self.w(p + "post_attention_layernorm.weight"), eps)
            x = x + (self.moe(i, p, h, margins) if c["mlp_types"][i] == "moe" else self.mlp(p + "mlp.", h))
        x = rms_norm_zc(x, self.w("norm.weight"), eps)
        head = "embed_tokens.weight" if c["tie_word_embeddings"] else "/lm_head.weight"
        chunks = [torch.arange(s, min(V, s + 16384)) for s in range(0, V, 16384)]  # bounded memory
        logits = torch.cat([x @ self.w(head, rows=r).T for r in chunks], dim=1)
        return logits, (min(margins) if margins else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="dir with config.json + model*.safetensors")
    ap.add_argument("--ids", action="append", required=True, help="comma-separated token ids (one prompt)")
    ap.add_argument("--out", required=True, help="output JSON file")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    model = Qwen35Reference(args.model)
    prompts = []
    for spec in args.ids:
        try:
            ids = [int(t) for t in spec.split(",") if t.strip() != ""]
        except ValueError:
            fail(f"bad --ids {spec!r}")
        logits, margin = model.forward(ids)
        if not torch.isfinite(logits).all():
            fail("non-finite logits")
        rec = {"ids": ids, "logits": [[float(np.float32(v)) for v in row] for row in logits.tolist()]}
        if margin is not None:
            rec["min_router_topk_logit_margin"] = margin
        prompts.append(rec)
    summary = dict(model.c)
    summary["tensor_prefix"] = model.prefix
    summary["embed_dtype"] = model.st.entries[model.prefix + "embed_tokens.weight"][1]
    summary["expert_layout"] = sorted(set(model.expert_layout.values()))
    with open(args.out, "w") as f:
        json.dump({"model": summary, "prompts": prompts}, f)


if __name__ == "__main__":
    main()
