"""What `triptych lab` prints: the model shown, then per backend the lesson's
steps with what each made, the weights whole as text heatmaps, the
invariants, the NaN token and what the framework adds."""

from __future__ import annotations

from triptych.common import backends, prose
from triptych.common.walk import Walk
from triptych.lab.adds import poison_line, poisoned_token


def print_model(console, shown, multi: bool) -> None:
    """What is shown: the trained model and what its heads do, measured, or
    the random weights."""

    def say(text: str = "", style: str | None = None, code: bool = False) -> None:
        prose.say(console, text, style, code=code)

    if not shown.trained:
        say(
            "random weights (--weights random): the tiny preset on the toy "
            "sentence; no head has learned anything",
            "bold",
        )
        say()
        return
    from triptych.common import trained

    model = trained.load()
    c = model.config
    say(
        f"the trained model (shared/fixtures/induction.npz): {c.n_layers} layers "
        f"of {c.n_heads} heads, d_model {c.d_model}, trained {c.steps} steps to "
        f"an induction accuracy of {model.meta['induction_accuracy']:.1%}",
        "bold",
    )
    say("what each head does, measured on 256 held-out sequences:")
    for role in trained.head_roles():
        mark = (
            " <- shown"
            if role.layer == shown.layer and (multi or role.head == shown.head)
            else ""
        )
        say(f"   {role.name}: {role.describe()}{mark}")
    say()


def print_walk(
    console,
    walk_: Walk,
    shown,
    dtype: str,
    checks,
    poisoned_rows,
    adds,
    multi: bool = False,
) -> None:
    """The lesson's steps with what they made, the weights as heatmaps, the
    invariants, the notes.

    Args:
        shown: the View (triptych.common.trained) walked.
        poisoned_rows: what `nan_rows` found; adds: `framework_lines`'s lines.
    """
    import numpy as np

    def say(text: str = "", style: str | None = None, code: bool = False) -> None:
        prose.say(console, text, style, code=code)

    fixture = shown.fixture
    version = backends.versions().get(walk_.backend)
    T, C = fixture.x.shape
    say(
        f"== {walk_.backend} {version}: {walk_.path}, {walk_.function.__name__}, "
        f"{shown.describe(multi)}, {dtype} ==",
        "bold",
    )
    where = (
        f"what enters layer {shown.layer} as the model reads"
        if shown.trained
        else "the toy sentence"
    )
    say(f"x {(T, C)}, {where}: {' '.join(fixture.preset.tokens)}")
    for run in walk_.steps:
        step = run.step
        say(
            f"{step.number}. {step.title}  ({walk_.path}:{step.comment_line})",
            "bold cyan",
        )
        if not step.lines:
            say("   (one head: nothing to split)")
        for _, text in step.lines:
            say(f"   {text}", code=True)
        for made in run.made:
            say(f"     {made.name} {made.shape}")
            say(_slice_text(np.asarray(made.value)), code=True)
    weights = np.asarray(walk_.weights, dtype=np.float64)
    for h, matrix in enumerate(weights if weights.ndim == 3 else [weights]):
        head = h if weights.ndim == 3 else shown.head
        role = None if head is None else shown.role(head)
        name = "weights" if head is None else f"weights of head {head}"
        what = "" if role is None else f": {role.describe()}"
        say(f"{name}, whole (row: the query, column: the key){what}", "bold")
        for line in text_heatmap(matrix, shown.labels):
            say(f"   {line}", code=not line.startswith("scale: "))
    for check in checks:
        say(
            f"{check.claim:<28} {'YES' if check.holds else 'NO':<4} ({check.evidence})",
            "green" if check.holds else "bold red",
        )
    lesson_rows, full_rows = poisoned_rows
    index = poisoned_token(T)
    token = fixture.preset.tokens[index]
    say(f"why attention.py is longer: NaN in token {index} ({token!r})", "bold")
    say(f"   {poison_line(walk_.backend, T)}", code=True)
    say(
        f"   lesson: NaN in rows {_rows(lesson_rows)} of {T}: a masked weight "
        "is 0, and 0 * NaN is NaN"
    )
    say(
        f"   impl_{walk_.backend}.{walk_.function.__name__}: NaN in rows "
        f"{_rows(full_rows)}, the rows that attend token {index}"
    )
    say(f"what {walk_.backend} adds", "bold")
    for line in adds:
        say(f"   {line}")
    say()


SHADES = " .:-=+*#%@"
"""Ten characters from weight 0 to weight 1, light to dark."""


def text_heatmap(matrix, labels: list[str]) -> list[str]:
    """A (T, T) matrix of weights as lines of characters, each row labelled
    with its position and token, each column headed by its token's first two
    letters; a scale line at the end. Above the diagonal (never attended by a
    causal head): blank."""
    import numpy as np

    T = matrix.shape[0]
    width = max(len(word) for word in labels[:T]) + 4
    head = " " * width + "".join(f"{word[:2]:<3}" for word in labels[:T])
    lines = [head.rstrip()]
    for i in range(T):
        cells = []
        for j in range(T):
            value = float(np.clip(np.nan_to_num(matrix[i, j]), 0.0, 1.0))
            shade = SHADES[min(int(value * len(SHADES)), len(SHADES) - 1)]
            cells.append(f"{shade * 2} ")
        label = f"{i:>2} {labels[i]}"
        lines.append(f"{label:<{width}}{''.join(cells)}".rstrip())
    steps = ", ".join(
        f"{SHADES[k]!r} < {(k + 1) / len(SHADES):.1f}" for k in range(len(SHADES) - 1)
    )
    lines.append(f"scale: {steps}, '@' >= 0.9")
    return lines


def _rows(rows: list[int]) -> str:
    """'5-7' for [5, 6, 7], 'none' for []."""
    if not rows:
        return "none"
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"{rows[0]}-{rows[-1]}" if len(rows) > 1 else str(rows[0])
    return ", ".join(map(str, rows))


def _slice_text(value) -> str:
    """The top-left corner of a (..., rows, columns) array, indented, 3 decimals."""
    import numpy as np

    leading = "0, " * (value.ndim - 2)  # the first head of each leading axis
    while value.ndim > 2:
        value = value[0]
    rows = min(4 if value.shape[0] == value.shape[1] else 3, value.shape[0])
    columns = min(4, value.shape[1])
    corner = value[:rows, :columns]
    corner = corner.astype(int if corner.dtype == bool else np.float64)  # bool: 1, 0
    text = np.array2string(corner, precision=3, suppress_small=True, floatmode="fixed")
    label = f"[{leading}:{rows}, :{columns}] "
    pad = " " * (7 + len(label))
    first, *rest = text.splitlines()
    return "\n".join([f"       {label}{first}", *(pad + line for line in rest)])
