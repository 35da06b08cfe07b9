"""The Python module against itself and against the C++ programs.

Run by ctest with PYTHONPATH pointing at the built module and
SHMBUS_PRODUCER / SHMBUS_CONSUMER / SHMBUS_INSPECT at the programs."""
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

import shmbus
import synthetic

PRODUCER = os.environ.get("SHMBUS_PRODUCER")
CONSUMER = os.environ.get("SHMBUS_CONSUMER")


@pytest.fixture
def name(request):
    n = f"pytest-{os.getpid()}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
    yield n
    shmbus.Bus.remove(n)


def test_round_trip_publish_claim_and_views(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=128)
    assert (bus.name, bus.policy, bus.capacity, bus.max_payload) == (name, "block", 16, 104)
    consumer = shmbus.Consumer(bus, name="py")
    producer = shmbus.Producer(bus)
    assert producer.publish(b"hello") == 0
    assert producer.publish(memoryview(b"xxworldxx")[2:7]) == 1
    assert producer.publish(bytearray(b"")) == 2
    view = producer.claim(20)
    assert not view.readonly and len(view) == 20
    view[:8] = b"in place"
    assert producer.commit(8) == 3
    with pytest.raises(ValueError):  # released by commit
        view[0] = 1
    with pytest.raises(ValueError, match=f"{bus.max_message + 1} bytes, max {bus.max_message}"):
        producer.publish(b"x" * (bus.max_message + 1))

    seq, ts, mv = consumer.next(1.0)
    assert (seq, ts, bytes(mv)) == (0, 0, b"hello")
    assert mv.readonly
    seq2, _, mv2 = consumer.next(1.0)
    # The previous message's view is revoked, not left dangling.
    with pytest.raises(ValueError):
        bytes(mv)
    assert (seq2, bytes(mv2)) == (1, b"world")
    assert bytes(consumer.next(1.0)[2]) == b""
    assert bytes(consumer.next(1.0)[2]) == b"in place"
    assert consumer.next(0.01) is None  # timeout
    assert consumer.cursor == 4 and consumer.delivered == 4


def test_zero_copy_on_a_block_bus(name):
    """The view reads the record in shared memory: a write through a claim is
    visible through a consumer's view of the same record without a copy."""
    bus = shmbus.Bus.create(name, capacity=4, record_size=64)
    consumer = shmbus.Consumer(bus)
    producer = shmbus.Producer(bus)
    producer.publish(b"AAAA")
    _, _, mv = consumer.next(1.0)
    raw = mv.obj  # the exporter: no copy was made in between
    assert bytes(mv) == b"AAAA"
    producer.close()
    with pytest.raises(shmbus.EndOfStream) as e:
        consumer.next(1.0)
    assert e.value.reason == "closed" and consumer.end_reason == "closed"
    with pytest.raises(ValueError):
        bytes(mv)
    assert len(memoryview(raw)) == 0  # a new view of a revoked message is empty


def test_iteration_ends_at_end_of_stream_and_start_positions(name):
    bus = shmbus.Bus.create(name, capacity=64, record_size=64)
    with shmbus.Producer(bus) as producer:
        for i in range(10):
            producer.publish(struct.pack("<Q", i))
        latest = shmbus.Consumer(bus, start="latest")
        from_seq = shmbus.Consumer(bus, start="sequence", start_seq=7)
        producer.publish(struct.pack("<Q", 10))
    earliest = shmbus.Consumer(bus)
    assert [s for s, _, _ in earliest] == list(range(11))
    assert [struct.unpack("<Q", m)[0] for _, _, m in from_seq] == [7, 8, 9, 10]
    assert [s for s, _, _ in latest] == [10]
    with pytest.raises(shmbus.Error) as e:
        shmbus.Consumer(bus, start="sequence", start_seq=1000)
    assert e.value.errc == 14 and name in str(e.value)  # not_retained


def test_a_best_effort_reader_is_never_waited_for_and_counts_its_loss(name):
    """A lossless logger and a best-effort dashboard on one block bus."""
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    logger = shmbus.Consumer(bus, name="logger")
    dashboard = shmbus.Consumer(bus, name="dashboard", best_effort=True)
    with shmbus.Producer(bus) as producer:
        for i in range(100):
            producer.publish(struct.pack("<Q", i), timeout=0)  # never waits for the dashboard
            assert logger.next(1.0)[0] == i
    got = [struct.unpack("<Q", bytes(m))[0] for _, _, m in dashboard]
    assert got == list(range(84, 100))
    assert dashboard.lost == 84 and logger.lost == 0


def test_a_hold_limit_lets_a_stuck_reader_go_and_it_counts_its_loss(name):
    """A producer with max_hold stops waiting for a reader that does not read."""
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    stuck = shmbus.Consumer(bus, name="stuck")
    with pytest.raises(ValueError):
        shmbus.Producer(bus, max_hold=-1.0)
    with shmbus.Producer(bus, max_hold=0.01) as producer:
        for i in range(100):
            producer.publish(struct.pack("<Q", i), timeout=5.0)
    snap = shmbus.Inspector(name).snapshot()
    assert snap["counters"]["readers_let_go"] == 1
    assert snap["readers"][0]["best_effort"] and snap["readers"][0]["let_go_ns"] > 0
    assert not stuck.let_go
    got = [struct.unpack("<Q", bytes(m))[0] for _, _, m in stuck]
    assert stuck.let_go
    assert got == list(range(84, 100)) and stuck.lost == 84


def test_let_go_reader_releases_a_producer_without_a_hold_limit(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    stuck = shmbus.Consumer(bus, name="stuck")
    producer = shmbus.Producer(bus)
    for i in range(16):
        producer.publish(struct.pack("<Q", i))
    with pytest.raises(TimeoutError):
        producer.publish(struct.pack("<Q", 16), timeout=0.0)
    shmbus.Bus.let_go_reader(name, stuck.slot)
    for i in range(16, 100):
        producer.publish(struct.pack("<Q", i), timeout=0.0)
    with pytest.raises(shmbus.Error, match="does not hold the producer: it was let go") as e:
        shmbus.Bus.let_go_reader(name, stuck.slot)
    assert e.value.errc == 2
    producer.close()  # end of stream: the loop below ends
    got = [struct.unpack("<Q", bytes(m))[0] for _, _, m in stuck]
    assert stuck.let_go and got == list(range(84, 100)) and stuck.lost == 84


def test_a_reader_let_go_while_it_held_a_message_is_warned(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    stuck = shmbus.Consumer(bus, name="stuck")
    producer = shmbus.Producer(bus, max_hold=0.01)
    producer.publish(struct.pack("<Q", 0))
    assert stuck.next(1.0)[0] == 0  # held while the producer laps it
    for i in range(1, 40):
        producer.publish(struct.pack("<Q", i), timeout=5.0)
    with pytest.warns(RuntimeWarning, match="overwritten while it was held"):
        seq, _, _ = stuck.next(1.0)
    assert stuck.let_go and seq == 24 and stuck.lost == 23


def test_durable_reader_resumes_where_it_stopped(name):
    bus = shmbus.Bus.create(name, capacity=64, record_size=64)
    producer = shmbus.Producer(bus)
    for i in range(10):
        producer.publish(struct.pack("<Q", i))
    with shmbus.Consumer(bus, name="keeper", start="resume") as c:
        assert not c.resumed
        with pytest.raises(shmbus.Error):  # the name is held
            shmbus.Consumer(bus, name="keeper", durable=True)
        assert [c.next(1.0)[0] for _ in range(4)] == [0, 1, 2, 3]
    snap = shmbus.Inspector(name).snapshot()
    assert [(b["name"], b["cursor"], b["held"]) for b in snap["bookmarks"]] == [("keeper", 4, False)]
    again = shmbus.Consumer(bus, name="keeper", start="resume")
    assert again.resumed and again.resume_gap == 0
    assert again.next(1.0)[0] == 4


def test_a_remembered_name_is_moved_and_forgotten(name):
    bus = shmbus.Bus.create(name, capacity=64, record_size=64)
    producer = shmbus.Producer(bus, timestamps="coarse")
    stamps = []
    for i in range(10):
        producer.publish(struct.pack("<Q", i))
        stamps.append(time.time_ns())
        time.sleep(0.002)  # coarse stamps tick every few ms: keep them apart
    with shmbus.Consumer(bus, name="keeper", start="resume") as c:
        assert [c.next(1.0)[0] for _ in range(4)] == [0, 1, 2, 3]
        with pytest.raises(shmbus.Error, match="keeper") as held:
            shmbus.Bus.move_reader_name(name, "keeper", to="latest")
        assert held.value.errc == 20  # name in use
        with pytest.raises(shmbus.Error) as held:
            shmbus.Bus.forget_reader_name(name, "keeper")
        assert held.value.errc == 20

    moved = shmbus.Bus.move_reader_name(name, "keeper", to=2)
    assert moved == {"from": 4, "to": 2, "oldest": 0, "head": 10, "timestamp_ns": 0, "unstamped": 0}
    with shmbus.Consumer(bus, name="keeper", start="resume") as c:
        assert c.resumed and c.next(1.0)[0] == 2

    # By time: the first message stamped at or after the 7th one's stamp.
    snap = shmbus.Inspector(name).snapshot()
    assert [(b["cursor"], b["lag"], b["gone"], b["held"], b["holder_pid"]) for b in snap["bookmarks"]] == [
        (3, 7, 0, False, 0)]
    with shmbus.Consumer(bus, start="sequence", start_seq=7) as c:
        seventh = c.next(1.0)
    moved = shmbus.Bus.move_reader_name(name, "keeper", time_ns=seventh.timestamp_ns)
    assert moved is not None and moved["to"] <= 7 and moved["timestamp_ns"] == seventh.timestamp_ns
    with shmbus.Consumer(bus, name="keeper", start="resume") as c:
        assert c.next(1.0).timestamp_ns == seventh.timestamp_ns
    later = shmbus.Bus.move_reader_name(name, "keeper", time_ns=stamps[-1] + 10**9)
    assert later is not None and (later["to"], later["timestamp_ns"]) == (10, 0)  # nothing that late: the head

    with pytest.raises(shmbus.Error, match="11") as gone:
        shmbus.Bus.move_reader_name(name, "keeper", to=11)
    assert gone.value.errc == 14  # not retained
    assert [b["cursor"] for b in shmbus.Inspector(name).snapshot()["bookmarks"]] == [10]  # refusals move nothing
    with pytest.raises(ValueError, match="exactly one"):
        shmbus.Bus.move_reader_name(name, "keeper")
    with pytest.raises(ValueError, match="exactly one"):
        shmbus.Bus.move_reader_name(name, "keeper", to=1, time_ns=1)
    with pytest.raises(ValueError, match="'later'"):
        shmbus.Bus.move_reader_name(name, "keeper", to="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="-1"):
        shmbus.Bus.move_reader_name(name, "keeper", to=-1)
    with pytest.raises(TypeError, match="float"):
        shmbus.Bus.move_reader_name(name, "keeper", to=1.5)  # type: ignore[arg-type]
    assert shmbus.Bus.move_reader_name(name, "nobody", to="earliest") is None
    for bad in ("", "n" * 32):  # names no reader could hold: refused, not "not found"
        with pytest.raises(shmbus.Error) as refused:
            shmbus.Bus.move_reader_name(name, bad, to="earliest")
        assert refused.value.errc == 2
        with pytest.raises(shmbus.Error):
            shmbus.Bus.forget_reader_name(name, bad)
    with pytest.raises(shmbus.BusNotFound):
        shmbus.Bus.move_reader_name(name + "-missing", "keeper", to="earliest")
    assert shmbus.Bus.move_reader_name(name, "keeper", to="earliest")["to"] == 0  # type: ignore[index]

    assert shmbus.Bus.forget_reader_name(name, "keeper") is True
    assert shmbus.Bus.forget_reader_name(name, "keeper") is False
    assert shmbus.Inspector(name).snapshot()["bookmarks"] == []
    with shmbus.Consumer(bus, name="keeper", start="resume") as c:
        assert not c.resumed


def test_snapshot_names_the_directory_and_pages(name):
    shmbus.Bus.create(name, capacity=16, record_size=64)
    snap = shmbus.Inspector(name).snapshot()
    assert snap["dir"] == os.path.realpath(shmbus.bus_dir())
    assert snap["pages"].startswith("tmpfs") and snap["page_size"] >= 4096


def test_errors_and_inspector_snapshot(name):
    with pytest.raises(shmbus.Error):
        shmbus.Bus.open(name, 0.0)
    with pytest.raises(shmbus.Error):
        shmbus.Bus.create("bad/name")
    bus = shmbus.Bus.create(name, capacity=8, record_size=64, policy="overwrite")
    with pytest.raises(shmbus.Error):
        shmbus.Bus.create(name)
    assert shmbus.Bus.exists(name)
    consumer = shmbus.Consumer(bus, name="watcher")
    producer = shmbus.Producer(bus, timestamps="coarse")
    with pytest.raises(shmbus.Error):
        shmbus.Producer(bus)  # producer_active
    for i in range(20):
        producer.publish(struct.pack("<Q", i))
    snap = shmbus.Inspector(name).snapshot()
    assert snap["head"] == 20 and snap["policy"] == "overwrite" and snap["counters"]["published"] == 20
    assert snap["producer"]["pid"] == os.getpid() and snap["producer"]["liveness"] == "alive"
    [reader] = snap["readers"]
    assert (reader["name"], reader["cursor"], reader["lag"]) == ("watcher", 0, 20)
    # Overwrite: the lap is skipped and counted; reading resumes at the oldest.
    seq, ts, mv = consumer.next(1.0)
    assert seq == 12 and struct.unpack("<Q", mv)[0] == 12 and ts > 0
    assert consumer.lost == 12


def test_next_releases_the_gil_while_waiting(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    consumer = shmbus.Consumer(bus)
    producer = shmbus.Producer(bus)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        assert consumer.next(0.3) is None
    finally:
        stop.set()
        t.join()
    # With the GIL held for 0.3 s the ticker could not have run more than once.
    assert len(ticks) > 20
    # A publish from another thread wakes a waiting next().
    threading.Timer(0.05, lambda: producer.publish(b"late")).start()
    got = consumer.next(5.0)
    assert got is not None and bytes(got[2]) == b"late"


def test_ctrl_c_interrupts_a_blocked_next(name, tmp_path):
    shmbus.Bus.create(name, capacity=16, record_size=64)
    script = tmp_path / "blocked.py"
    script.write_text(
        "import shmbus, sys\n"
        f"c = shmbus.Consumer(shmbus.Bus.open({name!r}))\n"
        "print('waiting', flush=True)\n"
        "try:\n"
        "    c.next()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(0)\n"
        "sys.exit(3)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                         env=os.environ)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.2)
    start = time.monotonic()
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=5) == 0
    assert p.stdout.read().strip() == "interrupted"
    assert time.monotonic() - start < 2


@pytest.mark.skipif(not PRODUCER, reason="SHMBUS_PRODUCER not set")
def test_python_consumer_verifies_a_million_messages_from_the_cpp_producer(name):
    count = 1_000_000
    bus = shmbus.Bus.create(name, capacity=65536, record_size=128)
    consumer = shmbus.Consumer(bus, name="pytest")
    producer = subprocess.Popen([PRODUCER, name, "--count", str(count), "--size", "64"],
                                stderr=subprocess.PIPE, text=True)
    expected = 0
    checked = 0
    unpack = struct.Struct("<Q").unpack_from
    for seq, _, payload in consumer:
        if seq != expected or len(payload) != 64 or unpack(payload, 0)[0] != seq:
            pytest.fail(f"message {seq}: expected {expected}, length {len(payload)}")
        if seq % 997 == 0:  # the full byte-exact check on a sample
            assert synthetic.is_valid(payload, seq), f"message {seq} corrupt"
            checked += 1
        expected += 1
    assert producer.wait(timeout=60) == 0, producer.stderr.read()
    assert expected == count and checked > 1000
    assert consumer.lost == 0 and consumer.corrupt == 0


@pytest.mark.skipif(not CONSUMER, reason="SHMBUS_CONSUMER not set")
def test_python_producer_feeds_shmbus_consumer_verify(name):
    count, size = 50_000, 64
    bus = shmbus.Bus.create(name, capacity=1024, record_size=128)
    consumer = subprocess.Popen([CONSUMER, name, "--verify", "--count", str(count), "--format", "none"],
                                stderr=subprocess.PIPE, text=True)
    try:
        producer = shmbus.Producer(bus, wait_for_readers=1, wait_for_readers_timeout=10.0)
        messages = [synthetic.make(i, size) for i in range(1000)]
        for i in range(count):
            if i < len(messages):
                producer.publish(messages[i], timeout=10.0)
            else:
                view = producer.claim(size, timeout=10.0)  # in place, half of them
                view[:] = synthetic.make(i, size)
                producer.commit()
        producer.close()
        assert consumer.wait(timeout=60) == 0, consumer.stderr.read()
        summary = consumer.stderr.read()
        assert f"{count} messages, 0 lost" in summary and "verified OK" in summary
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()


def test_stubs_describe_the_module():
    """The stubs (shmbus/__init__.pyi, beside the built extension) name every
    public class and method the module has, and nothing it lacks."""
    import ast
    stub_path = os.path.join(os.path.dirname(shmbus.__file__), "__init__.pyi")
    tree = ast.parse(open(stub_path).read())
    stub = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stub[node.name] = {n.name for n in node.body
                               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                               and not n.name.startswith("_")}
    for cls in ("Bus", "Producer", "Consumer", "WaitSet", "Inspector", "Error", "EndOfStream"):
        assert cls in stub, f"{cls} missing from the stubs"
        actual = {n for n in dir(getattr(shmbus, cls)) if not n.startswith("_")}
        if cls in ("Error", "EndOfStream"):
            continue
        assert stub[cls] == actual, f"{cls}: stubs {sorted(stub[cls])} vs module {sorted(actual)}"


def test_readme_example_runs(name):
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hello.py")
    out = subprocess.run([sys.executable, example, name], check=True, capture_output=True, text=True,
                         env=os.environ)
    assert out.stdout == "#0 hello\n#1 from\n#2 Python\n#3 in place\n4 delivered\n"


def test_close_from_another_thread_while_next_waits(name):
    """The usual shutdown of a reader thread: no crash, the waiting next() raises."""
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    consumer = shmbus.Consumer(bus)
    raised = []

    def read():
        try:
            consumer.next()
        except RuntimeError as e:
            raised.append(str(e))

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.2)  # inside next(), waiting
    consumer.close()
    t.join(5)
    assert not t.is_alive()
    assert raised and "closed while next() waited" in raised[0]
    with pytest.raises(RuntimeError, match="consumer is closed"):
        consumer.next(0)
    # The slot was given back: another consumer can have it.
    assert shmbus.Inspector(name).snapshot()["readers"] == []


def test_ctrl_c_interrupts_waiting_for_readers(name, tmp_path):
    shmbus.Bus.create(name, capacity=16, record_size=64)
    script = tmp_path / "waiting.py"
    script.write_text(
        "import shmbus, sys\n"
        "print('waiting', flush=True)\n"
        "try:\n"
        f"    shmbus.Producer(shmbus.Bus.open({name!r}), wait_for_readers=1)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(0)\n"
        "sys.exit(3)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    start = time.monotonic()
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=5) == 0
    assert p.stdout.read().strip() == "interrupted"
    assert time.monotonic() - start < 2
    with pytest.raises(TimeoutError, match="timed out waiting for 1 reader"):
        shmbus.Producer(shmbus.Bus.open(name), wait_for_readers=1, wait_for_readers_timeout=0.15)


def test_end_of_stream_reason_is_the_documented_string(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    consumer = shmbus.Consumer(bus)
    shmbus.Producer(bus).close()
    with pytest.raises(shmbus.EndOfStream) as e:
        consumer.next(1.0)
    assert e.value.reason == "closed" and consumer.end_reason == "closed"
    died = shmbus.Bus.create(name + "-died", capacity=16, record_size=64)
    try:
        c = shmbus.Consumer(died)
        pid = os.fork()
        if pid == 0:
            p = shmbus.Producer(shmbus.Bus.open(name + "-died"))
            p.publish(b"x")
            os._exit(0)  # dies holding the role: no close
        os.waitpid(pid, 0)
        assert bytes(c.next(5.0)[2]) == b"x"
        with pytest.raises(shmbus.EndOfStream) as e:
            c.next(5.0)
        assert e.value.reason == "producer_died" and c.end_reason == "producer_died"
    finally:
        shmbus.Bus.remove(name + "-died")
    # The stub's Literal names exactly the strings seen at run time.
    import re
    stub = open(os.path.join(os.path.dirname(shmbus.__file__), "__init__.pyi")).read()
    literal = re.search(r"reason: Literal\[([^]]*)\]", stub).group(1)
    assert {x.strip().strip('"') for x in literal.split(",")} == {"closed", "producer_died", "removed"}


def test_objects_made_before_a_fork_refuse_to_work_in_the_child(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    producer = shmbus.Producer(bus)
    consumer = shmbus.Consumer(bus)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        results = []
        for call in (lambda: producer.publish(b"child"), lambda: consumer.next(0)):
            try:
                call()
                results.append("worked")
            except RuntimeError as e:
                results.append("refused" if "before a fork" in str(e) else str(e))
        os.write(w, ",".join(results).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1000).decode() == "refused,refused"
    # The parent's stream is untouched: its seq 0 is its own message.
    assert producer.publish(b"parent") == 0
    assert bytes(consumer.next(1.0)[2]) == b"parent"


def test_commit_of_more_than_was_claimed_is_refused(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=128)
    producer = shmbus.Producer(bus)
    consumer = shmbus.Consumer(bus)
    view = producer.claim(8)
    view[:] = b"12345678"
    with pytest.raises(ValueError, match=r"commit\(100\) after claim\(8\)"):
        producer.commit(100)
    assert producer.commit(8) == 0  # the claim stayed open
    assert bytes(consumer.next(1.0)[2]) == b"12345678"


def test_open_or_create_refuses_a_bus_with_other_options_unless_as_is(name):
    shmbus.Bus.create(name, capacity=1024, record_size=64)
    with pytest.raises(shmbus.OptionsDiffer, match="exists as block 1024 x 64 B.*not overwrite 64 x 4096 B") as e:
        shmbus.Bus.open_or_create(name, capacity=64, record_size=4096, policy="overwrite")
    assert isinstance(e.value, ValueError) and isinstance(e.value, shmbus.Error) and e.value.errc == 24
    same = shmbus.Bus.open_or_create(name, capacity=1024, record_size=64)
    assert (same.capacity, same.record_size) == (1024, 64)
    as_is = shmbus.Bus.open_or_create(name, capacity=64, record_size=4096, policy="overwrite", as_is=True)
    assert (as_is.capacity, as_is.record_size, as_is.policy) == (1024, 64, "block")


def test_the_default_ring_is_sized_in_bytes_and_open_or_create_takes_it_as_asked(name):
    bus = shmbus.Bus.open_or_create(name)
    assert (bus.capacity, bus.record_size) == (16384, 256)  # 4 MiB of records
    again = shmbus.Bus.open_or_create(name)  # the default, asked again, is the same bus
    assert again.capacity == 16384
    with pytest.raises(ValueError, match="exists as block 16384 x 256 B.*not block 2048 x 2048 B"):
        shmbus.Bus.open_or_create(name, record_size=2048)  # its default ring: 2048 records


def test_batches_publish_and_read_many_messages_per_call(name):
    bus = shmbus.Bus.create(name, capacity=64, record_size=64)
    producer = shmbus.Producer(bus)
    consumer = shmbus.Consumer(bus)
    with pytest.raises(ValueError, match="payload 1 is 2025 bytes, max 2024; nothing was published"):
        producer.publish_batch([b"ok", b"x" * 2025])
    assert producer.next_seq == 0
    assert producer.publish_batch([struct.pack("<Q", i) for i in range(50)]) == 50
    first = consumer.read_batch(32)
    assert [s for s, _, _ in first] == list(range(32))
    assert [struct.unpack("<Q", m)[0] for _, _, m in first] == list(range(32))
    kept = first[0][2]
    rest = consumer.read_batch(100, timeout=0)
    assert [s for s, _, _ in rest] == list(range(32, 50))
    with pytest.raises(ValueError):
        bytes(kept)  # released by the next call
    assert consumer.read_batch(8, timeout=0.05) == []
    assert consumer.read_batch(10**12, timeout=0) == []  # bounded per call, nothing huge allocated
    # A full block ring: the batch goes out as far as the timeout allows.
    assert producer.publish_batch([b"y"] * 100, timeout=0.05) == 64
    assert len(consumer.read_batch(1000)) == 64
    producer.close()
    with pytest.raises(shmbus.EndOfStream):
        consumer.read_batch(8, timeout=1.0)


def test_a_batch_that_ends_the_stream_is_returned_and_end_comes_next(name):
    bus = shmbus.Bus.create(name, capacity=64, record_size=64)
    consumer = shmbus.Consumer(bus)
    with shmbus.Producer(bus) as producer:
        producer.publish_batch([b"a", b"b", b"c"])
    got = consumer.read_batch(10, timeout=1.0)
    assert [bytes(m) for _, _, m in got] == [b"a", b"b", b"c"]
    with pytest.raises(shmbus.EndOfStream) as e:
        consumer.read_batch(10)  # at once, not after waiting for a new producer
    assert e.value.reason == "closed"


def test_errors_are_the_builtin_os_errors_python_programs_catch(name):
    with pytest.raises(FileNotFoundError) as e:
        shmbus.Bus.open(name)
    assert isinstance(e.value, shmbus.Error) and isinstance(e.value, shmbus.BusNotFound)
    assert e.value.errno == 2 and e.value.errc == 4 and name in str(e.value)
    shmbus.Bus.create(name, capacity=16, record_size=64)
    with pytest.raises(FileExistsError) as e:
        shmbus.Bus.create(name, capacity=16, record_size=64)
    assert isinstance(e.value, shmbus.BusExists) and e.value.errno == 17
    with pytest.raises(ValueError, match="capacity must be between 0 and .*, not -1"):
        shmbus.Bus.create(name + "-neg", capacity=-1)
    with pytest.raises(shmbus.Error, match="not a power of two"):
        shmbus.Bus.create(name + "-odd", capacity=3)


def test_names_help_pickling_and_repr(name, tmp_path):
    from shmbus import Buffer, Message, Policy  # the stub's names exist at run time
    assert Message and Policy and Buffer
    # The extension is shmbus._shmbus; its classes and errors are named shmbus.X.
    assert {getattr(shmbus, n).__module__ for n in ("Bus", "Producer", "Consumer", "Error", "EndOfStream")} == {"shmbus"}
    assert shmbus.Consumer.__doc__ and "EndOfStream" in shmbus.Consumer.next.__doc__
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    import pickle
    again = pickle.loads(pickle.dumps(bus))
    assert again.name == name and again.capacity == 16
    producer = shmbus.Producer(bus)
    consumer = shmbus.Consumer(bus)
    assert repr(producer) == f"<shmbus.Producer of '{name}', next seq 0>"
    assert repr(consumer).startswith(f"<shmbus.Consumer of '{name}', slot ")
    with pytest.raises(TypeError, match="cannot be pickled; pass the Bus"):
        pickle.dumps(consumer)
    # A Bus goes to a spawned process by name.
    script = tmp_path / "spawned.py"
    script.write_text(
        "import multiprocessing as mp, shmbus, sys\n"
        "def child(bus):\n"
        "    with shmbus.Producer(bus) as p:\n"
        "        p.publish(b'from the child')\n"
        "if __name__ == '__main__':\n"
        f"    bus = shmbus.Bus.open({name!r})\n"
        "    p = mp.get_context('spawn').Process(target=child, args=(bus,))\n"
        "    p.start(); p.join(30)\n"
        "    sys.exit(p.exitcode)\n")
    producer.detach()
    assert subprocess.run([sys.executable, str(script)], env=os.environ, timeout=60).returncode == 0
    assert bytes(consumer.next(5.0)[2]) == b"from the child"


def test_the_stub_type_checks_a_typed_program_under_mypy_strict(tmp_path):
    import shutil
    mypy = shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy is not installed (scripts/install-deps.sh installs it)")
    program = tmp_path / "typed.py"
    program.write_text(
        "import shmbus\n"
        "from shmbus import Message\n"
        "\n"
        "def drain(c: shmbus.Consumer) -> int:\n"
        "    seq, ts, payload = c.next()  # no timeout: a message, never None\n"
        "    total = len(payload) + seq + ts\n"
        "    maybe = c.next(0.1)\n"
        "    if maybe is not None:\n"
        "        total += maybe[0]\n"
        "    batch: list[Message] = c.read_batch(64, timeout=0)\n"
        "    records: int = sum(m.records for m in batch)\n"
        "    if batch:\n"
        "        first: memoryview = batch[0].payload\n"
        "        total += len(first) + batch[0].seq + batch[0].timestamp_ns\n"
        "    return total + len(batch) + records + c.bus.max_message + c.bus.max_payload\n"
        "\n"
        "def main() -> None:\n"
        "    try:\n"
        "        bus = shmbus.Bus.open('typed')\n"
        "    except FileNotFoundError:\n"
        "        bus = shmbus.Bus.create('typed', capacity=16, record_size=64, policy='block')\n"
        "    with shmbus.Producer(bus, max_hold=2.0) as p:\n"
        "        p.publish(b'x')\n"
        "        p.publish(bytearray(b'y'))\n"
        "        p.publish(memoryview(b'z'))\n"
        "        p.publish_batch([b'a', b'b'])\n"
        "    snap = shmbus.Inspector('typed').snapshot()\n"
        "    lag: int = snap['readers'][0]['lag'] if snap['readers'] else 0\n"
        "    reason: str = snap['producer']['liveness']\n"
        "    print(lag, reason, snap['counters']['readers_let_go'], snap['max_message'])\n"
        "    try:\n"
        "        drain(shmbus.Consumer(bus))\n"
        "    except shmbus.EndOfStream as e:\n"
        "        if e.reason == 'producer_died':\n"
        "            pass\n")
    package_parent = os.path.dirname(os.path.dirname(shmbus.__file__))  # holds shmbus/
    out = subprocess.run([mypy, "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(program)],
                         env={**os.environ, "MYPYPATH": package_parent}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_removing_a_bus_ends_the_stream_of_a_blocked_reader(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    consumer = shmbus.Consumer(bus)
    producer = shmbus.Producer(bus)
    ended = []

    def read():
        try:
            consumer.next()  # no timeout: it would wait for good
        except shmbus.EndOfStream as e:
            ended.append(e.reason)

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.2)
    assert shmbus.Bus.remove(name)
    t.join(5)
    assert not t.is_alive() and ended == ["removed"]
    with pytest.raises(RuntimeError, match="producer is closed"):
        producer.publish(b"into a removed bus")
    assert not shmbus.Bus.exists(name)


# ---- Messages that span records

def pattern(seq, size):
    """The bytes of message `seq` in these tests: a view of the wrong message,
    or of the wrong records, differs."""
    return bytes((seq * 131 + i * 7 + i // 64) & 0xFF for i in range(size))


def records_for(size, record_size):
    return 1 if size + 24 <= record_size else -(-(size + 24) // record_size)


def bus_mapping(name):
    """The address ranges of the bus's segment mapped in this process."""
    path = f"/dev/shm/shmbus.{name}"
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].rstrip("\n").removesuffix(" (deleted)") == path:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((lo, hi))
    return ranges


def buffer_address(obj):
    """Where an object's buffer (PEP 3118) starts, as its exporter says."""
    import ctypes
    py_buffer = (ctypes.c_char * 256)()  # a Py_buffer, whose first field is `void* buf`
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.c_void_p]
    assert get(obj, ctypes.addressof(py_buffer), 0) == 0
    try:
        return ctypes.c_void_p.from_buffer(py_buffer).value
    finally:
        release(ctypes.addressof(py_buffer))


def inside(ranges, address, size):
    return any(lo <= address and address + size <= hi for lo, hi in ranges)


READERS = [("block", False), ("block", True), ("overwrite", False)]  # in place, checked copy, checked copy


@pytest.mark.parametrize("policy,best_effort", READERS)
def test_messages_that_span_records_round_trip(name, policy, best_effort):
    """Up to max_message bytes, by publish() and claim(): each read is one
    memoryview of the whole message; sequence numbers count records, and a
    message that would cross the end of the ring starts the next lap (the
    records between lose nothing)."""
    bus = shmbus.Bus.create(name, capacity=16, record_size=64, policy=policy)
    assert (bus.max_payload, bus.max_message) == (40, 8 * 64 - 24)
    assert shmbus.Inspector(name).snapshot()["max_message"] == bus.max_message
    consumer = shmbus.Consumer(bus, best_effort=best_effort)
    producer = shmbus.Producer(bus)
    sizes = [5, 40, 41, 100, 300, bus.max_message, 0, 7, 200, bus.max_message, 41]
    expected_seq = 0
    for i, size in enumerate(sizes * 2):
        k = records_for(size, 64)
        if expected_seq % 16 + k > 16:
            expected_seq += 16 - expected_seq % 16  # padding to the next lap
        if i % 2:
            view = producer.claim(size, timeout=5.0)
            assert len(view) == size and not view.readonly and view.contiguous
            view[:] = pattern(expected_seq, size)
            seq = producer.commit()
        else:
            seq = producer.publish(pattern(expected_seq, size), timeout=5.0)
        assert seq == expected_seq and producer.next_seq == seq + k
        m = consumer.next(1.0)
        assert isinstance(m, shmbus.Message) and isinstance(m, tuple) and len(m) == 3
        assert (m.seq, m.timestamp_ns, m.records) == (seq, 0, k)
        assert m[0] == m.seq and m[2] is m.payload
        assert isinstance(m.payload, memoryview) and m.payload.contiguous and m.payload.readonly
        assert len(m.payload) == size and bytes(m.payload) == pattern(seq, size)
        expected_seq = seq + k
        # Nothing more; the call gives back the records of the message in hand
        # (a block producer waits for them before it reuses them).
        assert consumer.next(0) is None
    assert consumer.lost == 0 and consumer.delivered == 2 * len(sizes)
    assert consumer.cursor == expected_seq == bus.head


@pytest.mark.parametrize("policy,best_effort", READERS)
def test_read_batch_of_small_and_spanning_messages(name, policy, best_effort):
    """A batch keeps the order and the bytes; a message longer than
    max_payload that the reader copies comes alone in its batch, while one
    read in place comes with the others."""
    bus = shmbus.Bus.create(name, capacity=64, record_size=64, policy=policy)
    consumer = shmbus.Consumer(bus, best_effort=best_effort)
    producer = shmbus.Producer(bus)
    sizes = [8, 150, 8, 40, 300, 1000, 8, 41]
    seqs, at = [], 0
    for size in sizes:
        seqs.append(at)
        at += records_for(size, 64)
    assert producer.publish_batch([pattern(s, size) for s, size in zip(seqs, sizes)]) == len(sizes)
    assert producer.next_seq == at == 1 + 3 + 1 + 1 + 6 + 16 + 1 + 2
    got, batches = [], []
    while len(got) < len(sizes):
        batch = consumer.read_batch(256, timeout=1.0)
        assert batch, f"only {len(got)} of {len(sizes)} messages"
        batches.append([len(m.payload) for m in batch])
        for m in batch:  # checked before the next call releases the views
            assert bytes(m.payload) == pattern(m.seq, len(m.payload))
            got.append((m.seq, len(m.payload), m.records))
    assert got == [(s, size, records_for(size, 64)) for s, size in zip(seqs, sizes)]
    if policy == "block" and not best_effort:
        assert batches == [sizes]  # in place: everything available in one batch
    else:
        assert all(len(b) == 1 for b in batches if max(b) > bus.max_payload)
        assert batches == [[8], [150], [8, 40], [300], [1000], [8], [41]]
    assert consumer.read_batch(16, timeout=0) == [] and consumer.lost == 0


def test_a_spanning_message_is_one_view_of_the_shared_records(name):
    """On a block bus a holding reader's view of a message that spans records
    is the bus's memory itself; a best-effort reader's is its own copy."""
    bus = shmbus.Bus.create(name, capacity=16, record_size=128)
    in_place = shmbus.Consumer(bus)
    copying = shmbus.Consumer(bus, best_effort=True)
    producer = shmbus.Producer(bus)
    data = pattern(0, bus.max_message)
    producer.publish(data)
    ranges = bus_mapping(name)
    assert ranges
    view = in_place.next(1.0).payload
    address = buffer_address(view)
    assert inside(ranges, address, len(view)) and bytes(view) == data
    copy = copying.next(1.0).payload
    assert not inside(ranges, buffer_address(copy), 1) and bytes(copy) == data


def test_numpy_reads_a_spanning_message_without_a_copy(name):
    np = pytest.importorskip("numpy")
    bus = shmbus.Bus.create(name, capacity=16, record_size=128)
    consumer = shmbus.Consumer(bus)
    producer = shmbus.Producer(bus)
    values = np.arange(bus.max_message // 8, dtype=np.uint64)
    producer.publish(values)
    m = consumer.next(1.0)
    assert m.records == 8
    first = np.frombuffer(m.payload, dtype=np.uint64)
    second = np.frombuffer(m.payload, dtype=np.uint64)
    assert np.array_equal(first, values)
    address = first.__array_interface__["data"][0]
    assert np.shares_memory(first, second) and address == buffer_address(m.payload)
    assert inside(bus_mapping(name), address, first.nbytes)  # the records in shared memory, not a copy
    assert not first.flags.writeable


def test_claim_of_a_large_size_and_too_large_errors(name):
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    consumer = shmbus.Consumer(bus)
    producer = shmbus.Producer(bus)
    too_many = bus.max_message + 1
    for call in (lambda: producer.publish(b"x" * too_many), lambda: producer.claim(too_many)):
        with pytest.raises(ValueError, match=f"bus '{name}': message of {too_many} bytes, max {bus.max_message}$"):
            call()
    with pytest.raises(ValueError, match=f"payload 2 is {too_many} bytes, max {bus.max_message}; nothing"):
        producer.publish_batch([b"a", b"b" * 100, b"c" * too_many])
    assert producer.next_seq == 0
    # A claim of more than max_payload: one contiguous writable view.
    view = producer.claim(bus.max_message)
    assert len(view) == bus.max_message
    view[:] = pattern(0, bus.max_message)
    assert producer.commit() == 0 and producer.next_seq == 8
    # Committing less than a large claim keeps the records claimed.
    view = producer.claim(300)
    view[:50] = pattern(8, 50)
    assert producer.commit(50) == 8 and producer.next_seq == 8 + records_for(300, 64)
    assert producer.publish(b"after") == 8 + records_for(300, 64)
    m = consumer.next(1.0)
    assert (m.seq, m.records, bytes(m.payload)) == (0, 8, pattern(0, bus.max_message))
    m = consumer.next(1.0)
    assert (m.seq, m.records, bytes(m.payload)) == (8, records_for(300, 64), pattern(8, 50))
    m = consumer.next(1.0)
    assert (m.seq, m.records, bytes(m.payload)) == (8 + records_for(300, 64), 1, b"after")


def test_commit_refuses_while_an_array_made_from_the_claim_lives(name):
    """A numpy array on a claim's view reaches the record itself: commit()
    refuses while it lives, so no write through it lands in a published
    message; once it is gone the claim commits what it wrote."""
    np = pytest.importorskip("numpy")
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    consumer = shmbus.Consumer(bus)
    producer = shmbus.Producer(bus)
    view = producer.claim(8)
    array = np.frombuffer(view, dtype=np.uint64)
    array[0] = 111
    with pytest.raises(BufferError, match=f"bus '{name}': the claim's view is still exported .1 buffer"):
        producer.commit()
    assert producer.next_seq == 0  # nothing published; the claim is still open
    with pytest.raises(RuntimeError, match="commit"):
        producer.publish(b"x")
    del array
    assert producer.commit() == 0
    assert np.frombuffer(consumer.next(1.0).payload, dtype=np.uint64)[0] == 111
    with pytest.raises(ValueError):
        view[0] = 1  # released by the commit
    # A slice shares the view's buffer: the same rule.
    view = producer.claim(8)
    part = view[:4]
    part[:] = b"abcd"
    with pytest.raises(BufferError, match="still exported"):
        producer.commit(4)
    del part
    assert producer.commit(4) == 1
    assert bytes(consumer.next(1.0).payload) == b"abcd"


@pytest.mark.parametrize("policy", ["block", "overwrite"])
def test_a_copying_consumer_hands_out_messages_that_outlive_the_next_call(name, policy):
    """Without copy, a payload (and an array made from it) is valid until the
    next call: on an overwrite bus such an array then shows the next message.
    With copy=True every payload is its own bytes and keeps its values."""
    np = pytest.importorskip("numpy")
    bus = shmbus.Bus.create(name, capacity=4, record_size=64, policy=policy)
    plain = shmbus.Consumer(bus, name="plain")
    copying = shmbus.Consumer(bus, name="copying", copy=True)
    producer = shmbus.Producer(bus)
    for i in (1, 2, 3):
        producer.publish(np.array([i], dtype=np.uint64))
    m = plain.next(1.0)
    early = np.frombuffer(m.payload, dtype=np.uint64)
    plain.next(1.0)
    with pytest.raises(ValueError):
        bytes(m.payload)
    if policy == "overwrite":
        assert early[0] == 2  # the consumer's own buffer holds the next message now
    kept = [copying.next(1.0) for _ in range(2)] + copying.read_batch(timeout=1.0)
    arrays = [np.frombuffer(k.payload, dtype=np.uint64) for k in kept]
    assert copying.next(0.01) is None
    producer.publish_batch([np.array([i], dtype=np.uint64) for i in (4, 5, 6, 7)], timeout=0.01)
    for _ in range(3):
        plain.next(1.0)
    assert [int(a[0]) for a in arrays] == [1, 2, 3]
    assert [bytes(k.payload) for k in kept] == [struct.pack("<Q", i) for i in (1, 2, 3)]
    assert all(k.payload.readonly for k in kept)


def test_a_bus_closes_and_is_a_context_manager(name):
    with shmbus.Bus.create(name, capacity=8, record_size=64) as bus:
        assert not bus.closed
        consumer = shmbus.Consumer(bus)
        producer = shmbus.Producer(bus)
    assert bus.closed and bus.name == name and repr(bus) == f"<shmbus.Bus '{name}', closed>"
    for use in (lambda: bus.head, lambda: bus.capacity, lambda: shmbus.Consumer(bus),
                lambda: shmbus.Producer(bus)):
        with pytest.raises(ValueError, match=f"bus '{name}': this Bus is closed"):
            use()
    bus.close()  # again: nothing
    # What was made from it carries on, and the bus stays.
    producer.publish(b"after")
    assert bytes(consumer.next(1.0).payload) == b"after"
    assert consumer.bus.head == 1 and not consumer.bus.closed
    assert shmbus.Bus.exists(name)
    reopened = shmbus.Bus.open(name)
    reopened.close()
    assert reopened.closed



def test_a_snapshot_names_the_reader_holding_a_waiting_publish(name):
    """publish() waits in slices (to handle signals between them): another
    process looking at any moment sees one wait, held back by the reader
    that does not read, since the wait began."""
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    lazy = shmbus.Consumer(bus, name="lazy")
    producer = shmbus.Producer(bus)
    for _ in range(16):
        producer.publish(b"x")
    waiting = threading.Thread(target=lambda: pytest.raises(TimeoutError, producer.publish, b"y", timeout=1.5))
    waiting.start()
    time.sleep(0.1)
    look = ("import shmbus, sys, time\n"
            "seen = []\n"
            "for _ in range(50):\n"
            "    p = shmbus.Inspector(sys.argv[1]).snapshot()['producer']\n"
            "    seen.append((p['waiting_for_space'], p['blocked_on_slot']))\n"
            "    time.sleep(0.017)\n"
            "print(seen)\n")
    out = subprocess.run([sys.executable, "-c", look, name], check=True, capture_output=True, text=True,
                         env=os.environ)
    waiting.join()
    seen = eval(out.stdout)
    assert seen == [(True, lazy.slot)] * 50


def test_a_snapshot_has_the_inspectors_warnings_and_stopped_processes(name):
    """snapshot() judges the bus as shmbus-inspect show --json does (the same
    library code): stopped readers, dead ones, who holds the producer, the
    warnings in the same words."""
    bus = shmbus.Bus.create(name, capacity=16, record_size=64)
    attach = ("import shmbus, sys, time\n"
              "c = shmbus.Consumer(shmbus.Bus.open(sys.argv[1]), name=sys.argv[2],\n"
              "                    best_effort=sys.argv[2] == 'gone')\n"
              "print(c.slot, flush=True)\n"
              "time.sleep(60)\n")
    readers = {}
    # A best-effort reader: the producer does not wait for it, so it does not
    # reclaim it either once it is dead.
    for who in ("stuck", "gone"):
        child = subprocess.Popen([sys.executable, "-c", attach, name, who], stdout=subprocess.PIPE, text=True,
                                 env=os.environ)
        readers[who] = (child, int(child.stdout.readline()))
    stuck, stuck_slot = readers["stuck"]
    gone, gone_slot = readers["gone"]
    try:
        os.kill(stuck.pid, signal.SIGSTOP)
        os.kill(gone.pid, signal.SIGKILL)
        gone.wait()
        producer = shmbus.Producer(bus)
        for _ in range(16):
            producer.publish(b"x")
        waiting = threading.Thread(target=lambda: pytest.raises(TimeoutError, producer.publish, b"y", timeout=1.0))
        waiting.start()
        time.sleep(0.2)
        snap = shmbus.Inspector(name).snapshot()
        cli = None
        if os.environ.get("SHMBUS_INSPECT"):
            out = subprocess.run([os.environ["SHMBUS_INSPECT"], "show", name, "--json", "--interval", "0"],
                                 check=True, capture_output=True, text=True)
            cli = json.loads(out.stdout)
        waiting.join()
    finally:
        os.kill(stuck.pid, signal.SIGKILL)
        stuck.wait()
    by_slot = {r["slot"]: r for r in snap["readers"]}
    assert by_slot[stuck_slot]["stopped"] and by_slot[stuck_slot]["liveness"] == "alive"
    assert not by_slot[gone_slot]["stopped"] and by_slot[gone_slot]["liveness"] == "dead"
    assert not snap["producer"]["stopped"] and snap["producer"]["waiting_for_space"]
    assert snap["producer"]["blocked_on_slot"] == stuck_slot
    kinds = [(w["kind"], w["slot"]) for w in snap["warnings"]]
    assert kinds[0] == ("dead_reader", gone_slot)
    assert ("producer_blocked", snap["producer"]["blocked_on_slot"]) in kinds
    assert ("reader_lagging", stuck_slot) in kinds and ("reader_lagging", gone_slot) in kinds
    [dead] = [w["message"] for w in snap["warnings"] if w["kind"] == "dead_reader"]
    assert dead == (f"reader {gone_slot} 'gone' (pid {gone.pid}, dead) is dead but still holds its slot at "
                    f"cursor 0; `shmbus-inspect gc {name}` reclaims it")
    assert f"reader {stuck_slot} 'stuck' (pid {stuck.pid}, stopped) lags 16 messages (100.0% of the ring)" in [
        w["message"] for w in snap["warnings"]]
    if cli is not None:
        assert snap["warnings"] == cli["warnings"]
        assert [(r["slot"], r["stopped"]) for r in snap["readers"]] == [
            (r["slot"], r["stopped"]) for r in cli["readers"]]
        assert snap["producer"]["blocked_on_slot"] == cli["producer"]["blocked_on_slot"]


def test_a_snapshot_shows_the_exact_cursor_of_a_reader_that_waits(name):
    """A reader stores its cursor lazily (every capacity/16 reads, at most
    32) but always before it waits: one waiting, or whose last call found
    nothing, is shown where it is; one between calls at most 31 behind."""
    bus = shmbus.Bus.create(name, capacity=1024, record_size=64)
    consumer = shmbus.Consumer(bus, name="r")
    producer = shmbus.Producer(bus)

    def shown():
        [r] = shmbus.Inspector(name).snapshot()["readers"]
        return r["cursor"], r["delivered"], r["lag"]

    for _ in range(10):
        producer.publish(b"x")
    for _ in range(10):
        consumer.next(1.0)
    cursor, delivered, _ = shown()
    assert consumer.cursor == 10 and 10 - 31 <= cursor <= 10 and delivered == cursor
    waiting = threading.Thread(target=consumer.next, args=(1.0,))
    waiting.start()
    time.sleep(0.2)
    assert shown() == (10, 10, 0)
    waiting.join()
    producer.publish_batch([b"y"] * 40)
    assert len(consumer.read_batch(timeout=1.0)) == 40
    assert consumer.next(0) is None
    assert shown() == (50, 50, 0)


def test_the_stubs_pass_mypy_strict_themselves(tmp_path):
    """An installed package's stub errors are hidden from its users' mypy
    runs (site-packages): check the stub as a package of its own."""
    import shutil
    mypy = shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy is not installed (scripts/install-deps.sh installs it)")
    pkg = tmp_path / "shmbus"
    pkg.mkdir()
    shutil.copy(os.path.join(os.path.dirname(shmbus.__file__), "__init__.pyi"), pkg / "__init__.pyi")
    (pkg / "py.typed").write_text("")
    checked = subprocess.run([mypy, "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                              "-p", "shmbus"], cwd=tmp_path, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def bus_dirs():
    import tempfile
    a = tempfile.mkdtemp(prefix="shmbus-pydir.", dir="/dev/shm")
    b = tempfile.mkdtemp(prefix="shmbus-pydir.", dir="/dev/shm")
    yield a, b
    import shutil
    shutil.rmtree(a, ignore_errors=True)
    shutil.rmtree(b, ignore_errors=True)


def test_a_bus_lives_in_the_directory_it_is_given(name, bus_dirs):
    a, b = bus_dirs
    bus = shmbus.Bus.create(name, capacity=16, record_size=128, dir=a)
    assert (bus.dir, bus.path) == (a, f"{a}/shmbus.{name}")
    assert bus.pages == "tmpfs, 4 KiB pages" and bus.page_size == 4096
    assert os.path.exists(f"{a}/shmbus.{name}") and not os.path.exists(f"/dev/shm/shmbus.{name}")
    assert shmbus.Bus.exists(name, dir=a) and not shmbus.Bus.exists(name, dir=b) and not shmbus.Bus.exists(name)
    with pytest.raises(shmbus.BusNotFound, match=f"{b}/shmbus.{name} does not exist"):
        shmbus.Bus.open(name, dir=b)
    producer = shmbus.Producer(bus)
    consumer = shmbus.Consumer(shmbus.Bus.open(name, dir=a))
    producer.publish(b"in a")
    assert bytes(consumer.next(1.0).payload) == b"in a"
    assert shmbus.Inspector(name, dir=a).snapshot()["head"] == 1
    # A Bus pickles with its directory.
    import pickle
    assert pickle.loads(pickle.dumps(bus)).path == bus.path
    consumer.close()
    producer.close()
    assert not shmbus.Bus.remove(name, dir=b)
    assert shmbus.Bus.remove(name, dir=a)


def test_the_default_directory_is_set_bus_dir_then_shmbus_dir_then_dev_shm(name, bus_dirs, monkeypatch):
    a, b = bus_dirs
    monkeypatch.setenv("SHMBUS_DIR", a)
    try:
        assert shmbus.bus_dir() == a
        assert shmbus.Bus.create(name, capacity=16).dir == a
        shmbus.set_bus_dir(b)
        assert shmbus.bus_dir() == b and not shmbus.Bus.exists(name)
        with pytest.raises(shmbus.Error, match=f"bus directory {a}/missing does not exist"):
            shmbus.set_bus_dir(f"{a}/missing")
        assert shmbus.bus_dir() == b
    finally:
        shmbus.set_bus_dir("")
    assert shmbus.Bus.remove(name)  # from $SHMBUS_DIR again
    monkeypatch.delenv("SHMBUS_DIR")
    assert shmbus.bus_dir() == "/dev/shm"
