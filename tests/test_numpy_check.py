"""`triptych check` on NumPy targets: our backend, its lesson, the broken
versions of tests/broken_attention.py (each caught with its diagnosis), the
mistakes' own float64 attention, the command (exit codes, a process per
target: an endless loop, a crash, an import that raises; results.json
against docs/check.schema.json, report.md, --grade) and the pytest plugin
(through pytester). NumPy only, so `tox -e numpy` runs it; a few examples
per property keep it to about 30 s on 2 cores.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import broken_attention
import jsonschema
import numpy as np
import pytest

import impl_numpy
from shared import assert_close
from triptych import check
from triptych.check import mistakes
from triptych.check.adapters import adapter_for
from triptych.check.problems import Problem
from triptych.check.properties import PROPERTIES, Settings, property_ids, run_property
from triptych.cli import main

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
BROKEN = ROOT / "tests" / "broken_attention.py"
SCHEMA = json.loads((ROOT / "docs" / "check.schema.json").read_text())
FEW = Settings(examples=4)


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


def test_the_lesson_fails_only_what_it_never_promised():
    """The lesson takes no mask, multiplies a masked NaN by 0, and takes
    q @ k^T in float16 before the scale (docs/reading.md)."""
    from impl_numpy import lesson

    found = results(lesson.multi_head_attention, Settings(examples=20))
    assert {id for id, r in found.items() if r.status == "FAIL"} == {
        "NaN behind the mask",
        "hostile magnitudes",
    }
    assert "0 * NaN = NaN" in found["NaN behind the mask"].diagnosis
    assert "overflows float16" in found["hostile magnitudes"].diagnosis
    assert found["mask"].status == found["fully masked rows"].status == "SKIP"


@pytest.mark.parametrize("name", list(broken_attention.EXPECTED))
def test_each_broken_version_is_caught_with_its_diagnosis(name):
    id, words = broken_attention.EXPECTED[name]
    result = run_property(adapter_for(getattr(broken_attention, name)), FEW, id)
    assert result.status == "FAIL", result.reason
    assert words in result.diagnosis
    assert result.smallest["text"] and result.finding.message
    problem = Problem(
        tuple(result.smallest["batch"]),
        *(result.smallest[k] for k in ("T", "H", "D", "seed", "mask")),
    )
    assert problem.T <= 8 and problem.C <= 8  # hypothesis shrank it small


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
    inputs = Problem((2,), 6, 2, 3, 2024, "per head").inputs()
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
    assert good["adapter"] == "multi, numpy"
    assert [p["status"] for p in bad["properties"]] == ["FAIL", "PASS", "FAIL"]
    assert bad["properties"][2]["diagnosis"].startswith("scale missing")
    report = (out / "report.md").read_text()
    assert "scale missing" in report and "smallest failing input: x (" in report
    assert "scale missing" in stdout and stdout.rstrip().endswith("report.md")


def test_one_bad_target_never_stops_the_others(tmp_path, capsys):
    """An endless loop (killed at --timeout), a crash, a function that raises,
    a file whose import raises: FAIL rows; no such file, a name that is not
    callable, a signature nothing fits: ERROR rows and exit code 2."""
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def attention(x:\n")
    targets = [
        f"{BROKEN}:endless_loop",
        f"{BROKEN}:crashes",
        f"{BROKEN}:raises",
        f"{syntax}:attention",
        f"{tmp_path}/missing.py:attention",
        f"{BROKEN}:EXPECTED",
        "os.path:join",
        "impl_numpy:multi_head_attention",
    ]
    options = ["--properties", "oracle:float64", "--examples", "2", "--timeout", "10"]
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
        "ERROR",
        "PASS",
    ]
    assert found["endless_loop"]["error"].startswith(
        "timed out after 10 s while checking oracle:float64"
    )
    assert found["crashes"]["error"].startswith(
        "crashed (SIGABRT) while checking oracle:float64"
    )
    assert "raises on every input" in found["raises"]["properties"][0]["reason"]
    assert "raised SyntaxError" in doc["targets"][3]["error"]
    assert "no such file" in doc["targets"][4]["error"]
    assert "is a dict, not callable" in found["EXPECTED"]["error"]
    assert "join(a, p) fits no signature" in found["join"]["error"]
    assert stderr.count("triptych check: error:") == 3


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
        'kernel.py needs torch, which is not installed here: pip install "attention-triptych[torch]"'
        in stderr
    )


def test_grade_prints_a_line_per_property_over_a_folder(tmp_path, capsys):
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
    properties = "oracle:float32,causality,NaN behind the mask"
    options = ["--grade", "--examples", "2", "--properties", properties]
    code, stdout, _ = run_cli(
        ["check", f"{folder}/*.py:attention", *options, "--output-dir", str(tmp_path)],
        capsys,
    )
    assert code == 1
    lines = stdout.splitlines()
    header = next(line for line in lines if line.startswith("property"))
    assert header.split() == ["property", "alice", "bob", "carol"]
    row = {line.split("  ")[0]: line.split()[-3:] for line in lines}
    assert row["oracle:float32"] == ["PASS", "PASS", "FAIL"]
    assert row["NaN behind the mask"] == ["PASS", "FAIL", "PASS"]
    assert row["score"] == ["3/3", "2/3", "2/3"]


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
    assert code == 0 and 'pip install "attention-triptych[check]"' in " ".join(
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
    """docs/check.md's adapter, as it stands, on a homework of its signature."""
    section = (ROOT / "docs" / "check.md").read_text().split("## Adapters")[1]
    (code,) = re.findall(r"```python\n(.*?)```", section.split("\n## ")[0], re.S)
    (tmp_path / "grading.py").write_text(code)
    (tmp_path / "homework.py").write_text(
        "import numpy as np\n\nfrom impl_numpy import multi_head_attention\n\n\n"
        "def attention(X, Wq, Wk, Wv, heads):\n"
        "    eye = np.eye(X.shape[-1], dtype=X.dtype)\n"
        "    return multi_head_attention(X, Wq, Wk, Wv, eye, heads)[0]\n"
    )
    options = ["--properties", "oracle:float32,causality", "--examples", "2"]
    options += ["--adapter", f"{tmp_path}/grading.py:adapt", "--output-dir", "out"]
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = run_cli(["check", "homework.py:attention", *options], capsys)
    assert code == 0, stdout
    assert "(multi (adapter adapt), numpy)" in stdout


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


def test_the_plugin_fails_a_target_it_cannot_check_in_one_line(pytester):
    result = pytester.runpytest(
        "--attention-impl=impl_numpy:no_such_function",
        "--attention-dtypes=float64",
        "-k",
        "oracle",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*impl_numpy has no no_such_function*"])
