"""asyncio and many buses from one thread: Consumer.fileno()/has_news(),
await consumer.next_async(), async for, WaitSet (wait, fileno, wait_async),
and Producer.publish_async on a full bus."""
import asyncio
import os
import select
import struct
import threading
import time

import pytest

import shmbus


@pytest.fixture
def names(request):
    base = f"pyaio-{os.getpid()}-{request.node.name[:30]}"
    made = [f"{base}-{i}" for i in range(4)]
    yield made
    for n in made:
        shmbus.Bus.remove(n)


def readable(fd, timeout):
    return bool(select.select([fd], [], [], timeout)[0])


def test_fileno_is_readable_only_while_there_is_news(names):
    bus = shmbus.Bus.create(names[0], capacity=64, record_size=64)
    c = shmbus.Consumer(bus)
    p = shmbus.Producer(bus)
    fd = c.fileno()
    assert c.fileno() == fd
    assert not c.has_news()
    assert not readable(fd, 0.05)
    p.publish(b"a")
    assert readable(fd, 5)
    assert c.has_news()
    assert readable(fd, 0), "still readable: the news is not taken"
    assert bytes(c.next(0).payload) == b"a"
    assert not c.has_news()
    assert not readable(fd, 0)
    p.close()
    assert readable(fd, 5)
    assert c.has_news(), "the end of the stream is news"
    with pytest.raises(shmbus.EndOfStream):
        c.next(0)


def test_async_for_reads_every_message_of_another_thread_then_ends(names):
    bus = shmbus.Bus.create(names[0], capacity=64, record_size=64)
    c = shmbus.Consumer(bus)
    n = 5000

    def produce():
        with shmbus.Producer(bus) as p:
            for i in range(n):
                if i % 500 == 499:
                    time.sleep(0.002)  # the reader goes to sleep now and then
                p.publish(struct.pack("<Q", i))

    async def main():
        got = []
        async for m in c:
            got.append(struct.unpack("<Q", m.payload)[0])
        return got

    t = threading.Thread(target=produce)
    t.start()
    got = asyncio.run(main())
    t.join()
    assert got == list(range(n))


def test_a_cancelled_await_loses_nothing(names):
    bus = shmbus.Bus.create(names[0], capacity=64, record_size=64)
    c = shmbus.Consumer(bus)
    p = shmbus.Producer(bus)

    async def main():
        for _ in range(20):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.next_async(), 0.005)
        assert await c.next_async(0.01) is None
        p.publish(b"first")
        m = await asyncio.wait_for(c.next_async(), 5)
        return m.seq, bytes(m.payload)

    assert asyncio.run(main()) == (0, b"first")


def test_one_thread_awaits_three_buses_and_publishes_to_a_fourth(names):
    # The fourth holds everything forwarded: it is read after the loop ends.
    buses = [shmbus.Bus.create(n, capacity=64 if i < 3 else 8192, record_size=64) for i, n in enumerate(names)]
    readers = [shmbus.Consumer(b) for b in buses[:3]]
    out_reader = shmbus.Consumer(buses[3])
    per_bus = 2000

    def produce(bus, k):
        with shmbus.Producer(bus) as p:
            for i in range(per_bus):
                p.publish(struct.pack("<QQ", k, i))

    threads = [threading.Thread(target=produce, args=(b, k)) for k, b in enumerate(buses[:3])]

    async def main():
        out = shmbus.Producer(buses[3])
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.001)

        tick_task = asyncio.create_task(ticker())
        seen = [[] for _ in range(3)]
        ended = set()
        with shmbus.WaitSet() as ws:
            for r in readers:
                ws.add(r)
            for t in threads:
                t.start()
            while len(ended) < 3:
                for r in await ws.wait_async(10):
                    k = readers.index(r)
                    while True:
                        try:
                            m = r.next(0)
                        except shmbus.EndOfStream:
                            ended.add(k)
                            ws.remove(r)
                            break
                        if m is None:
                            break
                        bus_k, i = struct.unpack("<QQ", m.payload)
                        seen[k].append(i)
                        await out.publish_async(m.payload)  # forwarded in order
        out.close()
        stop = True
        await tick_task
        return seen, ticks

    seen, ticks = asyncio.run(main())
    for t in threads:
        t.join()
    assert seen == [list(range(per_bus))] * 3
    forwarded = [struct.unpack("<QQ", m.payload) for m in out_reader]
    assert sorted(forwarded) == sorted((k, i) for k in range(3) for i in range(per_bus))
    assert ticks > 0, "the loop ran other tasks meanwhile"


def test_publish_async_on_a_full_bus_lets_the_loop_run_and_completes(names):
    bus = shmbus.Bus.create(names[0], capacity=16, record_size=64)
    c = shmbus.Consumer(bus)
    p = shmbus.Producer(bus)
    for i in range(16):
        p.publish(struct.pack("<Q", i))

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            for _ in range(20):
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        with pytest.raises(TimeoutError):
            await p.publish_async(b"x", timeout=0.02)
        reader = threading.Timer(0.05, lambda: [c.next(1) for _ in range(16)])
        reader.start()
        seq = await p.publish_async(struct.pack("<Q", 16), timeout=10)
        reader.join()
        await task
        return seq, ticks

    seq, ticks = asyncio.run(main())
    assert seq == 16
    assert ticks == 20
    assert struct.unpack("<Q", c.next(1).payload)[0] == 16, "the timed-out publish published nothing"


def test_a_consumer_closed_while_in_a_wait_set_leaves_it(names):
    buses = [shmbus.Bus.create(n, capacity=64, record_size=64) for n in names[:2]]
    a, b = shmbus.Consumer(buses[0]), shmbus.Consumer(buses[1])
    ws = shmbus.WaitSet()
    ws.add(a)
    ws.add(b)
    assert len(ws) == 2
    fd = ws.fileno()
    assert ws.wait(0) == []
    a.close()
    assert len(ws) == 1
    with shmbus.Producer(buses[1]) as p:
        p.publish(b"b")
    assert readable(fd, 5)
    assert ws.wait(0) == [b]
    with pytest.raises(shmbus.Error):
        ws.add(b)
    ws.close()
    assert "closed" in repr(ws)
    with pytest.raises(ValueError):
        ws.wait(0)


def test_a_wait_set_waiting_in_one_thread_while_another_closes_and_removes(names):
    buses = [shmbus.Bus.create(n, capacity=64, record_size=64) for n in names[:3]]
    a, b, c = (shmbus.Consumer(bus) for bus in buses)
    ws = shmbus.WaitSet()
    for x in (a, b, c):
        ws.add(x)
    results = []

    def waiter():
        for _ in range(3):
            results.append(ws.wait(5))

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.2)
    with pytest.raises(RuntimeError, match="in use by another thread"):
        a.next(0)  # the waiting thread holds it
    started = time.monotonic()
    a.close()  # the usual shutdown: the wait returns and closes it
    assert time.monotonic() - started < 2
    assert "closed" in repr(a)
    time.sleep(0.2)
    ws.remove(b)  # waits for the wait to return
    assert len(ws) == 1
    with shmbus.Producer(buses[2]) as p:
        p.publish(b"c")
    t.join(10)
    assert not t.is_alive()
    assert results[-1] == [c], results


@pytest.mark.parametrize("how", ["next_async", "async_for", "wait_async"])
@pytest.mark.parametrize("closer", ["loop", "thread"])
def test_closing_a_consumer_wakes_an_await_on_it(names, how, closer):
    bus = shmbus.Bus.create(names[0], capacity=64, record_size=64)
    c = shmbus.Consumer(bus)
    ws = shmbus.WaitSet()
    ws.add(c)

    async def main():
        loop = asyncio.get_running_loop()
        if closer == "loop":
            loop.call_later(0.2, c.close)
        else:
            threading.Timer(0.2, c.close).start()
        started = loop.time()
        if how == "wait_async":
            assert await ws.wait_async() == []  # its only member left
        else:
            with pytest.raises(RuntimeError, match="closed"):
                if how == "next_async":
                    await c.next_async()
                else:
                    async for _ in c:
                        pass
        return loop.time() - started

    took = asyncio.run(asyncio.wait_for(main(), 10))
    assert took < 2


def test_closing_a_wait_set_wakes_an_await_on_it(names):
    bus = shmbus.Bus.create(names[0], capacity=64, record_size=64)
    c = shmbus.Consumer(bus)
    ws = shmbus.WaitSet()
    ws.add(c)

    async def main():
        asyncio.get_running_loop().call_later(0.2, ws.close)
        with pytest.raises(ValueError, match="closed"):
            await ws.wait_async()

    asyncio.run(asyncio.wait_for(main(), 10))
