"""`pip install SOURCE_DIR` into a fresh venv, then use the installed shmbus
and type-check a program against it with mypy --strict, without MYPYPATH:
mypy finds the types through PEP 561 (shmbus/py.typed).

  python3 pip_install.py SOURCE_DIR WORK_DIR

Run by ctest with the python3 the module is built for. Exits 77 (ctest's
SKIP_RETURN_CODE) when pip cannot reach the package index, which it needs
for the build backend (scikit-build-core), or when venv or mypy is missing."""
import os
import shutil
import subprocess
import sys
import time

SKIP = 77
source_dir, work_dir = sys.argv[1], sys.argv[2]
venv = os.path.join(work_dir, "venv")
python = os.path.join(venv, "bin", "python")
# The user's pip configuration (index, proxy) applies; nothing else leaks in.
env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH", "VIRTUAL_ENV")}
env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")  # ninja would run a job per core and more
started = time.monotonic()


def run(*cmd, timeout=600, check=True):
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, env=env, cwd=work_dir, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        sys.exit(f"failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


shutil.rmtree(work_dir, ignore_errors=True)
os.makedirs(work_dir)
made = run(sys.executable, "-m", "venv", venv, check=False)
if made.returncode != 0:
    print(f"SKIP: {sys.executable} -m venv failed (apt install python3-venv):\n{made.stderr}")
    sys.exit(SKIP)

# Can pip reach the index? Fetch the build backend alone, and skip if not.
probe = run(python, "-m", "pip", "download", "--no-deps", "--retries", "1", "--timeout", "20",
            "--dest", os.path.join(work_dir, "probe"), "scikit-build-core>=0.10", timeout=120, check=False)
if probe.returncode != 0:
    print(f"SKIP: pip cannot reach the package index for scikit-build-core:\n{probe.stderr.strip()}")
    sys.exit(SKIP)

installed = run(python, "-m", "pip", "install", "--retries", "1", source_dir)
print(installed.stdout.strip().splitlines()[-1])
print(f"pip install took {time.monotonic() - started:.0f} s")

use = run(python, "-c", """
import os, sys, shmbus
name = f"pip-install-{os.getpid()}"
bus = shmbus.Bus.create(name, capacity=8, record_size=64)
try:
    consumer = shmbus.Consumer(bus)
    with shmbus.Producer(bus) as producer:
        producer.publish(b"from a pip-installed shmbus")
    seq, _, payload = consumer.next(1.0)
    assert (seq, bytes(payload)) == (0, b"from a pip-installed shmbus"), (seq, bytes(payload))
    print(shmbus.__version__, shmbus.__file__)
finally:
    shmbus.Bus.remove(name)
""")
version, where = use.stdout.split()
if not where.startswith(os.path.realpath(venv)) and not where.startswith(venv):
    sys.exit(f"shmbus was imported from {where}, not from the venv")
print(f"shmbus {version} published and read a message, imported from {where}")

mypy = "/usr/bin/mypy" if os.access("/usr/bin/mypy", os.X_OK) else shutil.which("mypy")
if mypy is None:
    print("SKIP: mypy is not installed (scripts/install-deps.sh installs it): the types were not checked")
    sys.exit(SKIP)
program = os.path.join(work_dir, "typed.py")
with open(program, "w") as f:
    f.write("""import shmbus
from shmbus import Message


def first(name: str) -> Message | None:
    bus = shmbus.Bus.open(name)
    with shmbus.Consumer(bus, name="typed") as consumer:
        return consumer.next(0.5)


def main() -> None:
    try:
        bus = shmbus.Bus.create("typed", capacity=16, record_size=64, policy="overwrite")
    except shmbus.BusExists:
        bus = shmbus.Bus.open("typed")
    with shmbus.Producer(bus) as producer:
        seq: int = producer.publish(b"typed")
    message = first(bus.name)
    size: int = len(message[2]) if message is not None else 0
    print(seq, size, shmbus.__version__)
""")
examples = [os.path.join(source_dir, "examples", f) for f in ("hello.py", "asyncio_buses.py")]
checked = run(mypy, "--strict", "--no-incremental", "--cache-dir", os.path.join(work_dir, "mypy-cache"),
              "--python-executable", python, program, *examples, timeout=300, check=False)
print(checked.stdout.strip())
if checked.returncode != 0:
    sys.exit(f"mypy --strict failed on {program}:\n{checked.stdout}\n{checked.stderr}")
print(f"pip install check passed in {time.monotonic() - started:.0f} s")
