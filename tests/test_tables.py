"""Tables on a narrow terminal (triptych.common.tables): no cell is ever cut.

A terminal of 80 or 100 columns gets each table as it is, with headers and
spaced cells wrapped between words, in parts of fewer columns, or stacked,
whichever first fits; every number stays whole and no line is wider than the
terminal. Checked on made-up tables for each of the four ways, and on what
`triptych grad` and `triptych run` (19 words too) print on a terminal of 80
and 100 columns (TTY_COMPATIBLE=1 and COLUMNS make rich's Console believe it
writes to one), and on the tables of bench, shard, train and check rendered
on an 80-column console. Piped, a table stays whole on one line per row.
"""

from __future__ import annotations

import io
import re

import pytest

from triptych.cli import main
from triptych.common.tables import Bar, Table, as_markdown, as_rich, as_text

pytestmark = pytest.mark.every_backend

ANSI = re.compile(r"\x1b\[[0-9;]*m")
NINETEEN = "the quick brown fox jumps over the lazy dog and then the cat sat on the mat again today"


def rendered(table: Table, width: int) -> str:
    """`table` printed by rich on a terminal `width` columns wide, no colour."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, force_terminal=True)
    console.print(as_rich(table))
    return ANSI.sub("", console.file.getvalue())


def assert_whole(text: str, table: Table, width: int) -> None:
    """Every word of every cell of `table` appears whole in `text`; no line
    is wider than `width`; nothing is elided."""
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    tokens = set(re.split(r"[\s│┃]+", text))
    for row in table.rows:
        for cell in row:
            words = cell.text("█", "░") if isinstance(cell, Bar) else cell
            for word in words.split():
                assert word in tokens, f"{word!r} cut in:\n{text}"


def numbers_table(n_columns: int, cell: str = "7.8e-05") -> Table:
    return Table(
        "made up",
        ["name", *(f"column {i}" for i in range(n_columns))],
        "l" + "r" * n_columns,
        [[f"row {r}", *([cell] * n_columns)] for r in range(3)],
        caption="a caption",
    )


def test_a_table_that_fits_is_drawn_as_it_is():
    table = numbers_table(3)
    text = rendered(table, 80)
    assert "column 0" in text and "part 1" not in text
    assert_whole(text, table, 80)


def test_headers_wrap_between_words_before_a_cell_is_cut():
    table = numbers_table(5)  # headers "column i" too wide on one line at 60
    text = rendered(table, 60)
    assert "part 1" not in text  # fitted in one piece
    assert_whole(text, table, 60)


def test_too_many_columns_come_in_parts_each_with_the_key_column():
    table = numbers_table(20)
    text = rendered(table, 80)
    assert "part 1 of " in text and "too wide for 80" in text
    parts = text.count("row 0")
    assert parts > 1 and text.count("row 2") == parts  # the key column repeated
    assert text.count("a caption") == 1  # under the last part only
    assert_whole(text, table, 80)


def test_a_row_name_stays_on_one_line_when_two_parts_hold_every_cell_whole():
    """`triptych run`'s table of each backend at 80 columns: fitted in one
    piece, its row names ("H-head weights (H, T, T)") would wrap."""
    table = Table(
        "each backend",
        ["", "numpy", "torch", "jax", "oracle"],
        "lllll",
        [
            ["H-head weights (H, T, T)", *(["(4, 16, 16)"] * 3), "(4, 16, 16)"],
            ["version", "numpy 2.4.6", "torch 2.13.0+cpu", "jax 0.10.2, flax 0.12.8", "-"],
        ],
    )  # fmt: skip
    text = rendered(table, 80)
    assert "part 1 of 2" in text
    assert text.count("H-head weights (H, T, T)") == 2  # whole, in both parts
    assert "torch 2.13.0+cpu" in text and "jax 0.10.2, flax 0.12.8" in text
    assert_whole(text, table, 80)
    # where splitting would take more than two parts, the names wrap instead
    wide = numbers_table(3, cell="1.5e-05 and 1.6e-05")
    wide.rows[0][0] = "a row name of several words"
    text = rendered(wide, 60)
    assert "part 1" not in text
    assert_whole(text, wide, 60)


def test_keys_name_several_columns():
    table = numbers_table(12)
    table.columns[1] = "form"
    table.keys = 2
    for row in table.rows:
        row[1] = "multi"
    text = rendered(table, 70)
    assert text.count("multi") == 3 * text.count("form")
    assert_whole(text, table, 70)


def test_a_terminal_too_narrow_for_two_columns_gets_one_block_per_row():
    table = numbers_table(4, cell="1.234567e-05")
    table.rows[0][0] = "a rather long row label"
    text = rendered(table, 24)
    assert "column 3: 1.234567e-05" in text
    assert_whole(text, table, 24)


def test_piped_tables_keep_every_cell_on_one_line():
    table = numbers_table(20)
    table.columns[-1] = "details"
    table.align = table.align[:-1] + "l"
    table.rows[0][-1] = "x " * 200  # one long free-text cell
    lines = as_text(table).splitlines()
    assert len(lines) == 3 + 3 + 1  # title, header, rule, rows, caption
    assert lines[2].endswith(" " + "-" * len("details"))  # no 400-wide rule
    assert all(line == line.rstrip() for line in lines)
    assert as_markdown(table).splitlines()[1].startswith("| --- | ---: |")


def command_output(monkeypatch, capsys, argv: list[str], width: int) -> str:
    """`triptych ARGV` in this process on a terminal `width` columns wide."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    code = main(argv)
    assert code == 0
    return ANSI.sub("", capsys.readouterr().out)


@pytest.mark.parametrize("width", [80, 100])
def test_grad_keeps_every_difference_whole(request, monkeypatch, capsys, width):
    from triptych import grad
    from triptych.common.backends import load_backend

    names = list(request.config.selected_backends)
    argv = ["grad", "--backends", ",".join(names), "--dtypes", "float32"]
    text = command_output(monkeypatch, capsys, argv, width)
    table = grad.agreement_table(
        grad.agreement_rows({n: load_backend(n) for n in names}, "tiny", ["float32"])
    )
    assert "PASS: all 9 rows" in text
    body = text[text.index("largest |difference|") : text.index("PASS: all")]
    assert_whole(body, table, width)
    assert max(len(line) for line in text.splitlines()) <= width  # the header too


@pytest.mark.parametrize("width", [80])
def test_run_keeps_every_weight_whole_for_19_words(
    request, monkeypatch, capsys, tmp_path, width
):
    names = ",".join(request.config.selected_backends)
    argv = ["run", "--weights", "random", "--tokens", NINETEEN, "--backends", names]
    text = command_output(
        monkeypatch, capsys, [*argv, "--output-dir", str(tmp_path)], width
    )
    assert "0…" not in text
    assert re.search(r"┃ +12 cat +┃", text)  # part 2's header: which key, as rows say
    document = (tmp_path / "results.json").read_text()
    assert '"verdict": "PASS"' in document
    for title in ("Single-head attention weights", "Entropy per head", "Agreement"):
        assert title in text
    # the cells themselves, as the plain log has them
    log = (tmp_path / "run_log.txt").read_text()
    start = log.index("Single-head attention weights")
    for line in log[start:].splitlines()[3:22]:  # the 19 rows of weights
        _label, *weights = re.split(r"\s{2,}", line.strip())
        assert len(weights) == 19
        for weight in weights:
            assert weight in text
    assert max(len(line) for line in text.splitlines()) <= width


def test_the_tables_of_bench_shard_train_and_check_fit_80_columns():
    from types import SimpleNamespace

    from triptych.bench import report as bench_report
    from triptych.bench import summary as bench_summary
    from triptych.check import report as check_report
    from triptych.shard import report as shard_report
    from triptych.train import report as train_report

    row = dict.fromkeys(bench_report.ROW_FIELDS)
    row.update(
        mode="torch-blockwise-compile", kind="ours", T=2048, status="ok",
        first_call_s=12.3456, compile_s=12.3, median_s=0.0123, iqr_s=0.00456,
        gflops=123.456, pct_of_gemm_peak=12.3, speedup_vs_numpy=1.23,
        jit_speedup=2272.58, max_abs_diff_out=1.2e-6, noisy=True,
    )  # fmt: skip
    bench = bench_summary.results_table([row])
    shard = shard_report.table(
        {
            "config": {
                "strategy": "sequence",
                "problem": {"T": 1024, "C": 64, "H": 8, "batch": [], "dtype": "float32", "padded": False},
            },
            "tolerance": {"atol": 2e-5},
            "results": [
                {"backend": "torch", "devices": 8, "rows_per_device": 128,
                 "max_abs_diff": 1.234e-07, "status": "ok",
                 "peak_bytes": 123456789, "largest_array_bytes": 4194304},
            ],
        }
    )  # fmt: skip
    train = train_report.tables(
        {
            "chance_accuracy": 0.0625,
            "trainers": [
                {"name": "torch-compile", "median_step_s": 0.0123, "accuracy_before": 0.061,
                 "accuracy_after": 0.998, "first_loss": 4.1589, "final_loss": 0.0123,
                 "first_step_s": 38.123},
            ],
            "tolerance": {"final": 1.23e-13, "multiple": 100},
            "agreement": {"pairs": [
                {"pair": "numpy vs torch-compile", "max_difference": 1.234e-14,
                 "final_difference": 1.2e-14, "first_step_outside": None},
            ]},
        }
    )  # fmt: skip
    result = {
        "id": "oracle-float32",
        "status": "FAIL",
        "reason": "max |diff| 1.234e-02 beyond 2e-05",
        "diagnosis": "the scale is 1/D, not 1/sqrt(D)",
        "smallest": {"text": "x (1, 2, 8), H 1"},
    }
    check = check_report.target_table(
        SimpleNamespace(
            target="homework.py:attention", adapter=None, error=None,
            status="FAIL", seconds=1.5, properties=[result],
            counts=lambda: {"PASS": 0, "FAIL": 1, "NOTE": 0, "SKIP": 0},
        )
    )  # fmt: skip
    for table in [bench, shard, *train, check]:
        assert_whole(rendered(table, 80), table, 80)


def test_check_keeps_a_path_with_hyphens_whole_where_it_wraps(monkeypatch):
    """A student's folder named with a hyphen: the target's line, its cause
    and the caption wrap between words, never inside the path."""
    from types import SimpleNamespace

    from triptych.check import report as check_report

    monkeypatch.setenv("COLUMNS", "40")
    path = "../trial-answers/m-1/02_single_head/single_head_numpy.py"
    result = {"id": "oracle-float32", "status": "FAIL", "diagnosis": None,
              "reason": f"raises in {path}", "smallest": None}  # fmt: skip
    report = SimpleNamespace(
        target=f"{path}:single_head_attention", adapter="x (..., T, C)",
        error=f"exited in {path}", status="FAIL", seconds=1.5,
        properties=[result], causes=[{"cause": f"raises in {path}",
                                      "properties": ["oracle-float32"]}],
        counts=lambda: {"PASS": 0, "FAIL": 1, "NOTE": 0, "SKIP": 0},
    )  # fmt: skip
    text = check_report.plain_target(report)
    assert text.count(path) == 4, text  # the target, the cause, the row, the caption


def test_prose_wraps_between_words_under_its_indent_and_a_path_stays_whole():
    from triptych.common.prose import wrapped

    line = "   layer 1 head 0: induction head: 0.59 of its weight on the token after"
    assert wrapped(line, 80) == line  # fits: as it is
    path = "/a/path/longer/than/the/terminal/is/wide.py"
    lines = wrapped(f"{line} {path}", 30).splitlines()
    assert lines[0] == "   layer 1 head 0: induction"
    assert all(rest.startswith("     ") for rest in lines[1:])  # a hanging indent
    assert f"     {path}" in lines  # wider than 30, whole
    assert " ".join(lines).split() == f"{line} {path}".split()


def test_lab_wraps_its_prose_at_80_columns_and_keeps_it_whole_piped(
    monkeypatch, capsys
):
    argv = ["lab", "--backend", "numpy"]
    text = command_output(monkeypatch, capsys, argv, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "   q, k, v = x @ w_q, x @ w_k, x @ w_v" in text  # code unwrapped
    monkeypatch.delenv("TTY_COMPATIBLE")
    assert main(argv) == 0
    piped = capsys.readouterr().out
    assert (
        "on the token after the current token's previous occurrence (a uniform" in piped
    )
    assert max(len(line) for line in piped.splitlines()) > 80


def test_shards_lines_under_its_table_wrap_at_80_columns(monkeypatch, capsys):
    from triptych.shard import print_report

    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    result = {"backend": "torch", "devices": 8, "rows_per_device": 128,
              "max_abs_diff": 1.234e-07, "status": "ok",
              "peak_bytes": 123456789, "largest_array_bytes": 4194304}  # fmt: skip
    slopes = {"peak_bytes_slope": -0.64, "peak_bytes_ratio": 3.57,
              "largest_array_bytes_slope": -1.0, "largest_array_bytes_ratio": 8.0}  # fmt: skip
    document = {
        "config": {
            "strategy": "sequence",
            "problem": {"T": 1024, "C": 64, "H": 8, "batch": [], "dtype": "float32", "padded": False},
            "not_installed": ["jax"],
        },
        "tolerance": {"atol": 2e-5},
        "results": [result],
        "scaling": {"torch": slopes},
    }  # fmt: skip
    print_report(document, ["/a/rather/long/output/folder/results.json"] * 2)
    text = ANSI.sub("", capsys.readouterr().out)
    assert "  torch peak: N^-0.64, 3.57x less on the most devices\n" in text
    assert "  torch largest: N^-1.00, 8x less on the most devices\n" in text
    caption = " ".join(text.split())  # the table's caption, wrapped
    assert "torch: how much the rank's resident set grew during the call" in caption
    assert 'not run: jax (pip install -c constraints.txt -e ".[jax]")' in caption
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_grade_names_each_target_short_and_unique_and_its_files_in_full():
    from types import SimpleNamespace

    from triptych.check import report

    assert report.short_labels(
        ["/tmp/a/x.py:f", "/tmp/b/x.py:f", "/tmp/c/y.py:g", "/tmp/c/y.py:h"]
    ) == ["a/x", "b/x", "y:g", "y:h"]
    assert report.short_labels(["impl_numpy:attention", "pkg.alice:attention"]) == [
        "impl_numpy",
        "alice",
    ]
    fail = {
        "id": "oracle:float32", "status": "FAIL", "reason": "max |diff| 1.2e-02",
        "diagnosis": "the scale is 1/D, not 1/sqrt(D)",
    }  # fmt: skip
    reports = [
        SimpleNamespace(
            target=f"/tmp/nu_impls/{name}/attention.py:CausalSelfAttention",
            status="FAIL",
            error=None,
            properties=[fail],
            counts=lambda: {"PASS": 0, "FAIL": 1, "NOTE": 0, "SKIP": 0},
        )
        for name in ("alice", "bob")
    ]
    table = report.grade_table(reports, ["oracle:float32"])
    text = rendered(table, 80)
    assert_whole(text, table, 80)
    assert "/tmp/nu_impls" not in text
    assert re.search(r"│ bob/attention +│", text)
    assert "│ f32: the scale is 1/D, not 1/sqrt(D) " in text  # on one line
    assert "/tmp/nu_impls/bob/attention.py:CausalSelfAttention" in (
        report.grade_csv(reports, ["oracle:float32"])
    )
