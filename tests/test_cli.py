"""`triptych run` and the command line: exit codes, the printed agreement, the
files it writes (PNG sizes, results.json against docs/results.schema.json),
bad input, missing backends and atomic writes.

Every run here uses the backends this pytest session selected (`--backends`),
so `tox -e numpy` runs them with NumPy alone and `tox -e crosscheck` with all
three; the tiny preset keeps each run to a second or two.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from helpers import golden

import impl_numpy
from shared import assert_close
from triptych.cli import SUBCOMMANDS, main
from triptych.run import plots, report
from triptych.run.results import summarize_entropy

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "results.schema.json").read_text())
N_QUANTITIES = 5  # 1-head weights and output, H-head weights and output, entropy

pytestmark = pytest.mark.every_backend  # and in crosscheck, all three at once


def run_cli(argv: list[str]) -> int:
    """main(argv), with argparse's SystemExit turned into its exit code."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def n_comparisons(n_backends: int) -> int:
    """Each backend against the oracle, and every pair of backends."""
    return n_backends + n_backends * (n_backends - 1) // 2


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels of a PNG, read back as an image."""
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.std() > 0, f"{path.name} is blank"
    return image.shape[1], image.shape[0]


def leftovers(directory: Path) -> list[str]:
    """Staging directories that a run left behind."""
    return [p.name for p in directory.rglob(".triptych-run-*")]


@pytest.fixture(scope="module")
def selected(request) -> list[str]:
    return list(request.config.selected_backends)


@pytest.fixture(scope="module")
def tiny_run(selected, tmp_path_factory):
    """One `triptych run --tiny` with the selected backends, shared by the tests."""
    out = tmp_path_factory.mktemp("run") / "outputs"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(
            [
                "run",
                "--tiny",
                "--backends",
                ",".join(selected),
                "--output-dir",
                str(out),
            ]
        )
    return code, stdout.getvalue(), out


def test_run_tiny_passes_and_prints_the_agreement(tiny_run, selected):
    code, text, _ = tiny_run
    assert code == 0
    assert "tokens   the cat sat on the mat . and" in text
    assert "T 8   d_model 32   n_heads 4   d_head 8   seed 0" in text
    assert "weights: random (N(0, 1/C), drawn from the seed), not trained" in text
    agreement = text[text.index("Agreement:") :]
    rows = agreement.splitlines()[3 : 3 + n_comparisons(len(selected))]
    expected = [f"{name} vs oracle" for name in selected]
    expected += [
        f"{a} vs {b}" for i, a in enumerate(selected) for b in selected[i + 1 :]
    ]
    assert [row.split("  ")[0] for row in rows] == expected
    assert all(row.endswith("PASS") for row in rows)
    assert text.rstrip().splitlines()[-1].startswith("PASS: ")
    assert "\x1b[" not in text and "┃" not in text  # plain text when not a terminal


def test_run_prints_the_seed_weights_rounded_to_3_places(tiny_run):
    _, text, _ = tiny_run
    expected = golden("tiny")["single_weights"]
    table = text[text.index("Single-head attention weights") :]
    for i, row in enumerate(expected):
        line = next(x for x in table.splitlines() if x.startswith(f"{i} "))
        cells = line.split()[2:]
        assert cells == ["0" if w == 0 else f"{w:.3f}" for w in row]


def test_every_png_opens_at_its_expected_size(tiny_run, selected):
    _, _, out = tiny_run
    # tiny: 4 heads in one row of 2-inch panels, 0.25 in apart, 1.25 in margins
    # left and right, 0.75 in top and bottom; 100 dpi
    width = 100 * (1.25 + 4 * 2.0 + 3 * 0.25 + 1.25)
    for name in selected:
        assert png_size(out / f"attention_heatmaps_{name}.png") == (width, 350)
    rows = n_comparisons(len(selected))  # one row of panels per comparison
    height = 100 * (0.75 + rows * 2.0 + (rows - 1) * 0.5 + 0.75)
    assert png_size(out / "attention_diff.png") == (width, height)
    assert png_size(out / "entropy.png") == (1100, 400)
    assert plots.grid_inches(1, 4) == (width / 100, 3.5)


def test_results_json_matches_the_schema_and_the_oracle(tiny_run, selected):
    _, _, out = tiny_run
    document = json.loads((out / "results.json").read_text())
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert document["verdict"] == "PASS"
    assert list(document["backends"]) == selected
    assert sorted(document["files"]) == sorted(p.name for p in out.iterdir())
    agreement = document["agreement"]
    assert len(agreement) == N_QUANTITIES * n_comparisons(len(selected))
    assert all(row["passed"] for row in agreement)
    g = golden("tiny")
    oracle = document["oracle"]
    assert_close(oracle["single_head_weights"], g["single_weights"], "float64")
    assert_close(oracle["entropy"]["rows_nats"], g["multi_entropy"], "float64")
    for name in selected:
        result = document["backends"][name]
        assert result["shapes"]["multi_weights"] == [4, 8, 8]
        assert_close(result["single_head_weights"], g["single_weights"], "float32")
        assert_close(result["entropy"]["rows_nats"], g["multi_entropy"], "float32")


def test_the_schema_rejects_a_broken_document(tiny_run):
    _, _, out = tiny_run
    document = json.loads((out / "results.json").read_text())
    del document["verdict"]
    with pytest.raises(jsonschema.ValidationError, match="verdict"):
        jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def _properties(node, path="results"):
    """(path, schema) of every named property in a JSON Schema, nested too."""
    if isinstance(node, dict):
        for name, child in node.get("properties", {}).items():
            yield f"{path}.{name}", child
            yield from _properties(child, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            yield from _properties(node.get(key), f"{path}[]")
        for name, child in node.get("$defs", {}).items():
            yield from _properties(child, f"$defs.{name}")


def test_every_field_of_the_schema_is_described():
    fields = list(_properties(SCHEMA))
    assert len(fields) > 40
    undescribed = [path for path, schema in fields if "description" not in schema]
    assert not undescribed, f"no description: {undescribed}"


def test_run_log_holds_the_printed_report_and_the_versions(tiny_run):
    _, text, out = tiny_run
    log = (out / "run_log.txt").read_text()
    assert log.startswith(text)
    assert f"numpy {np.__version__}" in log.splitlines()[-1]
    # made in a private staging directory, renamed into place with the usual mode
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~_umask()


def test_json_prints_only_the_document_and_quiet_only_the_verdict(tmp_path, capsys):
    """Without --tiny or --full: the trained model's layer 1, its heads' roles
    in the report, in results.json (valid against the schema) and in the
    heatmaps' titles."""
    argv = ["run", "--backends", "numpy", "--output-dir", str(tmp_path)]
    assert run_cli(argv) == 0
    text = capsys.readouterr().out
    assert "tokens   the cat sat on a mat and slept the cat sat on a mat and slept" in (
        text
    )
    assert "weights: layer 1 of the trained model that ships with the project" in text
    roles = [line for line in text.splitlines() if line.startswith("   head ")]
    assert len(roles) == 4 and all(": induction head: " in line for line in roles)
    assert run_cli([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "results.json").read_text())
    jsonschema.validate(printed, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert printed["input"]["preset"] == "trained"
    assert printed["input"]["trained"]["layer"] == 1
    assert [h["role"] for h in printed["input"]["trained"]["heads"]] == [
        "induction"
    ] * 4
    # the single head: the one lab walks and read shows, an induction head
    from triptych import lab
    from triptych.common import trained

    shown = trained.view()
    assert printed["input"]["trained"]["single_head"] == shown.head == 3
    weights = np.array(printed["backends"]["numpy"]["single_head_weights"])
    walk = lab.walk("numpy", shown.fixture, "float32", head=shown.head)
    np.testing.assert_array_equal(weights, walk.weights)
    repeat = np.arange(8, 15)  # the second "the" on: the token after its first time
    assert weights[repeat].argmax(axis=-1).tolist() == (repeat - 7).tolist()
    assert run_cli([*argv, "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("PASS: ")


def test_a_backend_beyond_the_tolerance_fails_with_exit_1(
    tmp_path, capsys, monkeypatch
):
    real = impl_numpy.multi_head_attention

    def off_by_a_little(*args, **kwargs):
        out, weights = real(*args, **kwargs)
        return out + np.float32(1e-3), weights

    monkeypatch.setattr(impl_numpy, "multi_head_attention", off_by_a_little)
    code = run_cli(["run", "--backends", "numpy", "--output-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert code == 1
    row = next(line for line in text.splitlines() if line.startswith("numpy vs"))
    assert row.endswith("FAIL") and "1.0e-03!" in row
    assert "FAIL: 1 of 5 comparisons" in text
    assert "numpy vs oracle H-head output" in text
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["verdict"] == "FAIL"
    failed = [
        (r["actual"], r["quantity"]) for r in document["agreement"] if not r["passed"]
    ]
    assert failed == [("numpy", "multi_out")]


@pytest.mark.parametrize("command", ["run", "lab"])
@pytest.mark.parametrize("missing", ["torch", "jax"])
def test_a_missing_backend_is_one_line_naming_the_extra(
    command, missing, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, f"impl_{missing}", None)  # import fails
    out = tmp_path / "outputs"
    if command == "run":
        argv = ["run", "--backends", f"numpy,{missing}", "--output-dir", str(out)]
    else:
        argv = ["lab", "--backend", missing]
    assert run_cli(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert f'pip install -c constraints.txt -e ".[{missing}]"' in captured.err
    assert not out.exists()


def test_all_runs_every_installed_backend_and_says_which_are_not(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "impl_torch", None)
    monkeypatch.setitem(sys.modules, "impl_jax", None)
    assert run_cli(["run", "--json", "--output-dir", str(tmp_path)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document["backends"]) == ["numpy"]
    assert document["not_installed"] == ["torch", "jax"]
    assert document["summary"].startswith("PASS: numpy agrees with the float64 oracle")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--n-heads", "5"],
            "--n-heads 5 switches to random weights (the trained model's heads "
            "are its own) of width d_model=32, which 5 does not divide: add "
            "--d-model 35 (a multiple of 5), or choose --n-heads from 1, 2, 4, 8, "
            "16, 32",
        ),
        (
            ["--tiny", "--n-heads", "3"],
            "n_heads=3 does not divide d_model=32, the tiny preset's width; "
            "--d-model N sets another",
        ),
        (["--full", "--n-heads", "3", "--d-model", "16"], "d_model=16\n"),
        (["--d-model", "0"], "d_model must be >= 1, got 0"),
        (["--n-heads", "0"], "n_heads must be a positive integer, got 0"),
        (["--tiny", "--tokens", ""], "a preset needs at least 1 token, got T = 0"),
        (["--tiny", "--tokens", "   "], "a preset needs at least 1 token, got T = 0"),
        (["--tokens", ""], "the trained model reads 1 to 32 words, not 0"),
        (["--tokens", "the zebra"], "the trained model knows 64 words, not 'zebra'"),
        (["--layer", "2"], "--layer 2: the trained model has 2 layers, 0 and 1"),
        (["--weights", "random", "--layer", "0"], "--layer picks a layer of the"),
        (["--weights", "trained", "--full"], "--full choose a preset of random"),
        (["--backends", "tensorflow"], "unknown backend 'tensorflow'"),
        (["--backends", ","], "name at least one backend"),
        (["--dtype", "float16"], "invalid choice: 'float16'"),
        (["--seed", "-1"], "must be >= 0, got -1"),
        (["--d-model", "wide"], "invalid int value: 'wide'"),
        (["--tiny", "--full"], "not allowed with argument"),
        (["--quiet", "--json"], "not allowed with argument"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    argv, message, tmp_path, capsys
):
    out = tmp_path / "outputs"
    assert run_cli(["run", "--backends", "numpy", "--output-dir", str(out), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err
    assert captured.err.startswith("triptych run: error: ")
    assert list(tmp_path.iterdir()) == []


def test_an_output_dir_that_cannot_be_written_is_exit_2(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("in the way\n")
    for out, reason in (
        (a_file, "it is a file, not a directory"),
        (a_file / "outputs", f"{a_file} is a file, not a directory"),
    ):
        argv = ["run", "--backends", "numpy", "--output-dir", str(out)]
        assert run_cli(argv) == 2
        err = capsys.readouterr().err
        assert err == f"triptych run: error: cannot write to {out}: {reason}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
    assert a_file.read_text() == "in the way\n"


@pytest.mark.parametrize("exists", [False, True])
def test_a_failure_while_writing_leaves_the_output_dir_as_it_was(
    exists, tmp_path, monkeypatch
):
    out = tmp_path / "outputs"
    if exists:
        out.mkdir()
        (out / "results.json").write_text("from an earlier run\n")

    def broken(*args, **kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(plots, "save_entropy", broken)
    with pytest.raises(RuntimeError, match="the disk is full"):
        main(["run", "--backends", "numpy", "--output-dir", str(out)])
    assert leftovers(tmp_path) == []
    if exists:
        assert sorted(p.name for p in out.iterdir()) == ["results.json"]
        assert (out / "results.json").read_text() == "from an earlier run\n"
    else:
        assert not out.exists()


def test_a_new_run_replaces_its_own_files_and_keeps_the_rest(tmp_path, capsys):
    out = tmp_path / "outputs"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "attention_heatmaps_torch.png").write_bytes(b"stale")
    assert (
        run_cli(["run", "--quiet", "--backends", "numpy", "--output-dir", str(out)])
        == 0
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [
            "notes.txt",
            "run_log.txt",
            "results.json",
            "attention_heatmaps_numpy.png",
            "attention_diff.png",
            "entropy.png",
        ]
    )
    assert (out / "notes.txt").read_text() == "mine\n"


def test_overrides_reach_the_input(selected, tmp_path, capsys):
    argv = ["run", "--json", "--backends", ",".join(selected)]
    argv += ["--output-dir", str(tmp_path), "--d-model", "24", "--n-heads", "2"]
    argv += ["--seed", "7", "--tokens", "a b c d e", "--dtype", "float64"]
    assert run_cli(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["input"] == {
        "checkpoint": None,
        "trained": None,
        "preset": "tiny",
        "overrides": {"d_model": 24, "n_heads": 2, "seed": 7, "tokens": "a b c d e"},
        "tokens": ["a", "b", "c", "d", "e"],
        "T": 5,
        "d_model": 24,
        "n_heads": 2,
        "d_head": 12,
        "seed": 7,
        "dtype": "float64",
    }
    assert document["tolerance"] == {"dtype": "float64", "atol": 1e-12, "rtol": 1e-12}
    assert document["verdict"] == "PASS"
    for name in selected:
        assert document["backends"][name]["shapes"]["multi_weights"] == [2, 5, 5]
        assert document["backends"][name]["dtype"] == "float64"
    width, height = plots.grid_inches(1, 2)
    size = (100 * width, 100 * height)
    assert png_size(tmp_path / f"attention_heatmaps_{selected[0]}.png") == size


def test_more_than_4_heads_wrap_onto_more_rows_of_panels(tmp_path):
    weights = np.tril(np.ones((6, 5, 5))) / np.arange(1, 6)[:, None]  # (H, T, T)
    plots.save_heatmaps(tmp_path / "six.png", weights, list("abcde"), "six heads")
    # two rows of four 2-inch panels, 0.5 in between the rows
    assert png_size(tmp_path / "six.png") == (1125, 100 * (0.75 + 4.0 + 0.5 + 0.75))


def test_one_token_has_no_normalized_entropy(tmp_path, capsys):
    argv = ["run", "--tiny", "--backends", "numpy", "--tokens", "alone", "--output-dir"]
    assert run_cli([*argv, str(tmp_path)]) == 0
    text = capsys.readouterr().out
    entropy_table = text[text.index("Entropy per head") :].splitlines()
    assert entropy_table[3].split() == ["0", "/", "log", "T", "n/a", "n/a", "n/a"]
    assert entropy_table[4].split() == ["/", "log(i+1)", "n/a", "n/a", "n/a"]
    document = json.loads((tmp_path / "results.json").read_text())
    entropy = document["backends"]["numpy"]["entropy"]
    assert entropy["over_log_T"] is None and entropy["over_causal"] is None
    assert entropy["rows_nats"] == [[0.0]] * 4


def test_entropy_is_normalized_by_log_T_and_by_the_causal_maximum():
    T = 6
    uniform = np.log(np.arange(1, T + 1))  # a uniform causal row i has log(i + 1)
    one_hot = np.zeros(T)
    summary = summarize_entropy(np.stack([uniform, one_hot]))  # (H=2, T)
    np.testing.assert_allclose(summary.mean_nats, [uniform.mean(), 0.0])
    np.testing.assert_allclose(summary.over_causal, [1.0, 0.0], rtol=1e-15)
    np.testing.assert_allclose(summary.over_log_T, [uniform.mean() / math.log(T), 0])
    # the original build script's measure: even a uniform head is below 1
    assert summary.over_log_T[0] < 1
    single = summarize_entropy(np.zeros((3, 1)))
    assert single.over_log_T is None and single.over_causal is None


def test_a_terminal_gets_rich_tables_and_a_pipe_plain_text():
    from rich.console import Console

    from shared import PRESETS, make_fixture
    from triptych import run

    results = run.compute(
        make_fixture(PRESETS["tiny"]), {}, {"numpy": impl_numpy}, "float32", []
    )
    for terminal in (True, False):
        console = Console(file=io.StringIO(), force_terminal=terminal, width=150)
        report.print_report(results, "out", {"results.json": "all of it"}, console)
        text = console.file.getvalue()
        assert ("┃" in text) is terminal
        assert ("\x1b[" in text) is terminal  # colour only on a terminal
        assert "numpy vs oracle" in text and "PASS" in text


def test_a_backend_that_rounds_differently_gets_its_own_weights_table():
    from shared import PRESETS, make_fixture
    from triptych import run

    results = run.compute(
        make_fixture(PRESETS["tiny"]), {}, {"numpy": impl_numpy}, "float32", []
    )
    numpy_outcome = results.outcomes[0]
    shifted = dict(numpy_outcome.arrays)
    shifted["single_weights"] = shifted["single_weights"] + np.float32(0.01)
    other = dataclasses.replace(numpy_outcome, name="torch", arrays=shifted)
    both = dataclasses.replace(results, outcomes=[numpy_outcome, other])
    titles = [table.title for table in report.weights_tables(both)]
    assert titles == [
        "Single-head attention weights, rounded to 3 places (numpy)",
        "Single-head attention weights, rounded to 3 places (torch)",
    ]
    same = dataclasses.replace(results, outcomes=[numpy_outcome, numpy_outcome])
    assert len(report.weights_tables(same)) == 1


def test_help_shows_every_default(capsys):
    assert run_cli(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: all)", "(default: float32)", "(default: outputs)"):
        assert default in text
    assert run_cli(["lab", "--help"]) == 0
    assert "(default: all)" in " ".join(capsys.readouterr().out.split())
    assert run_cli(["--version"]) == 0
    assert capsys.readouterr().out.startswith("triptych ")


def test_help_imports_neither_torch_nor_jax_nor_matplotlib():
    code = (
        "import sys, contextlib, io\n"
        "from triptych.cli import SUBCOMMANDS, build_parser\n"
        "for argv in [['--help']] + [[name, '--help'] for name in SUBCOMMANDS]:\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        build_parser().parse_args(argv)\n"
        "print(sorted(m for m in ('torch', 'jax', 'matplotlib') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
    assert {"run", "lab"} <= set(SUBCOMMANDS)


def test_python_m_triptych_run_tiny_in_a_real_process(tmp_path):
    out = tmp_path / "outputs"
    argv = ["run", "--tiny", "--backends", "numpy", "--output-dir", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "triptych", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TERM": "dumb"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.rstrip().splitlines()
    assert lines[-1].startswith("PASS: ")
    assert "\x1b[" not in done.stdout  # a pipe gets plain text
    document = json.loads((out / "results.json").read_text())
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert (out / "run_log.txt").read_text().startswith(done.stdout)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def test_the_agreement_legend_names_only_what_the_table_shows():
    from shared import PRESETS, make_fixture
    from triptych import run
    from triptych.run.results import Comparison

    computed = run.compute(
        make_fixture(PRESETS["tiny"]), {}, {"numpy": impl_numpy}, "float32", []
    )

    def caption(*comparisons):
        results = dataclasses.replace(computed, comparisons=list(comparisons))
        return report.agreement_table(results).caption

    near = Comparison("numpy", "oracle", "multi_out", 1e-7, True)
    same = Comparison("numpy", "oracle", "multi_weights", 0.0, True)
    far = Comparison("numpy", "oracle", "entropy", 1.0, False)
    assert caption(near) == ""
    assert caption(near, same) == "0 = bit for bit the same"
    assert caption(near, far) == "! = beyond the tolerance"
    assert caption(same, far) == "0 = bit for bit the same; ! = beyond the tolerance"
