"""Short names for check's grade table: each target's file stem or module's
last part, with as many folders above as tell it from the others."""

from __future__ import annotations

from pathlib import Path


def short_labels(targets: list[str]) -> list[str]:
    """A short name for each target, unique among them, for the grade table
    (grade.csv, grade.md and results.json keep the whole spec): its file's
    stem or its module's last part ("alice"), with as many folders (or
    packages) above as tell it from another file ("alice/attention"), and
    ":object" where the same file is named twice; the whole spec where even
    that reads the same."""
    split = [_split(target) for target in targets]
    labels = []
    for target, this in zip(targets, split, strict=True):
        if this is None:
            labels.append(target)
            continue
        parts, sep, name = this
        others = {s[0] for s in split if s is not None and s[0] != parts}
        k = 1
        while k < len(parts) and any(o[-k:] == parts[-k:] for o in others):
            k += 1
        label = sep.join(parts[-k:])
        if any(s is not None and s[0] == parts and s[2] != name for s in split):
            label += f":{name}"
        labels.append(label)
    return labels if len(set(labels)) == len(labels) else list(targets)


def _split(target: str) -> tuple[tuple[str, ...], str, str] | None:
    """A target's file as its folders and stem (or its module as packages),
    their separator and the object's name; None for a target of no form."""
    where, _, name = target.rpartition(":")
    if not where:
        return None
    if where.endswith(".py") or "/" in where or "\\" in where:
        return Path(where).with_suffix("").parts, "/", name
    return tuple(where.split(".")), ".", name
