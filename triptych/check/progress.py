"""What `triptych check` shows while it runs: on a terminal a progress bar
naming each target and the property it is at; piped, a line as each target
starts and as it ends."""

from __future__ import annotations

LOADING_SAID_AFTER_S = 1.0
"""Piped, a target still loading after this long is named ('checking
TARGET'), so one whose import hangs is never silent; one that cannot be
loaded gives its one error line alone."""


def progress_shown(total: int):
    """A context giving advance(spec) -> the event callback of one target: a
    rich progress bar on a terminal's stderr (the target named, and the time
    going by, from its start: one that hangs shows so); otherwise a line as
    each target starts (once loaded, or after LOADING_SAID_AFTER_S of
    loading) and one as it ends."""
    import contextlib
    import sys
    import threading

    from triptych.common import status

    console = status.console()

    @contextlib.contextmanager
    def shown():
        if not console.is_terminal:
            timers = []

            def advance(spec):
                said = []  # "checking" said (a target that fails at once: never)
                lock = threading.Lock()

                def say(what: str) -> None:
                    print(f"{what} {spec}", file=sys.stderr, flush=True)

                def announce() -> None:
                    with lock:
                        if not said:
                            said.append(True)
                            say("checking")

                def on_event(event):
                    if event["event"] == "start":  # loaded: its properties run
                        announce()
                    elif event["event"] in ("done", "error"):
                        timer.cancel()
                        with lock:
                            if said:
                                say("checked")
                            said.append(False)  # too late to announce

                for old in timers:  # the last target's (one that crashed)
                    old.cancel()
                timer = threading.Timer(LOADING_SAID_AFTER_S, announce)
                timer.daemon = True
                timers[:] = [timer]
                timer.start()
                return on_event

            try:
                yield advance
            finally:
                for timer in timers:
                    timer.cancel()
            return
        with status.progress() as bar:
            task = bar.add_task("triptych check", total=total)

            def advance(spec):
                name = progress_name(spec)
                # the target is the line's task, what it does now its note: a
                # narrow terminal elides the note first (status.progress)
                note = "loading it, finding its call"
                bar.update(task, description=name, note=note)

                def on_event(event):
                    if event["event"] == "begin":
                        bar.update(task, description=name, note=event["property"])
                    elif event["event"] == "property":
                        bar.advance(task)

                return on_event

            yield advance

    return shown()


def progress_name(spec: str) -> str:
    """The target as the progress line names it: its file's name and the
    object ('a_nanogpt.py:CausalSelfAttention'), the folders left out (the
    line has a terminal's width; the grade and the files have the path)."""
    import os

    where, _, name = spec.rpartition(":")
    return f"{os.path.basename(where)}:{name}" if where else spec
