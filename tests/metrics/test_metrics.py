"""shmbus-inspect metrics: its output parsed by Prometheus' own parser
(python3-prometheus-client), printed once and served over HTTP.

Run by ctest with SHMBUS_INSPECT, SHMBUS_PRODUCER and SHMBUS_ACTOR set to
the binaries under test."""
import json
import os
import re
import signal
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

INSPECT = os.environ["SHMBUS_INSPECT"]
PRODUCER = os.environ["SHMBUS_PRODUCER"]
CONSUMER = os.environ["SHMBUS_CONSUMER"]
ACTOR = os.environ["SHMBUS_ACTOR"]


def samples(text):
    """{(sample name, frozenset(labels)): value} and the families, parsed."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(parsed, metric, **labels):
    matches = [v for (n, ls), v in parsed.items() if n == metric and set(labels.items()) <= ls]
    assert len(matches) == 1, f"{metric}{labels}: {len(matches)} samples"
    return matches[0]


def reader_labels(parsed, name):
    """Labels of the reader called `name` (from its cursor sample)."""
    for (n, ls), _ in parsed.items():
        d = dict(ls)
        if n == "shmbus_reader_cursor" and d.get("name") == name:
            return d
    raise AssertionError(f"no reader named {name!r}")


def scrape(bus):
    out = subprocess.run([INSPECT, "metrics", bus], check=True, capture_output=True, text=True)
    return out.stdout


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.02)


@pytest.fixture
def bus(tmp_path):
    name = f"metrics-test-{os.getpid()}-{tmp_path.name[-8:]}"
    subprocess.run([PRODUCER, name, "--create", "--capacity", "64", "--record-size", "128",
                    "--count", "10", "--size", "64", "--keep-open"],
                   check=True, capture_output=True)
    procs = []
    yield name, tmp_path, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run([INSPECT, "rm", "--force", name], capture_output=True)


def start_reader(bus, tmp_path, procs, mode, name):
    ready = tmp_path / f"ready-{len(procs)}"
    args = [ACTOR, mode, bus, name] + ([str(tmp_path / "stop")] if mode == "consume" else []) + [str(ready)]
    p = subprocess.Popen(args)
    procs.append(p)
    assert wait_for(ready.exists), f"{mode} {name} never attached"
    return p


def test_bus_and_reader_metrics_parse_and_match_the_bus(bus):
    name, tmp_path, procs = bus
    # A reader whose name needs escaping in a label, one that reads everything,
    # and one that stalls at the start.
    odd = 'we"ird\\na'
    start_reader(name, tmp_path, procs, "consume", odd)
    stalled = start_reader(name, tmp_path, procs, "stall", "audit")

    # The consumer stores its cursor before it waits: all 10 read.
    def caught_up():
        parsed = samples(scrape(name))
        return parsed if value(parsed, "shmbus_reader_cursor", name=odd) == 10 else None

    parsed = wait_for(caught_up)
    assert parsed, "the consumer's cursor never reached 10"
    assert value(parsed, "shmbus_bus_up", bus=name) == 1
    assert value(parsed, "shmbus_messages_published_total", bus=name) == 10
    assert value(parsed, "shmbus_bus_head", bus=name) == 10
    assert value(parsed, "shmbus_bus_capacity_records", bus=name) == 64
    assert value(parsed, "shmbus_bus_record_size_bytes", bus=name) == 128
    assert value(parsed, "shmbus_readers", bus=name) == 2
    # --keep-open: the producer left without marking end-of-stream.
    assert value(parsed, "shmbus_producer_closed", bus=name) == 0
    assert value(parsed, "shmbus_producer_alive", bus=name) == 0

    assert value(parsed, "shmbus_reader_lag_messages", name=odd) == 0
    assert value(parsed, "shmbus_reader_delivered_total", name=odd) == 10
    assert value(parsed, "shmbus_reader_lost_total", name=odd) == 0
    assert value(parsed, "shmbus_reader_alive", name=odd) == 1

    audit = reader_labels(parsed, "audit")
    assert set(audit) == {"bus", "slot", "name"} and audit["bus"] == name
    assert value(parsed, "shmbus_reader_pid", name="audit") == stalled.pid
    assert value(parsed, "shmbus_reader_cursor", name="audit") == 0
    assert value(parsed, "shmbus_reader_lag_messages", name="audit") == 10
    assert value(parsed, "shmbus_reader_delivered_total", name="audit") == 0
    assert value(parsed, "shmbus_reader_alive", name="audit") == 1
    assert state_of(parsed, "shmbus_reader_state", name="audit") == "alive"

    # A reader killed with SIGKILL shows as dead until its slot is reclaimed.
    stalled.send_signal(signal.SIGKILL)
    stalled.wait()
    parsed = samples(scrape(name))
    assert value(parsed, "shmbus_reader_alive", name="audit") == 0
    assert state_of(parsed, "shmbus_reader_state", name="audit") == "dead"


PRODUCER_STATES = {"alive", "stopped", "dead", "unknown"}
READER_STATES = PRODUCER_STATES | {"let_go", "evicted"}


def state_of(parsed, metric, **labels):
    """The one state whose sample is 1, checking that every state is there."""
    states = {dict(ls)["state"]: v for (n, ls), v in parsed.items()
              if n == metric and set(labels.items()) <= ls}
    assert set(states) == (READER_STATES if metric.startswith("shmbus_reader") else PRODUCER_STATES), states
    ones = [s for s, v in states.items() if v == 1]
    assert len(ones) == 1 and sum(states.values()) == 1, states
    return ones[0]


def series(text, prefix):
    """The label sets of every sample whose name starts with `prefix`."""
    return {(n, ls) for (n, ls) in samples(text) if n.startswith(prefix)}


def test_a_stopped_reader_is_exported_as_stopped(bus):
    name, tmp_path, procs = bus
    stalled = start_reader(name, tmp_path, procs, "stall", "audit")
    os.kill(stalled.pid, signal.SIGSTOP)
    try:
        # The signal is delivered after kill() returns: wait until it is stopped.
        assert wait_for(lambda: open(f"/proc/{stalled.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T")
        parsed = samples(scrape(name))
        assert state_of(parsed, "shmbus_reader_state", name="audit") == "stopped"
        assert value(parsed, "shmbus_reader_alive", name="audit") == 1  # alive, but reads nothing
    finally:
        os.kill(stalled.pid, signal.SIGCONT)
    assert state_of(samples(scrape(name)), "shmbus_reader_state", name="audit") == "alive"


# layout.hpp: the reader table starts at 512, a slot is 128 bytes, its state
# word is at offset 8 of the slot.
def clear_slot_state(bus, slot):
    with open(f"/dev/shm/shmbus.{bus}", "r+b") as f:
        f.seek(512 + 128 * slot + 8)
        f.write(b"\0\0\0\0")


def test_an_evicted_reader_is_exported_as_evicted(bus):
    name, tmp_path, procs = bus
    start_reader(name, tmp_path, procs, "stall", "audit")
    parsed = samples(scrape(name))
    assert state_of(parsed, "shmbus_reader_state", name="audit") == "alive"
    assert value(parsed, "shmbus_reader_holds_producer", name="audit") == 1
    # A stray store clears the slot's state: the producer no longer counts
    # it. The stalled reader never reads, so it is not told and stays so.
    clear_slot_state(name, int((tmp_path / "ready-0").read_text()))
    parsed = samples(scrape(name))
    assert state_of(parsed, "shmbus_reader_state", name="audit") == "evicted"
    assert value(parsed, "shmbus_reader_holds_producer", name="audit") == 0
    assert value(parsed, "shmbus_reader_alive", name="audit") == 1
    # shmbus-inspect show says so too, in text and JSON.
    shown = subprocess.run([INSPECT, "show", name, "--interval", "0"], check=True, capture_output=True,
                           text=True).stdout
    assert re.search(r"audit\s+\d+\s+alive,evicted\b", shown), shown
    report = json.loads(subprocess.run([INSPECT, "show", name, "--interval", "0", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    assert [r["evicted"] for r in report["readers"]] == [True]
    assert "reader_evicted" in [w["kind"] for w in report["warnings"]]


def test_a_reader_let_go_is_exported_as_let_go(bus):
    name, tmp_path, procs = bus
    start_reader(name, tmp_path, procs, "stall", "audit")
    # 10 behind on a 64-record ring: the producer waits 0.2 s for the stalled
    # reader, lets it go, and publishes the rest.
    subprocess.run([PRODUCER, name, "--count", "100", "--size", "64", "--max-hold", "200ms", "--keep-open"],
                   check=True, capture_output=True, timeout=10)
    parsed = samples(scrape(name))
    assert value(parsed, "shmbus_readers_let_go_total", bus=name) == 1
    assert state_of(parsed, "shmbus_reader_state", name="audit") == "let_go"
    assert value(parsed, "shmbus_reader_holds_producer", name="audit") == 0
    assert value(parsed, "shmbus_reader_let_go_timestamp_seconds", name="audit") > 0


def test_reader_series_stay_the_same_across_a_restart(bus):
    name, tmp_path, procs = bus
    first = start_reader(name, tmp_path, procs, "stall", "audit")
    before = series(scrape(name), "shmbus_reader_")
    first.kill()
    first.wait()
    subprocess.run([INSPECT, "gc", name], check=True, capture_output=True)
    second = start_reader(name, tmp_path, procs, "stall", "audit")
    text = scrape(name)
    assert series(text, "shmbus_reader_") == before
    assert value(samples(text), "shmbus_reader_pid", name="audit") == second.pid


def test_producer_wait_seconds_grow_during_a_wait(bus):
    name, tmp_path, procs = bus
    start_reader(name, tmp_path, procs, "stall", "audit")
    # The stalled reader is 10 behind on a 64-record ring: 54 more fill it,
    # and the producer waits for as long as the test lets it.
    producer = subprocess.Popen([PRODUCER, name, "--count", "100", "--size", "64"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(producer)

    def waiting():
        parsed = samples(scrape(name))
        return parsed if value(parsed, "shmbus_producer_waiting_for_space", bus=name) == 1 else None

    first = wait_for(waiting)
    assert first, "the producer never waited"
    time.sleep(0.5)
    second = samples(scrape(name))
    assert value(second, "shmbus_producer_waiting_for_space", bus=name) == 1
    grown = (value(second, "shmbus_producer_wait_seconds_total", bus=name)
             - value(first, "shmbus_producer_wait_seconds_total", bus=name))
    assert grown >= 0.4, f"wait seconds grew by {grown} in 0.5 s of waiting"
    assert value(second, "shmbus_producer_waiting_seconds", bus=name) >= 0.4
    assert value(second, "shmbus_producer_pid", bus=name) == producer.pid
    assert state_of(second, "shmbus_producer_state", bus=name) == "alive"


def test_durable_names_are_exported(bus):
    name, _, _ = bus
    # A name that stopped at 4 of 10, then 100 more messages on a 64-record ring.
    subprocess.run([CONSUMER, name, "--name", "archiver", "--count", "4", "--format", "none"],
                   check=True, capture_output=True)
    parsed = samples(scrape(name))
    assert value(parsed, "shmbus_durable_cursor", bus=name, name="archiver") == 4
    assert value(parsed, "shmbus_durable_lag_messages", bus=name, name="archiver") == 6
    assert value(parsed, "shmbus_durable_position_retained", bus=name, name="archiver") == 1
    assert value(parsed, "shmbus_durable_gone_messages", bus=name, name="archiver") == 0
    assert value(parsed, "shmbus_durable_held", bus=name, name="archiver") == 0
    subprocess.run([PRODUCER, name, "--count", "100", "--size", "64", "--keep-open"],
                   check=True, capture_output=True)
    parsed = samples(scrape(name))
    assert value(parsed, "shmbus_durable_lag_messages", bus=name, name="archiver") == 106
    assert value(parsed, "shmbus_durable_position_retained", bus=name, name="archiver") == 0
    oldest = value(parsed, "shmbus_bus_oldest", bus=name)
    assert oldest > 4
    assert value(parsed, "shmbus_durable_gone_messages", bus=name, name="archiver") == oldest - 4


def test_missing_bus_is_down_and_others_still_reported(bus):
    name, _, _ = bus
    out = subprocess.run([INSPECT, "metrics", name, "no-such-bus-metrics"], check=True,
                         capture_output=True, text=True)
    parsed = samples(out.stdout)
    assert value(parsed, "shmbus_bus_up", bus="no-such-bus-metrics") == 0
    assert value(parsed, "shmbus_bus_up", bus=name) == 1
    assert "no-such-bus-metrics" in out.stderr


def test_listen_serves_metrics_over_http_until_sigterm(bus):
    name, _, _ = bus
    server = subprocess.Popen([INSPECT, "metrics", name, "--listen", "127.0.0.1:0"],
                              stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        m = re.search(r"http://(127\.0\.0\.1:\d+)/metrics", line)
        assert m, f"no address announced: {line!r}"
        url = f"http://{m.group(1)}/metrics"
        # The docs' recipe.
        got = subprocess.run(["curl", "-fsS", url], check=True, capture_output=True, text=True)
        parsed = samples(got.stdout)
        assert value(parsed, "shmbus_messages_published_total", bus=name) == 10
        headers = subprocess.run(["curl", "-sS", "-D", "-", "-o", "/dev/null", url],
                                 check=True, capture_output=True, text=True).stdout
        assert "text/plain; version=0.0.4" in headers
        missing = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                  f"http://{m.group(1)}/other"], capture_output=True, text=True)
        assert missing.stdout == "404"
        # Each scrape reads the bus afresh.
        subprocess.run([PRODUCER, name, "--count", "5", "--size", "64", "--keep-open"],
                       check=True, capture_output=True)
        got = subprocess.run(["curl", "-fsS", url], check=True, capture_output=True, text=True)
        assert value(samples(got.stdout), "shmbus_messages_published_total", bus=name) == 15
    finally:
        server.send_signal(signal.SIGTERM)
        rc = server.wait(timeout=5)
    assert rc == 0


def test_listen_rejects_a_bad_address():
    out = subprocess.run([INSPECT, "metrics", "--listen", "localhost"], capture_output=True, text=True)
    assert out.returncode == 2  # a bad command line
    assert "HOST:PORT" in out.stderr


def test_listen_on_a_port_in_use_names_the_address():
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        out = subprocess.run([INSPECT, "metrics", "--listen", address], capture_output=True, text=True,
                             timeout=10)
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"shmbus-inspect: --listen {address}: cannot bind: "), lines[0]
    assert "bus ''" not in lines[0]
    assert "another program listens there" in lines[0]


def test_clients_that_dribble_their_request_do_not_stall_the_others(bus):
    import socket
    name, _, _ = bus
    server = subprocess.Popen([INSPECT, "metrics", name, "--listen", "127.0.0.1:0"],
                              stderr=subprocess.PIPE, text=True)
    dribblers = []
    try:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", server.stderr.readline())
        assert m
        port = int(m.group(1))
        url = f"http://127.0.0.1:{port}/metrics"
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(request[:1])
            dribblers.append(s)
        # A byte from each every 0.5 s, and a scrape between: every scrape is
        # answered at once.
        for i in range(1, 7):
            for s in dribblers:
                s.sendall(request[i:i + 1])
            got = subprocess.run(["curl", "-fsS", "--max-time", "2", url], capture_output=True, text=True)
            assert got.returncode == 0, f"scrape {i} beside slow clients: {got.stderr}"
            assert value(samples(got.stdout), "shmbus_messages_published_total", bus=name) == 10
            time.sleep(0.5)
        # A request that is not complete 5 s after the connect is dropped.
        for s in dribblers:
            s.settimeout(10)
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
    finally:
        for s in dribblers:
            s.close()
        server.send_signal(signal.SIGTERM)
        rc = server.wait(timeout=5)
    assert rc == 0
