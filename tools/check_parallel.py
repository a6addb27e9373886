"""The parallel files stay parallel: each impl_* file diffed with its copies in
the other impl_* packages once the framework idioms are normalised; whatever
difference is left fails (docs/architecture.md, "Parallel files").

    python tools/check_parallel.py [FILE ...] [--root DIR] [--list]

In the spirit of transformers' utils/check_copies.py. Every file name that two
or more impl_* packages have is compared, NumPy's copy (torch's, where NumPy
has none or is left out) with each other one. What may differ, and why, is
declared in tools/parallel_rules.py (and, file by file, parallel_declared.py):
the idioms each framework spells its own way (np., torch. and jnp. read xp.,
dim= reads axis=, .transpose( reads .swapaxes(, ...), per file the lines or
definitions a framework writes its own way, the files compared only in
outline and those left out. Exit status 1 on
a difference, printed as both files, the line numbers and both lines; or on a
declaration that finds nothing.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import re
import sys
import tokenize
from dataclasses import dataclass, replace
from pathlib import Path

from parallel_declared import DECLARED
from parallel_rules import (
    FRAMEWORKS,
    IDIOMS,
    LEFT_OUT,
    OUTLINE,
    Idiom,
    Own,
)

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Line:
    number: int  # in the file (a wrapped statement's first line)
    text: str  # as written, spaces collapsed
    key: str  # what is compared
    prose: bool = False  # a comment line, or a docstring's sentence


def logical_lines(source: str) -> list[Line]:
    """The file as compared: a statement (wrapped or not, its comments after
    it) a line, a comment on a line of its own a line, a docstring a line per
    sentence; blank lines are none."""
    lines, found, tokens = source.splitlines(), [], []
    skip = (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)

    def close():
        code = [t for t in tokens if t.type != tokenize.COMMENT]
        comments = [t for t in tokens if t.type == tokenize.COMMENT]
        if len(code) == 1 and code[0].type == tokenize.STRING and not comments:
            found.extend(sentences(code[0].string, code[0].start[0]))
        elif tokens:
            first, last = tokens[0].start[0], tokens[-1].end[0]
            text = " ".join(squeeze(lines[n - 1]) for n in range(first, last + 1))
            key = compact(code) + "".join(f"  {squeeze(c.string)}" for c in comments)
            found.append(Line(first, text, key.strip(), not code))
        tokens.clear()

    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and not tokens:
            tokens.append(token)
            close()  # a comment on a line of its own
        elif token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            close()
        elif token.type not in skip:
            tokens.append(token)
    return found


def sentences(docstring: str, first: int) -> list[Line]:
    """A docstring (its first line `first`) as Lines, one a sentence."""
    text, found = re.sub('^r?"""|"""$', "", docstring), []
    for paragraph in re.finditer(r"\S(?:.|\n(?!\s*\n))*", text):
        start = first + text.count("\n", 0, paragraph.start())
        for m in re.finditer(r"\S.*?(?:[.!?](?=\s)|$)", paragraph[0] + " ", re.S):
            number = start + paragraph[0].count("\n", 0, m.start())
            found.append(Line(number, squeeze(m[0]), squeeze(m[0]), True))
    return found


def squeeze(text: str) -> str:
    return " ".join(text.split())


def compact(tokens: list[tokenize.TokenInfo]) -> str:
    """The tokens without the spaces between symbols, and without the comma
    ruff format adds before a bracket it closes on a line of its own."""
    text, previous = "", ""
    for token in tokens:
        if re.match(r"\w", token.string) and re.search(r"\w$", previous):
            text += " "
        text += token.string
        previous = token.string
    text = re.sub(r",([)\]}])", r"\1", text)
    text = re.sub(r"\bimport\((.*)\)$", r"import \1", text)
    start = re.match(r"(return |[\w.,\[\] ]+=)\(", text)
    if start and unwrapped(text[start.end() :]):
        text = start[1] + text[start.end() : -1]  # x = (...) reads x = ...
    return text


def unwrapped(text: str) -> bool:
    """Whether `text`, the rest of a line after "(", closes it at its end, and
    holds no comma outside brackets: the brackets ruff format adds."""
    depth = 1
    for k, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if depth == 0:
            return k == len(text) - 1
        if depth == 1 and char == ",":
            return False
    return False


DEFINITION = re.compile(r"(def|code of) ([\w|*\\]+)")


def finds(what: str, source: str, lines: list[Line]) -> set[int]:
    """The indices of the lines that `what`, one of an Own's lines, finds."""
    definition = DEFINITION.fullmatch(what)
    if definition:
        spans = [
            (min([n.lineno] + [d.lineno for d in n.decorator_list]), n.end_lineno)
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.FunctionDef | ast.ClassDef)
            and re.fullmatch(definition[2], n.name)
        ]
        code_only = definition[1] == "code of"
        return {
            k
            for k, x in enumerate(lines)
            if any(a <= x.number <= b for a, b in spans) and not (code_only and x.prose)
        }
    written = re.sub(r"\s", "", what)
    head, tail = written.startswith("..."), written.endswith("...")
    core = written[3 if head else 0 : -3 if tail else None]
    pattern = re.compile("(.*)" * head + re.escape(core) + "(.*)" * tail, re.S)
    return {
        k for k, x in enumerate(lines) if pattern.fullmatch(re.sub(r"\s", "", x.text))
    }


def outline(lines: list[Line]) -> list[Line]:
    """The definitions' names and the numbered comments, in order."""
    found = []
    for x in lines:
        name = re.match(r"(def|class) \w+", x.key)
        if name or re.match(r"# (\w+ )?(\d\.|\[\d\]) ", x.key):
            found.append(replace(x, key=name[0] if name else x.key))
    return found


def normalised(path: Path, framework: str, idioms, owns, found: set) -> list[Line]:
    """The file's lines as compared: `idioms` rewritten, the lines that `owns`
    ((rule, line, label) each) find left out. Into `found` go (rule, label,
    line) of each Own's line that found some, (rule, framework, spelling) of
    each idiom that rewrote some."""
    source = path.read_text()
    lines = []
    for line in logical_lines(source):
        key = line.key
        for rule in idioms:
            if applies(rule, framework):
                new = re.sub(rule.spelling, rule.reads_as, key)
                found.update([(rule, framework, rule.spelling)] if new != key else [])
                key = new
        lines.append(replace(line, key=key))
    out = set()
    for rule, what, label in owns:
        numbers = finds(what, source, lines)
        found.update([(rule, label, what)] if numbers else [])
        out |= numbers
    return [x for k, x in enumerate(lines) if k not in out and x.key]


def applies(rule: Idiom | Own, framework: str) -> bool:
    return framework in rule.frameworks.split()


def copies(root: Path, name: str) -> dict[str, Path]:
    """The frameworks whose package has `name`, and the copy of each."""
    paths = {f: root / f"impl_{f}" / name for f in FRAMEWORKS}
    return {f: p for f, p in paths.items() if p.exists()}


def compared(root: Path, name: str) -> dict[str, Path]:
    """The copies of `name` that are compared, LEFT_OUT's taken out."""
    left_out = LEFT_OUT.get(name, ("", ""))[0].split()
    found = {f: p for f, p in copies(root, name).items() if f not in left_out}
    return found if len(found) > 1 else {}


def check(root: Path, name: str) -> list[str]:
    """The differences between the copies of `name`, as messages; and the
    declarations for `name` that find nothing."""
    paths = compared(root, name)
    if not paths:
        return []
    declared, found, messages = DECLARED.get(name, ()), set(), []
    idioms = [r for r in (*IDIOMS, *declared) if isinstance(r, Idiom)]
    owns = [r for r in declared if isinstance(r, Own)]
    reference, *others = paths
    for other in others:
        theirs = [(r, w, other) for r in owns if applies(r, other) for w in r.lines]
        ours = [
            (r, w, reference) for r in owns if applies(r, reference) for w in r.lines
        ]
        ours += [
            (r, w, "instead") for r in owns if applies(r, other) for w in r.instead
        ]
        ours += [(r, w, "twin") for r, w, _ in theirs if DEFINITION.fullmatch(w)]
        a = normalised(paths[reference], reference, idioms, ours, found)
        b = normalised(paths[other], other, idioms, theirs, found)
        if name in OUTLINE:
            a, b = outline(a), outline(b)
        matcher = difflib.SequenceMatcher(
            None, [x.key for x in a], [x.key for x in b], autojunk=False
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag != "equal":
                where = (place(root, paths[reference], a, i1, i2),)
                where += (place(root, paths[other], b, j1, j2),)
                shown = [f"  {reference:>5} {x.number}: {x.text}" for x in a[i1:i2]]
                shown += [f"  {other:>5} {x.number}: {x.text}" for x in b[j1:j2]]
                messages.append(" differs from ".join(where) + "\n" + "\n".join(shown))
    for rule in declared:
        mine = rule.lines if isinstance(rule, Own) else (rule.spelling,)
        wanted = [
            (f, w, f) for f in rule.frameworks.split() if f in paths for w in mine
        ]
        if isinstance(rule, Own) and any(applies(rule, f) for f in others):
            wanted += [(reference, w, "instead") for w in rule.instead]
        for framework, what, label in wanted:
            if (rule, label, what) not in found:
                messages.append(
                    f"impl_{framework}/{name}: declared, found nowhere: {what}"
                )
    return messages


def place(root: Path, path: Path, lines: list[Line], i: int, j: int) -> str:
    """`impl_x/file.py:12-14`, or where lines missing from it would be."""
    name = path.relative_to(root).as_posix()
    if i == j:
        after = lines[i - 1].number if i else 0
        return f"{name} (nothing, after line {after})"
    first, last = lines[i].number, lines[j - 1].number
    return f"{name}:{first}" + (f"-{last}" if last != first else "")


def file_names(root: Path) -> list[str]:
    """Every file name that two or more impl_* packages have."""
    names = {p.name for f in FRAMEWORKS for p in (root / f"impl_{f}").glob("*.py")}
    return sorted(n for n in names if len(copies(root, n)) > 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="What may differ, and why: tools/parallel_rules.py.",
    )
    parser.add_argument("files", nargs="*", help="file names (default: all)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository")
    parser.add_argument(
        "--list", action="store_true", help="print what is compared, then stop"
    )
    args = parser.parse_args(argv)
    names = args.files or file_names(args.root)
    if args.list:
        for name in names:
            paths = compared(args.root, name)
            how = "in outline" if name in OUTLINE else "line by line"
            print(f"{name}: {' '.join(paths) or 'not compared'}", end="")
            print(f", {how}" if paths else "", end="")
            left_out, why = LEFT_OUT.get(name, ("", ""))
            if paths and left_out:
                why = f"{left_out} left out: {why}"
            print("".join(f" ({w})" for w in (why, OUTLINE.get(name)) if w))
        return 0
    messages = [m for name in names for m in check(args.root, name)]
    print("\n\n".join(messages), end="\n\n" if messages else "")
    print(f"{len(messages)} difference(s) in {len(names)} parallel files")
    return 1 if messages else 0


if __name__ == "__main__":
    sys.exit(main())
