"""Ctrl-C while a command runs must stop it, wherever it lands.

Python's handler raises KeyboardInterrupt in whatever Python code runs when
the signal is seen, and some code cannot raise: a callback of the garbage
collector (JAX registers one, run at every collection), a weakref callback, a
__del__. Python ignores an exception raised there ("Exception ignored in ...",
through `sys.unraisablehook`) and goes on, so the Ctrl-C would be lost and a
sweep would run to its end. Within `ctrl_c_never_lost` such a KeyboardInterrupt
is not printed but sent again a moment later, when other code runs (Python's
rule for any signal: one that arrives while C code runs, the collector's or a
BLAS product, is raised when Python code runs next; one already pending when
a blocking call such as time.sleep starts is raised when that call returns).
`triptych.cli.main` runs every command in it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

RETRY_S = 0.05
"""How long after a Ctrl-C that could not be raised it is sent again."""


@contextlib.contextmanager
def ctrl_c_never_lost() -> Iterator[None]:
    """Within the block, a KeyboardInterrupt that Python would ignore (raised
    where no exception can be) is sent to the main thread again."""
    main = threading.main_thread()
    active = True

    def send_again() -> None:
        if active:  # the block may have ended meanwhile
            signal.pthread_kill(main.ident, signal.SIGINT)

    def hook(unraisable) -> None:
        if not (active and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            previous(unraisable)
            return
        retry = threading.Timer(RETRY_S, send_again)
        retry.daemon = True
        retry.start()

    previous = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        yield
    finally:
        active = False
        sys.unraisablehook = previous
