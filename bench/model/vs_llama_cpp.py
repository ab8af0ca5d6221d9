#!/usr/bin/env python3
"""kiln against llama.cpp (node-llama-cpp 3.21.1's CPU build, .cache/llama-oracle) on the same GGUF
files, in interleaved rounds: decode tok/s and prefill tok/s per model, median and spread, and the
ratio kiln / llama.cpp. The GGUFs are bench_model's generated models (Qwen3-0.6B-shaped by default,
--archs for the Qwen3.5 and Gemma 4 shapes; f16, bf16, q8_0; `bench_model --keep`), the files
llama.cpp's own quantizer makes from their f16 versions (--quants Q4_K_M,Q6_K,IQ4_XS,...:
llama_model_quantize in node-llama-cpp's libllama, its per-tensor mixes) and stories260K.
llama.cpp's figures include node-llama-cpp's JS loop: small next to a 0.5B model's step, large next
to stories260K's (compare that row with care).

  bench/model/vs_llama_cpp.py [--device cpu|vulkan|auto] [--dtypes f16,bf16,q8_0] [--rounds 3]
                              [--prompt 64] [--decode 16] [--threads N] [--layers 28]
                              [--archs qwen3,qwen3_5,gemma4-e2b] [--quants Q4_K_M,Q6_K,IQ4_XS]
                              [--isa avx2]
--isa avx2 times both on their AVX2 code where the CPU has more: kiln with KILN_CPU_ISA=avx2, and
llama.cpp from a copy of node-llama-cpp whose only CPU variant is ggml's `haswell` (AVX2, FMA, F16C;
ggml loads the best variant the CPU runs, so the copy leaves it no other).
"""
import ctypes
import glob
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
ORACLE = os.path.join(ROOT, ".cache", "llama-oracle")
SHAPES = {"qwen3": "qwen3-0.6B-shape", "qwen3_5": "qwen3.5-0.8B-shape", "gemma4-e2b": "gemma4-E2B-shape",
          "gemma4-moe": "gemma4-moe-shape"}


# llama_ftype values (llama.h) of the file types people download.
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_M": 12, "Q4_K_S": 14,
          "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30}


_SILENT = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda level, text, user: None)


def llama_quantize(src, dst, ftype):
    """llama.cpp's quantizer (llama_model_quantize): its params struct starts with nthread, ftype."""
    lib_path = glob.glob(os.path.join(ORACLE, "node_modules", "@node-llama-cpp", "*", "bins", "*", "libllama.v*.so"))
    if not lib_path:
        sys.exit("node-llama-cpp's libllama is not under .cache/llama-oracle (run scripts/setup.sh)")
    lib = ctypes.CDLL(lib_path[0])
    lib.llama_log_set(_SILENT, None)  # its per-tensor report would fill the table's output

    class Params(ctypes.Structure):  # larger than llama_model_quantize_params: returned through memory either way
        _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("rest", ctypes.c_ubyte * 504)]

    lib.llama_model_quantize_default_params.restype = Params
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Params)]
    p = lib.llama_model_quantize_default_params()
    p.nthread, p.ftype = os.cpu_count(), FTYPES[ftype]
    if lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) != 0:
        sys.exit(f"llama_model_quantize failed on {src}")


def oracle_for(isa):
    """The node-llama-cpp tree to run: the installed one, or for --isa avx2 a copy (made once, under
    .cache/llama-oracle-avx2) holding only ggml's haswell CPU variant."""
    if not isa:
        return ORACLE
    if isa != "avx2":
        sys.exit("--isa: only avx2 is supported (kiln's avx512 variant is what runs by default)")
    copy = ORACLE + "-avx2"
    if not os.path.isdir(copy):
        subprocess.run(["cp", "-a", ORACLE, copy + ".tmp"], check=True)
        for lib in glob.glob(os.path.join(copy + ".tmp", "node_modules", "@node-llama-cpp", "*", "bins", "*",
                                          "libggml-cpu-*.so")):
            if not lib.endswith("libggml-cpu-haswell.so"):
                os.remove(lib)
        os.rename(copy + ".tmp", copy)
    return copy


def kiln(build, model, device, prompt, decode):
    out = subprocess.run([os.path.join(build, "bin", "bench_model"), "--model", model, "--device", device,
                          "--prompt", str(prompt), "--decode", str(decode)],
                         capture_output=True, text=True, check=True).stdout
    # "device   decode t/s   prefill t/s" then one row: name, decode, prefill
    row = [l for l in out.splitlines() if re.match(r".*\s[0-9.]+\s+[0-9.]+$", l)][0].split()
    return float(row[-2]), float(row[-1])


def llama_cpp(oracle, model, prompt, decode, threads):
    script = os.path.join(oracle, "bench.mjs")
    subprocess.run(["cp", os.path.join(ROOT, "tools", "oracle", "llama", "bench.mjs"), script], check=True)
    out = subprocess.run(["node", script, model, str(prompt), str(decode), str(threads)],
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["decode_tps"], r["prefill_tps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtypes", default="f16,bf16,q8_0")
    ap.add_argument("--archs", default="qwen3", help="bench_model shapes: qwen3, qwen3_5, gemma4-e2b, gemma4-moe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--quants", default="", help="llama.cpp file types made from the f16 models: " + ",".join(FTYPES))
    ap.add_argument("--isa", default="", help="avx2: both on their AVX2 code (kiln's avx2 variant, ggml's haswell)")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(ORACLE, "node_modules", "node-llama-cpp")):
        sys.exit("node-llama-cpp is not installed under .cache/llama-oracle (run scripts/setup.sh)")
    models = []
    for arch in [x for x in a.archs.split(",") if x]:
        for dt in [d for d in a.dtypes.split(",") if d]:
            path = os.path.join(a.dir, f"kiln-bench-{arch}-{dt}.gguf")
            if not os.path.exists(path):  # bench_model writes it (and times it once, on a small prompt)
                cmd = [os.path.join(a.build, "bin", "bench_model"), "--arch", arch, "--dtype", dt, "--dir", a.dir,
                       "--keep", "--prompt", "8", "--decode", "2", "--device", "cpu"]
                if arch == "qwen3":
                    cmd += ["--layers", str(a.layers)]
                subprocess.run(cmd, capture_output=True, check=True)
            models.append((f"{SHAPES.get(arch, arch)} {dt}", path))
        for q in [x for x in a.quants.split(",") if x]:
            src, path = os.path.join(a.dir, f"kiln-bench-{arch}-f16.gguf"), os.path.join(a.dir, f"kiln-bench-{arch}-{q}.gguf")
            if not os.path.exists(src):
                cmd = [os.path.join(a.build, "bin", "bench_model"), "--arch", arch, "--dtype", "f16", "--dir", a.dir,
                       "--keep", "--prompt", "8", "--decode", "2", "--device", "cpu"]
                if arch == "qwen3":
                    cmd += ["--layers", str(a.layers)]
                subprocess.run(cmd, capture_output=True, check=True)
            if not os.path.exists(path):
                llama_quantize(src, path, q)
            models.append((f"{SHAPES.get(arch, arch)} {q}", path))
    # stories260K: llama.cpp on one thread (more threads spin-wait longer than a 260K model's step:
    # 51 tok/s with 2 threads on the 2-vCPU VM, ~1000 with 1).
    models.append(("stories260K (JS loop dominates)", os.path.join(ROOT, "configs", "models", "stories260K.gguf")))
    oracle = oracle_for(a.isa)
    if a.isa:
        os.environ["KILN_CPU_ISA"] = a.isa
    print(f"kiln ({a.device}{', ' + a.isa if a.isa else ''}) vs llama.cpp (node-llama-cpp 3.21.1 CPU"
          f"{', haswell variant' if a.isa else ''}, {a.threads} threads); prompt {a.prompt}, "
          f"decode {a.decode}, {a.rounds} interleaved rounds; median [min-max]\n")
    print(f"{'model':34} {'kiln decode':>20} {'llama.cpp decode':>20} {'ratio':>6} "
          f"{'kiln prefill':>20} {'llama.cpp prefill':>20} {'ratio':>6}")
    for name, path in models:
        k_dec, k_pre, l_dec, l_pre = [], [], [], []
        for _ in range(a.rounds):
            d, p = kiln(a.build, path, a.device, a.prompt, a.decode)
            k_dec.append(d), k_pre.append(p)
            d, p = llama_cpp(oracle, path, a.prompt, a.decode, 1 if "stories260K" in name else a.threads)
            l_dec.append(d), l_pre.append(p)

        def fmt(v):
            return f"{statistics.median(v):8.1f} [{min(v):.1f}-{max(v):.1f}]"

        print(f"{name:34} {fmt(k_dec):>20} {fmt(l_dec):>20} {statistics.median(k_dec) / statistics.median(l_dec):6.2f} "
              f"{fmt(k_pre):>20} {fmt(l_pre):>20} {statistics.median(k_pre) / statistics.median(l_pre):6.2f}",
              flush=True)


if __name__ == "__main__":
    main()
