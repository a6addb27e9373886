"""impl_*/tuned.py, once per backend, float64 and float32: equal to the float64
oracle at the table's tolerances for T a multiple of the block size and not,
T smaller than one block, batch axes, the block size from its rule; a value
that is not finite makes NaN exactly the rows that attend it; the rule itself;
and bad input refused with the library's message. Small shapes: the speed is
the bench's (triptych bench --modes numpy-tuned,torch-tuned,jax-tuned-jit)."""

from __future__ import annotations

import importlib
import re
import warnings

import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    ShapeOnly,
    foreign_array,
    name_of,
    per_process_cache,
    random_inputs,
)

from shared import assert_close
from shared.reference import reference_multi_head

C, H = 16, 4
# (batch, T, block_size): T not a multiple of the block, T below one block, the rule
CASES = [((2,), 13, 4), ((), 5, 16), ((2,), 9, None)]


def tuned(backend):
    """The backend's multi_head_tuned_attention, jitted where there is a jit."""
    module = importlib.import_module(f"{backend.__name__}.tuned")
    return getattr(
        module,
        "multi_head_tuned_attention_jit",
        module.multi_head_tuned_attention,
    )


@per_process_cache
def _oracle(batch, T):
    x, p = random_inputs(T + 100, batch, T, C)
    out, _ = reference_multi_head(x, *(p[n] for n in PARAM_NAMES), H)
    return x, p, out


def _run(backend, x, p, dtype, **kwargs):
    args = [backend.from_numpy(a, dtype) for a in (x, *(p[n] for n in PARAM_NAMES))]
    return backend.to_numpy(tuned(backend)(*args, H, **kwargs))


@pytest.mark.parametrize(
    ("batch", "T", "block_size"),
    CASES,
    ids=[f"batch{b}-T{t}-B{s}" for b, t, s in CASES],
)
def test_tuned_equals_the_oracle(backend, dtype, batch, T, block_size):
    x, p, expected = _oracle(batch, T)
    out = _run(backend, x, p, dtype, block_size=block_size)
    assert out.dtype == np.dtype(dtype)
    assert_close(out, expected, dtype, f"tuned {dtype}, block_size={block_size}")


def test_a_non_finite_input_reaches_only_the_rows_that_attend_it(backend):
    # x[6] is NaN, so key 6's score and value are: rows 0 to 5 must equal the
    # oracle on x[:6] (with block 4, rows 4 and 5 share the diagonal block with
    # key 6, where a plain weights @ v would give them 0 * NaN), rows 6 to 9 NaN
    x, p = random_inputs(3, (), 10, C)
    x[6] = np.nan
    out = _run(backend, x, p, "float64", block_size=4)
    expected, _ = reference_multi_head(x[:6], *(p[n] for n in PARAM_NAMES), H)
    assert_close(out[:6], expected, "float64", "the rows before the NaN")
    assert np.isnan(out[6:]).all()


def test_the_block_size_rule():
    from impl_numpy.tuned import QUERY_BLOCK, query_block_size

    assert query_block_size(8192) == QUERY_BLOCK == 128  # the measured best
    assert query_block_size(20) == 20  # never longer than T


def test_bad_input_is_the_librarys_error(backend):
    x, p = random_inputs(0, (), 6, C)
    args = [backend.from_numpy(a, "float32") for a in (x, *(p[n] for n in PARAM_NAMES))]
    with pytest.raises(ValueError) as tuned_error:
        tuned(backend)(*args, 3)  # 3 heads do not divide C = 16
    with pytest.raises(ValueError) as library_error:
        backend.multi_head_attention(*args, 3)
    assert str(tuned_error.value) == str(library_error.value)
    # an array of another framework (a stand-in where it is not installed),
    # eager: jax.jit refuses it before any check can run
    args[0] = foreign_array(x.astype(np.float32), name_of(backend))
    eager = importlib.import_module(f"{backend.__name__}.tuned")
    with pytest.raises(TypeError) as tuned_error:
        eager.multi_head_tuned_attention(*args, H)
    with pytest.raises(TypeError) as library_error:
        backend.multi_head_attention(*args, H)
    assert str(tuned_error.value) == str(library_error.value)


# NumPy's threads over query blocks (impl_numpy/tuned.py, `workers`)


@pytest.fixture
def pools(monkeypatch):
    """(threads, BLAS threads meanwhile) of each pool impl_numpy/tuned.py starts."""
    from impl_numpy import tuned as numpy_tuned

    started = []

    class Recorded(numpy_tuned.ThreadPoolExecutor):
        def __init__(self, max_workers, *args, **kwargs):
            started.append((max_workers, numpy_tuned.blas_threads()))
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(numpy_tuned, "ThreadPoolExecutor", Recorded)
    return started


def _numpy_tuned(x, p, **kwargs):
    from impl_numpy import tuned as numpy_tuned

    args = (x, *(p[n] for n in PARAM_NAMES), H)
    return numpy_tuned.multi_head_tuned_attention(*args, block_size=4, **kwargs)


@pytest.mark.neutral  # NumPy alone: once, in the jax env (docs/suite.md)
@pytest.mark.parametrize("workers", [2, 3])
def test_numpy_threads_over_blocks_give_the_same_bits_and_restore_the_blas(
    workers, pools
):
    from threadpoolctl import threadpool_info, threadpool_limits

    x, p, expected = _oracle((2,), 13)  # 4 blocks of 4
    x = x.copy()
    x[1, 9] = np.nan  # rows 9 to 12 of item 1 attend it, in the last two blocks
    with threadpool_limits(limits=3, user_api="blas"):  # not 1: restored or not
        before = [info["num_threads"] for info in threadpool_info()]
        one = _numpy_tuned(x, p, workers=1)
        assert pools == []  # one worker: no pool
        many = _numpy_tuned(x, p, workers=workers)
        assert pools == [(workers, 1)]  # the BLAS on one thread meanwhile
        assert [info["num_threads"] for info in threadpool_info()] == before
    np.testing.assert_array_equal(many, one)  # each block's products are the same
    assert_close(many[0], expected[0], "float64", f"workers={workers}, item 0")
    assert_close(many[1, :9], expected[1, :9], "float64", "item 1 before the NaN")
    assert np.isnan(many[1, 9:]).all()


@pytest.mark.neutral
def test_numpy_workers_default_to_the_blas_threads(pools):
    from threadpoolctl import threadpool_limits

    from impl_numpy import tuned as numpy_tuned

    x, p, _ = _oracle((2,), 13)
    with threadpool_limits(limits=1, user_api="blas"):
        assert numpy_tuned.blas_threads() == 1
        _numpy_tuned(x, p)
    with threadpool_limits(limits=3, user_api="blas"):
        assert numpy_tuned.blas_threads() == 3
        _numpy_tuned(x, p)
        with numpy_tuned._one_blas_thread():
            assert numpy_tuned.blas_threads() == 1
        assert numpy_tuned.blas_threads() == 3
    assert pools == [(3, 1)]  # none where the BLAS had one thread


@pytest.mark.neutral
def test_numpy_threads_keep_the_callers_errstate():
    # scores of 1e305 * 1e305 overflow: the caller silenced it, in every thread
    x, p, _ = _oracle((2,), 13)
    x = x * 1e300
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")
        one = _numpy_tuned(x, p, workers=1)
        many = _numpy_tuned(x, p, workers=2)
    np.testing.assert_array_equal(many, one)


@pytest.mark.neutral
@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_numpy_bad_workers_are_refused_before_any_compute(workers):
    from impl_numpy import tuned as numpy_tuned

    # arrays that fail on any arithmetic: the check comes before the compute
    x = ShapeOnly((5, C))
    weights = [ShapeOnly((C, C)) for _ in PARAM_NAMES]
    message = f"workers must be a positive integer, got {workers!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        numpy_tuned.multi_head_tuned_attention(x, *weights, H, workers=workers)


@pytest.mark.parametrize("block_size", [0, -4])
def test_a_bad_block_size_is_blockwise_attentions_error(backend, block_size):
    x, p = random_inputs(0, (), 6, C)
    args = [backend.from_numpy(a, "float32") for a in (x, *(p[n] for n in PARAM_NAMES))]
    eager = importlib.import_module(f"{backend.__name__}.tuned")
    with pytest.raises(ValueError) as tuned_error:
        eager.multi_head_tuned_attention(*args, H, block_size=block_size)
    with pytest.raises(ValueError) as library_error:
        backend.blockwise_attention(*(args[0][..., :4],) * 3, block_size=block_size)
    assert str(tuned_error.value) == str(library_error.value)


# JAX's groups of heads on threads: the rule, shared/blocks.py (JAX's own
# tests: test_jax_tuned.py)


@pytest.mark.neutral
@pytest.mark.parametrize(
    ("n_heads", "workers", "cores", "expected"),
    [
        (8, None, 2, (2, 256)),  # a group per core, each program on one core
        (8, 3, 2, (2, 256)),  # 8 heads in 3 equal groups cannot be: 2
        (4, 8, 8, (4, 512)),  # 4 groups of one head, 2 cores each
        (8, 1, 2, (1, 512)),  # one program on both cores
        (6, 4, 4, (3, 256)),
    ],
)
def test_jax_head_groups_rule(n_heads, workers, cores, expected):
    from shared.blocks import head_groups

    assert head_groups(4096, n_heads, workers, cores) == expected
    assert head_groups(100, n_heads, workers, cores)[1] == 100  # never above T
