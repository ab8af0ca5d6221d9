"""Shared pieces of the scale-out tests: the Python modules they need, free ports, `kiln serve`
processes (started in their own process group, always stopped), HTTP and SSE over loopback, and
the YAML configs they write.

Sections:
  1. ensure_modules: exit 77 (ctest's skip) when pyzmq/msgpack are missing from every python3
  2. ports and processes (Proc, Kiln)
  3. HTTP helpers (json_request, stream_chat)
  4. configs (yaml_of, kiln_config)
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

SKIP = 77

# ---------------------------------------------------------------------------------------------
# 1. Modules
# ---------------------------------------------------------------------------------------------

_SYSTEM_PYTHONS = ("/usr/bin/python3", "/bin/python3")


def ensure_modules(*names: str, required: bool = True) -> None:
    """Imports `names`; if one is missing, re-runs this script under the system python3 (where the
    Debian packages python3-zmq and python3-msgpack live), else exits 77 (required) or returns."""
    missing = []
    for n in names:
        try:
            __import__(n)
        except ImportError:
            missing.append(n)
    if not missing:
        return
    if not os.environ.get("KILN_SCALE_REEXEC"):
        for py in _SYSTEM_PYTHONS:
            if os.path.exists(py) and os.path.realpath(py) != os.path.realpath(sys.executable):
                env = dict(os.environ, KILN_SCALE_REEXEC="1")
                env.pop("PYTHONHOME", None)
                env.pop("PYTHONPATH", None)
                sys.stdout.flush()
                os.execve(py, [py] + sys.argv, env)
    if not required:
        return
    print(f"SKIP: python modules missing: {', '.join(missing)} (apt-get install python3-zmq python3-msgpack)")
    sys.exit(SKIP)


# ---------------------------------------------------------------------------------------------
# 2. Ports and processes
# ---------------------------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_run(n: int, tries: int = 50) -> int:
    """A port p with p .. p+n-1 all free on every interface (kiln binds tcp://*:p+i)."""
    for _ in range(tries):
        base = free_port()
        if base + n > 65535:
            continue
        socks = []
        try:
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("0.0.0.0", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no run of {n} free ports")


class Failures:
    """Failures collected (and printed) as a test goes, so one run reports all it finds."""

    def __init__(self):
        self.items: list[str] = []
        self.lock = threading.Lock()

    def add(self, what: str) -> None:
        with self.lock:
            self.items.append(what)
        print(f"FAIL {what}", flush=True)

    def check(self, ok: bool, what: str) -> bool:
        if not ok:
            self.add(what)
        return ok


class Proc:
    """A child process in its own process group; stderr+stdout collected in memory by a thread."""

    def __init__(self, argv: list[str], name: str, cwd: str | None = None, env: dict | None = None):
        self.name = name
        self.argv = argv
        self.log = []
        self._lock = threading.Lock()
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  cwd=cwd, env=env, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in iter(self.p.stdout.readline, b""):
            with self._lock:
                self.log.append(line.decode("utf-8", "replace"))
        self.p.stdout.close()

    def text(self) -> str:
        with self._lock:
            return "".join(self.log)

    def alive(self) -> bool:
        return self.p.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.p.send_signal(sig)

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL of the whole process group after grace_s."""
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if self.wait(grace_s) is None:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.wait(5)
        else:
            try:  # children it may have left behind
                os.killpg(self.p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._reader.join(2)


class Kiln(Proc):
    """`kiln serve --config CONFIG --port 0`, ready once it printed its listening line (wait=False:
    call wait_listening() later, e.g. after starting several)."""

    LISTENING = re.compile(r"kiln serve: listening on http://([^:\s]+):(\d+) \((\d+) models?\)")

    def __init__(self, binary: str, config: str, name: str = "kiln", timeout_s: float = 60.0,
                 extra: list[str] | None = None, wait: bool = True, port: int = 0):
        super().__init__([binary, "serve", "--config", config, "--port", str(port)] + (extra or []), name)
        self.port = None
        self.url = None
        if wait:
            self.wait_listening(timeout_s)

    def wait_listening(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            m = self.LISTENING.search(self.text())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.p.returncode} before listening:\n"
                                   f"{self.text()[-4000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not print its listening line within {timeout_s} s:\n"
                                   f"{self.text()[-4000:]}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"


def stop_all(procs) -> None:
    for p in reversed(list(procs)):
        try:
            p.stop()
        except Exception as e:  # keep stopping the others
            print(f"warning: stopping {getattr(p, 'name', p)}: {e}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# 3. HTTP
# ---------------------------------------------------------------------------------------------

class Response:
    def __init__(self, status: int, headers: dict, body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"HTTP {self.status} {self.body[:300]!r}"


def _split(url: str) -> tuple[str, int, str]:
    m = re.match(r"http://([^:/]+):(\d+)(/.*)?$", url)
    if not m:
        raise ValueError(url)
    return m.group(1), int(m.group(2)), m.group(3) or "/"


def request(method: str, url: str, body=None, headers: dict | None = None, timeout_s: float = 30.0) -> Response:
    host, port, path = _split(url)
    c = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        h = {"Connection": "close"}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        c.close()


def get(url: str, timeout_s: float = 10.0, headers: dict | None = None) -> Response:
    return request("GET", url, None, headers, timeout_s)


def post(url: str, body, headers: dict | None = None, timeout_s: float = 60.0) -> Response:
    return request("POST", url, body, headers, timeout_s)


class Stream:
    """A streamed chat completion read in a thread: its SSE `data:` events, in order."""

    def __init__(self, url: str, body: dict, headers: dict | None = None, timeout_s: float = 60.0):
        self.events: list = []
        self.status = None
        self.error = None
        self.done = threading.Event()
        self.first = threading.Event()
        self._t = threading.Thread(target=self._run, args=(url, body, headers or {}, timeout_s), daemon=True)
        self._t.start()

    def _run(self, url, body, headers, timeout_s):
        host, port, path = _split(url)
        c = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
            h.update(headers)
            c.request("POST", path, body=json.dumps(dict(body, stream=True)).encode(), headers=h)
            r = c.getresponse()
            self.status = r.status
            if r.status != 200:
                self.error = f"HTTP {r.status}: {r.read()[:300]!r}"
                return
            for raw in r:
                line = raw.decode().rstrip("\r\n")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                self.events.append(data)
                self.first.set()
                if data == "[DONE]":
                    break
        except Exception as e:  # reported by the test that reads the stream
            self.error = f"{type(e).__name__}: {e}"
        finally:
            c.close()
            self.first.set()
            self.done.set()

    def wait(self, timeout_s: float) -> bool:
        return self.done.wait(timeout_s)

    def chunks(self) -> list[dict]:
        return [json.loads(e) for e in self.events if e != "[DONE]"]

    def text(self) -> str:
        out = []
        for ch in self.chunks():
            for c in ch.get("choices", []):
                d = c.get("delta", {})
                out.append(d.get("content") or "")
                out.append(d.get("reasoning_content") or "")
        return "".join(out)

    def finish_reason(self):
        fr = None
        for ch in self.chunks():
            for c in ch.get("choices", []):
                fr = c.get("finish_reason") or fr
        return fr


# ---------------------------------------------------------------------------------------------
# 4. Configs
# ---------------------------------------------------------------------------------------------

def _scalar(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(str(v))  # a JSON string is a YAML double-quoted scalar


def yaml_of(v, indent: int = 0) -> str:
    """Block-style YAML of dicts, lists and scalars (what kiln's config reader expects)."""
    pad = " " * indent
    out = []
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{k}:\n{yaml_of(x, indent + 2)}")
            elif isinstance(x, dict):
                out.append(f"{pad}{k}: {{}}\n")
            elif isinstance(x, list):
                out.append(f"{pad}{k}: []\n")
            else:
                out.append(f"{pad}{k}: {_scalar(x)}\n")
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, dict) and x:
                body = yaml_of(x, indent + 2)
                out.append(f"{pad}- {body[indent + 2:]}")
            else:
                out.append(f"{pad}- {_scalar(x)}\n")
    return "".join(out)


def write_config(path: str, cfg: dict) -> str:
    with open(path, "w") as f:
        f.write("# written by tests/scale\n" + yaml_of(cfg))
    return path


def wait_until(pred, timeout_s: float, interval_s: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s} s")
        time.sleep(interval_s)
