# Uses the installed Python module: create a bus, publish, read, remove.
import sys

import shmbus

name = sys.argv[1]
bus = shmbus.Bus.create(name, capacity=8, record_size=64)
consumer = shmbus.Consumer(bus)
with shmbus.Producer(bus) as producer:
    producer.publish(b"from Python through an installed shmbus")
seq, _, payload = consumer.next(1.0)
ok = seq == 0 and bytes(payload) == b"from Python through an installed shmbus"
consumer.close()
shmbus.Bus.remove(name)
print(f"{name} (Python, {shmbus.__file__}): {'message received' if ok else 'wrong message'}")
sys.exit(0 if ok else 1)
