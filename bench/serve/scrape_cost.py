#!/usr/bin/env python3
"""What scraping /metrics costs the engine: mean step time under a fixed load, with and without a
scraper polling /metrics every 50 ms (as a router's endpoint picker does), interleaved rounds.

  python3 bench/serve/scrape_cost.py [--kiln build/bin/kiln] [--config configs/default.yaml]
      [--model stories260K] [--rounds 4] [--streams 16] [--tokens 256] [--period 0.05]

Mean step time = the rise of kiln_step_seconds_total over the rise of kiln_steps_total during a
round (the engine's own clock, so HTTP and client time do not count). Prints each round and the
ratio of medians; the target is a cost under 2 %.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


def metric(base, name, model):
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    m = re.search(r"^%s\{model=\"%s\"\} ([0-9.eE+-]+)$" % (re.escape(name), re.escape(model)), text, re.M)
    return float(m.group(1)) if m else 0.0


def load(base, model, streams, tokens):
    def one(i):
        body = {"model": model, "prompt": "Once upon a time %d" % i, "max_tokens": tokens, "ignore_eos": True,
                "temperature": 0}
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=600).read()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def round_step_time(base, model, streams, tokens, period):
    stop = threading.Event()
    scrapes = [0]

    def scraper():
        while not stop.is_set():
            urllib.request.urlopen(base + "/metrics", timeout=10).read()
            scrapes[0] += 1
            stop.wait(period)
    t = threading.Thread(target=scraper) if period else None
    s0, n0 = metric(base, "kiln_step_seconds_total", model), metric(base, "kiln_steps_total", model)
    if t:
        t.start()
    load(base, model, streams, tokens)
    stop.set()
    if t:
        t.join()
    s1, n1 = metric(base, "kiln_step_seconds_total", model), metric(base, "kiln_steps_total", model)
    return (s1 - s0) / max(1.0, n1 - n0) * 1e3, scrapes[0]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(repo, "build/bin/kiln"))
    ap.add_argument("--config", default=os.path.join(repo, "configs/default.yaml"))
    ap.add_argument("--model", default="stories260K")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--period", type=float, default=0.05)
    a = ap.parse_args()
    proc = subprocess.Popen([a.kiln, "serve", "--config", a.config, "--port", "0"], stderr=subprocess.PIPE,
                            text=True)
    try:
        base = None
        deadline = time.time() + 120
        while time.time() < deadline and base is None:
            line = proc.stderr.readline()
            if not line:
                break
            m = re.search(r"listening on (http://[0-9.]+:[0-9]+)", line)
            if m:
                base = m.group(1)
        if base is None:
            sys.exit("kiln serve did not start")
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # drain the log
        load(base, a.model, a.streams, 16)  # warm-up: graphs built, caches filled
        plain, scraped = [], []
        print("round  plain ms/step  scraped ms/step  scrapes")
        for r in range(a.rounds):
            order = [(plain, 0.0), (scraped, a.period)] if r % 2 == 0 else [(scraped, a.period), (plain, 0.0)]
            got = {}
            for sink, period in order:
                ms, n = round_step_time(base, a.model, a.streams, a.tokens, period)
                sink.append(ms)
                got[period] = (ms, n)
            print("%5d  %13.3f  %15.3f  %7d" % (r, got[0.0][0], got[a.period][0], got[a.period][1]))
        p, s = statistics.median(plain), statistics.median(scraped)
        print("median step: plain %.3f ms, scraped every %.0f ms %.3f ms: cost %+.1f %% (target < 2 %%)" %
              (p, a.period * 1e3, s, (s / p - 1) * 100))
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
