# The package shmbus: the compiled extension shmbus._shmbus re-exported, with
# its stubs (__init__.pyi) and the PEP 561 marker (py.typed) beside it, so
# type checkers find the types of an installed shmbus.
from ._shmbus import *  # noqa: F401,F403 -- every public name of the extension
from ._shmbus import __doc__, __version__  # noqa: F401


def _adopt() -> None:
    # The extension's classes and errors are shmbus.X, as a program names
    # them: in repr(), tracebacks, help() and pickles.
    from . import _shmbus
    for obj in vars(_shmbus).values():
        if isinstance(obj, type) and obj.__module__ == _shmbus.__name__:
            obj.__module__ = __name__


_adopt()
del _adopt


# ---- asyncio ----
#
# A consumer (or a WaitSet) is awaited through its descriptor: the event
# loop watches fileno() with add_reader(); nothing is read until the loop
# runs the coroutine again, so cancelling an await (asyncio.wait_for, a task
# cancelled at shutdown) never loses a message.

import asyncio as _asyncio
from typing import Any as _Any, List as _List, Optional as _Optional


async def _readable(fd: int, timeout: _Optional[float]) -> bool:
    """Waits until `fd` is readable; False after `timeout` seconds."""
    loop = _asyncio.get_running_loop()
    fut = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, ready)
    try:
        if timeout is None:
            await fut
        else:
            try:
                await _asyncio.wait_for(fut, timeout)
            except _asyncio.TimeoutError:
                return False
        return True
    finally:
        loop.remove_reader(fd)


async def _consumer_wait_next(self: "Consumer", timeout: _Optional[float]) -> _Optional["Message"]:
    """next_async() once next(0) found nothing: wait on the descriptor."""
    loop = _asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        if self.has_news():
            # News next() did not take (a record being written): let the
            # loop run before looking again.
            await _asyncio.sleep(0)
        else:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return None
            await _readable(self.fileno(), left)
        m = self.next(0)
        if m is not None:
            return m


async def _consumer_next_async(self: "Consumer", timeout: _Optional[float] = None) -> _Optional["Message"]:
    m = self.next(0)  # a message there already: no wait, no descriptor
    if m is not None:
        return m
    return await _consumer_wait_next(self, timeout)


async def _consumer_anext(self: "Consumer") -> "Message":
    try:
        m = self.next(0)
        if m is None:
            m = await _consumer_wait_next(self, None)
    except EndOfStream:
        raise StopAsyncIteration from None
    assert m is not None
    return m


def _consumer_aiter(self: "Consumer") -> "Consumer":
    return self


async def _wait_set_wait_async(self: "WaitSet", timeout: _Optional[float] = None) -> _List["Consumer"]:
    loop = _asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        ready = self.wait(0)
        if not ready and len(self) == 0:
            return []  # nothing left to wait for (every member closed or removed)
        if ready:
            # Other tasks run between two waits even while news keeps coming.
            await _asyncio.sleep(0)
            return ready
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            return []
        await _readable(self.fileno(), left)


async def _producer_publish_async(self: "Producer", data: _Any, timeout: _Optional[float] = None) -> int:
    # While a block bus is full the loop runs other tasks and looks again,
    # from 50 us up to every 5 ms; a publish that finds room costs no wait.
    loop = _asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    pause = 50e-6
    while True:
        try:
            return self.publish(data, 0)
        except TimeoutError:
            if deadline is not None and loop.time() >= deadline:
                raise
        await _asyncio.sleep(pause)
        pause = min(pause * 2, 5e-3)


Consumer.next_async = _consumer_next_async  # type: ignore[attr-defined]
Consumer.__anext__ = _consumer_anext  # type: ignore[attr-defined]
Consumer.__aiter__ = _consumer_aiter  # type: ignore[attr-defined]
WaitSet.wait_async = _wait_set_wait_async  # type: ignore[attr-defined]
Producer.publish_async = _producer_publish_async  # type: ignore[attr-defined]
_consumer_next_async.__doc__ = """Awaits the next Message: None after `timeout`
seconds with nothing new; raises EndOfStream. The loop runs other tasks
meanwhile; cancelling it loses nothing."""
_wait_set_wait_async.__doc__ = """Awaits members with news (as wait()); an
empty list after `timeout` seconds."""
_producer_publish_async.__doc__ = """Publishes without blocking the loop: while a
block bus is full, other tasks run; TimeoutError after `timeout` seconds.
Cancelled, nothing was published."""
