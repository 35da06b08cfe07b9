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
