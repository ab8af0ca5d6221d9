// Tokenizer oracle for kiln's tests and bench: @lenml/tokenizers (transformers.js) under node.
// Usage: node tools/oracle/tokenize.mjs < request.json > response.json
// Request: {"dir": "<folder with tokenizer.json + tokenizer_config.json>",
//           "no_nfc": false,          // drop a top-level NFC normalizer (Qwen3.5 vectors)
//           "encode": ["text", ...],  // or {"b64": "..."} for raw bytes (decoded as UTF-8, lossy)
//           "add_special": false,     // post-processor for "encode"
//           "encode_special": [...],  // like "encode", always with the post-processor
//           "decode": [[ids], ...],
//           "bench": "text"}          // optional: time encode of this text, reply bench_seconds
// Response: {"encode": [[ids], ...], "encode_special": [[ids], ...], "decode": ["text", ...],
//            "bench_seconds": s}
// Packages are found in $KILN_ORACLE_DIR/node_modules (default: .cache/oracle beside this checkout).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const oracleDir = process.env.KILN_ORACLE_DIR || path.join(here, "..", "..", ".cache", "oracle");
const require = createRequire(path.join(oracleDir, "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const req = JSON.parse(readFileSync(0, "utf8"));
const tj = JSON.parse(readFileSync(path.join(req.dir, "tokenizer.json"), "utf8"));
let cfg = {};
try { cfg = JSON.parse(readFileSync(path.join(req.dir, "tokenizer_config.json"), "utf8")); } catch {}
if (req.no_nfc && tj.normalizer && tj.normalizer.type === "NFC") tj.normalizer = null;
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: cfg });

const text = (t) => (typeof t === "string" ? t : Buffer.from(t.b64, "base64").toString("utf8"));
const res = {};
if (req.encode) res.encode = req.encode.map((t) => tok.encode(text(t), { add_special_tokens: !!req.add_special }));
if (req.encode_special) res.encode_special = req.encode_special.map((t) => tok.encode(text(t), { add_special_tokens: true }));
if (req.decode) res.decode = req.decode.map((ids) => (ids.length ? tok.decode(ids, { skip_special_tokens: false }) : ""));
if (req.bench !== undefined) {
  const t = text(req.bench);
  tok.encode(t.slice(0, 10000), { add_special_tokens: false });  // warm-up
  // CPU seconds (user + system) of the encode: comparable with the C++ side's thread CPU time.
  const c0 = process.cpuUsage();
  const ids = tok.encode(t, { add_special_tokens: false });
  const c = process.cpuUsage(c0);
  res.bench_seconds = (c.user + c.system) / 1e6;
  res.bench_tokens = ids.length;
}
process.stdout.write(JSON.stringify(res));
