#!/usr/bin/env python3
"""Unit tests of kv_subscriber.py against a fake publisher (pyzmq + msgpack, no kiln): valid
streams are accepted and indexed, every protocol violation is rejected with a ProtocolError that
names it, replay and late joining work, and the prefix score follows the contract.

  python3 tests/scale/test_kv_protocol.py [-v]     (exit 0: pass; 77: pyzmq/msgpack missing)
"""
from __future__ import annotations

import os
import struct
import sys
import threading
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.ensure_modules("zmq", "msgpack")
import msgpack  # noqa: E402
import zmq  # noqa: E402

import kv_subscriber as kv  # noqa: E402

B = 4  # block size of the fake streams
TOPIC = "kv@127.0.0.1:8000@fake"


# ---------------------------------------------------------------------------------------------
# Event builders and the fake publisher
# ---------------------------------------------------------------------------------------------

def stored(hashes, parent, tokens, salt=None, extra=None, bs=B):
    ev = ["BlockStored", list(hashes), parent, list(tokens), bs, None, "GPU", None]
    if extra is not None:
        ev.append(extra)
    elif salt is not None:
        ev.append([[salt]] + [None] * (len(hashes) - 1))
    return ev


def removed(hashes):
    return ["BlockRemoved", list(hashes), "GPU"]


CLEARED = ["AllBlocksCleared"]


def payload(events, ts=None, dp=0, single_float=False) -> bytes:
    return msgpack.packb([time.time() if ts is None else ts, events, dp], use_single_float=single_float)


class FakePublisher:
    """An XPUB (so it knows when a subscriber has joined) plus a replay ROUTER served by a thread,
    both on 127.0.0.1 with ports picked by ZMQ; keeps every batch it sent for replay."""

    def __init__(self, topic: str = TOPIC, drop_before: int = 0):
        self.ctx = zmq.Context.instance()
        self.topic = topic
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.buffer: list[tuple[int, bytes]] = []
        self.drop_before = drop_before  # replay buffer lost batches below this
        self.seq = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        router = self.ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        rport = router.bind_to_random_port("tcp://127.0.0.1")
        self.replay_endpoint = f"tcp://127.0.0.1:{rport}"
        self.replay_override = None  # a function (from_seq) -> list of frame lists, for broken replies
        self.thread = threading.Thread(target=self._serve, args=(router,), daemon=True)
        self.thread.start()

    def _serve(self, router):
        try:
            while not self.stop.is_set():
                if not router.poll(50):
                    continue
                ident, empty, seqb = router.recv_multipart()
                start = struct.unpack(">Q", seqb)[0]
                if self.replay_override:
                    for frames in self.replay_override(start):
                        router.send_multipart([ident] + frames)
                    continue
                with self.lock:
                    items = [(s, p) for s, p in self.buffer if s >= start and s >= self.drop_before]
                for s, p in items:
                    router.send_multipart([ident, b"", self.topic.encode(), struct.pack(">Q", s), p])
                router.send_multipart([ident, b"", b"", struct.pack(">q", -1), b""])
        finally:
            router.close(0)

    def wait_subscriber(self, timeout_s: float = 5.0) -> None:
        if not self.pub.poll(int(timeout_s * 1000)):
            raise TimeoutError("no subscriber joined")
        msg = self.pub.recv()
        assert msg[:1] == b"\x01", msg

    def send(self, events=None, *, raw=None, seq=None, topic=None, frames=None, record=True):
        """Publishes one batch (next seq unless given); returns its seq."""
        s = self.seq if seq is None else seq
        p = payload(events) if raw is None else raw
        if frames is None:
            frames = [(self.topic if topic is None else topic).encode(), struct.pack(">Q", s), p]
        self.pub.send_multipart(frames)
        if record:
            with self.lock:
                self.buffer.append((s, p))
        if seq is None:
            self.seq += 1
        return s

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.pub.close(0)


def drain(sub: kv.Subscriber, upto: int | None = None, timeout_s: float = 3.0) -> None:
    """Polls until batch `upto` is applied (or, without upto, for a short while)."""
    if upto is None:
        sub.poll(0.2)
    else:
        sub.wait_for(upto, timeout_s)


# A valid stream: two chains, a salted chain, removals leaf first, a reset, then more.
CHAIN_A = list(range(1, 13))  # three blocks
CHAIN_B = CHAIN_A[:4] + [50, 51, 52, 53]  # shares the first block with A
SALTED = CHAIN_A[:8]


def valid_batches():
    return [
        [CLEARED],
        [stored([11, 12, 13], None, CHAIN_A)],
        [stored([24], 11, CHAIN_B[4:8])],
        [stored([31, 32], None, SALTED, salt="s1"), removed([13])],
        [removed([24, 12])],
    ]


class Fixture(unittest.TestCase):
    def setUp(self):
        self.pub = FakePublisher()
        self.subs = []

    def tearDown(self):
        for s in self.subs:
            s.close()
        self.pub.close()

    def subscribe(self, replay=True, **kw) -> kv.Subscriber:
        sub = kv.Subscriber(self.pub.endpoint, TOPIC, self.pub.replay_endpoint if replay else None, **kw)
        self.subs.append(sub)
        self.pub.wait_subscriber()
        time.sleep(0.05)  # the subscription reaches the XPUB before the SUB's filter is active on its side
        return sub

    def expect_error(self, sub, needle: str, upto=None):
        with self.assertRaises(kv.ProtocolError) as cm:
            drain(sub, upto)
            sub.poll(0.3)
        self.assertIn(needle, str(cm.exception))
        return cm.exception

    def send_all(self, batches):
        for b in batches:
            self.pub.send(b)


# ---------------------------------------------------------------------------------------------
# Valid streams
# ---------------------------------------------------------------------------------------------

class ValidStreams(Fixture):
    def test_valid_stream_is_indexed(self):
        sub = self.subscribe(replay=False)
        self.send_all(valid_batches())
        drain(sub, 4)
        self.assertEqual(sub.applied_seq, 4)
        self.assertEqual(sub.batches_live, 5)
        self.assertEqual(set(sub.index.blocks), {11, 31, 32})
        self.assertEqual(sub.index.blocks[11], kv.Block(None, (1, 2, 3, 4), None))
        self.assertEqual(sub.index.blocks[31], kv.Block(None, (1, 2, 3, 4), "s1"))
        self.assertEqual(sub.index.blocks[32], kv.Block(31, (5, 6, 7, 8), None))

    def test_reset_then_restore(self):
        sub = self.subscribe(replay=False)
        self.send_all(valid_batches() + [[CLEARED], [stored([11], None, CHAIN_A[:4])]])
        drain(sub, 6)
        self.assertEqual(set(sub.index.blocks), {11})

    def test_large_hashes_and_extra_keys_with_nils(self):
        sub = self.subscribe(replay=False)
        big = (1 << 64) - 1
        self.send_all([[CLEARED], [stored([big, 7], None, CHAIN_A[:8], extra=[None, None])]])
        drain(sub, 1)
        self.assertEqual(sub.index.blocks[7].parent, big)

    def test_topic_learned_when_not_given(self):
        sub = kv.Subscriber(self.pub.endpoint)
        self.subs.append(sub)
        self.pub.wait_subscriber()
        time.sleep(0.05)
        self.send_all(valid_batches()[:2])
        drain(sub, 1)
        self.assertEqual(sub.topic, TOPIC)

    def test_empty_batch_is_allowed(self):
        sub = self.subscribe(replay=False)
        self.send_all([[CLEARED], []])
        drain(sub, 1)


# ---------------------------------------------------------------------------------------------
# Violations
# ---------------------------------------------------------------------------------------------

class Violations(Fixture):
    def check(self, batches, needle, replay=False):
        sub = self.subscribe(replay=replay)
        self.send_all(batches)
        return self.expect_error(sub, needle, upto=len(batches) - 1)

    def test_gap_in_seq(self):
        sub = self.subscribe(replay=False)
        self.pub.send([CLEARED])
        self.pub.send([stored([11], None, CHAIN_A[:4])], seq=2)
        self.expect_error(sub, "seq 2 arrived when 1 was due", upto=2)

    def test_gap_mid_stream_even_with_replay(self):
        sub = self.subscribe(replay=True)
        self.pub.send([CLEARED])
        drain(sub, 0)
        self.pub.seq = 2
        self.pub.send([stored([11], None, CHAIN_A[:4])])
        self.expect_error(sub, "batches 1..1 missing", upto=1)

    def test_repeated_seq(self):
        sub = self.subscribe(replay=False)
        self.pub.send([CLEARED])
        self.pub.send([stored([11], None, CHAIN_A[:4])])
        self.pub.send([stored([12], 11, CHAIN_A[4:8])], seq=1)
        self.expect_error(sub, "seq 1 arrived after 1")

    def test_missing_start_without_replay(self):
        sub = self.subscribe(replay=False)
        self.pub.send([CLEARED], seq=3)
        self.expect_error(sub, "no replay endpoint")

    def test_first_batch_without_clear(self):
        self.check([[stored([11], None, CHAIN_A[:4])]], "first batch must hold AllBlocksCleared")

    def test_child_before_parent(self):
        self.check([[CLEARED], [stored([12], 11, CHAIN_A[4:8])]], "stored before its parent 11")

    def test_parent_removed(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])], [removed([11])], [stored([12], 11, CHAIN_A[4:8])]],
                   "stored before its parent 11")

    def test_duplicate_store(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])], [stored([11], None, CHAIN_A[:4])]],
                   "stored twice")

    def test_duplicate_within_event(self):
        self.check([[CLEARED], [stored([11, 11], None, CHAIN_A[:8])]], "stored twice")

    def test_wrong_token_count(self):
        self.check([[CLEARED], [stored([11, 12], None, CHAIN_A[:7])]], "7 token_ids for 2 blocks of 4")

    def test_remove_unknown(self):
        self.check([[CLEARED], [removed([99])]], "BlockRemoved of block 99, which is not stored")

    def test_remove_after_clear(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])], [CLEARED], [removed([11])]],
                   "which is not stored")

    def test_remove_parent_before_child(self):
        self.check([[CLEARED], [stored([11, 12], None, CHAIN_A[:8])], [removed([11, 12])]],
                   "children [12] are still stored")

    def test_salt_on_child_block(self):
        self.check([[CLEARED], [stored([11, 12], None, CHAIN_A[:8], extra=[None, ["s"]])]],
                   "not a chain's first block")

    def test_salt_on_block_with_parent(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])], [stored([12], 11, CHAIN_A[4:8], salt="s")]],
                   "not a chain's first block")

    def test_extra_keys_length(self):
        self.check([[CLEARED], [stored([11, 12], None, CHAIN_A[:8], extra=[["s"]])]], "one entry per block")

    def test_extra_keys_shape(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4], extra=[[1, 2]])]], "expected [salt string]")

    def test_same_content_other_hash(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])], [removed([11])], [stored([77], None, CHAIN_A[:4])]],
                   "earlier gave hash 11")

    def test_same_hash_other_content(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])], [removed([11])], [stored([11], None, CHAIN_B[4:8])]],
                   "announced for different contents")

    def test_same_content_two_live_hashes(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4]), stored([77], None, CHAIN_A[:4])]],
                   "same (parent, tokens, salt) as live block 11")

    def test_unknown_tag(self):
        self.check([[CLEARED], [["BlockEvicted", [11], "GPU"]]], "unknown event tag 'BlockEvicted'")

    def test_stored_field_count(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])[:7]]], "BlockStored has 7 fields")

    def test_removed_field_count(self):
        self.check([[CLEARED], [["BlockRemoved", [11]]]], "BlockRemoved has 2 fields")

    def test_cleared_field_count(self):
        self.check([[["AllBlocksCleared", 1]]], "AllBlocksCleared has 2 fields")

    def test_medium(self):
        ev = stored([11], None, CHAIN_A[:4])
        ev[6] = "CPU"
        self.check([[CLEARED], [ev]], "medium is 'CPU'")

    def test_lora_id(self):
        ev = stored([11], None, CHAIN_A[:4])
        ev[5] = 3
        self.check([[CLEARED], [ev]], "lora_id is 3")

    def test_block_size_changes(self):
        self.check([[CLEARED], [stored([11], None, CHAIN_A[:4])], [stored([21], None, CHAIN_A[:8], bs=8)]],
                   "block_size 8 differs")

    def test_negative_hash(self):
        self.check([[CLEARED], [stored([-5], None, CHAIN_A[:4])]], "not an unsigned 64-bit integer")

    def test_string_hash(self):
        self.check([[CLEARED], [stored([b"\x01" * 8], None, CHAIN_A[:4])]], "not an unsigned 64-bit integer")

    def test_wrong_topic(self):
        sub = self.subscribe(replay=False)
        self.pub.send([CLEARED], topic=TOPIC + "x")  # the SUB filter is a prefix: this one gets through
        self.expect_error(sub, "expected 'kv@127.0.0.1:8000@fake'")

    def test_two_frames(self):
        sub = self.subscribe(replay=False)
        self.pub.send(frames=[TOPIC.encode(), payload([CLEARED])], record=False)
        self.expect_error(sub, "2 frames, expected 3")

    def test_short_seq_frame(self):
        sub = self.subscribe(replay=False)
        self.pub.send(frames=[TOPIC.encode(), b"\0\0\0\0", payload([CLEARED])], record=False)
        self.expect_error(sub, "4 bytes, expected 8")

    def test_payload_not_msgpack(self):
        sub = self.subscribe(replay=False)
        self.pub.send(raw=b"\xc1")
        self.expect_error(sub, "not valid msgpack")

    def test_payload_two_elements(self):
        sub = self.subscribe(replay=False)
        self.pub.send(raw=msgpack.packb([time.time(), [CLEARED]]))
        self.expect_error(sub, "3-element array")

    def test_payload_float32_ts(self):
        sub = self.subscribe(replay=False)
        self.pub.send(raw=payload([CLEARED], single_float=True))
        self.expect_error(sub, "float64")

    def test_payload_int_ts(self):
        sub = self.subscribe(replay=False)
        self.pub.send(raw=msgpack.packb([int(time.time()), [CLEARED], 0]))
        self.expect_error(sub, "float64")

    def test_payload_dp_rank(self):
        sub = self.subscribe(replay=False)
        self.pub.send(raw=payload([CLEARED], dp=1))
        self.expect_error(sub, "data_parallel_rank must be 0")

    def test_payload_ts_in_ms(self):
        sub = self.subscribe(replay=False)
        self.pub.send(raw=payload([CLEARED], ts=time.time() * 1000))
        self.expect_error(sub, "not seconds since the epoch")


# ---------------------------------------------------------------------------------------------
# Replay
# ---------------------------------------------------------------------------------------------

class Replay(Fixture):
    def test_replay_function(self):
        for b in valid_batches():
            self.pub.send(b)
        got = kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 2, TOPIC)
        self.assertEqual([b.seq for b in got], [2, 3, 4])
        self.assertEqual(kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 9, TOPIC), [])

    def test_replay_into_fresh_index_reproduces_live(self):
        sub = self.subscribe(replay=False)
        self.send_all(valid_batches())
        drain(sub, 4)
        fresh = kv.BlockIndex()
        for b in kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 0, TOPIC):
            for i, ev in enumerate(b.events):
                fresh.apply_event(ev, f"replay seq {b.seq} event {i}")
        self.assertEqual(fresh.blocks, sub.index.blocks)

    def test_late_join_catches_up(self):
        batches = valid_batches()
        for b in batches[:3]:
            self.pub.send(b)  # nobody listens: these are gone from the PUB side
        sub = self.subscribe(replay=True)
        self.pub.send(batches[3])
        drain(sub, 3)
        self.pub.send(batches[4])
        drain(sub, 4)
        self.assertEqual(sub.batches_replayed, 4)  # 0..3 (3 was also buffered when the replay ran)
        self.assertEqual(sub.batches_live, 1)
        self.assertEqual(set(sub.index.blocks), {11, 31, 32})

    def test_late_join_idle_publisher(self):
        self.send_all(valid_batches())
        sub = self.subscribe(replay=True)
        sub.wait_for(4, timeout_s=3, replay_after_s=0.2)
        self.assertEqual(sub.batches_replayed, 5)
        self.pub.send([stored([12], 11, CHAIN_A[4:8])])
        drain(sub, 5)
        self.assertEqual(sub.batches_live, 1)

    def test_recover_gaps_real_loss(self):
        sub = self.subscribe(replay=True, recover_gaps=True)
        self.pub.send([CLEARED])
        drain(sub, 0)
        with self.pub.lock:
            self.pub.buffer.append((1, payload([stored([11], None, CHAIN_A[:4])])))
        self.pub.seq = 2
        self.pub.send([stored([12], 11, CHAIN_A[4:8])])
        drain(sub, 2)
        self.assertEqual(sub.replays, 1)
        self.assertEqual(set(sub.index.blocks), {11, 12})

    def test_replay_lost_batches(self):
        self.pub.drop_before = 2
        self.send_all(valid_batches())
        sub = self.subscribe(replay=True)
        self.pub.send([stored([12], 11, CHAIN_A[4:8])])
        self.expect_error(sub, "no longer holds the batches")

    def test_replay_whatever_is_buffered(self):
        self.pub.drop_before = 2
        self.send_all(valid_batches())
        got = kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 0, TOPIC, exact_start=False)
        self.assertEqual([b.seq for b in got], [2, 3, 4])

    def test_replay_differs_from_live(self):
        self.pub.send([CLEARED])
        sub = self.subscribe(replay=True)
        # the buffer says one thing, the live stream another for the same seq
        with self.pub.lock:
            self.pub.buffer.append((1, payload([stored([11], None, CHAIN_A[:4])])))
        self.pub.send([stored([11], None, CHAIN_A[:4]), stored([12], 11, CHAIN_A[4:8])], record=False)
        self.expect_error(sub, "differs from the replayed one")

    def test_replay_without_end_marker(self):
        self.pub.replay_override = lambda start: [[b"", TOPIC.encode(), struct.pack(">Q", start), payload([CLEARED])]]
        with self.assertRaises(kv.ProtocolError) as cm:
            kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 0, TOPIC, timeout_s=0.5)
        self.assertIn("no end marker", str(cm.exception))

    def test_replay_bad_end_marker(self):
        self.pub.replay_override = lambda start: [[b"", b"", struct.pack(">q", -1), b"x"]]
        with self.assertRaises(kv.ProtocolError) as cm:
            kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 0, TOPIC)
        self.assertIn("not the end marker", str(cm.exception))

    def test_replay_old_format(self):
        """vLLM before the topic frame (and SGLang): [b"", seq, payload], end [b"", -1, b""]."""
        self.pub.replay_override = lambda start: [[b"", struct.pack(">Q", start), payload([CLEARED])],
                                                  [b"", struct.pack(">q", -1), b""]]
        with self.assertRaises(kv.ProtocolError) as cm:
            kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 0, TOPIC)
        self.assertIn("3 frames", str(cm.exception))

    def test_replay_wrong_topic(self):
        self.pub.replay_override = lambda start: [[b"", b"other", struct.pack(">Q", start), payload([CLEARED])],
                                                  [b"", b"", struct.pack(">q", -1), b""]]
        with self.assertRaises(kv.ProtocolError) as cm:
            kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 0, TOPIC)
        self.assertIn("a reply on topic 'other'", str(cm.exception))

    def test_replay_missing_delimiter(self):
        self.pub.replay_override = lambda start: [[TOPIC.encode(), struct.pack(">Q", start), payload([CLEARED]), b""]]
        with self.assertRaises(kv.ProtocolError) as cm:
            kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 0, TOPIC, timeout_s=1)
        self.assertIn("expected [b'', topic, seq, payload]", str(cm.exception))

    def test_replay_out_of_order(self):
        self.pub.replay_override = lambda start: [[b"", TOPIC.encode(), struct.pack(">Q", 1), payload([CLEARED])],
                                                  [b"", TOPIC.encode(), struct.pack(">Q", 0), payload([CLEARED])],
                                                  [b"", b"", struct.pack(">q", -1), b""]]
        with self.assertRaises(kv.ProtocolError) as cm:
            kv.replay(zmq.Context.instance(), self.pub.replay_endpoint, 1, TOPIC)
        self.assertIn("reply has seq 0, expected 2", str(cm.exception))


# ---------------------------------------------------------------------------------------------
# Prefix score
# ---------------------------------------------------------------------------------------------

class Score(unittest.TestCase):
    def setUp(self):
        self.ix = kv.BlockIndex(B)
        for i, ev in enumerate([CLEARED, stored([11, 12, 13], None, CHAIN_A), stored([24], 11, CHAIN_B[4:8]),
                                stored([31, 32], None, SALTED, salt="s1")]):
            self.ix.apply_event(ev, f"event {i}")

    def test_full_chain_needs_one_more_token(self):
        self.assertEqual(kv.prefix_score(self.ix, CHAIN_A, B), 8)  # the last block holds the last token
        self.assertEqual(kv.prefix_score(self.ix, CHAIN_A + [99], B), 12)

    def test_branches(self):
        self.assertEqual(kv.prefix_score(self.ix, CHAIN_B + [0], B), 8)
        self.assertEqual(kv.prefix_score(self.ix, CHAIN_A[:4] + [9, 9, 9, 9, 9], B), 4)
        self.assertEqual(kv.prefix_score(self.ix, [0] * 20, B), 0)
        self.assertEqual(kv.prefix_score(self.ix, [], B), 0)

    def test_salt_separates(self):
        self.assertEqual(kv.prefix_score(self.ix, SALTED + [0], B, salt="s1"), 8)
        self.assertEqual(kv.prefix_score(self.ix, SALTED + [0], B, salt="s2"), 0)
        self.assertEqual(kv.prefix_score(self.ix, CHAIN_A + [0], B, salt="s1"), 8)  # only 31, 32 are salted

    def test_partial_block_not_counted(self):
        self.assertEqual(kv.prefix_score(self.ix, CHAIN_A[:6], B), 4)


class CommandLine(Fixture):
    def test_cli_prints_events(self):
        import subprocess
        here = os.path.dirname(os.path.abspath(__file__))
        p = subprocess.Popen([sys.executable, os.path.join(here, "kv_subscriber.py"), "--endpoint", self.pub.endpoint,
                              "--topic", TOPIC, "--seconds", "1.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        try:
            self.pub.wait_subscriber(5)
            time.sleep(0.1)
            self.send_all(valid_batches()[:2])
            out, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        text = out.decode()
        self.assertEqual(p.returncode, 0, err.decode())
        self.assertIn("#0 live", text)
        self.assertIn("AllBlocksCleared", text)
        self.assertIn("BlockStored 3 block(s) [11, 12, 13] parent=None tokens=12", text)


if __name__ == "__main__":
    # ctest passes --kiln/--repo to every scale test; this one needs neither.
    argv = [a for i, a in enumerate(sys.argv)
            if not (a in ("--kiln", "--repo") or (i > 0 and sys.argv[i - 1] in ("--kiln", "--repo")))]
    unittest.main(argv=argv)
