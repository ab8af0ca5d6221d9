#!/usr/bin/env python3
"""GET /metrics of a kiln replica as a Prometheus scraper and a vLLM-aware router read it:

  - while the models load: /health 200 {"status": "loading"}, /health/ready and /v1/models 503;
  - the text parses under a strict exposition-format (0.0.4) parser of our own and, when
    python3-prometheus-client is installed, under text_string_to_metric_families;
  - the vllm: series the contract names are there, labelled model_name, with sane values
    (vllm:cache_config_info 1 with block_size and num_gpu_blocks; kv_cache_usage_perc in 0..1);
  - a burst of 16 concurrent requests (max_seqs 4): vllm:num_requests_running rises to at most 4,
    num_requests_waiting above 0, both fall to 0 after; the token and prefix-cache counters grow by
    what the answers' usage says.

  test_metrics.py --kiln build/bin/kiln --repo . [--keep]
Exit 0 pass, 1 fail, 77 skipped (no binary).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL = "stories260K"
MAX_SEQS = 4

# ---------------------------------------------------------------------------------------------
# A strict parser of the Prometheus text format 0.0.4
# ---------------------------------------------------------------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
SAMPLE = re.compile(rf"^({NAME})(\{{(.*)\}})? (\S+)( -?\d+)?$")
LABEL_PAIR = re.compile(rf'\s*({LABEL})="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}


class ParseError(Exception):
    pass


def parse_value(s: str, where: str) -> float:
    if s in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
        raise ParseError(f"{where}: value {s!r} is not a float")
    return float(s)


def parse_labels(s: str, where: str) -> tuple:
    out = []
    pos = 0
    while pos < len(s):
        m = LABEL_PAIR.match(s, pos)
        if not m or m.end() == pos:
            raise ParseError(f"{where}: bad label syntax at {s[pos:pos + 40]!r}")
        value = m.group(2).replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        out.append((m.group(1), value))
        pos = m.end()
        if m.group(3) == "" and pos < len(s):
            raise ParseError(f"{where}: junk after the labels: {s[pos:]!r}")
    names = [k for k, _ in out]
    if len(set(names)) != len(names):
        raise ParseError(f"{where}: a label repeated: {names}")
    return tuple(sorted(out))


def family_of(sample: str, types: dict) -> str | None:
    if sample in types:
        return sample
    for fam, t in types.items():
        for suf in SUFFIXES.get(t, ()):
            if suf and sample == fam + suf:
                return fam
    return None


def parse_strict(text: str) -> dict:
    """{family: {"type", "help", "samples": {(name, labels): value}}}; raises ParseError."""
    if not text.endswith("\n"):
        raise ParseError("the exposition does not end with a newline")
    fams: dict = {}
    types: dict = {}
    done: set = set()  # families whose samples are over (each family's lines must be contiguous)
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n} {line[:80]!r}"
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not re.fullmatch(NAME, name):
                    raise ParseError(f"{where}: bad metric name")
                f = fams.setdefault(name, {"type": None, "help": None, "samples": {}})
                if name in done or (f["samples"]):
                    raise ParseError(f"{where}: {parts[1]} after the family's samples")
                if parts[1] == "TYPE":
                    if f["type"] is not None:
                        raise ParseError(f"{where}: a second TYPE")
                    t = parts[3] if len(parts) > 3 else ""
                    if t not in TYPES:
                        raise ParseError(f"{where}: unknown type {t!r}")
                    f["type"] = t
                    types[name] = t
                else:
                    if f["help"] is not None:
                        raise ParseError(f"{where}: a second HELP")
                    f["help"] = parts[3] if len(parts) > 3 else ""
                if current is not None and current != name:
                    done.add(current)
                current = name
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ParseError(f"{where}: not a sample line")
        name, labels, value = m.group(1), parse_labels(m.group(3) or "", where), parse_value(m.group(4), where)
        fam = family_of(name, types) or name
        if fam in done:
            raise ParseError(f"{where}: the samples of {fam} are not contiguous")
        if current is not None and current != fam:
            done.add(current)
        current = fam
        f = fams.setdefault(fam, {"type": None, "help": None, "samples": {}})
        if (name, labels) in f["samples"]:
            raise ParseError(f"{where}: a repeated series")
        t = f["type"] or "untyped"
        if t == "counter" and not (value >= 0 or math.isnan(value)):
            raise ParseError(f"{where}: a negative counter")
        f["samples"][(name, labels)] = value
    return fams


def value(fams: dict, name: str, **labels) -> float | None:
    for fam in fams.values():
        for (n, ls), v in fam["samples"].items():
            if n == name and all(dict(ls).get(k) == str(x) for k, x in labels.items()):
                return v
    return None


# ---------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        print(f"SKIP: no kiln binary at {args.kiln}")
        return harness.SKIP
    harness.ensure_modules("prometheus_client", required=False)
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        text_string_to_metric_families = None
        print("note: prometheus_client is not installed (apt-get install python3-prometheus-client): "
              "the strict parser alone checks the format")

    t0 = time.monotonic()
    fails = harness.Failures()
    tmp = tempfile.mkdtemp(prefix="kiln_metrics_")
    procs = []
    repo = os.path.abspath(args.repo)
    try:
        cfg = {"server": {"host": "127.0.0.1", "port": 0, "vllm_metrics": True, "drain_timeout_s": 5},
               "models": [{"name": MODEL, "path": f"{repo}/configs/models/stories260K.gguf",
                           "chat_template": f"{repo}/configs/templates/plain.jinja", "max_seqs": MAX_SEQS,
                           "cache": {"block_tokens": 16, "memory": "64MiB", "prefix_caching": True}}]}
        qwen = f"{repo}/configs/models/tiny-qwen3_5"
        if os.path.exists(os.path.join(qwen, "config.json")):  # a second model: a longer loading phase to see
            cfg["models"].append({"name": "tiny-qwen3.5", "path": qwen, "cache": {"memory": "64MiB"}})
        # A fixed port, so that the probes can be watched while the models load (the listening
        # line comes after that).
        port = harness.free_port()
        k = harness.Kiln(args.kiln, harness.write_config(os.path.join(tmp, "kiln.yaml"), cfg), "kiln", wait=False,
                         port=port)
        procs.append(k)
        base = f"http://127.0.0.1:{port}"
        seen = []  # (/health body status, /health/ready status and body, /v1/models status) while loading
        deadline = time.monotonic() + 60
        while not harness.Kiln.LISTENING.search(k.text()) and k.alive() and time.monotonic() < deadline:
            try:
                h = harness.get(f"{base}/health", 1)
                rd = harness.get(f"{base}/health/ready", 1)
                mo = harness.get(f"{base}/v1/models", 1)
                if not harness.Kiln.LISTENING.search(k.text()):
                    seen.append((h.status, h.json().get("status"), rd.status, rd.json().get("status"), mo.status))
            except (OSError, ValueError):
                time.sleep(0.005)
        k.wait_listening(5)
        loading = [x for x in seen if x[1] == "loading"]
        print(f"loading: {len(seen)} probe rounds before the listening line, {len(loading)} saw 'loading'", flush=True)
        if loading:
            fails.check(all(x[0] == 200 and x[2] == 503 and x[3] == "loading" and x[4] == 503 for x in loading),
                        f"while loading: (/health status, its status field, /health/ready, its status, /v1/models) "
                        f"{sorted(set(loading))}, expected (200, loading, 503, loading, 503)")
        else:
            print("note: the models loaded before a probe got through; the loading state went unchecked")
        ready = harness.get(f"{k.url}/health/ready")
        fails.check(ready.status == 200 and ready.json().get("status") == "ready", f"/health/ready once listening: {ready}")

        def scrape():
            r = harness.get(f"{k.url}/metrics", 5)
            if r.status != 200:
                raise AssertionError(f"GET /metrics: {r}")
            text = r.body.decode("utf-8")
            fams = parse_strict(text)
            return r, text, fams

        r, text, fams = scrape()
        ctype = r.headers.get("content-type", "")
        fails.check(ctype.startswith("text/plain") and "version=0.0.4" in ctype,
                    f"/metrics Content-Type {ctype!r}, expected text/plain; version=0.0.4")
        if text_string_to_metric_families:
            try:
                names = {f.name for f in text_string_to_metric_families(text)}
                fails.check("vllm:num_requests_running" in names, f"prometheus_client families: {sorted(names)[:40]}")
            except Exception as e:  # the client's parser raises ValueError and friends
                fails.add(f"prometheus_client cannot parse /metrics: {type(e).__name__}: {e}")
        for fam, f in fams.items():
            fails.check(f["type"] is not None, f"/metrics family {fam} has no # TYPE")
            if f["type"] == "counter":
                fails.check(all(n.endswith("_total") for n, _ in f["samples"]),
                            f"/metrics counter {fam}: samples {[n for n, _ in f['samples']][:3]} without _total")
        required = {"vllm:num_requests_waiting": "gauge", "vllm:num_requests_running": "gauge",
                    "vllm:kv_cache_usage_perc": "gauge", "vllm:cache_config_info": "gauge",
                    "vllm:prefix_cache_queries_total": "counter", "vllm:prefix_cache_hits_total": "counter",
                    "vllm:prompt_tokens_total": "counter", "vllm:generation_tokens_total": "counter"}
        for name, t in required.items():
            fam = next((f for f in fams.values() if any(n == name for n, _ in f["samples"])), None)
            if not fails.check(fam is not None, f"/metrics has no {name}"):
                continue
            fails.check(fam["type"] == t, f"/metrics {name} has TYPE {fam['type']}, expected {t}")
            fails.check(value(fams, name, model_name=MODEL) is not None,
                        f"/metrics {name} has no series labelled model_name=\"{MODEL}\"")
        info = [ls for f in fams.values() for (n, ls), v in f["samples"].items() if n == "vllm:cache_config_info"]
        if info:
            d = dict(info[0])
            fails.check(d.get("block_size") == "16" and d.get("num_gpu_blocks", "").isdigit()
                        and int(d["num_gpu_blocks"]) > 0 and value(fams, "vllm:cache_config_info") == 1,
                        f"vllm:cache_config_info labels {d} value {value(fams, 'vllm:cache_config_info')}")

        def counters(fams):
            return {n: value(fams, n, model_name=MODEL) or 0.0 for n in
                    ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
                     "vllm:prefix_cache_hits_total")}
        before = counters(fams)

        # The burst, sampled every ~20 ms by a thread.
        samples = []
        stop = threading.Event()
        errors = []

        def sampler():
            last = None
            while not stop.is_set():
                try:
                    _, _, f = scrape()
                except Exception as e:  # reported below
                    errors.append(f"{type(e).__name__}: {e}")
                    return
                run_, wait_ = value(f, "vllm:num_requests_running", model_name=MODEL), \
                    value(f, "vllm:num_requests_waiting", model_name=MODEL)
                usage = value(f, "vllm:kv_cache_usage_perc", model_name=MODEL)
                c = counters(f)
                if last is not None:
                    for n in c:
                        if c[n] < last[n]:
                            errors.append(f"{n} went down: {last[n]} -> {c[n]}")
                last = c
                samples.append((time.monotonic(), run_, wait_, usage))
                time.sleep(0.02)
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        shared = "Once upon a time there was a little girl who liked to play in the garden with her dog."

        def one(i):
            text = shared if i % 2 == 0 else f"{shared} On day {i} she found a {['red', 'blue', 'green'][i % 3]} ball."
            body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 200,
                    "ignore_eos": True, "temperature": 0}
            return harness.post(f"{k.url}/v1/chat/completions", body, timeout_s=60)
        t_burst = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(one, range(16)))
        t_done = time.monotonic()
        time.sleep(0.3)
        stop.set()
        th.join(5)
        fails.check(not errors, f"/metrics during the burst: {errors[:3]}")
        bad = [a for a in answers if a.status != 200]
        fails.check(not bad, f"burst answers: {bad[:2]}")
        during = [s for s in samples if t_burst <= s[0] <= t_done]
        peak_run = max((s[1] or 0 for s in during), default=0)
        peak_wait = max((s[2] or 0 for s in during), default=0)
        peak_sum = max(((s[1] or 0) + (s[2] or 0) for s in during), default=0)
        peak_usage = max((s[3] or 0 for s in during), default=0)
        print(f"burst: {len(during)} scrapes in {t_done - t_burst:.2f} s; peak running {peak_run}, waiting "
              f"{peak_wait}, running+waiting {peak_sum}, kv_cache_usage_perc {peak_usage:.3f}", flush=True)
        fails.check(2 <= peak_run <= MAX_SEQS, f"vllm:num_requests_running peaked at {peak_run} during a burst "
                                               f"of 16 (max_seqs {MAX_SEQS})")
        fails.check(peak_wait >= 1, f"vllm:num_requests_waiting stayed {peak_wait} with 16 requests for "
                                    f"{MAX_SEQS} sequences")
        fails.check(peak_sum >= 8, f"vllm:num_requests_running + waiting peaked at {peak_sum} (16 in flight)")
        fails.check(0 < peak_usage <= 1, f"vllm:kv_cache_usage_perc peaked at {peak_usage} during the burst")
        fails.check(all(s[3] is not None and 0 <= s[3] <= 1 for s in samples),
                    "vllm:kv_cache_usage_perc left 0..1")

        def idle():
            _, _, f = scrape()
            return (value(f, "vllm:num_requests_running", model_name=MODEL) == 0
                    and value(f, "vllm:num_requests_waiting", model_name=MODEL) == 0) and f
        try:
            fams = harness.wait_until(idle, 3, 0.05, "running and waiting back to 0")
        except TimeoutError as e:
            fails.add(f"after the burst: {e}: {samples[-1] if samples else None}")
            _, _, fams = scrape()
        after = counters(fams)
        ok = [a.json()["usage"] for a in answers if a.status == 200]
        want = {"vllm:prompt_tokens_total": sum(u["prompt_tokens"] for u in ok),
                "vllm:generation_tokens_total": sum(u["completion_tokens"] for u in ok),
                "vllm:prefix_cache_queries_total": sum(u["prompt_tokens"] for u in ok),
                "vllm:prefix_cache_hits_total": sum(u["prompt_tokens_details"]["cached_tokens"] for u in ok)}
        for n, w in want.items():
            fails.check(after[n] - before[n] == w, f"{n} grew by {after[n] - before[n]} over the burst; the answers' "
                                                   f"usage adds up to {w}")
        fails.check(want["vllm:prefix_cache_hits_total"] > 0, "no cached_tokens in a burst with a shared prompt")
    except Exception as e:
        import traceback
        traceback.print_exc()
        fails.add(f"{type(e).__name__}: {e}")
    finally:
        harness.stop_all(procs)
        if fails.items:
            for p in procs:
                print(f"--- {p.name} log (last 2000 chars) ---\n{p.text()[-2000:]}")
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'FAIL' if fails.items else 'PASS'} test_metrics: {len(fails.items)} failure(s) in "
          f"{time.monotonic() - t0:.1f} s")
    return 1 if fails.items else 0


if __name__ == "__main__":
    sys.exit(main())
