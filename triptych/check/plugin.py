"""The pytest plugin of `triptych check`: the same properties as tests of the
user's own suite.

    pytest --attention-impl=mypackage.attention:attend

adds one test per property and target, `attention[TARGET::PROPERTY]`, to
whatever else pytest collects (filter them with -k attention). A FAIL fails
the test with the reason, the diagnosis and the smallest failing input; a
NOTE is an expected failure (xfailed, with what it deviates in); a SKIP is a
skip. A target that cannot be checked (no such function, no signature fits,
its import raises) is one test, `attention[TARGET]`, that errors with the
reason, not one failure per property. The options mirror the command's:
--attention-signature, --attention-framework, --attention-adapter,
--attention-dtypes, --attention-examples (10 by default), --attention-seed,
--attention-eager, --attention-profile, --attention-skip, --attention-max-t,
--attention-batch; the messages name them so.
Installed with attention-triptych, pytest loads it by itself (the entry point
`pytest11` in pyproject.toml); otherwise `-p triptych.check.plugin`.

Unlike the command, the tests run in pytest's own process (no timeout of
their own: use pytest-timeout for that).
"""

from __future__ import annotations

import pytest

ITEM = "attention"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("attention", "attention properties (triptych check)")
    group.addoption(
        "--attention-impl",
        action="append",
        default=[],
        metavar="TARGET",
        help="module:function or path/to/file.py:function whose attention to "
        "check, one test per property (repeat for several)",
    )
    group.addoption("--attention-signature", default="auto", metavar="NAME")
    group.addoption("--attention-framework", default="auto", metavar="NAME")
    group.addoption("--attention-adapter", default=None, metavar="SPEC")
    group.addoption(
        "--attention-dtypes",
        default="float64,float32,float16,bfloat16",
        metavar="NAMES",
    )
    group.addoption("--attention-examples", type=int, default=10, metavar="N")
    group.addoption("--attention-seed", type=int, default=0, metavar="S")
    group.addoption("--attention-eager", action="store_true")
    group.addoption(
        "--attention-profile",
        default="default",
        choices=("default", "strict", "course"),
    )
    group.addoption("--attention-skip", action="append", default=[], metavar="ID")
    group.addoption("--attention-max-t", type=int, default=64, metavar="N")
    group.addoption(
        "--attention-batch", default=None, choices=("auto", "none", "one", "any")
    )


def settings_of(config):
    from triptych.check.properties import Settings

    dtypes = tuple(
        d.strip() for d in config.getoption("attention_dtypes").split(",") if d.strip()
    )
    return Settings(
        dtypes,
        config.getoption("attention_examples"),
        config.getoption("attention_seed"),
        profile=config.getoption("attention_profile"),
        max_t=max(2, config.getoption("attention_max_t")),
    )


def ids_of(config) -> list[str]:
    from triptych.check.properties import property_ids

    skip = [
        p.strip()
        for text in config.getoption("attention_skip")
        for p in text.split(",")
        if p.strip()
    ]
    return property_ids(settings_of(config), skip)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    """One item per target and property, after the user's own tests (first
    among the hooks, so that -k and -m see them); one erroring item for a
    target that cannot be checked."""
    specs = config.getoption("attention_impl")
    if not specs:
        return
    from triptych.check.target import TargetError, expand, options_spelled

    try:
        with options_spelled("--attention-"):
            specs = expand(specs)
    except TargetError as error:
        raise pytest.UsageError(f"--attention-impl: {error}") from None
    for spec in specs:
        if isinstance(adapter_of(config, spec), Exception):
            items.append(
                UncheckableItem.from_parent(session, name=f"{ITEM}[{spec}]", spec=spec)
            )
            continue
        for id in ids_of(config):
            items.append(
                PropertyItem.from_parent(
                    session, name=f"{ITEM}[{spec}::{id}]", spec=spec, property_id=id
                )
            )


class CannotCheckError(Exception):
    """A target that cannot be checked: the reason, one line."""


class UncheckableItem(pytest.Item):
    """A target that cannot be checked, as one test that errors in its
    setup (one error, not a failure per property)."""

    def __init__(self, *, spec: str, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec

    def setup(self) -> None:
        raise CannotCheckError(
            f"--attention-impl {self.spec}: {adapter_of(self.config, self.spec)}"
        )

    def runtest(self) -> None:  # never reached: setup raises
        raise AssertionError("unreachable")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CannotCheckError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


class PropertyFailedError(Exception):
    """A property that failed: its Result."""

    def __init__(self, result):
        super().__init__(result.reason)
        self.result = result


class PropertyItem(pytest.Item):
    """One property of one target, as a test."""

    def __init__(self, *, spec: str, property_id: str, **kwargs):
        super().__init__(**kwargs)
        self.spec, self.property_id = spec, property_id

    def runtest(self) -> None:
        from triptych.check.properties import run_property

        result = run_property(
            adapter_of(self.config, self.spec),
            settings_of(self.config),
            self.property_id,
        )
        if result.status == "FAIL":
            raise PropertyFailedError(result)
        if result.status == "SKIP":
            pytest.skip(result.reason)
        if result.status == "NOTE":
            pytest.xfail(f"{result.reason} ({result.diagnosis})")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, PropertyFailedError):
            from triptych.check.report import details

            result = excinfo.value.result
            head = f"{self.spec}: {result.id} ({result.title}) FAILED"
            return f"{head}\n{details(result.to_json())}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


_ADAPTERS = pytest.StashKey[dict]()


def adapter_of(config, spec: str):
    """The adapter of `spec`, made once per session (its import, framework,
    signature and batch axes), or the error that says why it cannot be
    checked (no such module or function, no signature fits, its framework
    missing, its import raises), its options spelled --attention-...
    """
    from triptych.check.adapters.probe import batch_of
    from triptych.check.runner import Job, make_adapter
    from triptych.check.target import TargetImportError, options_spelled
    from triptych.common.errors import CommandError

    adapters = config.stash.setdefault(_ADAPTERS, {})
    if spec not in adapters:
        settings = settings_of(config)
        job = Job(
            spec,
            config.getoption("attention_framework"),
            config.getoption("attention_signature"),
            config.getoption("attention_adapter"),
            settings.dtypes,
            eager=config.getoption("attention_eager"),
            profile=settings.profile,
            batch=batch_of(config.getoption("attention_batch"), settings.profile),
        )
        try:
            with options_spelled("--attention-"):
                adapters[spec] = make_adapter(job)
        except (CommandError, TargetImportError) as error:
            adapters[spec] = error
    return adapters[spec]
