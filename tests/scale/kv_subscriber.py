#!/usr/bin/env python3
"""A reference subscriber for KV-cache events in vLLM's wire format (docs: the scale-out contract,
issue 41), strict: every deviation from the protocol raises ProtocolError naming what is wrong.

Sections:
  1. ProtocolError, Block and BlockIndex: one replica's announced blocks, every event checked
     (parent before child, no double store, removals of live leaves, extra_keys / salt layout)
  2. decode_message / decode_payload: the 3 frames and the msgpack payload [ts, events, dp_rank]
  3. replay(): a DEALER asking a replica's ROUTER for its buffered batches from a sequence number
  4. Subscriber: a SUB socket on one replica's topic, contiguous sequence numbers from 0, the
     catch-up through replay when it joined late
  5. prefix_score() / prefix_match(): the router's score of a prompt against an index
  6. the command line: print every event of a topic as it arrives

Wire format (what kiln and vLLM publish):
  frames   [topic utf-8, seq 8-byte big-endian unsigned (from 0 per topic, +1 per batch), payload]
  payload  msgpack [ts float64, [event, ...], dp_rank 0]
  events   ["BlockStored", hashes, parent|nil, token_ids, block_size, nil, "GPU", nil (, extra_keys)]
           ["BlockRemoved", hashes, "GPU"]
           ["AllBlocksCleared"]
  replay   DEALER sends [b"", seq]; the ROUTER answers [b"", topic, seq, payload] per buffered batch
           with sequence >= seq, then [b"", b"", -1 (8-byte signed), b""] (current vLLM and llm-d).
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from dataclasses import dataclass, field

try:
    import msgpack
    import zmq
except ImportError:
    if __name__ != "__main__":
        raise
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness
    harness.ensure_modules("zmq", "msgpack")  # the command line: re-run under the system python3

U64_MAX = (1 << 64) - 1
END_OF_REPLAY = -1


class ProtocolError(Exception):
    """The publisher broke the KV-event protocol; the message says where and how."""


# ---------------------------------------------------------------------------------------------
# 1. One replica's index of announced blocks
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    parent: int | None
    tokens: tuple[int, ...]
    salt: str | None  # only on a chain's first block (parent None) of a salted request


@dataclass
class HashMemo:
    """(parent, tokens, salt) <-> hash for every block ever announced (shareable between replicas)."""
    by_key: dict = field(default_factory=dict)
    by_hash: dict = field(default_factory=dict)


@dataclass
class BatchStats:
    stored: int = 0
    removed: int = 0
    cleared: int = 0


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_hash(v, what: str) -> int:
    if not _is_int(v) or v < 0 or v > U64_MAX:
        raise ProtocolError(f"{what}: {v!r} is not an unsigned 64-bit integer")
    return v


class BlockIndex:
    """hash -> Block for the blocks a replica announced and has not removed.

    Also remembers every (parent, tokens, salt) <-> hash ever seen, across removals and resets: the
    contract says hashes depend on those alone, so the same inputs must always give the same hash
    (and two replicas the same hashes: pass one HashMemo to both indexes to check that too).
    """

    def __init__(self, block_size: int | None = None, memo: HashMemo | None = None):
        self.block_size = block_size
        self.blocks: dict[int, Block] = {}
        self.children: dict[int, set[int]] = {}
        self.by_key: dict[tuple, int] = {}  # (parent, tokens, salt) -> live hash
        self.memo = HashMemo() if memo is None else memo

    # -- queries ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.blocks)

    def lookup(self, parent: int | None, tokens, salt: str | None = None) -> int | None:
        return self.by_key.get((parent, tuple(tokens), salt if parent is None else None))

    def as_dict(self) -> dict[int, Block]:
        return dict(self.blocks)

    # -- mutation, with the protocol's invariants --------------------------------------------------
    def clear(self) -> None:
        self.blocks.clear()
        self.children.clear()
        self.by_key.clear()

    def store(self, h: int, parent: int | None, tokens: tuple[int, ...], salt: str | None, where: str) -> None:
        if h in self.blocks:
            raise ProtocolError(f"{where}: block {h} stored twice without a removal in between")
        if parent is not None and parent not in self.blocks:
            raise ProtocolError(f"{where}: block {h} stored before its parent {parent} "
                                "(the parent is not stored, or was removed)")
        if salt is not None and parent is not None:
            raise ProtocolError(f"{where}: block {h} has a salt but is not a chain's first block")
        key = (parent, tokens, salt)
        other = self.by_key.get(key)
        if other is not None:
            raise ProtocolError(f"{where}: block {h} has the same (parent, tokens, salt) as live block {other}")
        known = self.memo.by_key.get(key)
        if known is not None and known != h:
            raise ProtocolError(f"{where}: block {h} has the (parent, tokens, salt) that earlier gave hash {known}: "
                                "hashes must depend on those alone")
        seen = self.memo.by_hash.get(h)
        if seen is not None and seen != key:
            raise ProtocolError(f"{where}: hash {h} announced for different contents than before "
                                f"(parent {seen[0]} -> {parent}, salt {seen[2]!r} -> {salt!r}, "
                                f"tokens {'equal' if seen[1] == tokens else 'differ'})")
        self.memo.by_key[key] = h
        self.memo.by_hash[h] = key
        self.blocks[h] = Block(parent, tokens, salt)
        self.by_key[key] = h
        self.children[h] = set()
        if parent is not None:
            self.children[parent].add(h)

    def remove(self, h: int, where: str) -> None:
        b = self.blocks.get(h)
        if b is None:
            raise ProtocolError(f"{where}: BlockRemoved of block {h}, which is not stored")
        kids = self.children.get(h)
        if kids:
            raise ProtocolError(f"{where}: BlockRemoved of block {h} while its children {sorted(kids)[:4]} "
                                "are still stored (children must be removed first)")
        del self.blocks[h]
        del self.children[h]
        del self.by_key[(b.parent, b.tokens, b.salt)]
        if b.parent is not None:
            self.children[b.parent].discard(h)

    def apply_event(self, ev, where: str, stats: BatchStats | None = None) -> None:
        """Checks one decoded event (a list) and applies it."""
        if not isinstance(ev, list) or not ev:
            raise ProtocolError(f"{where}: an event must be a non-empty array, got {ev!r:.80}")
        tag = ev[0]
        if tag == "BlockStored":
            self._apply_stored(ev, where)
            if stats:
                stats.stored += 1
        elif tag == "BlockRemoved":
            if len(ev) != 3:
                raise ProtocolError(f"{where}: BlockRemoved has {len(ev)} fields, expected 3 "
                                    "[tag, block_hashes, medium]")
            hashes, medium = ev[1], ev[2]
            if not isinstance(hashes, list) or not hashes:
                raise ProtocolError(f"{where}: BlockRemoved block_hashes must be a non-empty array, got {hashes!r:.80}")
            if medium != "GPU":
                raise ProtocolError(f"{where}: BlockRemoved medium is {medium!r}, expected 'GPU'")
            for i, h in enumerate(hashes):
                self.remove(_check_hash(h, f"{where}: BlockRemoved block_hashes[{i}]"), where)
            if stats:
                stats.removed += 1
        elif tag == "AllBlocksCleared":
            if len(ev) != 1:
                raise ProtocolError(f"{where}: AllBlocksCleared has {len(ev)} fields, expected 1")
            self.clear()
            if stats:
                stats.cleared += 1
        else:
            raise ProtocolError(f"{where}: unknown event tag {tag!r} "
                                "(expected BlockStored, BlockRemoved or AllBlocksCleared)")

    def _apply_stored(self, ev, where: str) -> None:
        if len(ev) not in (8, 9):
            raise ProtocolError(f"{where}: BlockStored has {len(ev)} fields, expected 8 or 9 [tag, block_hashes, "
                                "parent_block_hash, token_ids, block_size, lora_id, medium, lora_name(, extra_keys)]")
        _, hashes, parent, tokens, bs, lora_id, medium, lora_name = ev[:8]
        extra = ev[8] if len(ev) == 9 else None
        if not isinstance(hashes, list) or not hashes:
            raise ProtocolError(f"{where}: BlockStored block_hashes must be a non-empty array, got {hashes!r:.80}")
        hashes = [_check_hash(h, f"{where}: BlockStored block_hashes[{i}]") for i, h in enumerate(hashes)]
        if parent is not None:
            _check_hash(parent, f"{where}: BlockStored parent_block_hash")
        if not _is_int(bs) or bs <= 0:
            raise ProtocolError(f"{where}: BlockStored block_size {bs!r} is not a positive integer")
        if self.block_size is None:
            self.block_size = bs
        elif bs != self.block_size:
            raise ProtocolError(f"{where}: BlockStored block_size {bs} differs from the block size {self.block_size}")
        if not isinstance(tokens, list) or not all(_is_int(t) and 0 <= t < (1 << 32) for t in tokens):
            raise ProtocolError(f"{where}: BlockStored token_ids must be an array of non-negative integers")
        if len(tokens) != bs * len(hashes):
            raise ProtocolError(f"{where}: BlockStored has {len(tokens)} token_ids for {len(hashes)} blocks of "
                                f"{bs} (expected {bs * len(hashes)})")
        if lora_id is not None:
            raise ProtocolError(f"{where}: BlockStored lora_id is {lora_id!r}, expected nil")
        if medium != "GPU":
            raise ProtocolError(f"{where}: BlockStored medium is {medium!r}, expected 'GPU'")
        if lora_name is not None:
            raise ProtocolError(f"{where}: BlockStored lora_name is {lora_name!r}, expected nil")
        salts: list[str | None] = [None] * len(hashes)
        if len(ev) == 9:
            if not isinstance(extra, list) or len(extra) != len(hashes):
                raise ProtocolError(f"{where}: BlockStored extra_keys must be an array with one entry per block "
                                    f"({len(hashes)}), got {extra!r:.80}")
            for i, e in enumerate(extra):
                if e is None:
                    continue
                if not isinstance(e, list):
                    raise ProtocolError(f"{where}: BlockStored extra_keys[{i}] must be nil or an array, got {e!r:.80}")
                if i > 0 or parent is not None:
                    raise ProtocolError(f"{where}: BlockStored extra_keys[{i}] = {e!r:.80} on a block that is not "
                                        "a chain's first block (the salt goes on the first block only)")
                if len(e) != 1 or not isinstance(e[0], str):
                    raise ProtocolError(f"{where}: BlockStored extra_keys[{i}] = {e!r:.80}, expected [salt string]")
                salts[i] = e[0]
        prev = parent
        for i, h in enumerate(hashes):
            self.store(h, prev, tuple(tokens[i * bs:(i + 1) * bs]), salts[i], where)
            prev = h


# ---------------------------------------------------------------------------------------------
# 2. Frames and payloads
# ---------------------------------------------------------------------------------------------

@dataclass
class Batch:
    topic: str
    seq: int
    ts: float
    events: list
    dp_rank: int
    raw: bytes = field(repr=False, default=b"")


def decode_seq(b: bytes, what: str, signed: bool = False) -> int:
    if len(b) != 8:
        raise ProtocolError(f"{what}: the sequence frame has {len(b)} bytes, expected 8 (big-endian)")
    return struct.unpack(">q" if signed else ">Q", b)[0]


def decode_payload(raw: bytes, where: str) -> tuple[float, list, int]:
    try:
        obj = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types; all mean a malformed payload
        raise ProtocolError(f"{where}: the payload is not valid msgpack ({e})") from None
    if not isinstance(obj, list) or len(obj) != 3:
        raise ProtocolError(f"{where}: the payload must be a 3-element array [ts, events, dp_rank], got {obj!r:.120}")
    ts, events, dp = obj
    # float64 on the wire: the array header (0x93), then 0xcb.
    if not isinstance(ts, float) or raw[:2] != b"\x93\xcb":
        raise ProtocolError(f"{where}: ts must be a msgpack float64, got {ts!r}")
    if not 1e9 < ts < time.time() + 86400:
        raise ProtocolError(f"{where}: ts {ts} is not seconds since the epoch")
    if not isinstance(events, list):
        raise ProtocolError(f"{where}: events must be an array, got {events!r:.80}")
    if not _is_int(dp) or dp != 0:
        raise ProtocolError(f"{where}: data_parallel_rank must be 0, got {dp!r}")
    return ts, events, dp


def decode_message(frames: list[bytes], topic: str | None) -> Batch:
    if len(frames) != 3:
        raise ProtocolError(f"a message has {len(frames)} frames, expected 3 [topic, seq, payload]")
    try:
        t = frames[0].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"the topic frame {frames[0]!r:.80} is not UTF-8") from None
    if topic is not None and t != topic:
        raise ProtocolError(f"message on topic {t!r}, expected {topic!r}")
    seq = decode_seq(frames[1], f"topic {t!r}")
    ts, events, dp = decode_payload(frames[2], f"topic {t!r} seq {seq}")
    return Batch(t, seq, ts, events, dp, frames[2])


# ---------------------------------------------------------------------------------------------
# 3. Replay
# ---------------------------------------------------------------------------------------------

def replay(ctx: zmq.Context, endpoint: str, from_seq: int, topic: str | None, timeout_s: float = 10.0,
           exact_start: bool = True) -> list[Batch]:
    """Asks the ROUTER at `endpoint` for every buffered batch with sequence >= from_seq.

    Returns them in order, checked: [b"", topic, seq, payload] each (topic as given; None: the
    first reply's, then the same), contiguous sequence numbers starting at from_seq (a later start
    means the buffer lost batches the caller needs; exact_start=False accepts it), ended by
    [b"", b"", -1, b""].
    """
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    where = f"replay from {from_seq} at {endpoint}"
    try:
        s.connect(endpoint)
        s.send_multipart([b"", struct.pack(">Q", from_seq)])
        out: list[Batch] = []
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not s.poll(int(left * 1000)):
                raise ProtocolError(f"{where}: no end marker within {timeout_s} s ({len(out)} batches received)")
            frames = s.recv_multipart()
            if len(frames) != 4 or frames[0] != b"":
                raise ProtocolError(f"{where}: a reply has {len(frames)} frames {[f[:24] for f in frames]}, expected "
                                    "[b'', topic, seq, payload] (end: [b'', b'', -1, b''])")
            _, t, seqb, payload = frames
            if t == b"":
                if decode_seq(seqb, where, signed=True) != END_OF_REPLAY or payload != b"":
                    raise ProtocolError(f"{where}: a reply with an empty topic that is not the end marker "
                                        f"[b'', b'', -1, b'']: seq {seqb!r}, payload {payload[:40]!r}")
                return out
            try:
                t = t.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError(f"{where}: the topic frame {t[:40]!r} is not UTF-8") from None
            if topic is not None and t != topic:
                raise ProtocolError(f"{where}: a reply on topic {t!r}, expected {topic!r}")
            topic = t
            seq = decode_seq(seqb, where)
            expect = out[-1].seq + 1 if out else from_seq if exact_start else max(seq, from_seq)
            if seq != expect:
                raise ProtocolError(f"{where}: reply has seq {seq}, expected {expect}"
                                    + (" (the replay buffer no longer holds the batches asked for)" if not out else ""))
            ts, events, dp = decode_payload(payload, f"{where} seq {seq}")
            out.append(Batch(t, seq, ts, events, dp, payload))
    finally:
        s.close(0)


# ---------------------------------------------------------------------------------------------
# 4. Subscriber
# ---------------------------------------------------------------------------------------------

class Subscriber:
    """One replica's event stream (one topic): a SUB socket, strict sequence numbers, an index.

    Sequence numbers must run 0, 1, 2, ... and batch 0 must hold AllBlocksCleared. A subscriber that
    connects after the replica started misses the first batches (ZMQ PUB drops what nobody
    receives): when it has applied nothing yet and the first message it sees is not seq 0, it asks
    the replay endpoint for everything from 0 and continues live, skipping the live batches the
    replay already covered (they must be byte-identical). A later gap is a ProtocolError, unless
    recover_gaps is set and there is a replay endpoint. bind: bind `endpoint` (for a publisher
    that connects, as one configured with tcp://HOST:PORT does) instead of connecting to it.
    """

    def __init__(self, endpoint: str, topic: str | None = None, replay_endpoint: str | None = None,
                 block_size: int | None = None, ctx: zmq.Context | None = None, recover_gaps: bool = False,
                 memo: HashMemo | None = None, on_batch=None, bind: bool = False):
        self.ctx = ctx or zmq.Context.instance()
        self.endpoint, self.topic, self.replay_endpoint = endpoint, topic, replay_endpoint
        self.index = BlockIndex(block_size, memo)
        self.recover_gaps = recover_gaps
        self.on_batch = on_batch
        self.next_seq = 0
        self.batches_live = 0
        self.batches_replayed = 0
        self.replays = 0
        self.last_batch: Batch | None = None
        self._overlap: dict[int, bytes] = {}  # seq -> payload applied from a replay, still due live
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)  # keep every batch: a dropped one would be a gap
        self.sock.setsockopt(zmq.SUBSCRIBE, (topic or "").encode())
        if bind:  # a publisher configured with a plain tcp://HOST:PORT connects to its subscriber
            self.sock.bind(endpoint)
        else:
            self.sock.connect(endpoint)

    def close(self) -> None:
        self.sock.close(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def applied_seq(self) -> int:
        """The last sequence number applied (-1: none)."""
        return self.next_seq - 1

    def _apply(self, b: Batch, live: bool) -> None:
        where = f"topic {b.topic!r} seq {b.seq}"
        if b.seq == 0 and not any(isinstance(e, list) and e[:1] == ["AllBlocksCleared"] for e in b.events):
            raise ProtocolError(f"{where}: the first batch must hold AllBlocksCleared, got "
                                f"{[e[0] if isinstance(e, list) and e else e for e in b.events]}")
        stats = BatchStats()
        for i, ev in enumerate(b.events):
            self.index.apply_event(ev, f"{where} event {i}", stats)
        self.next_seq = b.seq + 1
        self.last_batch = b
        if live:
            self.batches_live += 1
        else:
            self.batches_replayed += 1
        if self.on_batch:
            self.on_batch(b, live)

    def catch_up(self, from_seq: int | None = None, timeout_s: float = 10.0) -> int:
        """Applies the replayed batches from `from_seq` (default: the next one due); returns how many."""
        if not self.replay_endpoint:
            raise ProtocolError(f"topic {self.topic!r}: batches {self.next_seq}.. are missing and there is no "
                                "replay endpoint")
        start = self.next_seq if from_seq is None else from_seq
        if start != self.next_seq:
            raise ValueError(f"replay must start at the next batch due ({self.next_seq}), not {start}")
        got = replay(self.ctx, self.replay_endpoint, start, self.topic, timeout_s)
        self.replays += 1
        if got and self.topic is None:
            self.topic = got[0].topic
        for b in got:
            self._apply(b, live=False)
            self._overlap[b.seq] = b.raw
        return len(got)

    def _handle(self, frames: list[bytes]) -> None:
        b = decode_message(frames, self.topic)
        if self.topic is None:
            self.topic = b.topic  # one endpoint publishes one model's topic
        due = self.next_seq
        if b.seq in self._overlap:
            if self._overlap.pop(b.seq) != b.raw:
                raise ProtocolError(f"topic {b.topic!r} seq {b.seq}: the live payload differs from the replayed one")
            return
        self._overlap = {s: r for s, r in self._overlap.items() if s > b.seq}
        if b.seq < due:
            raise ProtocolError(f"topic {b.topic!r}: seq {b.seq} arrived after {due - 1} (repeated or out of order)")
        if b.seq > due:
            late_join = due == 0 and self.batches_live == 0 and self.batches_replayed == 0
            if not (late_join or self.recover_gaps) or not self.replay_endpoint:
                raise ProtocolError(f"topic {b.topic!r}: seq {b.seq} arrived when {due} was due "
                                    f"(batches {due}..{b.seq - 1} missing"
                                    + (", no replay endpoint)" if not self.replay_endpoint else ")"))
            self.catch_up()
            if b.seq < self.next_seq:
                if self._overlap.pop(b.seq, None) != b.raw:
                    raise ProtocolError(f"topic {b.topic!r} seq {b.seq}: the live payload differs from the replayed one")
                return
            if b.seq != self.next_seq:
                raise ProtocolError(f"topic {b.topic!r}: replay ended at {self.next_seq - 1} but live seq {b.seq} "
                                    "arrived earlier")
        self._apply(b, live=True)

    def poll(self, timeout_s: float = 0.0) -> int:
        """Applies every message that arrives within timeout_s (at least the ones waiting); returns the count."""
        n = 0
        deadline = time.monotonic() + timeout_s
        while True:
            left = max(0.0, deadline - time.monotonic())
            if not self.sock.poll(int(left * 1000)):
                return n
            while True:
                try:
                    frames = self.sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle(frames)
                n += 1
            if time.monotonic() >= deadline:
                return n

    def wait_for(self, seq: int, timeout_s: float = 10.0, replay_after_s: float | None = None) -> None:
        """Polls until batch `seq` is applied. replay_after_s: if it has not arrived live by then,
        fetch the rest through replay (a subscriber that connected after the last batch went out)."""
        deadline = time.monotonic() + timeout_s
        replay_at = None if replay_after_s is None else time.monotonic() + replay_after_s
        while self.applied_seq < seq:
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(f"topic {self.topic!r}: batch {seq} not received within {timeout_s} s "
                                   f"(applied up to {self.applied_seq})")
            if replay_at is not None and now >= replay_at and self.replay_endpoint:
                self.catch_up()
                replay_at = None
                continue
            self.poll(min(0.05, deadline - now))


# ---------------------------------------------------------------------------------------------
# 5. The router's prefix score
# ---------------------------------------------------------------------------------------------

def prefix_match(index: BlockIndex, token_ids, block_size: int, salt: str | None = None) -> tuple[int, str]:
    """(blocks matched, why the walk stopped): 'prompt' (it reached token_ids[:-1]'s last whole
    block), 'chain' (the index holds no child of the last matched block), 'branch' (it holds
    children, none with the prompt's next tokens: the prompt branches off an announced chain)."""
    t = list(token_ids)
    usable = max(0, len(t) - 1) // block_size
    parent = None
    for i in range(usable):
        h = index.lookup(parent, t[i * block_size:(i + 1) * block_size], salt if i == 0 else None)
        if h is None:
            if i == 0:
                roots = any(b.parent is None and b.salt == salt for b in index.blocks.values())
                return 0, "branch" if roots else "chain"
            return i, "branch" if index.children.get(parent) else "chain"
        parent = h
    return usable, "prompt"


def prefix_score(index: BlockIndex, token_ids, block_size: int, salt: str | None = None) -> int:
    """Tokens of `token_ids` a replica with this index serves from its prefix cache: block_size per
    matched block, walking the chain from the root (salted when the request is), counting only
    blocks inside token_ids[:-1] (the last prompt token is always recomputed)."""
    return prefix_match(index, token_ids, block_size, salt)[0] * block_size


# ---------------------------------------------------------------------------------------------
# 6. Command line
# ---------------------------------------------------------------------------------------------

def describe(ev) -> str:
    tag = ev[0]
    if tag == "BlockStored":
        extra = f" extra_keys={ev[8]}" if len(ev) > 8 else ""
        return (f"BlockStored {len(ev[1])} block(s) {ev[1]} parent={ev[2]} tokens={len(ev[3])} "
                f"block_size={ev[4]}{extra}")
    if tag == "BlockRemoved":
        return f"BlockRemoved {len(ev[1])} block(s) {ev[1]}"
    return tag


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Print (and check) a replica's KV-cache events.")
    ap.add_argument("--endpoint", required=True, help="the replica's PUB endpoint, e.g. tcp://127.0.0.1:5557")
    ap.add_argument("--topic", default=None, help="the topic (default: whatever the endpoint publishes)")
    ap.add_argument("--replay", default=None, help="the replica's replay (ROUTER) endpoint")
    ap.add_argument("--block-size", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: run until interrupted)")
    ap.add_argument("--recover-gaps", action="store_true", help="replay missed batches instead of failing")
    args = ap.parse_args(argv)

    def show(b: Batch, live: bool) -> None:
        src = "live" if live else "replay"
        print(f"[{b.topic} #{b.seq} {src} ts={b.ts:.3f}] {len(b.events)} event(s); index {len(sub.index)} blocks")
        for ev in b.events:
            print("   ", describe(ev))
        sys.stdout.flush()

    sub = Subscriber(args.endpoint, args.topic, args.replay, args.block_size, recover_gaps=args.recover_gaps,
                     on_batch=show)
    start = time.monotonic()
    end = start + args.seconds if args.seconds > 0 else None
    replayed = not args.replay
    try:
        while end is None or time.monotonic() < end:
            sub.poll(0.2 if end is None else min(0.2, max(0.0, end - time.monotonic())))
            if not replayed and time.monotonic() - start > 0.3:
                replayed = True
                if sub.applied_seq < 0:  # nothing live yet: what the replica published before we came
                    sub.catch_up()
    except ProtocolError as e:
        print(f"protocol error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
