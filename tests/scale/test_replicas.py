#!/usr/bin/env python3
"""Three kiln replicas (configs/default.yaml's models, KV events on) behind HAProxy and then behind
nginx, each balancing on X-Session-Id with consistent hashing and readiness health checks:

  - a session's turns stick to one replica (told apart by each replica's kiln_requests_total) and
    report cached_tokens > 0 from the second turn; sessions spread over the replicas;
  - a greedy answer through the proxy equals a replica's own;
  - replicas that computed the same prefix announce the same block hashes, and each one's events
    rebuild exactly its /debug/kv_blocks;
  - SIGTERM on a replica while it streams: /health/ready 503 within 0.5 s, /health 200 while it
    drains, its new generation requests 503 + Retry-After, the stream ends normally, its sessions'
    new turns go to the other replicas with no client-visible error, it exits 0, and the last event
    batch from each of its models holds AllBlocksCleared.

  test_replicas.py --kiln build/bin/kiln --repo . [--proxies haproxy,nginx] [--keep]
Exit 0 pass, 1 fail, 77 skipped (no binary, no haproxy and no nginx, or no pyzmq/msgpack).
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

REPLICAS = 3
MODELS = ("stories260K", "tiny-qwen3.5")
BLOCK = 16


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--proxies", default="haproxy,nginx")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true")
    return ap.parse_args()


def replica_config(repo: str, pub: int, replay: int) -> dict:
    """configs/default.yaml's two models (absolute paths), events on tcp://*:pub / replay (+1 for the second model)."""
    repo = os.path.abspath(repo)
    return {
        "log": {"level": "info"},
        "server": {"host": "127.0.0.1", "port": 0, "drain_timeout_s": 10, "vllm_metrics": True,
                   "debug_endpoints": True,
                   "kv_events": {"enabled": True, "publisher": "zmq", "endpoint": f"tcp://*:{pub}",
                                 "replay_endpoint": f"tcp://*:{replay}", "topic": "", "buffer_steps": 100000}},
        "models": [
            {"name": "stories260K", "path": f"{repo}/configs/models/stories260K.gguf",
             "chat_template": f"{repo}/configs/templates/plain.jinja", "max_context": 2048, "max_seqs": 64,
             "cache": {"block_tokens": BLOCK, "memory": "64MiB", "prefix_caching": True},
             "sampling": {"temperature": 0.8, "top_p": 0.95, "max_tokens": 256}},
            {"name": "tiny-qwen3.5", "path": f"{repo}/configs/models/tiny-qwen3_5", "max_seqs": 16,
             "cache": {"block_tokens": BLOCK, "memory": "64MiB", "snapshot_interval": 64},
             "tool_parser": "qwen3_coder", "reasoning_parser": "qwen3", "sampling": {"max_tokens": 256}},
        ],
    }


# ---------------------------------------------------------------------------------------------
# Proxies
# ---------------------------------------------------------------------------------------------

def haproxy_conf(port: int, backends: list[int]) -> str:
    servers = "\n".join(f"    server r{i} 127.0.0.1:{p} check" for i, p in enumerate(backends))
    return f"""global
    maxconn 256

defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout queue 10s
    retries 3
    option redispatch 1
    retry-on 503 conn-failure empty-response
    option http-buffer-request

frontend fe
    bind 127.0.0.1:{port}
    default_backend kiln

backend kiln
    balance hdr(X-Session-Id)
    hash-type consistent
    option httpchk GET /health/ready
    http-check expect status 200
    default-server inter 250ms fastinter 250ms downinter 250ms fall 1 rise 2
{servers}
"""


def nginx_main(tmp: str, http: str) -> str:
    """A whole nginx.conf around `http` (the http block's contents) with every path under `tmp`."""
    return f"""worker_processes 1;
error_log {tmp}/nginx-error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {tmp}/nginx-access.log;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
{http}
}}
"""


def nginx_conf(tmp: str, port: int, backends: list[int]) -> str:
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=30s;" for p in backends)
    return nginx_main(tmp, f"""    upstream kiln {{
        hash $http_x_session_id consistent;
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://kiln;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering on;
            proxy_next_upstream error timeout http_503 non_idempotent;
            proxy_next_upstream_tries 3;
            proxy_connect_timeout 2s;
            proxy_read_timeout 60s;
        }}
    }}""")


def from_deploy(kind: str, repo: str, tmp: str, port: int, backends: list[int]) -> str | None:
    """The shipped config (deploy/haproxy/haproxy.cfg, deploy/nginx/kiln.conf) with only its
    listen addresses and replica lines replaced; None when it is absent or no longer has the
    lines this substitutes (then the built-in config above is used)."""
    if kind == "haproxy":
        path = os.path.join(repo, "deploy/haproxy/haproxy.cfg")
        if not os.path.exists(path):
            return None
        text = open(path).read()
        servers = [ln for ln in text.splitlines() if re.match(r"\s*server \S+ \S+:\d+", ln)]
        if "bind :8080" not in text or not servers:
            return None
        indent = re.match(r"\s*", servers[0]).group(0)
        mine = "\n".join(f"{indent}server r{i} 127.0.0.1:{p}" for i, p in enumerate(backends))
        text = text.replace(servers[0], mine)
        for ln in servers[1:]:
            text = text.replace(ln + "\n", "")
        text = text.replace("bind :8080", f"bind 127.0.0.1:{port}")
        text = re.sub(r"bind :(\d+)", lambda m: f"bind 127.0.0.1:{harness.free_port()}", text)  # the stats page
        return text
    path = os.path.join(repo, "deploy/nginx/kiln.conf")
    if not os.path.exists(path):
        return None
    text = open(path).read()
    servers = [ln for ln in text.splitlines() if re.match(r"\s*server \d+\.\d+\.\d+\.\d+:\d+", ln)]
    if "listen 8080;" not in text or not servers:
        return None
    indent = re.match(r"\s*", servers[0]).group(0)
    opts = re.sub(r"^\s*server \S+", "", servers[0])  # max_fails=... fail_timeout=...;
    mine = "\n".join(f"{indent}server 127.0.0.1:{p}{opts}" for p in backends)
    text = text.replace(servers[0], mine)
    for ln in servers[1:]:
        text = text.replace(ln + "\n", "")
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{port};")
    return nginx_main(tmp, text)


def start_proxy(kind: str, repo: str, tmp: str, backends: list[int]) -> tuple[harness.Proc, str, str]:
    """(process, its URL, which config: deploy/... or built-in)."""
    port = harness.free_port()
    text = from_deploy(kind, repo, tmp, port, backends)
    source = f"deploy/{'haproxy/haproxy.cfg' if kind == 'haproxy' else 'nginx/kiln.conf'}"
    if text is None:
        source = "built-in"
        text = haproxy_conf(port, backends) if kind == "haproxy" else nginx_conf(tmp, port, backends)
    conf = os.path.join(tmp, "haproxy.cfg" if kind == "haproxy" else "nginx.conf")
    with open(conf, "w") as f:
        f.write(text)
    if kind == "haproxy":
        p = harness.Proc([shutil.which("haproxy"), "-db", "-f", conf], "haproxy")
    else:
        p = harness.Proc([shutil.which("nginx"), "-p", tmp, "-e", f"{tmp}/nginx-error.log", "-c", conf,
                          "-g", f"daemon off; pid {tmp}/nginx.pid;"], "nginx")
    return p, f"http://127.0.0.1:{port}", source


# ---------------------------------------------------------------------------------------------
# Replica bookkeeping
# ---------------------------------------------------------------------------------------------

def request_count(url: str, model: str = "stories260K") -> float:
    """kiln_requests_total{model, status="200"}: generation requests answered (a 503 while
    draining, which the proxy retries elsewhere, does not count; nor does the other model's stream)."""
    try:
        r = harness.get(f"{url}/metrics", 2)
    except OSError:  # gone (drained) meanwhile
        return float("nan")
    if r.status != 200:
        return float("nan")
    total = 0.0
    for line in r.body.decode().splitlines():
        if line.startswith("kiln_requests_total{") and 'status="200"' in line and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


class Fleet:
    def __init__(self, kilns):
        self.kilns = kilns

    def counts(self, alive_only=True):
        return [request_count(k.url) if (k.alive() or not alive_only) else float("nan") for k in self.kilns]

    def served_by(self, before, after) -> list[int]:
        return [i for i, (a, b) in enumerate(zip(before, after)) if b == b and a == a and b > a]


def one_replica(fleet: Fleet, fn):
    """Runs fn(); returns (its result, the replica indexes whose request count grew)."""
    before = fleet.counts()
    out = fn()
    # kiln counts a request when it finishes; give the counter a moment after the answer
    deadline = time.monotonic() + 2
    while True:
        after = fleet.counts()
        grew = fleet.served_by(before, after)
        if grew or time.monotonic() > deadline:
            return out, grew
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# One proxy's run
# ---------------------------------------------------------------------------------------------

def run_proxy(kind: str, args, fails: harness.Failures, kv, wl, zmq) -> None:
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix=f"kiln_replicas_{kind}_")
    procs, subs = [], []
    tag = f"[{kind}]"
    try:
        base = harness.free_port_run(REPLICAS * 4)
        kilns = []
        for i in range(REPLICAS):
            pub, replay = base + 4 * i, base + 4 * i + 2
            cfg = harness.write_config(os.path.join(tmp, f"r{i}.yaml"), replica_config(args.repo, pub, replay))
            k = harness.Kiln(args.kiln, cfg, f"{kind}-r{i}", wait=False)
            k.pub, k.replay = pub, replay
            procs.append(k)
            kilns.append(k)
        for k in kilns:
            k.wait_listening(60)
        fleet = Fleet(kilns)
        # events of both models of every replica; one hash memo: same prefix -> same hash everywhere
        memo = kv.HashMemo()
        ctx = zmq.Context.instance()
        for k in kilns:
            k.subs = {}
            for m, name in enumerate(MODELS):
                s = kv.Subscriber(f"tcp://127.0.0.1:{k.pub + m}", f"kv@127.0.0.1:{k.port}@{name}",
                                  f"tcp://127.0.0.1:{k.replay + m}", BLOCK, ctx, memo=memo)
                subs.append(s)
                k.subs[name] = s
        for k in kilns:
            for name, s in k.subs.items():
                s.wait_for(0, timeout_s=5, replay_after_s=0.3)
        proxy, purl, source = start_proxy(kind, args.repo, tmp, [k.port for k in kilns])
        procs.append(proxy)

        def proxy_ready():
            if not proxy.alive():
                raise RuntimeError(f"{kind} exited: {proxy.text()[-2000:]}")
            try:
                return all(harness.get(f"{purl}/health/ready", 2).status == 200 for _ in range(6))
            except OSError:
                return False
        harness.wait_until(proxy_ready, 15, 0.1, f"{kind} answering")
        time.sleep(0.6)  # every server through `rise 2` of the health checks
        print(f"{tag} {REPLICAS} replicas {[k.port for k in kilns]} behind {purl} ({source} config) in {time.monotonic() - t0:.1f} s",
              flush=True)

        # 1. Sticky sessions, cached prefixes from the second turn, spread over replicas.
        sessions = wl.make_sessions("stories260K", 9, args.seed, shared_system=9)
        home: dict[str, int] = {}
        for turn in range(3):
            for s in sessions:
                body = s.next_body(max_tokens=8)
                r, grew = one_replica(fleet, lambda: harness.post(f"{purl}/v1/chat/completions", body,
                                                                   {"X-Session-Id": s.sid}))
                if not fails.check(r.status == 200, f"{tag} {s.sid} turn {turn}: {r}"):
                    continue
                s.record(r.json())
                if not fails.check(len(grew) == 1, f"{tag} {s.sid} turn {turn}: served by replicas {grew}, "
                                                   "expected exactly one"):
                    continue
                if turn == 0:
                    home[s.sid] = grew[0]
                else:
                    fails.check(grew[0] == home[s.sid], f"{tag} {s.sid} turn {turn} went to replica {grew[0]}, "
                                                        f"its earlier turns to {home[s.sid]}")
                    cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
                    fails.check(cached > 0, f"{tag} {s.sid} turn {turn}: cached_tokens {cached}")
        used = sorted(set(home.values()))
        fails.check(len(used) >= 2, f"{tag} all sessions on replicas {used}: not spread")
        print(f"{tag} sessions -> replicas {home}", flush=True)

        # 2. The proxy's answer == a replica's own for the same greedy request.
        body = {"model": "stories260K", "temperature": 0, "max_tokens": 24,
                "messages": [{"role": "user", "content": "The little dog found a red ball in the park."}]}
        direct = harness.post(f"{kilns[0].url}/v1/chat/completions", body)
        via = harness.post(f"{purl}/v1/chat/completions", body, {"X-Session-Id": "compare"})
        if fails.check(direct.status == 200 and via.status == 200, f"{tag} compare: {direct} / {via}"):
            a, b = direct.json(), via.json()
            fails.check(a["choices"][0]["message"] == b["choices"][0]["message"]
                        and a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"],
                        f"{tag} through the proxy {b['choices'][0]['message']} != direct {a['choices'][0]['message']}")

        # 3. At rest: every replica's events == its /debug/kv_blocks (the shared memo already
        #    checked that the shared system prompt got the same hashes on every replica).
        for i, k in enumerate(kilns):
            wl.wait_idle(k.url)
            for name, s in k.subs.items():
                problems, doc = wl.sync_and_compare(k.url, name, [s])
                fails.check(not problems, f"{tag} replica {i} {name}: {problems}")
        fails.check(any(len(k.subs["stories260K"].index) for k in kilns), f"{tag} no replica announced a block")

        # 4. Drain: SIGTERM on the replica streaming a session's turn.
        victim_sid = sessions[0].sid
        vi = home.get(victim_sid, 0)
        victim = kilns[vi]
        others = [i for i in range(REPLICAS) if i != vi]
        qs = wl.Session(victim_sid, "tiny-qwen3.5", "You tell long stories.", random.Random(1))
        stream_body = qs.next_body(max_tokens=600)
        stream_body.update(ignore_eos=True, stream_options={"include_usage": True})
        st = harness.Stream(f"{purl}/v1/chat/completions", stream_body, {"X-Session-Id": victim_sid})
        st.first.wait(20)
        if not fails.check(st.events and st.error is None, f"{tag} the stream did not start: {st.error}"):
            return
        t_sig = time.monotonic()
        victim.signal(signal.SIGTERM)
        ready_503 = None
        while time.monotonic() - t_sig < 2.0:
            r = harness.get(f"{victim.url}/health/ready", 1)
            if r.status == 503:
                ready_503 = time.monotonic() - t_sig
                fails.check(r.json().get("status") == "draining",
                            f"{tag} /health/ready while draining: {r} (expected status draining)")
                break
            time.sleep(0.01)
        fails.check(ready_503 is not None and ready_503 <= 0.5,
                    f"{tag} /health/ready of the draining replica: 503 after {ready_503} s (expected within 0.5 s)")
        h = harness.get(f"{victim.url}/health", 1)
        fails.check(h.status == 200, f"{tag} /health while draining: {h} (expected 200: liveness)")
        print(f"{tag} draining: /health {h.status} {h.body.decode()[:80]}, /health/ready 503 after "
              f"{ready_503 if ready_503 is None else round(ready_503, 3)} s", flush=True)
        d = harness.post(f"{victim.url}/v1/chat/completions",
                         {"model": "stories260K", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        fails.check(d.status == 503 and "retry-after" in d.headers,
                    f"{tag} a new request straight to the draining replica: {d} headers {d.headers} "
                    "(expected 503 with Retry-After)")
        fails.check(not st.done.is_set(), f"{tag} the stream ended before the checks of the drain (make it longer)")
        # its sessions' next turns, while it drains and after it is gone: other replicas, no error
        moved = [s for s in sessions if home.get(s.sid) == vi]
        for phase in ("draining", "gone"):
            if phase == "gone":
                fails.check(st.wait(30), f"{tag} the stream did not finish")
                code = victim.wait(15)
                fails.check(code == 0, f"{tag} the drained replica exited with {code} (expected 0)")
            for s in moved:
                body = s.next_body(max_tokens=6)
                r, grew = one_replica(fleet, lambda: harness.post(f"{purl}/v1/chat/completions", body,
                                                                   {"X-Session-Id": s.sid}))
                if fails.check(r.status == 200, f"{tag} {s.sid}'s turn while its replica is {phase}: {r}"):
                    s.record(r.json())
                    fails.check(len(grew) == 1 and grew[0] in others,
                                f"{tag} {s.sid}'s turn while its replica is {phase}: served by {grew}, expected one of "
                                f"{others}")
        st.wait(30)
        fails.check(st.error is None and st.status == 200, f"{tag} the stream through the drain: {st.error}")
        fails.check(st.events and st.events[-1] == "[DONE]" and st.finish_reason() == "length",
                    f"{tag} the stream through the drain ended with {st.events[-2:] if st.events else None} "
                    f"(finish_reason {st.finish_reason()})")
        usage = [c["usage"] for c in st.chunks() if c.get("usage")]
        fails.check(usage and usage[-1]["completion_tokens"] == 600,
                    f"{tag} the stream's usage {usage[-1:] if usage else None}: expected 600 completion tokens")
        for name, s in victim.subs.items():
            try:
                s.poll(0.5)
                lb = s.last_batch
                fails.check(lb is not None and any(e[:1] == ["AllBlocksCleared"] for e in lb.events),
                            f"{tag} the drained replica's last {name} batch (seq {lb.seq if lb else None}) has "
                            f"{[e[0] for e in lb.events] if lb else None}, expected AllBlocksCleared")
                fails.check(len(s.index) == 0, f"{tag} {name}: {len(s.index)} blocks left after the drain")
            except kv.ProtocolError as e:
                fails.add(f"{tag} {name} events of the drained replica: {e}")
        print(f"{tag} drain: ready 503 after {ready_503 if ready_503 is None else round(ready_503, 3)} s, "
              f"{len(moved)} session(s) moved; {time.monotonic() - t0:.1f} s", flush=True)
    except kv.ProtocolError as e:
        fails.add(f"{tag} protocol error: {e}")
    except Exception as e:
        import traceback
        traceback.print_exc()
        fails.add(f"{tag} {type(e).__name__}: {e}")
    finally:
        for s in subs:
            s.close()
        harness.stop_all(procs)
        failed = bool(fails.items)
        for p in procs:
            with open(os.path.join(tmp, f"{p.name}.log"), "w") as f:
                f.write(p.text())
            if failed:
                print(f"--- {p.name} log (last 1500 chars) ---\n{p.text()[-1500:]}")
        if failed and kind == "nginx" and os.path.exists(f"{tmp}/nginx-error.log"):
            print("--- nginx error.log ---\n" + open(f"{tmp}/nginx-error.log").read()[-3000:])
        if args.keep or failed:
            print(f"{tag} kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    args = parse_args()
    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        print(f"SKIP: no kiln binary at {args.kiln}")
        return harness.SKIP
    kinds = [k for k in args.proxies.split(",") if k]
    present = [k for k in kinds if shutil.which(k)]
    for k in kinds:
        if k not in present:
            print(f"note: {k} is not installed; skipped")
    if not present:
        print("SKIP: neither haproxy nor nginx is installed")
        return harness.SKIP
    if not os.path.exists(os.path.join(args.repo, "configs/models/tiny-qwen3_5/config.json")):
        print("SKIP: configs/models/tiny-qwen3_5 is missing (scripts/default_models.sh)")
        return harness.SKIP
    harness.ensure_modules("zmq", "msgpack")
    import kv_subscriber as kv
    import workload as wl
    import zmq
    t0 = time.monotonic()
    fails = harness.Failures()
    for k in present:
        run_proxy(k, args, fails, kv, wl, zmq)
    print(f"{'FAIL' if fails.items else 'PASS'} test_replicas: {len(fails.items)} failure(s) in "
          f"{time.monotonic() - t0:.1f} s")
    return 1 if fails.items else 0


if __name__ == "__main__":
    sys.exit(main())
