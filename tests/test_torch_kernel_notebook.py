"""notebooks/kernel_torch.ipynb, where Triton is (tox -e crosscheck and
kernels; the torch env has no Triton, and tests/test_notebooks.py skips the
notebook there): run top to bottom in a Jupyter kernel started without
TRITON_INTERPRET, whose cell before the imports turns Triton's interpreter
on, it prints the distances that impl_torch/kernel.py's flash_forward gives
on the same problem; the edit its Try it asks for makes it fail."""

from __future__ import annotations

import importlib

import nbformat
import pytest
import test_notebooks as notebooks
from nbclient.exceptions import CellExecutionError

NOTEBOOK = notebooks.NOTEBOOKS / "kernel_torch.ipynb"
jupyter_kernel = notebooks.jupyter_kernel  # the fixture: a kernel of this file's


def test_the_triton_kernel_notebook_prints_the_library_s_distances(
    request, tmp_path, jupyter_kernel
):
    backend = request.config.selected_backends["torch"]
    kernel = importlib.import_module("impl_torch.kernel")
    kernel.check_triton_runs(True, None)  # says to set TRITON_INTERPRET=1
    # a kernel started without it: the notebook's cell before the imports sets it
    with notebooks.kernel_of_its_own(jupyter_kernel, TRITON_INTERPRET=None):
        code = notebooks.executed(NOTEBOOK, tmp_path, jupyter_kernel)
    f32 = lambda a: backend.from_numpy(a, "float32")  # noqa: E731
    expected = notebooks.kernel_lines(backend, kernel, f32, kernel.flash_forward)
    assert notebooks.printed(code) == list(expected)


def test_the_try_it_makes_the_triton_kernel_notebook_fail(tmp_path, jupyter_kernel):
    right, wrong = notebooks.TRY_IT["kernel"]
    document = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c for c in document.cells if c.cell_type == "code" and right in c.source]
    assert len(cells) == 1  # online_softmax_step's
    cells[0].source = cells[0].source.replace(right, wrong)
    path = tmp_path / "edited.ipynb"
    nbformat.write(document, path)
    with pytest.raises(CellExecutionError) as raised:
        notebooks.executed(path, tmp_path, jupyter_kernel)
    assert raised.value.ename == "AssertionError"
    assert "blocks of 2: max |out" in str(raised.value)  # what the run cell printed
