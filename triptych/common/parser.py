"""The argument parser of `triptych` and of each of its commands: --help shows
each option's default, and a usage error is one line on stderr with exit code
2 (no usage block)."""

from __future__ import annotations

import argparse
import textwrap


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped paragraph by paragraph (a paragraph with line breaks
    stays as written), never at a hyphen inside a name (torch-compile,
    gpt-oss: copied from the help, a name must still be the name); "(default:
    ...)" after each option that has one."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            paragraph
            if "\n" in paragraph
            else textwrap.fill(
                paragraph,
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
            )
            for paragraph in text.split("\n\n")
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", text).strip()  # as argparse does
        return textwrap.wrap(text, width, break_on_hyphens=False)

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if isinstance(action, CommaList):  # the canonical form only: A,B
            return self._metavar_formatter(action, default_metavar)(1)[0]
        return super()._format_args(action, default_metavar)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.default in (None, argparse.SUPPRESS)
            or action.nargs == 0  # a flag: its default is just "not given"
            or "default" in text  # the help already says it
        ):
            return text
        if isinstance(action, CommaList):
            return f"{text} (default: {','.join(action.default)})"
        if isinstance(action.default, list | tuple) and not action.default:
            return f"{text} (default: none)"
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with `HelpFormatter` whose errors are one line."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str):
        import sys

        from triptych.common.prose import echo

        echo(f"{self.prog}: error: {message} (see {self.prog} --help)", sys.stderr)
        self.exit(2)


def integer_at_least(minimum: int):
    """An argparse `type`: an integer >= `minimum`, else a one-line error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse `type`: a number > 0, else a one-line error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def comma_separated(choices, what: str = "name"):
    """An argparse `type`: 'a,b' -> ('a', 'b'), each a name of `choices`, in
    order, once each; spaces and empty items (a trailing comma) are ignored.
    Every list option of triptych takes this one syntax."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            got = f"unknown {what} {unknown[0]!r}" if unknown else f"no {what}"
            raise argparse.ArgumentTypeError(
                f"{got}; choose from {','.join(choices)}, comma-separated"
            )
        return names

    return parse


class CommaList(argparse.Action):
    """A list option written A,B (`comma_separated`), which also takes the
    items as separate words, A B, for the commands that once took that form;
    the help shows A,B only. Give it nargs="+" and type=comma_separated(...)."""

    def __call__(self, parser, namespace, values, option_string=None):
        joined = tuple(dict.fromkeys(name for names in values for name in names))
        setattr(namespace, self.dest, joined)
