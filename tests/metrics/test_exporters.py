"""--metrics-listen of shmbus-bridge serve and mirror and of shmbus-nats out
and in: each is scraped during a real transfer, its counters must move, its
text must pass Prometheus' own parser and `promtool check metrics`, and a
scrape must be answered while other clients dribble their requests.

Run by ctest with SHMBUS_BRIDGE, SHMBUS_NATS, SHMBUS_PRODUCER, SHMBUS_CONSUMER,
SHMBUS_INSPECT, PROMTOOL and NATS_SERVER set (the last two empty when not
installed: the checks that need them are skipped, saying so)."""
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

BRIDGE = os.environ["SHMBUS_BRIDGE"]
NATS = os.environ.get("SHMBUS_NATS", "")
PRODUCER = os.environ["SHMBUS_PRODUCER"]
CONSUMER = os.environ["SHMBUS_CONSUMER"]
INSPECT = os.environ["SHMBUS_INSPECT"]
PROMTOOL = os.environ.get("PROMTOOL", "")
NATS_SERVER = os.environ.get("NATS_SERVER", "")

COUNT = 2000


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.02)


def samples(text):
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = s.value  # one series per name, but for closed{reason}
            if "reason" in s.labels:
                out[f"{s.name}:{s.labels['reason']}"] = s.value
    return out


def scrape(url):
    with urllib.request.urlopen(url, timeout=2) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def check_with_promtool(text):
    if not PROMTOOL:
        return  # stated once by test_promtool_is_there
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    assert out.returncode == 0, f"promtool check metrics: {out.stdout}{out.stderr}\n{text}"


def test_promtool_is_there():
    if not PROMTOOL:
        pytest.skip("promtool not found (Debian package prometheus): the text is checked by the Python parser only")


class Procs:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.procs = []

    def start(self, args, name):
        log = self.tmp / f"{name}.log"
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        self.procs.append(p)
        return p, log

    def stop_all(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture
def procs(tmp_path):
    ps = Procs(tmp_path)
    buses = []
    yield ps, buses
    ps.stop_all()
    for b in buses:
        subprocess.run([INSPECT, "rm", "--force", b], capture_output=True)


def announced(log, pattern, proc):
    def find():
        m = re.search(pattern, log.read_text()) if log.exists() else None
        if m:
            return m
        assert proc.poll() is None, f"exited: {log.read_text()}"
        return None
    m = wait_for(find)
    assert m, f"nothing like {pattern!r} in {log.read_text()}"
    return m


def metrics_url(log, proc):
    return announced(log, r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)", proc).group(1)


def counters_reach(url, name, want):
    """Scrapes until `name` reaches `want`; returns the last scrape's text."""
    last = {}

    def reached():
        text = scrape(url)
        last["text"] = text
        return samples(text).get(name, 0) >= want
    assert wait_for(reached), f"{name} never reached {want}:\n{last.get('text')}"
    return last["text"]


def scrapes_during(url, name, args):
    """Runs the producer `args` and scrapes `name` until it has reached COUNT.
    The values must never go down, and some scrape must see the transfer
    in the middle."""
    producer = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = []
    try:
        text = counters_reach_seen(url, name, COUNT, seen)
    finally:
        producer.wait(timeout=10)
    assert seen == sorted(seen), f"{name} went down: {seen}"
    assert any(0 < v < COUNT for v in seen), f"no scrape during the transfer: {seen}"
    return text


def counters_reach_seen(url, name, want, seen):
    last = {}

    def reached():
        text = scrape(url)
        last["text"] = text
        seen.append(samples(text).get(name, 0))
        return seen[-1] >= want
    assert wait_for(reached), f"{name} never reached {want}:\n{last.get('text')}"
    return last["text"]


def dribblers_do_not_stall(url):
    """Three clients send their request a byte at a time; scrapes are answered meanwhile."""
    port = int(re.search(r":(\d+)/", url).group(1))
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    slow = []
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(request[:1])
            slow.append(s)
        for i in range(1, 3):
            started = time.monotonic()
            scrape(url)
            assert time.monotonic() - started < 1, "a scrape waited for the slow clients"
            for s in slow:
                s.sendall(request[i:i + 1])
            time.sleep(0.3)
    finally:
        for s in slow:
            s.close()


def new_bus(buses, tag):
    name = f"exp-{tag}-{os.getpid()}-{len(buses)}"
    buses.append(name)
    subprocess.run([PRODUCER, name, "--create", "--capacity", "4096", "--count", "0", "--keep-open"],
                   check=True, capture_output=True)
    return name


def serve(ps, bus):
    p, log = ps.start([BRIDGE, "serve", bus, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                       "--stats-interval", "0"], "serve")
    port = announced(log, rf"serving bus '{re.escape(bus)}' on 127\.0\.0\.1:(\d+)", p).group(1)
    return p, int(port), metrics_url(log, p)


def test_bridge_serve_and_mirror_export_their_counters_during_a_transfer(procs):
    ps, buses = procs
    source = new_bus(buses, "src")
    _, port, serve_url = serve(ps, source)
    before = samples(scrape(serve_url))
    assert before["shmbus_bridge_subscribers"] == 0
    assert before["shmbus_bridge_messages_sent_total"] == 0

    local = f"exp-mirror-{os.getpid()}"
    buses.append(local)
    mirror, mlog = ps.start([BRIDGE, "mirror", "--connect", f"127.0.0.1:{port}", "--remote-bus", source,
                             "--bus", local, "--metrics-listen", "127.0.0.1:0", "--stats-interval", "0"], "mirror")
    mirror_url = metrics_url(mlog, mirror)
    counters_reach(mirror_url, "shmbus_mirror_connected", 1)
    counters_reach(serve_url, "shmbus_bridge_subscribers", 1)

    # 2000 messages in about half a second.
    text = scrapes_during(serve_url, "shmbus_bridge_messages_sent_total",
                          [PRODUCER, source, "--count", str(COUNT), "--size", "100", "--rate", "4000", "--keep-open"])
    check_with_promtool(text)
    s = samples(text)
    assert s["shmbus_bridge_connections_accepted_total"] == 1
    assert s["shmbus_bridge_bytes_sent_total"] > COUNT * 100
    assert s["shmbus_bridge_messages_dropped_total"] == 0
    assert s["shmbus_bridge_queued_bytes"] >= 0

    text = counters_reach(mirror_url, "shmbus_mirror_messages_received_total", COUNT)
    check_with_promtool(text)
    m = samples(text)
    assert m["shmbus_mirror_connects_total"] == 1
    assert m["shmbus_mirror_bytes_received_total"] >= COUNT * 100
    assert m["shmbus_mirror_next_seq"] == COUNT
    assert m["shmbus_mirror_lost_messages_total"] == 0

    dribblers_do_not_stall(serve_url)
    dribblers_do_not_stall(mirror_url)

    # The mirror leaves: the bridge counts its subscriber gone.
    mirror.send_signal(signal.SIGTERM)
    mirror.wait(timeout=5)
    text = counters_reach(serve_url, "shmbus_bridge_connections_closed_total:peer", 1)
    assert samples(text)["shmbus_bridge_subscribers"] == 0


def test_metrics_listen_rejects_a_bad_address(procs):
    ps, buses = procs
    bus = new_bus(buses, "bad")
    out = subprocess.run([BRIDGE, "serve", bus, "--listen", "127.0.0.1:0", "--metrics-listen", "localhost"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 2, out.stderr
    assert "--metrics-listen wants HOST:PORT" in out.stderr


@pytest.fixture
def nats_server(tmp_path):
    if not NATS_SERVER or not NATS:
        pytest.skip("nats-server or shmbus-nats not found: the gateway's exporters are not tested")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "nats.log"
    p = subprocess.Popen([NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp_path / "js"),
                          "-l", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: log.exists() and "Server is ready" in log.read_text()), "nats-server did not start"
        yield f"nats://127.0.0.1:{port}"
    finally:
        p.terminate()
        p.wait(timeout=5)


def test_nats_out_and_in_export_their_counters_during_a_transfer(nats_server, procs):
    # nats_server first: it is stopped after the gateways.
    ps, buses = procs
    source = new_bus(buses, "nats-src")
    stream = f"EXP{os.getpid()}"
    out, olog = ps.start([NATS, "out", source, "--server", nats_server, "--stream", stream, "--create-stream",
                          "--follow", "--metrics-listen", "127.0.0.1:0", "--stats-interval", "0"], "out")
    out_url = metrics_url(olog, out)
    counters_reach(out_url, "shmbus_nats_out_connected", 1)
    text = scrapes_during(out_url, "shmbus_nats_out_messages_acknowledged_total",
                          [PRODUCER, source, "--count", str(COUNT), "--size", "100", "--rate", "4000", "--keep-open"])
    check_with_promtool(text)
    s = samples(text)
    assert s["shmbus_nats_out_messages_published_total"] == COUNT
    assert s["shmbus_nats_out_bytes_published_total"] == COUNT * 100
    assert s["shmbus_nats_out_publish_failures_total"] == 0
    assert s["shmbus_nats_out_max_payload_bytes"] > s["shmbus_nats_out_largest_message_bytes"] > 100
    dribblers_do_not_stall(out_url)

    copy = f"exp-nats-copy-{os.getpid()}"
    buses.append(copy)
    inp, ilog = ps.start([NATS, "in", copy, "--server", nats_server, "--stream", stream, "--durable", "copy",
                          "--capacity", "4096", "--metrics-listen", "127.0.0.1:0", "--stats-interval", "0"], "in")
    in_url = metrics_url(ilog, inp)
    text = counters_reach(in_url, "shmbus_nats_in_messages_published_total", COUNT)
    check_with_promtool(text)
    s = samples(text)
    assert s["shmbus_nats_in_connected"] == 1
    assert s["shmbus_nats_in_messages_received_total"] == COUNT
    assert s["shmbus_nats_in_bytes_published_total"] == COUNT * 100
    assert s["shmbus_nats_in_next_seq"] == COUNT
    assert s["shmbus_nats_in_invalid_messages_total"] == 0
    assert s["shmbus_nats_in_pending_messages"] == 0  # caught up
    dribblers_do_not_stall(in_url)


def test_inspector_metrics_pass_promtool(procs):
    ps, buses = procs
    if not PROMTOOL:
        pytest.skip("promtool not found (Debian package prometheus)")
    bus = new_bus(buses, "inspect")
    text = subprocess.run([INSPECT, "metrics", bus], check=True, capture_output=True, text=True).stdout
    check_with_promtool(text)
