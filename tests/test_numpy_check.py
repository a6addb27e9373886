"""`triptych check` on NumPy targets: our backend, its lesson (in each
profile), implementations of other conventions (batch axes, the merged
heads' signature, einsum, log-sum-exp), the broken versions of
tests/broken_attention.py (each caught with its diagnosis, with the
defaults), the mistakes' own float64 attention, the command (exit codes, a
process per target: an endless loop, a crash, an import that raises;
results.json against docs/check.schema.json, report.md, --grade and its
files, --profile, --skip) and the pytest plugin (through pytester). NumPy
only, so `tox -e numpy` runs it; about 40 s on 2 busy cores.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import broken_attention
import jsonschema
import known_numpy
import numpy as np
import pytest

import impl_numpy
from shared import Rotary, assert_close
from triptych import check
from triptych.check import mistakes
from triptych.check.adapters import adapter_for
from triptych.check.problems import Problem, block_edges, catalogue
from triptych.check.properties import (
    PROFILES,
    PROPERTIES,
    Settings,
    property_ids,
    rich_problem,
    run_property,
)
from triptych.check.target import TargetError
from triptych.check.variant import Variant
from triptych.cli import main

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
BROKEN = ROOT / "tests" / "broken_attention.py"
SCHEMA = json.loads((ROOT / "docs" / "check.schema.json").read_text())
FEW = Settings(examples=4)
DEFAULTS = Settings()
STRICT = Settings(profile="strict")
VARIANT = Variant(2, Rotary(), window=3, softcap=5.0, alibi=True, sinks=True)


def results(target, settings=FEW, ids=None) -> dict:
    """Each property's Result for `target`, checked in this process."""
    adapter = adapter_for(target)
    return {
        id: run_property(adapter, settings, id) for id in ids or property_ids(settings)
    }


def statuses(found: dict) -> dict:
    return {id: result.status for id, result in found.items()}


def test_our_numpy_backend_passes_every_property():
    found = results(impl_numpy.multi_head_attention)
    assert statuses(found) == {**dict.fromkeys(found, "PASS"), "gradients": "SKIP"}


def test_single_head_and_the_module_form_pass_too():
    ids = ["oracle:float32", "mask", "fully masked rows"]
    single = results(impl_numpy.single_head_attention, ids=ids)
    module = results(impl_numpy.CausalSelfAttention, ids=ids)
    assert set(statuses(single).values()) == set(statuses(module).values()) == {"PASS"}
    assert adapter_for(impl_numpy.single_head_attention).signature == "single"
    assert adapter_for(impl_numpy.CausalSelfAttention).signature == "module"


def test_the_lesson_passes_the_default_and_course_profiles_not_strict():
    """The lesson takes no mask, multiplies a masked NaN by 0, and takes
    q @ k^T in float16 before the scale (docs/reading.md): right by the
    default and course profiles (a NOTE for the NaN), wrong by this project's
    own policies."""
    from impl_numpy import lesson

    default = results(lesson.multi_head_attention, DEFAULTS)
    assert {r.status for r in default.values()} == {"PASS", "NOTE", "SKIP"}
    assert default["NaN behind the mask"].status == "NOTE"
    assert "0 * NaN = NaN" in default["NaN behind the mask"].diagnosis
    assert default["mask"].status == default["fully masked rows"].status == "SKIP"
    course = Settings(profile="course")
    found = results(lesson.multi_head_attention, course)
    assert "NaN behind the mask" not in found
    assert {r.status for r in found.values()} == {"PASS", "SKIP"}
    ids = ["NaN behind the mask", "hostile magnitudes"]
    strict = results(lesson.multi_head_attention, STRICT, ids)
    assert statuses(strict) == dict.fromkeys(ids, "FAIL")
    assert "overflows float16" in strict["hostile magnitudes"].diagnosis


def test_the_profiles_list_their_properties():
    every = property_ids(DEFAULTS)
    assert property_ids(STRICT) == every
    assert property_ids(Settings(profile="course")) == [
        id for id in every if id not in ("fully masked rows", "NaN behind the mask")
    ]
    assert property_ids(DEFAULTS, skip=["scale", "oracle:float16"]) == [
        id for id in every if id not in ("scale", "oracle:float16")
    ]
    assert set(PROFILES) == {"default", "strict", "course"}


def test_sizes_reach_the_block_edges():
    sizes = {shape.T for shape in catalogue()}
    assert {15, 16, 17, 31, 32, 33, 63, 64, 65} <= sizes and max(sizes) == 65
    assert block_edges(8) == [] and block_edges(100)[-4:] == [63, 64, 65, 100]
    assert {127, 128, 129} <= {shape.T for shape in catalogue(128)}


@pytest.mark.parametrize("name", list(broken_attention.EXPECTED))
def test_each_broken_version_is_caught_with_its_diagnosis(name):
    """With the defaults (20 examples, T up to 65): the blockwise bug at 16
    is within reach."""
    id, words = broken_attention.EXPECTED[name]
    result = run_property(adapter_for(getattr(broken_attention, name)), DEFAULTS, id)
    assert result.status == "FAIL", result.reason
    assert words in result.diagnosis
    assert result.smallest["text"] and result.finding.message
    problem = Problem(
        tuple(result.smallest["batch"]),
        *(result.smallest[k] for k in ("T", "H", "D", "seed", "mask")),
    )
    if name == "blockwise_without_rescale":
        assert problem.T > broken_attention.BLOCK
    else:
        assert problem.T <= 8 and problem.C <= 8  # hypothesis shrank it small


@pytest.mark.parametrize("name", list(broken_attention.ALSO))
def test_a_leak_is_named_for_what_it_is_in_every_row(name):
    """Not "no causal mask" for a mask that leaks through the denominator,
    the axis or the batch; not a policy for a mask ignored or inverted."""
    id, words = broken_attention.ALSO[name]
    result = run_property(adapter_for(getattr(broken_attention, name)), DEFAULTS, id)
    assert result.status == "FAIL", result.reason
    assert words in result.diagnosis
    assert "no causal mask" not in result.diagnosis


@pytest.mark.parametrize("name", list(broken_attention.POLICIES))
def test_a_policy_difference_is_a_note_by_default_and_a_fail_when_strict(name):
    id, words = broken_attention.POLICIES[name]
    adapter = adapter_for(getattr(broken_attention, name))
    default, strict = (run_property(adapter, s, id) for s in (FEW, STRICT))
    assert (default.status, strict.status) == ("NOTE", "FAIL")
    assert words in default.diagnosis and words in strict.diagnosis


def test_a_broken_version_fails_its_property_and_passes_the_others():
    """No scale breaks what compares with the oracle, never what compares the
    implementation with itself (causality, independence, NaN, determinism)."""
    found = results(broken_attention.no_scale)
    failed = {id for id, r in found.items() if r.status == "FAIL"}
    assert {"oracle:float64", "oracle:float32", "scale"} <= failed
    assert not failed & {"causality", "independence", "NaN behind the mask"}
    assert found["determinism"].status == "PASS"


def test_float64_computed_in_float32_is_a_note_and_judged_at_float32():
    found = results(
        broken_attention.float32_inside,
        ids=["oracle:float64", "oracle:float32", "mask"],
    )
    assert statuses(found) == {
        "oracle:float64": "NOTE",
        "oracle:float32": "PASS",
        "mask": "PASS",
    }
    assert "computes in float32 inside" in found["oracle:float64"].diagnosis
    assert "judged at the float32 tolerance" in found["mask"].reason


def test_the_endless_loop_crash_and_raise_are_python_functions_too():
    found = run_property(adapter_for(broken_attention.raises), FEW, "oracle:float64")
    assert found.status == "FAIL"
    assert found.reason.startswith("raises on every input")
    assert "ValueError: not implemented yet" in found.reason


# Conventions: batch axes, signatures ----------------------------------------


def one_batch_axis(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """`B, T, C = x.shape`: (B, T, C) and nothing else."""
    B, T, C = x.shape  # noqa: RUF059 (the convention is the point)
    return impl_numpy.multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask)


def no_batch_axis(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """`T, C = x.shape`: one sequence (T, C)."""
    T, C = x.shape  # noqa: RUF059 (the convention is the point)
    return impl_numpy.multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask)


def homework(X, Wq, Wk, Wv, heads):
    """The merged heads, no output projection, heads as a positional."""
    eye = np.eye(X.shape[-1], dtype=X.dtype)
    return impl_numpy.multi_head_attention(X, Wq, Wk, Wv, eye, heads)[0]


def unreadable(X, A, B, C, D):
    """Five positional parameters that say nothing, and a TypeError."""
    return X @ A @ D


@pytest.mark.parametrize(
    "target, layout",
    [
        (impl_numpy.multi_head_attention, "x (..., T, C)"),
        (one_batch_axis, "x (B, T, C)"),
        (no_batch_axis, "x (T, C)"),
    ],
)
def test_every_batch_convention_is_found_and_passes(target, layout):
    adapter = adapter_for(target)
    assert adapter.describe() == f"multi, numpy, {layout}"
    ids = ["oracle:float64", "causality", "independence", "mask"]
    found = results(target, FEW, ids)
    assert statuses(found) == dict.fromkeys(ids, "PASS")
    given = adapter_for(target, batch="any")
    assert given.batch_ranks == (0, 1, 2)
    assert given.describe() == "multi, numpy, x (..., T, C) as --batch says"


def test_positional_heads_are_the_merged_heads_signature():
    adapter = adapter_for(homework)
    assert adapter.describe() == "heads, numpy, x (..., T, C)"
    ids = ["oracle:float32", "independence", "scale"]
    assert statuses(results(homework, FEW, ids)) == dict.fromkeys(ids, "PASS")


def test_a_signature_that_cannot_be_told_is_one_error_naming_those_that_fit():
    with pytest.raises(TargetError) as raised:
        adapter_for(unreadable)
    message = str(raised.value)
    assert message.startswith("unreadable(X, A, B, C, D): called as heads, ")
    assert "raised ValueError" in message and "its parameters fit heads" in message
    assert "--signature" in message and "\n" not in message
    with pytest.raises(TargetError, match="cannot be called as multi"):
        adapter_for(homework, signature="multi")


def passes_on(*args, **kwargs):
    """A wrapper, as a user writes one around a library's attention."""
    return impl_numpy.multi_head_attention(*args, **kwargs)


def test_a_wrapper_of_args_is_checked_as_the_signature_named():
    """What *args take cannot be read: one error that says so, with the
    stars, and the signature named with --signature is taken."""
    with pytest.raises(TargetError) as raised:
        adapter_for(passes_on)
    assert str(raised.value).startswith(
        "passes_on(*args, **kwargs) takes *args, whose arguments cannot be read"
    )
    adapter = adapter_for(passes_on, signature="multi")
    assert adapter.signature == "multi"
    with pytest.raises(TargetError, match=r"unreadable\(X, A, B, C, D\) cannot"):
        adapter_for(unreadable, signature="multi")  # no *args: not forced


def test_a_name_that_is_not_callable_says_what_it_is_in_english():
    from triptych.check.target import load

    with pytest.raises(TargetError, match="BLOCK is an int, not callable"):
        load(f"{BROKEN}:BLOCK")
    with pytest.raises(TargetError, match="EXPECTED is a dict, not callable"):
        load(f"{BROKEN}:EXPECTED")


def test_einsum_and_log_sum_exp_pass():
    ids = ["oracle:float64", "oracle:bfloat16", "causality", "mask"]
    ids += ["fully masked rows", "hostile magnitudes"]
    for target in (known_numpy.einsum_attention, known_numpy.log_sum_exp_attention):
        found = statuses(results(target, FEW, ids))
        assert set(found.values()) <= {"PASS", "NOTE", "SKIP"}, found
    einsum = results(known_numpy.einsum_attention, FEW, ["oracle:bfloat16"])
    assert "NumPy has no bfloat16" in einsum["oracle:bfloat16"].reason


# The mistakes' attention ------------------------------------------------------


@pytest.mark.parametrize(
    "problem",
    [
        Problem((), 1, 1, 3, 0),
        Problem((2,), 5, 2, 3, 1, "per head"),
        Problem((2, 1), 6, 4, 2, 2, "key padding"),
        Problem((2,), 6, 2, 2, 3, "empty rows"),
    ],
)
@pytest.mark.parametrize("level", ["x", "qkv"])
def test_attention_with_no_mistake_is_the_oracle(problem, level):
    for one_head in (False, True) if level == "x" else (False,):
        if one_head and problem.H > 1:
            continue
        adapter = adapter_for(
            impl_numpy.single_head_attention
            if one_head
            else impl_numpy.multi_head_attention
        )
        adapter.level = level
        inputs = problem.inputs()
        right = mistakes.mistaken(None, inputs, "float64", level, one_head)
        truth = adapter.truth(inputs, "float64")
        assert_close(right.out, truth.out, "float64", "out")
        assert_close(right.weights, truth.weights, "float64", "weights")


@pytest.mark.parametrize("mistake", mistakes.MISTAKES, ids=lambda m: m.name)
def test_every_mistake_changes_the_result_on_the_rich_problem(mistake):
    """So that a diagnosis can tell each one from the truth."""
    mask = "per head" if mistake.needs == "mask" else "none"
    inputs = Problem((2,), 6, 2, 3, 2024, mask).inputs()
    if mistake.needs in mistakes.VARIANT_NEEDS:  # 6 heads reading 2 KV heads
        inputs = Problem((2,), 6, 6, 4, 2024, mask, VARIANT).inputs()
    wrong = mistakes.mistaken(mistake, inputs, "float64", "x", False)
    right = mistakes.mistaken(None, inputs, "float64", "x", False)
    assert not np.allclose(wrong.out, right.out)


# The command ------------------------------------------------------------------


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_writes_results_json_and_report_md(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, _ = run_cli(
        [
            "check",
            "impl_numpy:multi_head_attention",
            f"{BROKEN}:no_scale",
            "--properties",
            "oracle:float64,scale,causality",
            "--examples",
            "3",
            "--output-dir",
            str(out),
        ],
        capsys,
    )
    assert code == 1
    doc = json.loads((out / "results.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["summary"] == {"targets": 2, "pass": 1, "fail": 1, "error": 0}
    good, bad = doc["targets"]
    assert good["adapter"] == "multi, numpy, x (..., T, C)"
    assert [p["status"] for p in bad["properties"]] == ["FAIL", "PASS", "FAIL"]
    assert bad["properties"][2]["diagnosis"].startswith("scale missing")
    report = (out / "report.md").read_text()
    assert "scale missing" in report and "smallest failing input: x (" in report
    assert "scale missing" in stdout and stdout.rstrip().endswith("report.md")
    assert max(len(line) for line in stdout.splitlines()) <= 100 + len(str(out)) * 2


def test_a_note_or_a_skip_shows_its_smallest_input_as_no_failure():
    """A NOTE is a deviation the profile expects, not a failure; a SKIP that
    could not judge (a scale wrong at every scale tried) names its input as
    such."""
    from triptych.check import report

    found = {"text": "x (2, 4), 1 head of width 4, seed 0"}
    for status, words in (
        ("FAIL", "smallest failing input: x (2, 4)"),
        ("NOTE", "smallest input that shows it: x (2, 4)"),
        ("SKIP", "smallest input it could not judge: x (2, 4)"),
    ):
        result = {"status": status, "reason": "r", "diagnosis": "", "smallest": found}
        assert words in report.details(result)


def test_one_bad_target_never_stops_the_others(tmp_path, capsys):
    """An endless loop (killed at --timeout), a crash, a function that raises,
    a file whose import raises: FAIL rows; a name that is not callable, a
    signature nothing fits: ERROR rows and exit code 2. (A file that does not
    exist stops the command before any target runs: tests/test_limits.py.)"""
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def attention(x:\n")
    targets = [
        f"{BROKEN}:endless_loop",
        f"{BROKEN}:crashes",
        f"{BROKEN}:raises",
        f"{syntax}:attention",
        f"{BROKEN}:EXPECTED",
        "os.path:join",
        "impl_numpy:multi_head_attention",
    ]
    # the endless loop holds the run for the whole timeout; each other target
    # here ends in under half a second (its own process, imports and all)
    options = ["--properties", "oracle:float64", "--examples", "2", "--timeout", "3"]
    code, _, stderr = run_cli(
        ["check", *targets, *options, "--output-dir", str(tmp_path / "out")], capsys
    )
    assert code == 2
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    found = {t["target"].rpartition(":")[2]: t for t in doc["targets"]}
    assert [t["status"] for t in doc["targets"]] == [
        "FAIL",
        "FAIL",
        "FAIL",
        "FAIL",
        "ERROR",
        "ERROR",
        "PASS",
    ]
    assert found["endless_loop"]["error"].startswith(
        "timed out after 3 s while checking how to call it"
    )
    assert found["crashes"]["error"].startswith(
        "crashed (SIGABRT) while checking how to call it"
    )
    assert "raises on every input" in found["raises"]["properties"][0]["reason"]
    assert "raised SyntaxError" in doc["targets"][3]["error"]
    assert "is a dict, not callable" in found["EXPECTED"]["error"]
    assert "join(a, *p) takes *p, whose arguments" in found["join"]["error"]
    assert stderr.count("triptych check: error:") == 2


def test_a_target_whose_framework_is_missing_cannot_be_checked(
    tmp_path, capsys, monkeypatch
):
    """torch hidden from the child by a torch.py that is not there, as in
    `tox -e numpy`."""
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "torch.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "hidden"))
    (tmp_path / "kernel.py").write_text(
        "import torch\n\n\ndef attention(q, k, v):\n    pass\n"
    )
    code, _, stderr = run_cli(
        ["check", f"{tmp_path}/kernel.py:attention", "--output-dir", str(tmp_path)],
        capsys,
    )
    assert code == 2
    assert (
        'kernel.py needs torch, which is not installed here: pip install -c constraints.txt -e ".[torch]"'
        in stderr
    )


def test_grade_prints_a_row_per_submission_and_writes_csv_and_markdown(
    tmp_path, capsys
):
    """One row per submission, a column per property, the score out of the
    properties that apply (a SKIP for no mask is out of it), why each FAIL
    failed beside it; a SyntaxError is a row with its
    message, a submission that cannot be checked a row too (and one line on
    stderr for all); no line padded."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "alice.py").write_text(
        "from impl_numpy import multi_head_attention as attention\n"
    )
    (folder / "bob.py").write_text(
        "from impl_numpy.lesson import multi_head_attention as attention\n"
    )
    (folder / "carol.py").write_text(
        "def attention(x, w_q, w_k, w_v, w_o, n_heads):\n    return x\n"
    )
    (folder / "dave.py").write_text("def attention(x:\n")
    (folder / "erin.py").write_text("def attend(x):\n    return x\n")
    properties = "oracle:float32,causality,mask,NaN behind the mask"
    options = ["--grade", "--examples", "2", "--properties", properties]
    options += ["--profile", "strict", "--output-dir", str(tmp_path / "out")]
    code, stdout, stderr = run_cli(
        ["check", f"{folder}/*.py:attention", *options], capsys
    )
    assert code == 2
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert errors == [
        "triptych check: error: 1 of 5 targets cannot be checked: their rows say why"
    ]
    lines = stdout.splitlines()
    assert lines[0].split()[:7] == [
        "target",
        "f32",
        "causal",
        "mask",
        "NaN",
        "score",
        "why",
    ]
    rows = {line.split()[0]: line for line in lines[1:6]}
    assert rows["alice"].split()[1:6] == ["PASS", "PASS", "PASS", "PASS", "4/4"]
    assert rows["bob"].split()[1:6] == ["PASS", "PASS", "SKIP", "FAIL", "2/3"]
    assert "NaN: a NaN or Inf behind the causal mask" in rows["bob"]
    assert rows["carol"].split()[1:6] == ["FAIL", "PASS", "SKIP", "PASS", "2/3"]
    assert rows["dave"].split()[1:6] == ["error"] * 4 + ["0/4"]
    assert "raised SyntaxError" in rows["dave"] and rows["dave"].count("error") == 5
    assert "has no attention" in rows["erin"]
    assert all(line == line.rstrip() for line in lines)
    assert stdout.count("SyntaxError") == 1
    with (tmp_path / "out" / "grade.csv").open() as f:
        found = {Path(r["target"]).stem.split(".")[0]: r for r in csv.DictReader(f)}
    assert found["bob"]["score"] == "2/3" and found["bob"]["of"] == "3"
    assert found["bob"]["NaN behind the mask"] == "FAIL"
    assert "0 * NaN = NaN" in found["bob"]["NaN behind the mask: why"]
    assert "SyntaxError" in found["dave"]["error"]
    markdown = (tmp_path / "out" / "grade.md").read_text()
    assert "| 2/3 |" in markdown and "**FAIL**: a NaN or Inf" in markdown


def test_ctrl_c_keeps_the_targets_done(tmp_path, capsys, monkeypatch):
    from triptych.check import runner

    done = []

    def check_then_ctrl_c(job, timeout_s, on_event=None):
        if done:
            raise KeyboardInterrupt
        done.append(job.target)
        return real(job, timeout_s, on_event)

    real = runner.check
    monkeypatch.setattr(runner, "check", check_then_ctrl_c)
    out = tmp_path / "out"
    targets = ["impl_numpy:multi_head_attention", f"{BROKEN}:no_scale"]
    options = ["--properties", "oracle:float64", "--examples", "1"]
    code, _, stderr = run_cli(
        ["check", *targets, *options, "--output-dir", str(out)], capsys
    )
    assert code == 130
    assert "1 row done so far kept in" in stderr
    with (out / "results.partial.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["target"], r["status"]) for r in rows] == [(targets[0], "PASS")]
    assert not (out / "results.json").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dtypes", "float8"], "--dtypes: choose from float64"),
        (["--properties", "speed"], "--properties: unknown speed"),
        (["--examples", "0"], "--examples: must be >= 1"),
        (["--signature", "kernel"], "--signature: invalid choice"),
        (["--skip", "speed"], "--skip: unknown speed"),
        (["--profile", "lenient"], "--profile: invalid choice"),
        (["--max-t", "1"], "--max-t: must be >= 2"),
        (["--properties", "scale", "--skip", "scale"], "no property left to check"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    code, _, stderr = run_cli(
        [
            "check",
            "impl_numpy:multi_head_attention",
            *argv,
            "--output-dir",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and message in stderr


def test_without_hypothesis_the_help_and_the_command_say_how(monkeypatch, capsys):
    monkeypatch.setattr(check, "has_hypothesis", lambda: False)
    code, stdout, _ = run_cli(["check", "--help"], capsys)
    assert code == 0 and 'pip install -c constraints.txt -e ".[check]"' in " ".join(
        stdout.split()
    )
    code, _, stderr = run_cli(["check", "impl_numpy:multi_head_attention"], capsys)
    assert code == 2 and "hypothesis is not installed here" in stderr


def test_the_docs_name_every_property_and_mistake():
    text = (ROOT / "docs" / "check.md").read_text()
    for id in [*property_ids(Settings()), *PROPERTIES]:
        assert f"`{id}`" in text, id
    for mistake in mistakes.MISTAKES:
        assert mistake.text in text, mistake.name


def test_the_adapter_of_the_docs_checks_a_homework(tmp_path, capsys, monkeypatch):
    """docs/check.md's adapter, as it stands, on a homework of its signature:
    the mask it takes reaches the homework (the mask property passes)."""
    section = (ROOT / "docs" / "check.md").read_text().split("## Adapters")[1]
    (code,) = re.findall(r"```python\n(.*?)```", section.split("\n## ")[0], re.S)
    (tmp_path / "grading.py").write_text(code)
    (tmp_path / "homework.py").write_text(
        "from impl_numpy import multi_head_attention\n\n\n"
        "def attention(X, params, mask=None):\n"
        "    weights = [params[n] for n in ('Wq', 'Wk', 'Wv', 'Wo')]\n"
        "    return multi_head_attention(X, *weights, params['heads'], mask)\n"
    )
    options = ["--properties", "oracle:float32,causality,mask", "--examples", "2"]
    options += ["--adapter", f"{tmp_path}/grading.py:adapt", "--output-dir", "out"]
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = run_cli(["check", "homework.py:attention", *options], capsys)
    assert code == 0, stdout
    assert "(multi (adapter adapt), numpy, x (..., T, C))" in stdout
    assert "PASS  mask" in stdout


# The pytest plugin ------------------------------------------------------------


def test_the_plugin_runs_the_properties_as_tests(pytester):
    result = pytester.runpytest(
        "--attention-impl=impl_numpy:multi_head_attention",
        f"--attention-impl={BROKEN}:off_by_one",
        f"--attention-impl={BROKEN}:float32_inside",
        "--attention-examples=2",
        "--attention-dtypes=float64",
        "-k",
        "oracle or causality or gradients",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3, failed=2, skipped=3, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*off_by_one: causality (a change in the future changes no earlier output) FAILED",
            "*looks like: future leaks at offset 1*",
        ]
    )


def test_a_target_the_plugin_cannot_check_is_one_error_naming_its_options(
    pytester, tmp_path
):
    """No such function, or a signature that cannot be told: one error each
    (not a failure per property), the hint naming --attention-signature."""
    (tmp_path / "homework.py").write_text(
        "def attention(X, A, B, C, D):\n    return X @ A @ D\n"
    )
    result = pytester.runpytest(
        "--attention-impl=impl_numpy:no_such_function",
        f"--attention-impl={tmp_path}/homework.py:attention",
        "--attention-dtypes=float64",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*impl_numpy has no no_such_function*",
            "*its parameters fit heads: name the one it has with "
            "--attention-signature*",
        ]
    )


def test_the_plugin_takes_the_profile_and_skip(pytester):
    result = pytester.runpytest(
        f"--attention-impl={BROKEN}:nan_leaks_through_the_mask",
        "--attention-dtypes=float64",
        "--attention-examples=2",
        "--attention-skip=oracle:float64,causality,rows sum to 1,scale,mask",
        "--attention-skip=independence,fully masked rows,hostile magnitudes",
        "--attention-skip=determinism,gradients",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(xfailed=1)
    strict = pytester.runpytest(
        f"--attention-impl={BROKEN}:nan_leaks_through_the_mask",
        "--attention-dtypes=float64",
        "--attention-examples=2",
        "--attention-profile=strict",
        "-k",
        "behind",
        "-p",
        "no:cacheprovider",
    )
    strict.assert_outcomes(failed=1)


# Variants: GQA, rotary positions, a window, a soft-cap, ALiBi, sinks, QK-norm -----

EVERY_VARIANT = VARIANT._replace(qk_norm=True)


def test_variant_attention_and_ours_pass_every_property_told_the_variant():
    """Told every option at once: the window and soft-cap properties join
    (after causality), hostile magnitudes is SKIP (its references are plain
    attention), the rest PASS; w_k and w_v drawn (C, 2 * D)."""
    settings = Settings(examples=3, variant=EVERY_VARIANT)
    ids = property_ids(settings)
    assert ids[ids.index("causality") :][:3] == ["causality", "window", "soft-cap"]
    for target in (broken_attention.variant_attention, impl_numpy.multi_head_attention):
        adapter = adapter_for(target, variant=EVERY_VARIANT)
        found = {id: run_property(adapter, settings, id) for id in ids}
        assert statuses(found) == {
            **dict.fromkeys(ids, "PASS"),
            "hostile magnitudes": "SKIP",
            "gradients": "SKIP",
        }, {id: r.reason for id, r in found.items() if r.status != "PASS"}
    assert "without rotary neox" in found["hostile magnitudes"].reason
    inputs = rich_problem(adapter).inputs()
    assert inputs.w["w_k"].shape == (inputs.x.shape[-1], 2 * 8)  # 4 rotary pairs
    assert inputs.H == 6 and set(inputs.extra) == {"sinks", "q_norm", "k_norm"}


def test_attention_with_no_mistake_is_the_oracle_with_every_variant():
    adapter = adapter_for(impl_numpy.multi_head_attention, variant=EVERY_VARIANT)
    inputs = Problem((2,), 7, 4, 4, 3, "per head", EVERY_VARIANT).inputs()
    right = mistakes.mistaken(None, inputs, "float32", "x", False)
    truth = adapter.truth(inputs, "float32")
    assert_close(right.out, truth.out, "float64", "out")
    assert_close(right.weights, truth.weights, "float64", "weights")


@pytest.mark.parametrize("name", list(broken_attention.VARIANT_EXPECTED))
def test_each_mistake_of_a_variant_is_caught_with_its_diagnosis(name):
    options, id, words = broken_attention.VARIANT_EXPECTED[name]
    variant = Variant(**options)
    adapter = adapter_for(getattr(broken_attention, name), variant=variant)
    result = run_property(adapter, Settings(examples=4, variant=variant), id)
    assert result.status == "FAIL", result.reason
    assert words in result.diagnosis
    assert result.smallest["T"] <= 8


def test_a_row_after_a_wrong_forward_says_so_and_gqa_order_breaks_independence():
    """GQA grouped in the wrong order: the oracle and independence name it
    (changing KV head g reaches heads it does not serve); hostile magnitudes
    (GQA alone: its references take the KV heads repeated) says the forward
    is already wrong, rather than guessing at an overflow."""
    variant = Variant(n_kv_heads=2)
    settings = Settings(examples=8, variant=variant)
    adapter = adapter_for(broken_attention.gqa_heads_tiled, variant=variant)
    found = {
        id: run_property(adapter, settings, id)
        for id in ("independence", "hostile magnitudes", "causality")
    }
    assert "h % H_kv" in found["independence"].diagnosis
    assert "KV head" in found["independence"].finding.message
    assert "the forward is already wrong" in found["hostile magnitudes"].diagnosis
    assert found["causality"].status == "PASS"
    right = adapter_for(broken_attention.variant_attention, variant=variant)
    assert run_property(right, settings, "hostile magnitudes").status == "PASS"


def test_a_target_that_cannot_take_the_variant_is_one_line():
    variant = Variant(window=3)
    with pytest.raises(TargetError, match=r"takes no window: the variant's options"):
        adapter_for(broken_attention.no_scale, variant=variant)
    with pytest.raises(TargetError, match="called as qkv, it cannot be told"):
        adapter_for(impl_numpy.blockwise_attention, variant=variant)
    with pytest.raises(TargetError, match="a module cannot be told the variant"):
        adapter_for(impl_numpy.CausalSelfAttention, variant=variant)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--window", "0"], "argument --window: must be >= 1, got 0"),
        (["--n-kv-heads", "0"], "argument --n-kv-heads: must be >= 1, got 0"),
        (["--rotary", "llama"], "the style comes first, neox (rotate halves)"),
        (["--rotary", "gptj,theta=5"], "after the style, base=B and fraction=F"),
        (["--rotary", "neox,fraction=2"], "fraction must be in (0, 1], got 2"),
        (["--softcap", "-1"], "argument --softcap: must be > 0"),
        (["--properties", "window"], "--properties: unknown window"),
    ],
)
def test_bad_variant_options_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    code, _, stderr = run_cli(
        ["check", "impl_numpy:multi_head_attention", *argv, "--output-dir",
         str(tmp_path)],
        capsys,
    )  # fmt: skip
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and message in stderr


def test_the_command_takes_the_variant_and_writes_it(tmp_path, capsys):
    """One process per target, as a user runs it: ours passes, the window
    one key too wide fails its window row, a kernel cannot be told the
    variant (exit 2, one line)."""
    out = tmp_path / "out"
    code, _, stderr = run_cli(
        [
            "check",
            "impl_numpy:multi_head_attention",
            f"{BROKEN}:window_one_key_too_many",
            "impl_numpy:blockwise_attention",
            "--window", "3", "--n-kv-heads", "2", "--rotary", "gptj,base=500",
            "--properties", "oracle:float64,window",
            "--examples", "2", "--output-dir", str(out),
        ],
        capsys,
    )  # fmt: skip
    assert code == 2
    doc = json.loads((out / "results.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["settings"]["variant"]["rotary"] == {
        "base": 500.0,
        "style": "gptj",
        "fraction": 1.0,
    }
    ours, wide, kernel = doc["targets"]
    assert [p["status"] for p in ours["properties"]] == ["PASS", "PASS"]
    assert [p["status"] for p in wide["properties"]] == ["FAIL", "FAIL"]
    assert "W + 1 keys" in wide["properties"][1]["diagnosis"]
    assert "KV heads" in wide["properties"][1]["smallest"]["text"]
    assert kernel["status"] == "ERROR"
    assert stderr.count("cannot be told the variant") == 1
