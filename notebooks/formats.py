"""The two files each notebook is written as (notebooks/build.py): the
.ipynb that Jupyter and Colab open, and its jupytext-paired percent-format
.py, the readable diff."""

from __future__ import annotations

import json

HEADER = """# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
"""


def percent(found: list[tuple[str, str]]) -> str:
    """The jupytext percent-format source of the cells."""
    parts = [HEADER]
    for kind, text in found:
        if kind == "markdown":
            body = "\n".join(("# " + line).rstrip() for line in text.splitlines())
            parts.append(f"# %% [markdown]\n{body}\n")
        else:
            parts.append(f"# %%\n{text.rstrip()}\n")
    return "\n".join(parts)


def notebook(found: list[tuple[str, str]]) -> str:
    """The .ipynb (nbformat 4.5) of the cells, without outputs."""
    nb_cells = []
    for i, (kind, text) in enumerate(found):
        lines = text.rstrip().splitlines(keepends=True)
        cell = {"cell_type": kind, "id": f"cell-{i}", "metadata": {}, "source": lines}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        nb_cells.append(cell)
    document = {
        "cells": nb_cells,
        "metadata": {
            "jupytext": {"formats": "ipynb,py:percent"},
            "kernelspec": {
                "display_name": "Python 3",
                "language": "python",
                "name": "python3",
            },
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1) + "\n"
