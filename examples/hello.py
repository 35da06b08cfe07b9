# docs/python.md's example: create a bus, publish three messages, read them.
import sys

import shmbus

name = sys.argv[1] if len(sys.argv) > 1 else "hello-py"
bus = shmbus.Bus.create(name, capacity=1024, record_size=128)
consumer = shmbus.Consumer(bus)  # attach before publishing: it starts at the oldest record
with shmbus.Producer(bus) as producer:  # leaving the block marks end-of-stream
    for text in (b"hello", b"from", b"Python"):
        producer.publish(text)
    view = producer.claim(8)  # or write in place
    view[:] = b"in place"
    producer.commit()

for seq, timestamp_ns, payload in consumer:  # until end-of-stream
    print(f"#{seq} {bytes(payload).decode()}")  # payload: a view into shared memory
print(shmbus.Inspector(name).snapshot()["readers"][0]["delivered"], "delivered")
shmbus.Bus.remove(name)
