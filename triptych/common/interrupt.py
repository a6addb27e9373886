"""Ctrl-C, SIGTERM and SIGHUP while a command runs must stop it, wherever
they land, and the same way: a KeyboardInterrupt, so that every `finally` and
`except KeyboardInterrupt` that cleans up after Ctrl-C (the staging folder
removed, a worker's process group killed, the rows done kept) runs for the
other two as well. Python's default for SIGTERM and SIGHUP is to end the
process at once, running none of it: a worker in a session of its own would
live on and an empty staging folder stay behind. Within `stops_never_lost`
they raise `Stopped`, a KeyboardInterrupt that names its signal, and
`triptych.cli` exits with 128 + its number (130, 143, 129), as a shell
reports a program the signal ended. A signal that was ignored when the
command started (`nohup` ignores SIGHUP) stays ignored.

Python's handler raises in whatever Python code runs when the signal is
seen, and some code cannot raise: a callback of the garbage collector (JAX
registers one, run at every collection), a weakref callback, a __del__.
Python ignores an exception raised there ("Exception ignored in ...", through
`sys.unraisablehook`) and goes on, so the Ctrl-C would be lost and a sweep
would run to its end. Within `stops_never_lost` such a KeyboardInterrupt is
not printed but its signal is sent again a moment later, when other code runs
(Python's rule for any signal: one that arrives while C code runs, the
collector's or a BLAS product, is raised when Python code runs next; one
already pending when a blocking call such as time.sleep starts is raised when
that call returns). `triptych.cli.main` runs every command in it.

Nor is a stop raised in the middle of an import: code that an extension
module runs while it initialises can swallow the exception (numpy.random's
Cython modules, imported when `np.random` is first read, dropped a SIGTERM
that way and `triptych train` trained on), or crash (jaxlib's, see
`triptych.common.backends`). A stop that lands there is sent again a moment
later, until the import has ended.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from triptych.common.errors import Stopped, signal_of

Child = TypeVar("Child")

RETRY_S = 0.05
"""How long after a stop that could not be raised its signal is sent again."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a command as Ctrl-C does (SIGINT is Ctrl-C)."""


def _imports(frame) -> set[int]:
    """The frames of importlib's machinery on `frame`'s stack (their ids):
    one for each import under way."""
    found = set()
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("importlib._bootstrap"):
            found.add(id(frame))
        frame = frame.f_back
    return found


@contextlib.contextmanager
def stops_never_lost() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Stopped` as SIGINT raises
    KeyboardInterrupt; a stop that lands inside an import, or that Python
    would ignore (raised where no exception can be), is sent to the main
    thread again a moment later. In another thread than the main one (signal
    handlers belong to the main thread) only the second part holds."""
    main = threading.main_thread()
    active = True
    # imports under way around the block (a command run as a module is
    # imported): a stop is held only for one begun inside it
    around = _imports(sys._getframe())

    def send_again(number: int) -> None:
        if active:  # the block may have ended meanwhile
            signal.pthread_kill(main.ident, number)

    def later(number: int) -> None:
        retry = threading.Timer(RETRY_S, send_again, (number,))
        retry.daemon = True
        retry.start()

    def stop(number: int, frame) -> None:
        if _imports(frame) - around:
            later(number)
        elif number == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise Stopped(number)

    def hook(unraisable) -> None:
        if active and isinstance(unraisable.exc_value, KeyboardInterrupt):
            later(signal_of(unraisable.exc_value))
        else:
            previous_hook(unraisable)

    previous_hook = sys.unraisablehook
    sys.unraisablehook = hook
    handlers = {}
    if threading.current_thread() is main:
        for number in STOP_SIGNALS:
            now = signal.getsignal(number)
            # SIGINT only where it is Python's own: not ignored, not a caller's
            if now is not signal.SIG_IGN and (
                number != signal.SIGINT or now is signal.default_int_handler
            ):
                handlers[number] = signal.signal(number, stop)
    try:
        yield
    finally:
        active = False
        sys.unraisablehook = previous_hook
        for number, previous in handlers.items():
            signal.signal(number, previous)


@contextlib.contextmanager
def stops_deferred() -> Iterator[None]:
    """Hold the stop signals back until the block ends, then deliver the
    first one held, as it would have been: for a block that must not be cut
    in two (a KeyboardInterrupt inside `Process.start()`, after the fork and
    before it returns the pid, would leave a child that no `finally` knows to
    kill). Signal handlers belong to the main thread; elsewhere this does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {
        number: signal.signal(number, lambda number, frame: held.append(number))
        for number in STOP_SIGNALS
        if signal.getsignal(number) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if held:
            signal.raise_signal(held[0])


@contextlib.contextmanager
def killed_unless_done(
    start: Callable[[], Child], kill: Callable[[Child], None]
) -> Iterator[Child]:
    """The child process `start()` starts, killed with `kill` if the block is
    left by an exception (a stop above all). The stops are held back while it
    starts (`stops_deferred`): one that lands inside `subprocess.Popen`, after
    the fork and before it returns, would leave a child nobody knows to kill;
    held back, it is raised once the child is known, and kills it."""
    child = None
    try:
        with stops_deferred():
            child = start()
        yield child
    except BaseException:
        if child is not None:
            kill(child)
        raise
