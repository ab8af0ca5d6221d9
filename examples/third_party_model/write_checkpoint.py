#!/usr/bin/env python3
"""Writes a random toy_lm checkpoint (config.json + model.safetensors, f32) into a folder: the
safetensors layout by hand (8-byte header length, JSON header, data), no third-party packages."""
import json, os, random, struct, sys

D, V, H, DH, F = 16, 32, 2, 8, 32
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1)
shapes = {
    "embed.weight": [V, D], "layer.attn_norm.weight": [D], "layer.q.weight": [H * DH, D],
    "layer.k.weight": [H * DH, D], "layer.v.weight": [H * DH, D], "layer.o.weight": [D, H * DH],
    "layer.mlp_norm.weight": [D], "layer.gate.weight": [F, D], "layer.up.weight": [F, D],
    "layer.down.weight": [D, F], "final_norm.weight": [D], "head.weight": [V, D],
}
header, data = {}, b""
for name, shape in shapes.items():
    n = 1
    for s in shape:
        n *= s
    norm = name.endswith("norm.weight")
    values = [1.0 + 0.1 * rng.gauss(0, 1) if norm else 0.2 * rng.gauss(0, 1) for _ in range(n)]
    blob = struct.pack("<%df" % n, *values)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
    data += blob
head = json.dumps(header).encode()
head += b" " * (-len(head) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head + data)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump({"model_type": "toy_lm", "hidden_size": D, "vocab_size": V, "num_heads": H, "head_dim": DH,
               "intermediate_size": F}, f)
