# asyncio: one thread awaits messages from three buses and publishes to a
# fourth, without blocking its event loop. Three producer processes feed
# the buses; a task reads the fourth with `async for`.
#
#   python3 examples/asyncio_buses.py [NAME-PREFIX]
import asyncio
import multiprocessing
import struct
import sys
from typing import List

import shmbus

PER_BUS = 10_000


def produce(name: str, index: int) -> None:
    bus = shmbus.Bus.open(name)
    with shmbus.Producer(bus, wait_for_readers=1) as producer:
        for i in range(PER_BUS):
            producer.publish(struct.pack("<QQ", index, i))


async def forward(inputs: List[shmbus.Consumer], out: shmbus.Producer) -> int:
    """Every message of the inputs, in each one's order, to `out`."""
    forwarded = 0
    with shmbus.WaitSet() as waiting:
        for consumer in inputs:
            waiting.add(consumer)
        while len(waiting) > 0:
            for consumer in await waiting.wait_async():
                while True:
                    try:
                        message = consumer.next(0)
                    except shmbus.EndOfStream:
                        waiting.remove(consumer)
                        break
                    if message is None:
                        break
                    await out.publish_async(message.payload)
                    forwarded += 1
    out.close()
    return forwarded


async def total(summary: shmbus.Consumer) -> List[int]:
    per_input = [0, 0, 0]
    async for message in summary:
        index, _ = struct.unpack("<QQ", message.payload)
        per_input[index] += 1
    return per_input


async def main(prefix: str) -> None:
    names = [f"{prefix}-{i}" for i in range(4)]
    buses = [shmbus.Bus.create(name, capacity=1024, record_size=64) for name in names]
    inputs = [shmbus.Consumer(bus) for bus in buses[:3]]
    summary = shmbus.Consumer(buses[3])
    out = shmbus.Producer(buses[3])
    workers = [multiprocessing.get_context("spawn").Process(target=produce, args=(names[i], i)) for i in range(3)]
    for worker in workers:
        worker.start()
    try:
        forwarded, per_input = await asyncio.gather(forward(inputs, out), total(summary))
    finally:
        for worker in workers:
            worker.join()
        for name in names:
            shmbus.Bus.remove(name)
    print(f"forwarded {forwarded} messages from 3 buses; the fourth carried {per_input}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "asyncio-example"))
