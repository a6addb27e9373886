"""A target written for a variant, checked without its option: which of the
variant's parameters it has (`variant_parameters`), the option each asks
for, and what a check without them says: one line where it cannot run
without them (`needs_option`), and, where it runs, the options it was not
checked with (the report's description: never a silent full mark).
"""

from __future__ import annotations

from triptych.check.adapters.probe import PROBE_RANKS, probe
from triptych.check.target import TargetError

OPTIONS = {
    "n_kv_heads": "--n-kv-heads N",
    "rotary": "--rotary STYLE",
    "window": "--window W",
    "softcap": "--softcap C",
    "alibi": "--alibi",
    "sinks": "--sinks",
    "q_norm": "--qk-norm",
    "k_norm": "--qk-norm",
}
"""A variant keyword of a target's parameters, and the option that gives it."""


def variant_parameters(parameters) -> list[str]:
    """The options of the variant keywords among a function's parameters
    (each once, in OPTIONS' order)."""
    found = [OPTIONS[name] for name in OPTIONS if name in parameters]
    return list(dict.fromkeys(found))


def needs_option(adapter, header: str, parameters, dtype: str) -> None:
    """Raises TargetError, one line, where a function with variant keywords,
    checked without any option, raises on every batch form of the probe (a
    rotary=None read as rotary.base): the option it needs named. Where it
    runs, the adapter records the options it was not checked with."""
    options = variant_parameters(parameters)
    if not options:
        return
    found = probe(adapter, PROBE_RANKS, dtype)
    errors = [error for error in found.values() if error is not None]
    if len(errors) < len(found) or not errors:
        adapter.unchecked = options
        return
    error = TargetError(
        f"{header} raises without a variant option ({errors[0]}): give "
        f"{' or '.join(options)}, the option of the parameter it takes for it "
        f"(docs/check.md#variants)"
    )
    error.needs = options  # for --grade's row: "variant unchecked: needs ..."
    raise error
