#!/usr/bin/env python3
"""Hostile and careless clients against a running vllm-srun worker.

    tests/hostile/hostile.py --port 8100 [--host 127.0.0.1] [--pid PID] [--scale ci|soak]
                             [--request-timeout 30] [--per-client-cap 256] [--only PHASE,...]

Phases: slow (slowloris headers, slow bodies, the per-client cap), amplification (a large state
with many questions, several at once), framing (bad Content-Length, chunked garbage, ...),
headers (huge headers), paths (path junk, made-up paths with huge Content-Length, refusals a
client must see whole), burst (far past the queue), disconnect (clients that leave mid-forward),
metrics (the exposition parses with Prometheus' own parser, its size is bounded), memory (RSS
back to its starting level; needs --pid, the worker on this host).

Throughout, a monitor asks GET /health every 50 ms on a fresh connection: every answer must be
200 within 100 ms. Every request the worker accepted must be answered (the 200s the clients saw
equal the worker's count), answers under load equal the same request alone, and the queue
drains to 0. Prints `ok ...` / `FAIL ...` lines and exits 1 on any failure.
Needs only Python 3's standard library, plus prometheus_client for the metrics phase
(Debian: python3-prometheus-client); without it that phase fails, saying why.
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import multiprocessing as mp
import os
import re
import socket
import sys
import threading
import time

GOLDEN = {
    "state": "Write a Python function that merges two sorted lists and explain its running time.",
    "questions": {
        "domain": {"type": "choice", "instructions": "Which domain does this request belong to?",
                   "criteria": {"code": "Programming", "math": "Mathematics", "other": "Anything else"}},
        "reasoning": {"type": "noul", "instructions": "Does answering this request need multi-step reasoning?"},
        "difficulty": {"type": "score", "instructions": "How difficult is this request?",
                       "criteria": ["Trivial", "Moderate", "Hard"]},
    },
}

SCALES = {
    # slow: slow clients held at once; junk: path-junk requests; burst: requests in the burst
    "ci": dict(slow=1030, amp_kb=200, amp_q=64, amp_parallel=4, junk=300, burst=600, burst_conc=64,
               disconnects=6, rounds=1),
    "soak": dict(slow=1030, amp_kb=512, amp_q=256, amp_parallel=13, junk=3000, burst=5000,
                 burst_conc=128, disconnects=40, rounds=5),
}

failures = []


def ok(msg):
    print("ok   " + msg, flush=True)


def bad(msg):
    print("FAIL " + msg, flush=True)
    failures.append(msg)


def check(cond, msg):
    (ok if cond else bad)(msg)
    return cond


class Worker:
    def __init__(self, host, port, pid):
        self.host, self.port, self.pid = host, port, pid

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()

    def decide(self, doc, timeout=120):
        return self.request("POST", "/v1/decisions", json.dumps(doc).encode(),
                            {"Content-Type": "application/json"}, timeout)

    def metrics(self):
        st, _, b = self.request("GET", "/metrics")
        return b.decode("utf-8", "replace") if st == 200 else ""

    def rss(self, field="VmRSS"):
        if not self.pid:
            return None
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None


def counter(text, name, **labels):
    """The value of one sample (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name + "{" + want + "}") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class HealthMonitor:
    """GET /health every 50 ms on a fresh connection, from a separate process (so the clients'
    own threads do not delay the probe); records every slow or failed answer, by phase."""

    def __init__(self, w, limit=0.1):
        self.w, self.limit = w, limit
        self.ctx = mp.get_context("fork")
        self._phase = self.ctx.Array("c", 32)
        self.stop_ev = self.ctx.Event()
        self.parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=self._run, args=(child,), daemon=True)
        self.n, self.worst, self.slow = 0, 0.0, []

    @property
    def phase(self):
        return self._phase.value.decode()

    @phase.setter
    def phase(self, p):
        self._phase.value = p.encode()[:31]

    def start(self):
        self.proc.start()

    def _run(self, conn):
        n, worst, slow = 0, 0.0, []
        while not self.stop_ev.is_set():
            t0 = time.monotonic()
            try:
                s = socket.create_connection((self.w.host, self.w.port), timeout=2)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    d = s.recv(4096)
                    if not d:
                        break
                    data += d
                s.close()
                status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else 0
            except OSError as e:
                status = str(e)
            dt = time.monotonic() - t0
            n += 1
            worst = max(worst, dt)
            if status != 200 or dt > self.limit:
                slow.append((self.phase, status, round(dt * 1e3, 1)))
            self.stop_ev.wait(max(0.0, 0.05 - dt))
        conn.send((n, worst, slow))

    def finish(self):
        self.stop_ev.set()
        self.n, self.worst, self.slow = self.parent.recv()
        self.proc.join()

    def report(self):
        check(self.n > 0 and not self.slow,
              f"/health answered 200 within {self.limit * 1e3:.0f} ms throughout: {self.n} probes, "
              f"worst {self.worst * 1e3:.1f} ms" + (f"; {len(self.slow)} not: {self.slow[:8]}" if self.slow else ""))


def raw(w, data, timeout, src=None, shut_wr=False):
    """Sends bytes, reads until the worker closes or `timeout`. Returns (status or None, text, closed)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if src:
        s.bind((src, 0))
    try:
        s.connect((w.host, w.port))
        s.sendall(data)
        if shut_wr:
            s.shutdown(socket.SHUT_WR)
        got, closed = b"", False
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not d:
                closed = True
                break
            got += d
            m = re.match(rb"HTTP/1\.[01] (\d+)[^\r]*\r\n(.*?)\r\n\r\n", got, re.S)
            if m:
                cl = re.search(rb"(?i)content-length: *(\d+)", m.group(2))
                if cl and len(got) >= m.end() + int(cl.group(1)):
                    break
        m = re.match(rb"HTTP/1\.[01] (\d+)", got)
        return (int(m.group(1)) if m else None), got.decode("latin-1"), closed
    except OSError as e:
        return None, str(e), True
    finally:
        s.close()


# ---------------------------------------------------------------- phases

def phase_slow(w, a, sc, mon):
    """Slowloris headers and slow bodies, each dribbling a byte a second: held at once, /health
    stays fast, and each is cut at the whole-request deadline, not later."""
    mon.phase = "slow"
    loop = w.host.startswith("127.")
    per_src = 200 if loop else max(1, a.per_client_cap - 8)
    n = sc["slow"] if loop else min(sc["slow"], per_src)
    socks = []
    t0 = time.monotonic()
    for i in range(n):
        src = f"127.0.0.{2 + i // per_src}" if loop else None
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(True)
        s.settimeout(5)
        if src:
            s.bind((src, 0))
        try:
            s.connect((w.host, w.port))
            if i % 2 == 0:  # headers that never end
                s.sendall(b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nX-Slow: ")
            else:  # whole headers, then a body a byte at a time
                s.sendall(b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100000\r\n\r\n{")
            s.setblocking(False)
            socks.append([s, None])
        except OSError as e:
            bad(f"slow client {i} could not connect: {e}")
            s.close()
            break
    ok(f"{len(socks)} slow clients connected in {time.monotonic() - t0:.1f} s")
    # the per-client cap: from one more address, cap + 40 connections; the surplus is closed at once
    extra = []
    if loop and a.per_client_cap > 0:
        for i in range(a.per_client_cap + 40):
            s = socket.socket()
            s.bind(("127.0.0.250", 0))
            s.settimeout(5)
            try:
                s.connect((w.host, w.port))
                s.setblocking(False)
                extra.append(s)
            except OSError:
                s.close()
    t_start = time.monotonic()
    deadline = a.request_timeout
    while time.monotonic() - t_start < deadline + 3:
        now = time.monotonic()
        for ent in socks:
            s, closed_at = ent
            if closed_at is not None:
                continue
            try:
                if s.recv(4096) == b"":
                    ent[1] = now - t_start
                    continue
            except BlockingIOError:
                pass
            except OSError:
                ent[1] = now - t_start
                continue
            try:
                s.send(b"a")
            except BlockingIOError:
                pass
            except OSError:
                ent[1] = now - t_start
        if extra and 1.0 < now - t_start < 2.2:
            closed = 0
            for s in extra:
                try:
                    if s.recv(1) == b"":
                        closed += 1
                except BlockingIOError:
                    pass
                except OSError:
                    closed += 1
            if now - t_start > 2.0:
                check(closed >= 40 and closed <= 44,
                      f"per-client cap {a.per_client_cap}: of {len(extra)} connections from one address, "
                      f"{closed} were closed at once")
                for s in extra:
                    s.close()
                extra = []
        time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
    early = sum(1 for _, c in socks if c is not None and c < deadline - 1.5)
    late = sum(1 for _, c in socks if c is None)
    check(early == 0, f"no slow client cut before the {deadline} s deadline ({early} were)")
    check(late == 0, f"every slow client cut by the deadline + 3 s ({late} still open)")
    for s, _ in socks:
        s.close()
    for s in extra:
        s.close()


def phase_amplification(w, a, sc, mon):
    mon.phase = "amplification"
    words = sc["amp_kb"] * 1024 // 6
    doc = {"state": "token " * words,
           "questions": {f"q{i}": {"type": "noul", "instructions": f"Is this about topic {i}?"}
                         for i in range(sc["amp_q"])}}
    body = json.dumps(doc).encode()
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(sc["amp_parallel"]) as ex:
        res = list(ex.map(lambda _: w.request("POST", "/v1/decisions", body,
                                              {"Content-Type": "application/json"}, 300),
                          range(sc["amp_parallel"])))
    dt = time.monotonic() - t0
    sts = sorted(set(r[0] for r in res))
    check(all(r[0] in (200, 400, 413, 429) for r in res),
          f"{sc['amp_parallel']} bodies of {len(body) >> 10} KiB with {sc['amp_q']} questions at once: "
          f"statuses {sts} in {dt:.1f} s")
    for st, _, b in res:
        if st == 200:
            ans = json.loads(b)["answers"]
            check(len(ans) == sc["amp_q"], f"a 200 answers every question ({len(ans)} of {sc['amp_q']})")
            break
    hw = w.rss("VmHWM")
    if hw:
        ok(f"worker peak RSS so far {hw >> 20} MiB")


FRAMING = [
    ("bad Content-Length", b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: abc\r\n\r\n{}", False),
    ("negative Content-Length", b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: -1\r\n\r\n{}", False),
    ("overflowing Content-Length",
     b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: 99999999999999999999999\r\n\r\n{}", False),
    ("two Content-Lengths", b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: 2\r\nContent-Length: 7\r\n\r\n{}", False),
    ("chunked garbage", b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", False),
    ("huge chunk size",
     b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n{}\r\n", False),
    ("chunked and Content-Length",
     b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", False),
    ("body shorter than Content-Length, then EOF",
     b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: 500\r\n\r\n{\"state\":", True),
    ("garbage request line", b"GARBAGE\x00\x01\r\n\r\n", False),
    ("HTTP/0.9 request", b"GET /health\r\n\r\n", False),
    ("header without a colon", b"GET /health HTTP/1.1\r\nHost: w\r\nNoColonHere\r\n\r\n", False),
    ("unknown HTTP version", b"GET /health HTTP/7.3\r\nHost: w\r\n\r\n", False),
    ("NUL in the path", b"GET /hea\x00lth HTTP/1.1\r\nHost: w\r\n\r\n", False),
]


def phase_framing(w, a, sc, mon):
    mon.phase = "framing"
    for name, data, shut in FRAMING:
        t0 = time.monotonic()
        st, text, closed = raw(w, data, a.request_timeout + 3, shut_wr=shut)
        dt = time.monotonic() - t0
        good = ((st is None and closed) or (st is not None and 400 <= st < 500) or st == 505
                or (st == 200 and b"health" in data))
        check(good and dt < a.request_timeout + 2.5,
              f"bad framing, {name}: {st if st else 'closed' if closed else 'no answer'} in {dt:.2f} s")


def phase_headers(w, a, sc, mon):
    mon.phase = "headers"
    for name, hdrs in [("one 100 KiB header", b"X-Big: " + b"a" * 100000 + b"\r\n"),
                       ("2,000 headers", b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 40) for i in range(2000))),
                       ("a 100 KiB URL", None)]:
        if hdrs is None:
            data = b"GET /" + b"u" * 100000 + b" HTTP/1.1\r\nHost: w\r\n\r\n"
        else:
            data = b"GET /health HTTP/1.1\r\nHost: w\r\n" + hdrs + b"\r\n"
        t0 = time.monotonic()
        st, text, closed = raw(w, data, 10)
        dt = time.monotonic() - t0
        check((st is None and closed) or (st is not None and st in (400, 404, 413, 414, 431)),
              f"huge headers, {name}: {st if st else 'closed'} in {dt:.2f} s")


def phase_paths(w, a, sc, mon):
    mon.phase = "paths"
    maxb = a.max_request_bytes
    # refusals that a client sending its whole body must see (not a reset)
    for name, path, method, extra, want in [
        ("oversized body sent whole", "/v1/decisions", "POST", maxb + 1000, 413),
        ("body to a made-up path", "/no/such/path", "POST", 5000, 404),
        ("POST to a GET route", "/health", "POST", 3000, 405),
    ]:
        body = b"a" * extra
        data = (f"{method} {path} HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        st, text, closed = raw(w, data, 20)
        check(st == want, f"{name} ({len(body)} bytes): the client sees {st} (want {want})")
    st, hd, _ = w.request("GET", "/v1/decisions")
    check(st == 405 and "server-timing" in hd, f"405 on a surface path carries Server-Timing ({st})")
    st, text, _ = raw(w, (f"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nExpect: 100-continue\r\n"
                          f"Content-Length: {maxb + 10}\r\n\r\n").encode(), 10)
    check(st == 413, f"oversized body with Expect: 100-continue answered {st} before the body")
    junk = ["/%22", '/"quoted"', "/" + "a" * 200, "/v1/decisions%00", "/metrics/../x", "/%ff%fe",
            "/v1/decisions?x=\"}", "/a\\b", "/\u00e9t\u00e9", "//", "/v1//decisions", "/health/live/extra"]
    for i in range(sc["junk"]):
        p = junk[i % len(junk)] if i < len(junk) else f"/made/up/{i}/" + "x" * (i % 180)
        if i % 2:  # a made-up path with a huge Content-Length and no body
            data = (f"POST {p} HTTP/1.1\r\nHost: w\r\nContent-Length: {10 ** 15 + i}\r\n\r\n").encode("utf-8")
        else:
            data = (f"GET {p} HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n").encode("utf-8")
        st, text, closed = raw(w, data, 10)
        if not ((st is None and closed) or (st is not None and 400 <= st < 500)):
            bad(f"path junk {p!r}: {st} {text[:200]!r}")
            break
    else:
        ok(f"{sc['junk']} path-junk requests answered 4xx or closed")


def phase_burst(w, a, sc, mon, solo):
    mon.phase = "burst"
    before = w.metrics()
    body = json.dumps(GOLDEN).encode()

    def one(_):
        try:
            return w.request("POST", "/v1/decisions", body, {"Content-Type": "application/json"}, 120)
        except OSError as e:
            return (str(e), {}, b"")

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(sc["burst_conc"]) as ex:
        res = list(ex.map(one, range(sc["burst"])))
    dt = time.monotonic() - t0
    counts = {}
    for st, _, _ in res:
        counts[st] = counts.get(st, 0) + 1
    n200 = counts.get(200, 0)
    check(set(counts) <= {200, 429}, f"burst of {sc['burst']} at {sc['burst_conc']} clients: {counts} in {dt:.1f} s")
    check(all(b == solo for st, _, b in res if st == 200), f"every 200 of the burst equals the request alone")
    time.sleep(0.3)
    after = w.metrics()
    k = dict(endpoint="/v1/decisions", status="200")
    got = counter(after, "vllm_srun_requests_total", **k) - counter(before, "vllm_srun_requests_total", **k)
    check(got == n200, f"nothing accepted was lost: the worker counts {got:.0f} answered, the clients got {n200}")
    check(counter(after, "vllm_srun_queue_depth") == 0, "the queue drained to 0")


def phase_disconnect(w, a, sc, mon, solo):
    mon.phase = "disconnect"
    before = w.metrics()
    long = json.dumps({"state": "x " * 300,
                       "questions": {f"q{i}": {"type": "noul", "instructions": f"is it {i}?"} for i in range(200)}}).encode()
    for i in range(sc["disconnects"]):
        s = socket.create_connection((w.host, w.port), timeout=5)
        s.sendall(b"POST /v1/decisions HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n" % len(long) + long)
        time.sleep(0.05 + 0.05 * (i % 4))
        s.close()
    time.sleep(1.5)
    after = w.metrics()
    k = dict(endpoint="/v1/decisions", status="499")
    n = counter(after, "vllm_srun_requests_total", **k) - counter(before, "vllm_srun_requests_total", **k)
    check(n >= 1, f"{sc['disconnects']} clients left mid-request: {n:.0f} counted as 499")
    check(counter(after, "vllm_srun_queue_depth") == 0, "the queue drained to 0 after the disconnects")
    st, _, b = w.decide(GOLDEN)
    check(st == 200 and b == solo, "the same answer after the disconnects")


def phase_metrics(w, a, sc, mon, lines0):
    mon.phase = "metrics"
    text = w.metrics()
    lines = text.count("\n")
    check(lines <= lines0 + 60, f"/metrics stays bounded under path junk: {lines0} lines before, {lines} after")
    labels = set(re.findall(r'endpoint="([^"]*)"', text))
    routes = {"/v1/decisions", "/v1/systemone", "/v1/classify", "/v1/embeddings", "/v1/rerank", "/v1/models",
              "/health", "/health/live", "/metrics", "/openapi.yaml", "other"}
    check(labels <= routes, f"endpoint labels only from the route table: {sorted(labels - routes) or 'yes'}")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        bad("prometheus_client is not installed (Debian: python3-prometheus-client): /metrics not parsed")
        return
    try:
        fams = list(text_string_to_metric_families(text))
        n = sum(len(f.samples) for f in fams)
        check(n > 0, f"/metrics parses with prometheus_client: {len(fams)} families, {n} samples")
        info = [s for f in fams for s in f.samples if s.name == "vllm_srun_model_info"]
        if info and a.served_name is not None:
            check(info[0].labels.get("model") == a.served_name,
                  f"the model label round-trips through escaping: {info[0].labels.get('model')!r}")
    except Exception as e:  # the parser raises ValueError and others on bad text
        bad(f"/metrics does not parse: {e!r}")


def trace(w, a, phase):
    if a.rss_trace and w.pid:
        time.sleep(1.2)
        print(f"     RSS after {phase}: {w.rss() / 2**20:.1f} MiB", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, help="the worker's process id (RSS checks; this host only)")
    ap.add_argument("--scale", default="ci", choices=sorted(SCALES))
    ap.add_argument("--request-timeout", type=float, default=30, help="the worker's --request-timeout")
    ap.add_argument("--per-client-cap", type=int, default=256, help="the worker's --max-connections-per-client")
    ap.add_argument("--served-name", help="check the model label of /metrics equals this")
    ap.add_argument("--only", help="comma-separated phases")
    ap.add_argument("--rss-slack-mib", type=float, default=48)
    ap.add_argument("--soak-rounds", type=int, help="rounds at the chosen scale (soak: 5)")
    ap.add_argument("--health-ms", type=float, default=100, help="the /health bound (ms)")
    ap.add_argument("--rss-trace", action="store_true", help="print the worker's RSS after each phase")
    a = ap.parse_args()
    sc = dict(SCALES[a.scale])
    if a.soak_rounds:
        sc["rounds"] = a.soak_rounds
    w = Worker(a.host, a.port, a.pid)
    st, _, b = w.request("GET", "/v1/models")
    if st != 200:
        print(f"FAIL the worker at {a.host}:{a.port} does not answer /v1/models ({st})")
        return 1
    limits = json.loads(b)["limits"]
    a.max_request_bytes = limits["max_request_bytes"]
    st, _, solo = w.decide(GOLDEN)
    if not check(st == 200, f"the golden request answered alone ({st})"):
        return 1
    only = set(a.only.split(",")) if a.only else None
    want = lambda p: only is None or p in only
    # warm up (the first requests allocate caches), then take the starting memory
    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda _: w.decide(GOLDEN), range(64)))
    time.sleep(1.5)
    rss0 = w.rss()
    lines0 = w.metrics().count("\n")
    if rss0:
        ok(f"starting RSS {rss0 / 2**20:.1f} MiB")
    mon = HealthMonitor(w, a.health_ms / 1e3)
    mon.start()
    for r in range(sc["rounds"]):
        if sc["rounds"] > 1:
            print(f"== round {r + 1} of {sc['rounds']}", flush=True)
        if want("slow"):
            phase_slow(w, a, sc, mon)
            trace(w, a, "slow")
        if want("framing"):
            phase_framing(w, a, sc, mon)
            trace(w, a, "framing")
        if want("headers"):
            phase_headers(w, a, sc, mon)
            trace(w, a, "headers")
        if want("paths"):
            phase_paths(w, a, sc, mon)
            trace(w, a, "paths")
        if want("burst"):
            phase_burst(w, a, sc, mon, solo)
        if want("disconnect"):
            phase_disconnect(w, a, sc, mon, solo)
        if want("amplification"):
            phase_amplification(w, a, sc, mon)
        if a.rss_trace and w.pid:
            print(f"     RSS after round {r + 1}: {w.rss() / 2**20:.1f} MiB", flush=True)
    if want("metrics"):
        phase_metrics(w, a, sc, mon, lines0)
    mon.finish()
    mon.report()
    st, _, b = w.decide(GOLDEN)
    check(st == 200 and b == solo, "the worker answers the golden request the same at the end")
    if rss0 and want("memory"):
        end = None
        for _ in range(20):  # the worker gives freed memory back when idle
            time.sleep(0.5)
            end = w.rss()
            if end <= rss0 + a.rss_slack_mib * 2**20:
                break
        check(end <= rss0 + a.rss_slack_mib * 2**20,
              f"RSS back to its starting level: {rss0 / 2**20:.1f} MiB at the start, {end / 2**20:.1f} MiB at the "
              f"end (slack {a.rss_slack_mib:.0f} MiB), peak {w.rss('VmHWM') / 2**20:.1f} MiB")
    print(f"== hostile: {len(failures)} failed" + (": " + "; ".join(failures[:5]) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
