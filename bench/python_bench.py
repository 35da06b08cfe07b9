#!/usr/bin/env python3
"""Python throughput: one producer process, one consumer process, N messages
of SIZE bytes, each consumer checking every sequence number. In the same run:

  shmbus  py -> py    the Python module on both sides (publish / next)
  shmbus  C++ -> py   shmbus-producer --count N feeding a Python consumer
  shmbus  asyncio     the consumer in an asyncio loop: `async for` (the loop
                      sleeps on Consumer.fileno() when it runs dry)
  shmbus  executor    the consumer in an asyncio loop, each message through
                      `await loop.run_in_executor(None, consumer.next)`
  shared_memory+Queue multiprocessing.shared_memory ring of slots, slot
                      numbers passed through a multiprocessing.Queue (bounded
                      to half the ring, so a slot is not reused while queued)
  Queue               multiprocessing.Queue carrying the bytes themselves

Usage: PYTHONPATH=build/python/module python3 bench/python_bench.py \
         --producer build/producer/shmbus-producer [--count 200000] [--size 64] [--runs 3]
Prints a Markdown table of medians (msgs/s) and the ratio to shmbus py -> py."""
import argparse
import asyncio
import multiprocessing as mp
import os
import platform
import statistics
import struct
import subprocess
import time
from multiprocessing import shared_memory

import shmbus

SEQ = struct.Struct("<Q")


def payload(size, seq):
    return SEQ.pack(seq) + b"x" * (size - SEQ.size)


# ---- shmbus

def shmbus_consume(name, count, ready, result, mode="loop"):
    consumer = shmbus.Consumer(shmbus.Bus.open(name), name="bench")
    ready.set()
    n = 0

    def check(seq, view):
        nonlocal n
        if seq != n or SEQ.unpack_from(view)[0] != seq:
            raise SystemExit(f"message {seq}: expected {n}")
        n += 1

    if mode == "loop":
        for seq, _, view in consumer:
            check(seq, view)
    elif mode == "asyncio":
        async def run():
            async for seq, _, view in consumer:
                check(seq, view)
        asyncio.run(run())
    else:  # executor
        async def run():
            loop = asyncio.get_running_loop()
            while True:
                try:
                    seq, _, view = await loop.run_in_executor(None, consumer.next)
                except shmbus.EndOfStream:
                    return
                check(seq, view)
        asyncio.run(run())
    result.put((n, None, time.perf_counter()))


def shmbus_produce(name, count, size):
    producer = shmbus.Producer(shmbus.Bus.open(name), wait_for_readers=1, wait_for_readers_timeout=10)
    base = bytearray(payload(size, 0))
    for i in range(count):
        SEQ.pack_into(base, 0, i)
        producer.publish(base)
    producer.close()


def run_shmbus(count, size, cpp_producer=None, mode="loop"):
    name = f"pybench-{os.getpid()}"
    shmbus.Bus.remove(name)
    shmbus.Bus.create(name, capacity=65536, record_size=max(64, (size + 24 + 63) // 64 * 64))
    ready, result = mp.Event(), mp.Queue()
    c = mp.Process(target=shmbus_consume, args=(name, count, ready, result, mode))
    c.start()
    ready.wait(10)
    t0 = time.perf_counter()
    if cpp_producer:
        subprocess.run([cpp_producer, name, "--count", str(count), "--size", str(size)],
                       check=True, stderr=subprocess.DEVNULL)
    else:
        p = mp.Process(target=shmbus_produce, args=(name, count, size))
        p.start()
        p.join()
    n, _, end = result.get(timeout=120)
    c.join()
    shmbus.Bus.remove(name)
    assert n == count, f"received {n} of {count}"
    return count / (end - t0)


# ---- multiprocessing.shared_memory + Queue

def shm_consume(shm_name, slots, size, count, q, result):
    shm = shared_memory.SharedMemory(name=shm_name)
    buf = shm.buf
    n = 0
    while True:
        item = q.get()
        if item is None:
            break
        off = (item % slots) * size
        data = bytes(buf[off:off + size])  # read before the slot can be reused
        if SEQ.unpack_from(data)[0] != n:
            raise SystemExit(f"message {n}: got {SEQ.unpack_from(data)[0]}")
        n += 1
    result.put((n, time.perf_counter()))
    del buf
    shm.close()


def run_shm_queue(count, size):
    slots = 65536
    shm = shared_memory.SharedMemory(create=True, size=slots * size)
    q = mp.Queue(maxsize=slots // 2)
    result = mp.Queue()
    c = mp.Process(target=shm_consume, args=(shm.name, slots, size, count, q, result))
    c.start()
    base = bytearray(payload(size, 0))
    t0 = time.perf_counter()
    buf = shm.buf
    for i in range(count):
        SEQ.pack_into(base, 0, i)
        off = (i % slots) * size
        buf[off:off + size] = base
        q.put(i)
    q.put(None)
    n, end = result.get(timeout=300)
    c.join()
    del buf
    shm.close()
    shm.unlink()
    assert n == count
    return count / (end - t0)


# ---- multiprocessing.Queue of bytes

def queue_consume(q, result):
    n = 0
    while True:
        item = q.get()
        if item is None:
            break
        if SEQ.unpack_from(item)[0] != n:
            raise SystemExit(f"message {n}")
        n += 1
    result.put((n, time.perf_counter()))


def run_queue(count, size):
    q = mp.Queue(maxsize=65536)
    result = mp.Queue()
    c = mp.Process(target=queue_consume, args=(q, result))
    c.start()
    base = bytearray(payload(size, 0))
    t0 = time.perf_counter()
    for i in range(count):
        SEQ.pack_into(base, 0, i)
        q.put(bytes(base))
    q.put(None)
    n, end = result.get(timeout=300)
    c.join()
    assert n == count
    return count / (end - t0)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--producer", help="shmbus-producer, for the C++ -> Python row")
    ap.add_argument("--executor-count", type=int, default=20_000,
                    help="messages for the run_in_executor row (thousands per second: fewer, same rate)")
    a = ap.parse_args()
    rows = {"shmbus, Python -> Python": lambda: run_shmbus(a.count, a.size)}
    if a.producer:
        rows["shmbus, C++ -> Python"] = lambda: run_shmbus(a.count, a.size, a.producer)
    rows["shmbus, Python -> Python, asyncio `async for`"] = lambda: run_shmbus(a.count, a.size, mode="asyncio")
    rows["shmbus, Python -> Python, asyncio + run_in_executor(next)"] = lambda: run_shmbus(
        a.executor_count, a.size, mode="executor")
    rows["shared_memory + Queue of slot numbers"] = lambda: run_shm_queue(a.count, a.size)
    rows["multiprocessing.Queue of bytes"] = lambda: run_queue(a.count, a.size)
    results = {k: [] for k in rows}
    for _ in range(a.runs):  # interleaved, so drift hits every row alike
        for k, f in rows.items():
            results[k].append(f())
    base = statistics.median(results["shmbus, Python -> Python"])
    print(f"{a.count} messages of {a.size} B, one producer and one consumer process, "
          f"medians of {a.runs} runs; {cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}\n")
    print("| transport | msgs/s | ÷ shmbus py → py |")
    print("|---|--:|--:|")
    for k, v in results.items():
        m = statistics.median(v)
        print(f"| {k} | {m / 1e3:,.0f} k | {m / base:.2f} |")


if __name__ == "__main__":
    main()
