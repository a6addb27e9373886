"""Writing a command's output files all at once: `triptych run`, `triptych bench`
and `triptych bench --memory` stage their files with `StagedDirectory`, so a
reader never sees half a file, a failure leaves the output directory as it was,
and each command removes its own files of an earlier run that this run did not
write (and nobody else's).

A sweep (one row per point, as `triptych bench` makes) runs inside
`rows_kept_on_interrupt`: on Ctrl-C the rows done so far go to the output
directory as a CSV file of their own, and nothing else there changes."""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from triptych.common.errors import CommandError, Interrupted, signal_of


class OutputDirectoryError(CommandError):
    """The output directory cannot be written; the message is one line:
    "cannot write to DIR: why"."""


class StagedDirectory:
    """Files made in a temporary directory and moved into `target` on success.

    If `target` exists, the temporary directory is made inside it (hidden,
    `.triptych-<command>-*`) and each finished file replaces its namesake with
    `os.replace`; otherwise it is made beside `target` and renamed to it whole.
    Either way it is on the same file system, so every move is atomic. Leaving
    the `with` block without `commit` (an error, Ctrl-C, SIGTERM) removes the
    temporary directory, and the folders above `target` that it made, and
    leaves `target` as it was.

    Args:
        target: the output directory.
        command: the command's name, e.g. "run": part of the hidden name.

    Raises:
        OutputDirectoryError: `target` cannot be written (not a directory, no
            permission, under a file).
    """

    def __init__(self, target: str | os.PathLike, command: str):
        self.target = Path(target)
        self.made: list[Path] = []
        try:
            self.path = self._make(f".triptych-{command}-")
        except OSError as error:
            reason = error.strerror or error
            raise OutputDirectoryError(f"cannot write to {target}: {reason}") from None

    def _make(self, prefix: str) -> Path:
        """The temporary directory, inside `target` or beside it."""
        if self.target.exists():
            if not self.target.is_dir():
                raise NotADirectoryError(20, "it is a file, not a directory")
            if not os.access(self.target, os.W_OK | os.X_OK):
                raise PermissionError(13, "permission denied")
            where = self.target
        else:
            where = self.target.absolute().parent
            above = next(p for p in (where, *where.parents) if p.exists())
            if not above.is_dir():
                raise NotADirectoryError(20, f"{above} is a file, not a directory")
            # the folders made here, deepest first: removed again on a failure
            self.made = [p for p in (where, *where.parents) if not p.exists()]
            where.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
        umask = os.umask(0)  # mkdtemp makes 0o700; give the usual mode instead
        os.umask(umask)
        path.chmod(0o777 & ~umask)
        return path

    def commit(self, files: Iterable[str], stale: Iterable[str]) -> list[Path]:
        """Move `files` into place; remove our own `stale` files of earlier runs.

        Args:
            files: the names of the files written into `path`.
            stale: names this command writes on other runs but did not write
                on this one (a name also in `files` is kept).

        Returns:
            The paths of `files` in `target`, in the order given.
        """
        files = list(files)
        if not self.target.exists():
            os.replace(self.path, self.target)
        else:
            for name in files:
                os.replace(self.path / name, self.target / name)
            for name in stale:
                if name not in files:
                    (self.target / name).unlink(missing_ok=True)
        return [self.target / name for name in files]

    def __enter__(self) -> StagedDirectory:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.path.exists():
            shutil.rmtree(self.path, ignore_errors=True)
        if not self.target.exists():  # no commit: the folders made go too
            for folder in self.made:
                with contextlib.suppress(OSError):  # one that is not empty stays
                    folder.rmdir()


def write_csv(
    path: Path,
    fields: Sequence[str],
    rows: Iterable[Mapping[str, Any]],
    settings: Mapping[str, Any] | None = None,
) -> None:
    """A CSV file: a header of `fields`, then one line per row, each row after
    `settings` (columns every row shares, e.g. the run's dtype)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows({**(settings or {}), **row} for row in rows)


@contextlib.contextmanager
def rows_kept_on_interrupt(
    staging: StagedDirectory,
    name: str,
    fields: Sequence[str],
    rows: list[dict[str, Any]],
    settings: Mapping[str, Any] | None = None,
) -> Iterator[None]:
    """On Ctrl-C (or SIGTERM, SIGHUP) in the block, keep the rows done so
    far: `rows` as the CSV file `name` (see `write_csv`) in the output
    directory, moved there alone; then raise `Interrupted`, which says where.

    The block must write nothing into the staging folder, so that nothing else
    can reach the output directory with it.
    """
    try:
        yield
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP
        number = signal_of(stop)
        if not rows:
            raise Interrupted("no row done yet", number) from None
        write_csv(staging.path / name, fields, rows, settings)
        (path,) = staging.commit([name], stale=())
        done = f"{len(rows)} row{'s' * (len(rows) > 1)}"
        raise Interrupted(f"{done} done so far kept in {path}", number) from None
