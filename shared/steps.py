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
from dataclasses import dataclass, field

STEPS = (
    "project x into queries, keys and values",
    "split heads (multi-head only)",
    "scores = q @ k^T",
    "scale by 1 / sqrt(D)",
    "mask the future",
    "softmax into weights",
    "weighted sum of values",
)
"""The seven step comments, in order: STEPS[0] is step 1. A file may add to a
step's words (`# 5. mask the future (and any given mask)` where a mask is
taken), and multi-head attention ends with `# 7. (continued) merge heads,
output projection`."""

CONTINUED = "merge heads, output projection"
"""The words of multi-head attention's last comment, `# 7. (continued) ...`."""

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

CACHE_STAGES = (
    "write the new key and value at position `length`",
    "attend the positions filled so far, the new one included",
)
"""The stages of a decoding step (impl_*/kv_cache.py), commented `# cache 1. ...`
(the cache's own words follow: in place, or a new array in JAX)."""

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
            step (with H heads, the merge and the output projection after
            the weighted sum).
        words: the comment's own words after `# N. `, as the file has them.
    """

    number: int
    comment_line: int
    lines: tuple[tuple[int, str], ...]
    continued: bool = False
    words: str = field(default="", compare=False)

    @property
    def title(self) -> str:
        """The comment's words, as the file writes them."""
        return self.words or STEPS[self.number - 1]


def steps_of(function) -> list[Step]:
    """The steps of `function`, in the order its source writes them (a file
    may add to a step's words, e.g. `# 3. scores = q @ k^T, one block`)."""
    source, first = inspect.getsourcelines(function)
    steps: list[Step] = []
    number, comment_line, lines, continued, words = None, 0, [], False, ""
    for line, text in enumerate(source, start=first):
        stripped = text.strip()
        if match := _STEP_COMMENT.match(text):
            if number is not None:
                steps.append(Step(number, comment_line, tuple(lines), continued, words))
            number, comment_line, lines = int(match[1]), line, []
            continued, words = match[2].startswith("(continued) "), match[2]
        elif stripped.startswith("return ") or stripped == "return":
            break
        elif number is not None and stripped and not stripped.startswith("#"):
            lines.append((line, text.rstrip("\n").strip()))
    if number is not None:
        steps.append(Step(number, comment_line, tuple(lines), continued, words))
    return steps
