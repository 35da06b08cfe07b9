"""shmbus: a shared-memory message bus for Linux.

One Producer appends fixed-size records to a named bus (/dev/shm/shmbus.NAME);
any number of Consumers, in any processes, each read every message from
their own cursor. A message longer than one record's payload
(Bus.max_payload), up to Bus.max_message, takes consecutive records.

Views: Consumer.next() returns a Message whose payload is one memoryview of
the whole message -- zero-copy on a `block` bus (it reads the records in
shared memory; numpy.frombuffer of it copies nothing either), the
consumer's own copy on an `overwrite` bus or for a best-effort reader. It
is valid until the next call on that consumer, which releases it: using it
afterwards raises ValueError. Views derived from it (slices, numpy arrays)
cannot be revoked: they keep the mapping alive, never crash, but from the
next call on show whatever that memory holds later (on a `block` bus the
record once the producer reuses it, on an `overwrite` bus the next message
copied there). Keep one with bytes(view), or make the Consumer with
copy=True: every message is then its own bytes, valid for as long as it is
referenced, at the cost of one copy.

Claims: Producer.claim() returns a writable view of the record itself.
commit() releases it, and refuses (BufferError, the claim stays open) while
anything made from it -- a numpy array, a slice -- still exports it: a write
through it after the commit would change a message consumers may already
have read. Delete those first (`del array`).

Waiting: next(), publish() and claim() wait with the GIL released and handle
signals at least every 100 ms, so Ctrl-C raises KeyboardInterrupt. Timeouts
are seconds (float); None waits as long as it takes.

asyncio: `await consumer.next_async()`, `async for message in consumer`,
`await producer.publish_async(data)` and `await wait_set.wait_async()` never
block the event loop; the loop watches the descriptor of the consumer or
wait set (fileno()), so cancelling an await loses no message. A WaitSet
waits on many consumers from one thread, with or without asyncio.
"""
from typing import Any, Iterator, List, Literal, Optional, Sequence, Tuple, TypedDict, Union, overload

from _typeshed import ReadableBuffer

__version__: str

# Anything that exports a contiguous buffer: bytes, bytearray, memoryview,
# array.array, numpy.ndarray... (the same names exist at run time).
Buffer = ReadableBuffer
Policy = Literal["block", "overwrite"]
class Error(OSError):
    """A setup error (create, open, attach). str() names the bus and the problem."""
    errc: int  # shmbus::Errc / the C API's SHMBUS_* value, e.g. 4 not found, 14 not retained

class OptionsDiffer(Error, ValueError):
    """Bus.open_or_create found the bus with other options than asked."""

class BusNotFound(Error, FileNotFoundError):
    """No bus of that name (errno ENOENT)."""

class BusExists(Error, FileExistsError):
    """A bus of that name exists (errno EEXIST)."""

class BusPermissionError(Error, PermissionError):
    """The bus exists but may not be opened: mode, or an owner not trusted (errno EACCES)."""

class EndOfStream(Exception):
    """Consumer.next(): the producer closed the bus or died, and everything
    it committed has been read."""
    reason: Literal["closed", "producer_died", "removed"]

def bus_dir() -> str:
    """The directory a bus without dir= lives in: the one set_bus_dir() set,
    else $SHMBUS_DIR, else /dev/shm."""
    ...

def set_bus_dir(dir: str) -> None:
    """Makes `dir` (tmpfs or hugetlbfs; checked, shmbus.Error otherwise) the
    default directory of this process; '' goes back to $SHMBUS_DIR, /dev/shm."""
    ...

class Bus:
    """A handle on a named bus (DIR/shmbus.NAME; DIR is bus_dir() unless dir= names one). A context manager:
    leaving it closes the handle. Producers, Consumers and views made from
    it hold their own, so closing it ends nothing they do."""
    @staticmethod
    def create(name: str, *, capacity: int = 0, record_size: int = 256,
               policy: Policy = "block", max_readers: int = 16, mode: int = 0o600,
               dir: Optional[str] = None) -> Bus:
        """Creates a bus exclusively (Error if it exists). record_size includes
        a 24-byte header and is a multiple of 8; capacity is a power of two,
        or 0 (the default): the power of two of records whose ring is nearest
        4 MiB, at least 64."""
    @staticmethod
    def open_or_create(name: str, *, capacity: int = 0, record_size: int = 256,
                       policy: Policy = "block", max_readers: int = 16, mode: int = 0o600,
                       dir: Optional[str] = None, as_is: bool = False) -> Bus:
        """Creates the bus, or opens it if it exists with these options
        (policy, capacity, record_size, max_readers; capacity 0 is the
        default ring for record_size). One with others raises OptionsDiffer
        (an Error and a ValueError) naming both, unless as_is=True, which
        joins it with its own options; the C++ and C APIs and
        shmbus-producer --create follow the same rule."""
    @staticmethod
    def open(name: str, ready_timeout: float = 2.0, *, dir: Optional[str] = None) -> Bus:
        """Opens an existing bus. Never waits: a bus appears under its name
        only once complete (ready_timeout is unused, kept for compatibility)."""
    @staticmethod
    def remove(name: str, *, end_streams: bool = True, dir: Optional[str] = None) -> bool:
        """Removes the bus; True if it existed. Ends the stream of every
        consumer still attached (EndOfStream, reason "removed") and closes its
        producer, so nobody runs on in a removed bus; end_streams=False only
        removes the name (mapped users carry on)."""
    @staticmethod
    def exists(name: str, *, dir: Optional[str] = None) -> bool: ...
    @staticmethod
    def move_reader_name(name: str, reader: str, *, to: Union[Literal["earliest", "latest"], int, None] = None,
                         time_ns: Optional[int] = None, dir: Optional[str] = None) -> Optional[ReaderNameMove]:
        """Moves the remembered (durable) reader name `reader` of bus `name`
        so that the next Consumer(start="resume") under it starts at `to`:
        "earliest" (the oldest retained message), "latest" (only messages
        published from now on) or a sequence from oldest to head; or, with
        time_ns=, at the first retained message stamped at that
        CLOCK_REALTIME time or later. Give exactly one of to= and time_ns=
        (ValueError otherwise). Holds the name's lock while it looks and
        writes, so no reader takes the name meanwhile. Returns what it did,
        or None if no such name is remembered. Raises shmbus.Error with
        errc 20 (name in use: a live reader holds it) or 14 (not retained: a
        sequence outside oldest..head or inside a message that spans
        records, the message saying where the next one starts; a time when
        no retained message carries a timestamp) or 2 (a reader name no
        reader could hold: empty or over 31 bytes); a missing bus raises
        BusNotFound."""
    @staticmethod
    def forget_reader_name(name: str, reader: str, *, dir: Optional[str] = None) -> bool:
        """Forgets the remembered reader name `reader` of bus `name`: a
        consumer resuming under it starts afresh. True if it was remembered;
        shmbus.Error (errc 20) while a live reader holds it, errc 2 for a
        name no reader could hold (empty or over 31 bytes)."""
    @staticmethod
    def let_go_reader(name: str, slot: int, *, dir: Optional[str] = None) -> None:
        """Lets the reader in slot `slot` (Consumer.slot) of bus `name` go
        at once, as a producer's hold limit does: it no longer holds the
        producer (which is woken if it waits for space), reads on as a
        best-effort reader and is told what it loses (shmbus-inspect let-go).
        shmbus.Error, errc 2, for a reader that does not hold the producer
        (best-effort, let go already, an overwrite bus); errc 4 for an empty
        slot or one whose process is gone."""
    @property
    def name(self) -> str: ...
    @property
    def dir(self) -> str:
        """The directory of the bus's segment (absolute)."""
    @property
    def path(self) -> str: ...
    @property
    def pages(self) -> str:
        """What backs the bus's memory, e.g. "hugetlbfs, 2 MiB huge pages"."""
    @property
    def page_size(self) -> int: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def capacity(self) -> int: ...
    @property
    def record_size(self) -> int: ...
    @property
    def max_payload(self) -> int:
        """The longest message that fits one record (record_size - 24)."""
    @property
    def max_message(self) -> int:
        """The longest message the bus accepts: one longer than max_payload
        takes consecutive records (at most half the ring, and at most 1 GiB)."""
    @property
    def max_readers(self) -> int: ...
    @property
    def head(self) -> int:
        """Next sequence number to be published."""
    @property
    def oldest(self) -> int:
        """Oldest sequence number still retained."""
    @property
    def closed(self) -> bool:
        """True once close() was called."""
    def close(self) -> None:
        """Lets go of this handle (a second call does nothing): every other
        use of it raises ValueError, except .name, .closed and repr(). The
        bus stays; Bus.remove() removes it."""
    def __enter__(self) -> Bus: ...
    def __exit__(self, *args: Any) -> None: ...

class Producer:
    """The bus's one producer (Error if a live process holds the role; a dead
    holder is taken over). A context manager: leaving it closes the stream."""
    def __init__(self, bus: Bus, *, timestamps: Literal["off", "coarse", "precise"] = "off",
                 wait_for_readers: int = 0, wait_for_readers_timeout: Optional[float] = None,
                 max_hold: Optional[float] = None) -> None:
        """wait_for_readers: wait until this many live consumers are attached
        (Ctrl-C interrupts; TimeoutError after wait_for_readers_timeout).
        max_hold: on a block bus, how long (seconds) the producer may wait
        for a reader that does not move before it lets that reader go; it
        reads on without holding the producer (Consumer.let_go). None: never.
        A Producer or Consumer made before os.fork() (multiprocessing's
        "fork" start method) raises RuntimeError when used in the child."""
    def publish(self, data: Buffer, timeout: Optional[float] = None) -> int:
        """Copies `data` (any contiguous buffer, up to Bus.max_message bytes)
        into the next record, or the records it takes if longer than
        Bus.max_payload; returns its sequence number. ValueError if too large
        (naming both sizes), TimeoutError if a block bus stays full for
        `timeout` seconds, RuntimeError once the producer is closed (also by
        Bus.remove())."""
    def publish_batch(self, items: Sequence[Buffer], timeout: Optional[float] = None) -> int:
        """Publishes the buffers in order, with one head update and wake-up
        check per run that fits; returns how many went out: all, or fewer if
        `timeout` ran out. Each may be up to Bus.max_message bytes; ValueError
        (nothing published) if one is longer."""
    async def publish_async(self, data: Buffer, timeout: Optional[float] = None) -> int:
        """publish() without blocking the event loop: while a block bus is
        full, other tasks run and it looks again (from every 50 us up to
        every 5 ms). TimeoutError after `timeout` seconds; cancelled or
        timed out, nothing was published. With room, it publishes at once
        without letting other tasks run first."""
    def claim(self, size: int, timeout: Optional[float] = None) -> memoryview:
        """The next record's payload, writable in place, `size` bytes (up to
        Bus.max_message: one contiguous view over the records a longer one
        than Bus.max_payload takes). Valid until commit(), which releases it.
        Anything made from it (numpy.frombuffer, a slice) must be gone by
        then: commit() refuses otherwise."""
    def commit(self, size: Optional[int] = None) -> int:
        """Publishes the claimed record (its first `size` bytes, default all);
        returns its sequence number. ValueError (the claim stays open) if
        `size` is more than was claimed; BufferError (the claim stays open,
        its own view released) while a buffer made from the claim's view --
        a numpy array, a slice -- is still alive, since writing through it
        would change the published message."""
    def close(self) -> None:
        """Marks end-of-stream and gives up the producer role. An open claim
        is abandoned, never published; an array still made from its view
        must not be written afterwards (the record is the next message's)."""
    def detach(self) -> None:
        """Gives up the role without end-of-stream (consumers wait for a new producer)."""
    @property
    def next_seq(self) -> int: ...
    @property
    def bus(self) -> Bus: ...
    def __enter__(self) -> Producer: ...
    def __exit__(self, *args: Any) -> None: ...

class Message(Tuple[int, int, memoryview]):
    """A message: the tuple (seq, timestamp_ns, payload), so
    `seq, ts, payload = message` unpacks it, and .records. Sequence numbers
    count records: a message longer than Bus.max_payload takes .records of
    them, and the next message's seq is at least seq + records."""
    @property
    def seq(self) -> int: ...
    @property
    def timestamp_ns(self) -> int: ...
    @property
    def payload(self) -> memoryview:
        """One contiguous view of the whole message, valid until the next
        call on the consumer (which releases it; arrays made from it then
        show later data), or for good with Consumer(copy=True)."""
    @property
    def records(self) -> int:
        """Records the message takes: 1, or more for one longer than Bus.max_payload."""

class Consumer:
    """A reader slot on the bus. Iterating yields messages until end of stream.
    Lost messages (overwrite bus, best-effort reader) and corrupt records are skipped and counted
    in .lost and .corrupt."""
    def __init__(self, bus: Bus, *, name: str = "consumer",
                 start: Literal["earliest", "latest", "sequence", "resume"] = "earliest",
                 start_seq: int = 0, durable: bool = False, best_effort: bool = False,
                 copy: bool = False) -> None:
        """durable: hold `name` exclusively (Error name_in_use otherwise) and
        leave the cursor in the bus under it when detaching or dying.
        start="resume" (implies durable) continues where that name stopped,
        or at the oldest record for a new name.
        best_effort: never hold a block bus's producer back; when lapped, the
        messages it missed are skipped and counted in .lost (as on an
        overwrite bus).
        copy: every message's payload is a view of its own bytes object, never
        released or reused, so numpy arrays made from it keep their values
        after the next call (one copy per message). Without it a payload and
        anything made from it are valid until the next call only."""
    @overload
    def next(self, timeout: None = None) -> Message:
        """The next message, or None after `timeout` seconds with nothing new.
        Raises EndOfStream; RuntimeError once the consumer is closed (also
        when close() from another thread ends a wait). Releases the previous
        message's view."""
    @overload
    def next(self, timeout: float) -> Optional[Message]: ...
    def read_batch(self, max: int = 256, timeout: Optional[float] = None) -> List[Message]:
        """Up to `max` (at most 4096) messages available now, waiting up to
        `timeout` for the first (an empty list after it). Their views are valid until the next
        call. A message longer than Bus.max_payload that the consumer copies
        (overwrite bus, best-effort reader) comes alone in its list. Raises
        EndOfStream once everything was read."""
    def __iter__(self) -> Iterator[Message]: ...
    def __next__(self) -> Message: ...
    async def next_async(self, timeout: Optional[float] = None) -> Optional[Message]:
        """Awaits the next Message without blocking the event loop; None after
        `timeout` seconds with nothing new; raises EndOfStream, and
        RuntimeError once the consumer is closed (close() from any thread
        wakes it). Cancelling it (asyncio.wait_for, a task cancelled) loses
        no message. A message already there is returned at once, without
        letting other tasks run first (as asyncio.Queue.get does): a loop
        that must share its thread fairly awaits asyncio.sleep(0) now and
        then."""
    def __aiter__(self) -> Consumer: ...
    async def __anext__(self) -> Message: ...
    def fileno(self) -> int:
        """A descriptor for select/poll/epoll or loop.add_reader(): readable
        once next() may have news. It stays readable while there is news and
        goes quiet only after a has_news() that finds none: drain with
        next(0), then call has_news() before waiting on it again (a loop
        that only calls next(0) finds it readable every time). Owned by the
        consumer; close() makes it readable once, to wake a watcher."""
    def has_news(self) -> bool:
        """True if next(0) has something to say: a message, a loss, the end
        of the stream. If not, fileno() goes quiet until there may be."""
    def close(self) -> None:
        """Releases the reader slot. Called from another thread while that
        one waits in next(), it returns once that next() has given up (within
        0.1 s), which raises RuntimeError."""
    @property
    def cursor(self) -> int: ...
    @property
    def delivered(self) -> int: ...
    @property
    def lost(self) -> int: ...
    @property
    def corrupt(self) -> int: ...
    @property
    def let_go(self) -> bool:
        """True once a producer's hold limit (Producer max_hold) let this
        reader go: it no longer holds the producer; laps count in .lost."""
    @property
    def slot(self) -> int: ...
    @property
    def resumed(self) -> bool:
        """start="resume": True if the name had a bookmark."""
    @property
    def resume_gap(self) -> int:
        """start="resume": messages after the bookmark already gone (also in .lost)."""
    @property
    def end_reason(self) -> str:
        """Why the stream last ended: "none", "closed", "producer_died" or "removed"."""
    @property
    def bus(self) -> Bus: ...
    def __enter__(self) -> Consumer: ...
    def __exit__(self, *args: Any) -> None: ...

class WaitSet:
    """Waits on many consumers from one thread (up to 127): wait(), or
    fileno() for an event loop, or `await wait_async()`. Holds its members
    alive; a consumer closed leaves it. A context manager: leaving it is
    close()."""
    def __init__(self) -> None: ...
    def add(self, consumer: Consumer) -> None:
        """Adds a consumer (Error, errc invalid_options, if it is a member already or the set is full)."""
    def remove(self, consumer: Consumer) -> None:
        """Removes a consumer (nothing if it is not a member)."""
    def wait(self, timeout: Optional[float] = None) -> List[Consumer]:
        """The members with news (a message, a loss, the end of the stream),
        in the order they were added, waiting up to `timeout` seconds (0:
        just look); an empty list after the timeout, or at once when another
        thread closes a member or changes the set meanwhile. A member is
        returned until its news is read (next(0) until it returns None)."""
    async def wait_async(self, timeout: Optional[float] = None) -> List[Consumer]:
        """wait() without blocking the event loop; an empty list after
        `timeout` seconds, or once the set has no members left (a member
        closed leaves it); ValueError once the set is closed."""
    def fileno(self) -> int:
        """A descriptor for an event loop: readable once a member may have
        news; then call wait(0), which keeps it readable while it returns
        members and makes it quiet when it returns none. Owned by the set."""
    def close(self) -> None:
        """Lets go of every member; any use after raises ValueError."""
    def __len__(self) -> int: ...
    def __enter__(self) -> WaitSet: ...
    def __exit__(self, *args: Any) -> None: ...

class Counters(TypedDict):
    published: int
    producer_waits: int
    producer_wait_ns: int
    wakeups: int
    readers_reclaimed: int
    readers_let_go: int
    data_sleepers: int

class ProducerInfo(TypedDict):
    attached: bool
    pid: int
    liveness: Literal["alive", "dead", "unknown"]
    # Alive but stopped (SIGSTOP, a debugger); told only of a process of
    # this PID namespace, by its /proc.
    stopped: bool
    closed: bool
    # A live producer blocked on a full block ring: from the first publish
    # that found no room until one finds room (retries in between are one
    # wait), and the slot of the reader holding it back (None: none found,
    # or that slot was freed or taken since).
    waiting_for_space: bool
    blocked_on_slot: Optional[int]
    takeovers: int

class ReaderInfo(TypedDict):
    slot: int
    pid: int
    liveness: Literal["alive", "dead", "unknown"]
    stopped: bool  # alive but stopped (SIGSTOP, a debugger), as for the producer
    name: str
    # The next sequence it will read, as the reader last stored it: exact
    # while it waits in next()/read_batch() and after a call that found
    # nothing (next(0) -> None); a reader busy between calls, or that stopped
    # calling, may show up to capacity/16 - 1 (at most 31) fewer than its own
    # Consumer.cursor, never more. delivered is stored with it.
    cursor: int
    lag: int
    delivered: int
    lost: int
    attach_time_ns: int
    last_active_ns: int
    sleeping: bool
    best_effort: bool
    let_go_ns: int
    evicted: bool

class BookmarkInfo(TypedDict):
    name: str
    cursor: int  # where a resume under this name starts
    lag: int  # head - cursor (0 if none)
    gone: int  # messages after the cursor already overwritten (0 if none)
    updated_ns: int
    held: bool
    holder_pid: int  # 0 when not held (shmbus-inspect show --json says null)

# What Bus.move_reader_name() did ("from" is a keyword, hence this form).
ReaderNameMove = TypedDict("ReaderNameMove", {
    "from": int,          # where the name would have resumed (its cursor, as stored)
    "to": int,            # where it resumes now
    "oldest": int,        # the bus when it moved: oldest retained ...
    "head": int,          # ... and head
    "timestamp_ns": int,  # time_ns=: the stamp of the message at "to"; 0 when none is that late ("to" is the head)
    "unstamped": int,     # time_ns=: messages passed over that carry no timestamp
})

class WarningInfo(TypedDict):
    kind: Literal["dead_reader", "producer_dead", "producer_blocked", "reader_let_go", "reader_lagging"]
    slot: Optional[int]  # the reader it is about
    message: str  # the line shmbus-inspect show prints after "warning: "

class Snapshot(TypedDict):
    name: str
    policy: Policy
    capacity: int
    record_size: int
    max_payload: int
    max_message: int
    max_readers: int
    segment_size: int
    creation_time_ns: int
    layout_version: int
    dir: str  # the directory of the segment (absolute)
    pages: str  # what backs the memory, e.g. "hugetlbfs, 2 MiB huge pages"
    page_size: int
    head: int
    oldest: int
    last_publish_ns: int
    counters: Counters
    producer: ProducerInfo
    readers: List[ReaderInfo]
    bookmarks: List[BookmarkInfo]
    removed: bool
    warnings: List[WarningInfo]  # most urgent first, as shmbus-inspect show lists them

class Inspector:
    """Reads a bus's header, counters and reader table without attaching."""
    def __init__(self, name: str, *, dir: Optional[str] = None) -> None: ...
    def snapshot(self) -> Snapshot:
        """{name, policy, capacity, record_size, max_payload, max_message, max_readers,
        segment_size, creation_time_ns, layout_version, dir, pages, page_size, head, oldest,
        last_publish_ns, counters: {published, producer_waits,
        producer_wait_ns, wakeups, readers_reclaimed, readers_let_go,
        data_sleepers},
        producer: {attached, pid, liveness, stopped, closed, waiting_for_space,
        blocked_on_slot, takeovers}, readers: [{slot, pid, liveness, stopped,
        name, cursor, lag, delivered, lost, attach_time_ns, last_active_ns,
        sleeping, best_effort, let_go_ns, evicted}], bookmarks: [{name, cursor, lag, gone, updated_ns,
        held, holder_pid}], removed, warnings: [{kind, slot, message}]}: what
        shmbus-inspect show --json reports, judged by the same library code."""
