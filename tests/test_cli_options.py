"""The command line as git, pytest and ruff users expect it: bare `triptych`
prints its help; a mistyped option points to the command's own --help (and
to the option meant); every list option takes one syntax, A,B; an option
that the others given would ignore is one line and exit code 2; every option
says what it is and its default; a --checkpoint that is not one is refused
before any framework is imported."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from triptych.cli import SUBCOMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def run_cli(argv: list[str]) -> int:
    """main(argv), with argparse's SystemExit turned into its exit code."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def test_bare_triptych_prints_its_help_and_exits_0(capsys):
    assert run_cli([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: triptych ")
    for command in SUBCOMMANDS:
        assert f"\n    {command} " in out


def test_every_help_fits_80_columns_and_keeps_each_name_whole(monkeypatch, capsys):
    """argparse wraps at a hyphen (torch-compile would read "torch-" then
    "compile"), leaves a group's title as long as written and shows an empty
    list as []."""
    monkeypatch.setenv("COLUMNS", "80")
    for command in ["", *SUBCOMMANDS]:
        assert run_cli([command, "--help"] if command else ["--help"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert max(map(len, lines)) <= 80, command
        broken = [line for line in lines if re.search(r"\w-$", line)]
        assert not broken, (command, broken)
        assert not any("(default: [])" in line for line in lines), command


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_an_unknown_option_points_to_the_commands_help(command, capsys):
    argv = [command, "--no-such-option"]
    if command == "check":
        argv.insert(1, "impl_numpy:multi_head_attention")
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"triptych {command}: error: unrecognized arguments: --no-such-option "
        f"(see triptych {command} --help)\n"
    )


def test_a_mistyped_option_names_the_one_meant(capsys):
    assert run_cli(["grad", "--dtpye", "float32"]) == 2
    assert capsys.readouterr().err == (
        "triptych grad: error: unrecognized arguments: --dtpye float32 (did you "
        "mean --dtypes?) (see triptych grad --help)\n"
    )


LISTS = [
    ("run", "--backends", "numpy,torch", ("numpy", "torch")),
    ("read", "--backends", "numpy,jax", ("numpy", "jax")),
    ("train", "--backends", "torch,jax", ("torch", "jax")),
    ("grad", "--backends", "jax,numpy", ("jax", "numpy")),
    ("grad", "--dtypes", "float64,float32", ("float64", "float32")),
    ("bench", "--T", "8,16", (8, 16)),
    ("bench", "--modes", "numpy,jax-jit", ("numpy", "jax-jit")),
    ("shard", "--backends", "numpy,torch", ("numpy", "torch")),
    ("shard", "--devices", "1,2", "1,2"),
    ("check", "--dtypes", "float64,float16", ("float64", "float16")),
]


@pytest.mark.parametrize(("command", "option", "given", "read"), LISTS)
def test_every_list_option_takes_comma_separated_names(command, option, given, read):
    extra = ["impl_numpy:multi_head_attention"] if command == "check" else []
    args = build_parser().parse_args([command, option, given, *extra])
    assert getattr(args, option.lstrip("-").replace("-", "_")) == read


def test_grad_still_reads_the_dtypes_as_separate_words_and_shows_one_form(capsys):
    parse = build_parser().parse_args
    assert parse(["grad", "--dtypes", "float64", "float32"]).dtypes == (
        "float64",
        "float32",
    )
    assert parse(["grad"]).dtypes == ("float32", "float64")
    assert run_cli(["grad", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--dtypes NAMES " in out and "[NAMES ...]" not in out
    assert "comma-separated, from float32,float64 (default: float32,float64)" in (
        " ".join(out.split())
    )
    assert run_cli(["grad", "--dtypes", "float32,float8"]) == 2
    assert capsys.readouterr().err == (
        "triptych grad: error: argument --dtypes: unknown dtype 'float8'; choose "
        "from float32,float64, comma-separated (see triptych grad --help)\n"
    )


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_option_says_what_it_is_and_names_its_value(command):
    """No bare metavar made from the option's name (DEVICES, D_MODEL), no
    option without help, and a default that is more than "not given" shown."""
    parser = build_parser().commands[command]
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{command} {action.option_strings[0]}: no help"
        if action.nargs != 0:
            named = action.metavar is not None or action.choices is not None
            assert named, f"{command} {action.option_strings[0]}: bare metavar"
        if action.nargs != 0 and action.default is not None:
            text = formatter._get_help_string(action)
            assert "default" in text, f"{command} {action.option_strings[0]}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "--tiny", "--layer", "1"],
            "triptych run: error: --layer picks a layer of the trained model or of "
            "a --checkpoint model, not of random weights: drop --layer",
        ),
        (
            ["bench", "--memory", "--repeats", "3"],
            "triptych bench: error: --repeats sets how a time is taken; --memory "
            "measures memory: drop --repeats",
        ),
        (
            ["bench", "--memory", "--warmup", "1", "--gemm-size", "64"],
            "triptych bench: error: --warmup, --gemm-size set how a time is "
            "taken; --memory measures memory: drop --warmup, --gemm-size",
        ),
        (
            ["bench", "--memory-timeout", "30"],
            "triptych bench: error: --memory-timeout only with --memory",
        ),
        (
            ["bench", "--memory", "--train"],
            "triptych bench: error: --memory measures attention's memory, not training",
        ),
        (
            ["shard", "--backends", "numpy,jax", "--rank-timeout", "5"],
            "triptych shard: error: --rank-timeout bounds torch's collectives, "
            "and --backends has no torch: drop --rank-timeout",
        ),
    ],
)
def test_an_option_the_others_would_ignore_is_exit_2(argv, message, capsys, tmp_path):
    assert run_cli([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.err == message + "\n" and captured.out == ""
    assert not (tmp_path / "out").exists()


def test_a_missing_checkpoint_is_refused_before_any_framework_is_imported(tmp_path):
    code = (
        "import sys; from triptych.cli import main; "
        f"code = main(['run', '--checkpoint', {str(tmp_path / 'none')!r}]); "
        "print(code, sorted({'torch', 'jax', 'transformers'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout == "2 []\n"
    assert done.stderr == (
        f"triptych run: error: --checkpoint {tmp_path / 'none'}: no such directory\n"
    )
