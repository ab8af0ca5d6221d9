"""Seeded multi-turn chat sessions for the scale-out tests, and the checks of a replica's announced
blocks against a subscriber's index (shared by test_kv_index.py and test_replicas.py)."""
from __future__ import annotations

import random
import time

import harness
import kv_subscriber as kv

WORDS = ("the a little girl boy cat dog tree house sun moon ball red blue green big small happy sad "
         "went saw played ran jumped found said looked wanted liked park garden river sky bird fish "
         "mom dad friend toy box cake apple flower rain snow day night time story king queen car boat "
         "hat shoe door window bed book star cloud hill road").split()


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


class Session:
    """One conversation: a system prompt, then user turns with the model's replies appended."""

    def __init__(self, sid: str, model: str, system: str, rng: random.Random, salt: str | None = None,
                 extra: dict | None = None, words: tuple[int, int] = (8, 24)):
        self.sid, self.model, self.salt, self.rng = sid, model, salt, rng
        self.messages = [{"role": "system", "content": system}]
        self.extra = extra or {}
        self.words = words
        self.turns = 0

    def next_body(self, max_tokens: int | None = None) -> dict:
        self.messages.append({"role": "user", "content": sentence(self.rng, *self.words)})
        body = {"model": self.model, "messages": [dict(m) for m in self.messages], "temperature": 0,
                "max_tokens": max_tokens or self.rng.randint(4, 12)}
        if self.salt is not None:
            body["cache_salt"] = self.salt
        body.update(self.extra)
        return body

    def record(self, response: dict) -> None:
        msg = response["choices"][0]["message"]
        self.messages.append({"role": "assistant", "content": msg.get("content") or ""})
        self.turns += 1


def make_sessions(model: str, n: int, seed: int, extra: dict | None = None, shared_system: int = 4,
                  salted: dict | None = None, words: tuple[int, int] = (8, 24),
                  system_words: tuple[int, int] = (12, 30)) -> list[Session]:
    """n sessions; the first `shared_system` share one system prompt (blocks shared between them);
    salted maps session number -> cache_salt; words / system_words: lengths of the messages."""
    rng = random.Random(seed)
    common = sentence(rng, max(system_words[0], system_words[1] - 10), system_words[1])
    salted = salted or {}
    out = []
    for i in range(n):
        system = common if i < shared_system else sentence(rng, *system_words)
        out.append(Session(f"{model}-s{i}", model, system, random.Random(rng.random()), salted.get(i), extra, words))
    return out


def blocks_of_debug(doc: dict) -> dict[int, kv.Block]:
    """/debug/kv_blocks' blocks as the subscriber's Block values; checks each entry's shape."""
    out = {}
    bs = doc["block_size"]
    for b in doc["blocks"]:
        if set(b) != {"hash", "parent", "token_ids", "extra_keys"}:
            raise AssertionError(f"/debug/kv_blocks entry has keys {sorted(b)}, expected hash, parent, token_ids, "
                                 f"extra_keys: {b}")
        ek = b["extra_keys"]
        if ek is not None and not (isinstance(ek, list) and len(ek) == 1 and isinstance(ek[0], str)):
            raise AssertionError(f"/debug/kv_blocks extra_keys {ek!r} is neither null nor [salt]")
        if len(b["token_ids"]) != bs:
            raise AssertionError(f"/debug/kv_blocks block {b['hash']} has {len(b['token_ids'])} tokens, not {bs}")
        if b["hash"] in out:
            raise AssertionError(f"/debug/kv_blocks lists block {b['hash']} twice")
        out[b["hash"]] = kv.Block(b["parent"], tuple(b["token_ids"]), ek[0] if ek else None)
    return out


def diff_blocks(mine: dict, theirs: dict, limit: int = 6) -> str:
    """'' when equal; else a description of the first differences."""
    if mine == theirs:
        return ""
    only_mine = [h for h in mine if h not in theirs]
    only_theirs = [h for h in theirs if h not in mine]
    differ = [h for h in mine if h in theirs and mine[h] != theirs[h]]
    lines = [f"subscriber {len(mine)} blocks, replica {len(theirs)} blocks"]
    if only_mine:
        lines.append(f"  only in the subscriber's index ({len(only_mine)}): "
                     + "; ".join(f"{h}: parent {mine[h].parent} salt {mine[h].salt!r} tokens {list(mine[h].tokens)}"
                                 for h in only_mine[:limit]))
    if only_theirs:
        lines.append(f"  only in /debug/kv_blocks ({len(only_theirs)}): "
                     + "; ".join(f"{h}: parent {theirs[h].parent} salt {theirs[h].salt!r} tokens {list(theirs[h].tokens)}"
                                 for h in only_theirs[:limit]))
    for h in differ[:limit]:
        lines.append(f"  block {h} differs: subscriber {mine[h]} replica {theirs[h]}")
    return "\n".join(lines)


def debug_blocks(url: str, model: str) -> dict:
    r = harness.get(f"{url}/debug/kv_blocks?model={model}")
    if r.status != 200:
        raise AssertionError(f"GET /debug/kv_blocks?model={model}: {r}")
    return r.json()


def sync_and_compare(url: str, model: str, subs: list, timeout_s: float = 15.0) -> tuple[str, dict]:
    """Reads /debug/kv_blocks, waits until every subscriber applied its published_seq and compares
    their indexes with its blocks. Retries while batches keep coming (the replica is not idle).
    Returns ('' or the differences, the last debug document)."""
    deadline = time.monotonic() + timeout_s
    while True:
        doc = debug_blocks(url, model)
        seq = doc["published_seq"]
        for s in subs:
            s.wait_for(seq, max(0.5, deadline - time.monotonic()), replay_after_s=None)
        if all(s.applied_seq == seq for s in subs) or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # more batches arrived meanwhile: not idle yet, read again
    theirs = blocks_of_debug(doc)
    problems = []
    for s in subs:
        if s.applied_seq != seq:
            problems.append(f"subscriber applied {s.applied_seq}, the replica's published_seq is {seq}")
        d = diff_blocks(s.index.blocks, theirs)
        if d:
            problems.append(f"index != /debug/kv_blocks at seq {seq}:\n{d}")
    return "\n".join(problems), doc


def wait_idle(url: str, timeout_s: float = 20.0) -> None:
    """Until the replica runs and queues no request (vllm: gauges), by /metrics."""
    def idle():
        r = harness.get(f"{url}/metrics")
        if r.status != 200:
            return False
        total = 0.0
        seen = False
        for line in r.body.decode().splitlines():
            if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
                total += float(line.rsplit(" ", 1)[1])
                seen = True
        return seen and total == 0
    harness.wait_until(idle, timeout_s, 0.05, "vllm:num_requests_running + waiting == 0")
