"""The seven steps of causal self-attention, as every attention file says them.

Each file of the reading path (`impl_*/lesson.py`, `attention.py`, and the
blockwise, KV-cache and backward files) marks its steps with these comments,
word for word, `# 1. project x into queries, keys and values` and so on;
`steps_of` finds them in a function's source, so that `triptych lab` and the
tests read the code by its steps instead of by line numbers.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

STEPS = (
    "project x into queries, keys and values",
    "split heads (multi-head only)",
    "scores = q @ k^T",
    "scale by 1 / sqrt(D)",
    "mask the future (and any given mask)",
    "softmax into weights",
    "weighted sum of values, merge heads, output projection",
)
"""The seven step comments, in order: STEPS[0] is step 1."""

RING_STAGES = (
    "cut the sequence into 2N chunks, two per device (zigzag)",
    "attend the queries held to the key/value block held",
    "pass the key/value block on to the next device",
    "normalize, merge heads, output projection",
)
"""The stages of ring attention (impl_*/sharded.py), commented `# ring 1. ...`."""

HEADS_STAGES = (
    "gather every device's rows (all-gather)",
    "attend with this device's heads",
    "sum the heads' outputs, each device keeping its rows (reduce-scatter)",
)
"""The stages of head-parallel attention, commented `# heads 1. ...`."""

_STEP_COMMENT = re.compile(r"^\s*# ([1-7])\. (.*)$")


def step_comment(number: int) -> str:
    """'# 3. scores = q @ k^T' for number 3."""
    return f"# {number}. {STEPS[number - 1]}"


@dataclass(frozen=True)
class Step:
    """One step of a function, as written in its source file.

    Attributes:
        number: 1 to 7.
        comment_line: the file's line number of the step comment.
        lines: (line number, text) of each line of code under the comment, up
            to the next step comment or the function's `return`; empty when the
            step has nothing to do (step 2 of single-head attention).
        continued: the comment reads `# 7. (continued) ...`: the rest of a
            step that a called function began.
    """

    number: int
    comment_line: int
    lines: tuple[tuple[int, str], ...]
    continued: bool = False

    @property
    def title(self) -> str:
        return STEPS[self.number - 1]


def steps_of(function) -> list[Step]:
    """The steps of `function`, in the order its source writes them (a file
    may add to a step's words, e.g. `# 3. scores = q @ k^T, one block`)."""
    source, first = inspect.getsourcelines(function)
    steps: list[Step] = []
    number, comment_line, lines, continued = None, 0, [], False
    for line, text in enumerate(source, start=first):
        stripped = text.strip()
        if match := _STEP_COMMENT.match(text):
            if number is not None:
                steps.append(Step(number, comment_line, tuple(lines), continued))
            number, comment_line, lines = int(match[1]), line, []
            continued = match[2].startswith("(continued) ")
        elif stripped.startswith("return ") or stripped == "return":
            break
        elif number is not None and stripped and not stripped.startswith("#"):
            lines.append((line, text.rstrip("\n").strip()))
    if number is not None:
        steps.append(Step(number, comment_line, tuple(lines), continued))
    return steps
