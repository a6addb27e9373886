"""How a launch of `triptych shard` failed, said: the one short line on
stderr, the whole message for the files (results.json's `failures`, each
row's `reason`), the first rank to fail first."""

from __future__ import annotations

import math
import re
import signal
from typing import Any

from triptych.shard.problem import plural


class DeviceFailureError(Exception):
    """A run failed on a device (a rank that died, a collective that timed
    out): exit code 1. The message is whole (the files keep it); `line` is
    the one short line stderr gets. `outcomes` says how each process ended."""

    def __init__(self, message: str, outcomes: list[dict[str, Any]], line=None):
        super().__init__(message)
        self.outcomes, self.line = outcomes, line or message


def how_it_ended(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def forkserver_ended(error: BaseException, N: int, rank: int) -> DeviceFailureError:
    """The device error of a rank that could not be forked: the forkserver
    ended (killed, out of memory), which multiprocessing says as EOFError."""
    why = f"the forkserver that forks the ranks ended ({type(error).__name__})"
    return DeviceFailureError(
        f"torch on {plural(N, 'process', 'processes')} failed: rank {rank}: {why}",
        [dict(rank=rank, status="error", returncode=None, error=why)],
    )


def failure_line(outcomes: list[dict[str, Any]], N: int, each=None) -> str:
    """One line: which rank failed first (the first to end), and how the
    others ended; with `each`, every message cut to about that many columns
    at a word (the whole of each is in the files)."""
    by_error: dict[str, list[int]] = {}
    for outcome in sorted(outcomes, key=_when_it_ended):
        if outcome["status"] != "ok":
            text = re.sub(r"\s+", " ", outcome["error"]).strip()
            by_error.setdefault(cut(text, each) if each else text, []).append(
                outcome["rank"]
            )
    parts = [
        f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}: {text}"
        for text, ranks in by_error.items()
    ]
    return f"torch on {plural(N, 'process', 'processes')} failed: " + "; ".join(parts)


def _when_it_ended(outcome: dict[str, Any]) -> tuple[float, bool]:
    """When the launcher saw a rank end (a rank it killed: last), and among
    those it saw end together (it looks every 50 ms; a peer's gloo error
    follows a death within milliseconds), one killed by a signal first: the
    others failed because it died."""
    ended, code = outcome.get("ended"), outcome.get("returncode")
    return math.inf if ended is None else ended, not (code is not None and code < 0)


SOURCE_LOCATION = re.compile(r"\[[^\]\s]*\.\w+:\d+\] ?")
"""'[../third_party/gloo/gloo/transport/tcp/pair.cc:534] ': where in C++ a
message was raised, which the short line leaves to the files."""
PEER = re.compile(r" ?\[[0-9a-fA-F.:]+\]:\d+")
"""' [127.0.0.1]:9089': the peer's address, which differs from rank to rank;
left to the files, the ranks with the same message share one part."""


def cut(text: str, width: int) -> str:
    """`text` in about `width` columns, its C++ source locations left out:
    cut at the last space before the width, an ellipsis after."""
    text = PEER.sub("", SOURCE_LOCATION.sub("", text))
    if len(text) <= width:
        return text
    space = text.rfind(" ", 0, width)
    return text[: space if space > 0 else width].rstrip(" :,;") + "…"
