#!/usr/bin/python3
"""Plain-PyTorch float64 reference forward pass of the Gemma 4 text model (golden logits for tests).

Written independently of the kiln engine from Hugging Face transformers'
models/gemma4/modeling_gemma4.py (Gemma4TextModel / Gemma4ForCausalLM), configuration_gemma4.py,
modeling_rope_utils.py (_compute_proportional_rope_parameters) and docs/models/gemma4.md.
Deliberately simple: explicit loop over layers, full T x T attention matrices, no KV cache,
everything in float64 (weights are cast to float64 when used).

Usage:
  /usr/bin/python3 tests/reference/gemma4_reference.py --model DIR --ids 2,17,5 [--ids ...] --out FILE
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

F64 = torch.float64
IGNORED_PREFIXES = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")


def fail(msg):
    sys.exit("gemma4_reference: error: " + msg)


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
def need(cfg, key):
    if key not in cfg:
        fail(f"config.json (text config) lacks required key '{key}'")
    return cfg[key]


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    if raw.get("model_type") == "gemma4" or "text_config" in raw:
        cfg = raw.get("text_config") or fail("wrapper config.json has no text_config")
    else:
        cfg = raw
    if cfg.get("model_type", "gemma4_text") != "gemma4_text":
        fail(f"unexpected text model_type {cfg.get('model_type')!r}")
    c = {k: need(cfg, k) for k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "global_head_dim", "attention_k_eq_v", "layer_types",
        "sliding_window", "rope_parameters", "rms_norm_eps", "hidden_activation",
        "final_logit_softcapping", "hidden_size_per_layer_input", "num_kv_shared_layers",
        "use_double_wide_mlp", "enable_moe_block", "tie_word_embeddings")}
    # keys only needed when their feature is on
    if c["attention_k_eq_v"]:
        c["num_global_key_value_heads"] = need(cfg, "num_global_key_value_heads")
    if c["hidden_size_per_layer_input"]:
        c["vocab_size_per_layer_input"] = need(cfg, "vocab_size_per_layer_input")
    if c["enable_moe_block"]:
        for k in ("num_experts", "top_k_experts", "moe_intermediate_size"):
            c[k] = need(cfg, k)
    if c["hidden_activation"] != "gelu_pytorch_tanh":
        fail(f"hidden_activation {c['hidden_activation']!r} unsupported (only gelu_pytorch_tanh)")
    if cfg.get("attention_bias", False):
        fail("attention_bias=true is not supported")
    if cfg.get("use_bidirectional_attention") == "all":
        fail("use_bidirectional_attention='all' (non-causal text) is not supported")
    L = c["num_hidden_layers"]
    lt = list(c["layer_types"])
    if len(lt) != L or any(t not in ("sliding_attention", "full_attention") for t in lt):
        fail(f"layer_types must list {L} entries of sliding_attention/full_attention")
    if lt[-1] != "full_attention":  # Gemma4TextConfig.__post_init__ forces this
        print("gemma4_reference: warning: last layer forced to full_attention (as HF does)", file=sys.stderr)
        lt[-1] = "full_attention"
    c["layer_types"] = lt
    for t in set(lt):
        rp = c["rope_parameters"].get(t) or fail(f"rope_parameters lacks an entry for {t}")
        if rp.get("rope_type") not in ("default", "proportional") or "rope_theta" not in rp:
            fail(f"rope_parameters[{t}] must have rope_type default/proportional and rope_theta: {rp}")
    S = c["num_kv_shared_layers"]
    if not 0 <= S < L:
        fail(f"num_kv_shared_layers={S} must be in [0, {L})")
    return c


# building blocks (float64)
def rms_norm(x, w, eps):  # Gemma4RMSNorm: weight used as-is (no 1 + w); w=None -> with_scale=False
    y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    return y * w if w is not None else y


def gelu_tanh(x):  # gelu_pytorch_tanh
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def rope_inv_freq(c, layer_type):
    rp = c["rope_parameters"][layer_type]
    base = float(rp["rope_theta"])
    if rp["rope_type"] == "default":  # HF compute_default_rope_parameters always uses config.head_dim
        dim = c["head_dim"]
        return 1.0 / base ** (torch.arange(0, dim, 2, dtype=F64) / dim)
    # proportional: exponent over the FULL head dim, zero frequency for the non-rotated tail
    key = "global_head_dim" if layer_type == "full_attention" else "head_dim"  # HF head_dim_key
    head_dim = c[key] or c["hidden_size"] // c["num_attention_heads"]
    rope_angles = int(float(rp.get("partial_rotary_factor", 1.0)) * head_dim // 2)
    inv = 1.0 / base ** (torch.arange(0, 2 * rope_angles, 2, dtype=F64) / head_dim)
    inv = torch.cat([inv, torch.zeros(head_dim // 2 - rope_angles, dtype=F64)])
    return inv / float(rp.get("factor", 1.0))


def apply_rope(x, inv_freq):  # x [T, heads, d]; NeoX rotate-half over the whole head
    T, d = x.shape[0], x.shape[-1]
    if inv_freq.numel() * 2 != d:
        fail(f"RoPE table has {inv_freq.numel()} frequencies for head dim {d}")
    freqs = torch.arange(T, dtype=F64)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None, :]
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * emb.cos() + rot * emb.sin()


def attention(q, k, v, window):  # q [T,nH,d], k/v [T,nKV,d]; scaling 1.0, causal (+ window)
    T, nH, _ = q.shape
    group = nH // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # == HF repeat_kv: query head h uses KV head h // group
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k)
    qi = torch.arange(T)[:, None]
    ki = torch.arange(T)[None, :]
    allowed = ki <= qi
    if window is not None:
        allowed = allowed & (qi - ki < window)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v).reshape(T, -1)


def scale_in_dtype(value, st_dtype):
    """HF Gemma4TextScaledWordEmbedding: torch.tensor(value) (f32) cast to the weight dtype."""
    tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[st_dtype]
    return float(torch.tensor(value, dtype=torch.float32).to(tdt).to(F64))


# model
class Gemma4Reference:
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
        L = c["num_hidden_layers"]
        self.first_shared = L - c["num_kv_shared_layers"]
        self.kv_source = {}  # shared layer -> last non-shared layer of the same type
        for i in range(self.first_shared, L):
            prev = [j for j in range(self.first_shared) if c["layer_types"][j] == c["layer_types"][i]]
            if not prev:
                fail(f"KV-shared layer {i} has no earlier non-shared {c['layer_types'][i]} layer")
            self.kv_source[i] = prev[-1]
        self.inv_freq = {t: rope_inv_freq(c, t) for t in set(c["layer_types"])}
        self.check_all_tensors_known()

    def w(self, name, shape=None, rows=None):
        full = name[1:] if name.startswith("/") else self.prefix + name  # "/x": un-prefixed name
        if full not in self.st.entries:
            fail(f"missing tensor {full}")
        if shape is not None and self.st.entries[full][2] != tuple(shape):
            fail(f"tensor {full} has shape {self.st.entries[full][2]}, expected {tuple(shape)}")
        return self.st.get(full, rows)

    def check_all_tensors_known(self):
        """Every language-model tensor must be one this reference reads (or a known-unused one)."""
        L = self.c["num_hidden_layers"]
        known = {"embed_tokens.weight", "norm.weight", "embed_tokens_per_layer.weight",
                 "per_layer_model_projection.weight", "per_layer_projection_norm.weight"}
        per_layer = ("input_layernorm.weight post_attention_layernorm.weight pre_feedforward_layernorm.weight "
                     "post_feedforward_layernorm.weight layer_scalar self_attn.q_proj.weight self_attn.o_proj.weight "
                     "self_attn.q_norm.weight self_attn.k_proj.weight self_attn.v_proj.weight self_attn.k_norm.weight "
                     "mlp.gate_proj.weight mlp.up_proj.weight mlp.down_proj.weight per_layer_input_gate.weight "
                     "per_layer_projection.weight post_per_layer_input_norm.weight router.proj.weight router.scale "
                     "router.per_expert_scale experts.gate_up_proj experts.down_proj pre_feedforward_layernorm_2.weight "
                     "post_feedforward_layernorm_1.weight post_feedforward_layernorm_2.weight").split()
        known |= {f"layers.{i}.{n}" for i in range(L) for n in per_layer}
        for name in self.st.entries:
            if name.startswith(IGNORED_PREFIXES) or name == "lm_head.weight":
                continue
            if not name.startswith(self.prefix) or name[len(self.prefix):] not in known:
                fail(f"unexpected tensor {name} in checkpoint")

    def layer(self, i, x, ple, kv_store, margins):
        c, p = self.c, f"layers.{i}."
        H, nH, eps = c["hidden_size"], c["num_attention_heads"], c["rms_norm_eps"]
        ltype = c["layer_types"][i]
        sliding = ltype == "sliding_attention"
        d = c["head_dim"] if sliding or not c["global_head_dim"] else c["global_head_dim"]
        k_eq_v = bool(c["attention_k_eq_v"]) and not sliding
        nKV = c["num_global_key_value_heads"] if k_eq_v else c["num_key_value_heads"]
        T = x.shape[0]
        inv = self.inv_freq[ltype]

        # --- attention block ---
        residual = x
        a = rms_norm(x, self.w(p + "input_layernorm.weight", [H]), eps)
        q = (a @ self.w(p + "self_attn.q_proj.weight", [nH * d, H]).T).reshape(T, nH, d)
        q = apply_rope(rms_norm(q, self.w(p + "self_attn.q_norm.weight", [d]), eps), inv)
        if i in self.kv_source:  # KV-shared layer: reuse K/V of the source layer (own k/v weights ignored)
            k, v = kv_store[self.kv_source[i]]
        else:
            k_raw = (a @ self.w(p + "self_attn.k_proj.weight", [nKV * d, H]).T).reshape(T, nKV, d)
            if k_eq_v:  # V = raw K projection (before k_norm / RoPE)
                v_raw = k_raw
            else:
                v_raw = (a @ self.w(p + "self_attn.v_proj.weight", [nKV * d, H]).T).reshape(T, nKV, d)
            k = apply_rope(rms_norm(k_raw, self.w(p + "self_attn.k_norm.weight", [d]), eps), inv)
            v = rms_norm(v_raw, None, eps)  # weightless v_norm, no RoPE
            kv_store[i] = (k, v)
        o = attention(q, k, v, c["sliding_window"] if sliding else None)
        o = o @ self.w(p + "self_attn.o_proj.weight", [H, nH * d]).T
        x = residual + rms_norm(o, self.w(p + "post_attention_layernorm.weight", [H]), eps)

        # --- feed-forward block (dense GeGLU MLP, + routed experts when enable_moe_block) ---
        residual = x
        inter = c["intermediate_size"] * (2 if c["use_double_wide_mlp"] and i >= self.first_shared > 0 else 1)
        m = rms_norm(x, self.w(p + "pre_feedforward_layernorm.weight", [H]), eps)
        m = gelu_tanh(m @ self.w(p + "mlp.gate_proj.weight", [inter, H]).T) * (
            m @ self.w(p + "mlp.up_proj.weight", [inter, H]).T)
        h = m @ self.w(p + "mlp.down_proj.weight", [H, inter]).T
        if c["enable_moe_block"]:
            E, K, I = c["num_experts"], c["top_k_experts"], c["moe_intermediate_size"]
            h1 = rms_norm(h, self.w(p + "post_feedforward_layernorm_1.weight", [H]), eps)
            # router on the post-attention residual (not on a pre-FFN-normed tensor)
            r = rms_norm(residual, None, eps) * self.w(p + "router.scale", [H]) * H ** -0.5
            probs = torch.softmax(r @ self.w(p + "router.proj.weight", [E, H]).T, dim=-1)
            top_w, top_i = torch.topk(probs, k=K, dim=-1)
            if K < E:  # distance between the k-th and (k+1)-th probability (routing robustness)
                margins.append(float((top_w[:, -1] - torch.topk(probs, k=K + 1, dim=-1)[0][:, -1]).min()))
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
            top_w = top_w * self.w(p + "router.per_expert_scale", [E])[top_i]
            xe = rms_norm(residual, self.w(p + "pre_feedforward_layernorm_2.weight", [H]), eps)
            hit = sorted(set(top_i.flatten().tolist()))  # load only the experts that were selected
            gate_up = dict(zip(hit, self.w(p + "experts.gate_up_proj", [E, 2 * I, H], rows=hit)))
            down = dict(zip(hit, self.w(p + "experts.down_proj", [E, H, I], rows=hit)))
            h2 = torch.zeros_like(residual)
            for t in range(T):
                for slot in range(K):
                    e = int(top_i[t, slot])
                    gu = gate_up[e] @ xe[t]  # gate rows first, then up rows
                    h2[t] += top_w[t, slot] * (down[e] @ (gelu_tanh(gu[:I]) * gu[I:]))
            h2 = rms_norm(h2, self.w(p + "post_feedforward_layernorm_2.weight", [H]), eps)
            h = h1 + h2
        x = residual + rms_norm(h, self.w(p + "post_feedforward_layernorm.weight", [H]), eps)

        # --- per-layer embedding residual, then layer_scalar ---
        P = c["hidden_size_per_layer_input"]
        if P:
            g = gelu_tanh(x @ self.w(p + "per_layer_input_gate.weight", [P, H]).T) * ple[:, i, :]
            g = g @ self.w(p + "per_layer_projection.weight", [H, P]).T
            x = x + rms_norm(g, self.w(p + "post_per_layer_input_norm.weight", [H]), eps)
        return x * self.w(p + "layer_scalar", [1])

    def forward(self, ids):
        c = self.c
        L, H, V, eps = c["num_hidden_layers"], c["hidden_size"], c["vocab_size"], c["rms_norm_eps"]
        T = len(ids)
        if T == 0 or min(ids) < 0 or max(ids) >= V:
            fail(f"token ids must be non-empty and in [0, {V})")
        emb_name = self.prefix + "embed_tokens.weight"
        x = self.w("embed_tokens.weight", [V, H], rows=ids)
        x = x * scale_in_dtype(H ** 0.5, self.st.entries[emb_name][1])  # HF rounds sqrt(H) to the weight dtype
        ple = None
        P = c["hidden_size_per_layer_input"]
        if P:  # get_per_layer_inputs + project_per_layer_inputs
            Vp = c["vocab_size_per_layer_input"]
            if max(ids) >= Vp:
                fail(f"token id >= vocab_size_per_layer_input ({Vp})")
            tok = self.w("embed_tokens_per_layer.weight", [Vp, L * P], rows=ids)
            tok = (tok * scale_in_dtype(P ** 0.5, self.st.entries[self.prefix + "embed_tokens_per_layer.weight"][1]))
            proj = (x @ self.w("per_layer_model_projection.weight", [L * P, H]).T) * H ** -0.5
            proj = rms_norm(proj.reshape(T, L, P), self.w("per_layer_projection_norm.weight", [P]), eps)
            ple = (proj + tok.reshape(T, L, P)) * 2.0 ** -0.5
        kv_store, margins = {}, []
        for i in range(L):
            x = self.layer(i, x, ple, kv_store, margins)
        x = rms_norm(x, self.w("norm.weight", [H]), eps)
        head = "embed_tokens.weight"  # tied head (lm_head.weight, if present, is a duplicate)
        if not c["tie_word_embeddings"]:
            head = "/lm_head.weight"
        chunks = [torch.arange(s, min(V, s + 16384)) for s in range(0, V, 16384)]  # bounded memory
        logits = torch.cat([x @ self.w(head, [V, H], rows=r).T for r in chunks], dim=1)
        cap = c["final_logit_softcapping"]
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits, (min(margins) if margins else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="dir with config.json + model*.safetensors")
    ap.add_argument("--ids", action="append", required=True, help="comma-separated token ids (one prompt)")
    ap.add_argument("--out", required=True, help="output JSON file")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    model = Gemma4Reference(args.model)
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
            rec["min_router_topk_margin"] = margin
        prompts.append(rec)
    summary = dict(model.c)
    summary["tensor_prefix"] = model.prefix
    summary["embed_dtype"] = model.st.entries[model.prefix + "embed_tokens.weight"][1]
    summary["kv_shared_sources"] = {str(k): v for k, v in model.kv_source.items()}
    with open(args.out, "w") as f:
        json.dump({"model": summary, "prompts": prompts}, f)


if __name__ == "__main__":
    main()
