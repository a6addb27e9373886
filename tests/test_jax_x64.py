"""JAX's 64-bit mode: `import impl_jax` leaves it as it was, float64 without it
raises the documented error (never a silent float32 result), float32 without
it gives what it gives with it, and a traced static argument says how to fix
it. The suite turns x64 on for itself (tests/conftest.py), so the mode-off
cases run in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import impl_jax
from shared import PRESETS, make_fixture

MESSAGE = (
    "float64 in JAX needs 64-bit mode, which is off (JAX would compute in "
    "float32): run jax.config.update('jax_enable_x64', True) at the start of the "
    "program, or set JAX_ENABLE_X64=1"
)


def run_fresh(code: str, x64: str | None) -> dict:
    """Run `code` in a new Python, JAX_ENABLE_X64 set to `x64` (None: unset);
    it prints one JSON document, returned."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    if x64 is not None:
        env["JAX_ENABLE_X64"] = x64
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("x64", [None, "1"], ids=["off", "on"])
def test_importing_impl_jax_leaves_the_64_bit_mode_as_it_was(x64):
    found = run_fresh(
        """
        import json
        import jax
        before = bool(jax.config.jax_enable_x64)
        import impl_jax
        print(json.dumps([before, bool(jax.config.jax_enable_x64)]))
        """,
        x64,
    )
    assert found == [x64 is not None] * 2


def test_float64_without_x64_raises_and_float32_is_the_same_as_with_it(tmp_path):
    path = tmp_path / "out32.npy"
    found = run_fresh(
        f"""
        import json
        import numpy as np
        import jax.numpy as jnp
        import impl_jax
        from shared import PRESETS, make_fixture

        f = make_fixture(PRESETS["tiny"])
        errors = {{}}
        attempts = {{
            "from_numpy of a float64 array": lambda: impl_jax.from_numpy(f.x),
            "from_numpy to float64": lambda: impl_jax.from_numpy(f.x, "float64"),
            "attention on float64 arrays": lambda: impl_jax.multi_head_attention(
                f.x, *f.params.values(), 4
            ),
            "blockwise on float64 arrays": lambda: impl_jax.blockwise_attention(
                f.x, f.x, f.x
            ),
            "a float64 cache": lambda: impl_jax.init_kv_cache((), 8, 32, 4, "float64"),
            "a float64 module": lambda: impl_jax.CausalSelfAttention.from_weights(
                *f.params.values(), 4
            ),
        }}
        for what, attempt in attempts.items():
            try:
                attempt()
                errors[what] = None
            except ValueError as error:
                errors[what] = str(error)
        args = [impl_jax.from_numpy(a, "float32") for a in (f.x, *f.params.values())]
        out, weights = impl_jax.multi_head_attention(*args, 4)
        np.save({str(path)!r}, np.asarray(out))
        cache = impl_jax.init_kv_cache((), 8, 32, 4)
        print(json.dumps({{
            "errors": errors,
            "dtypes": [str(out.dtype), str(weights.dtype)],
            "length": str(cache.length.dtype),
        }}))
        """,
        None,
    )
    assert found["errors"] == dict.fromkeys(found["errors"], MESSAGE)
    assert len(found["errors"]) == 6
    assert found["dtypes"] == ["float32", "float32"]
    assert found["length"] == "int32"  # int64 with x64 on, as in NumPy and torch
    f = make_fixture(PRESETS["tiny"])
    args = [impl_jax.from_numpy(a, "float32") for a in (f.x, *f.params.values())]
    out, _ = impl_jax.multi_head_attention(*args, 4)  # here x64 is on
    np.testing.assert_array_equal(np.load(path), impl_jax.to_numpy(out))


def test_float64_works_where_the_caller_turned_x64_on():
    assert jax.config.jax_enable_x64  # tests/conftest.py
    f = make_fixture(PRESETS["tiny"])
    out, _ = impl_jax.multi_head_attention(
        *(impl_jax.from_numpy(a) for a in (f.x, *f.params.values())), 4
    )
    assert out.dtype == np.float64
    assert impl_jax.init_kv_cache((), 8, 32, 4).length.dtype == np.int64


@pytest.mark.parametrize(
    ("function", "static"),
    [
        ("multi_head_attention", "n_heads"),
        ("multi_head_blockwise_attention", "n_heads"),
    ],
)
def test_a_traced_static_argument_says_how_to_mark_it_static(function, static):
    f = make_fixture(PRESETS["tiny"])
    args = [impl_jax.from_numpy(a, "float32") for a in (f.x, *f.params.values())]
    with pytest.raises(ValueError) as raised:
        jax.jit(getattr(impl_jax, function))(*args, 4)
    message = str(raised.value)
    assert message.startswith(f"{static} must be a Python int, known before any ")
    assert f'jax.jit(f, static_argnames=("{static}",))' in message
    assert "_jit twin" in message


def test_a_traced_block_size_says_so_too():
    q = impl_jax.from_numpy(np.ones((4, 2)), "float32")
    with pytest.raises(ValueError, match=r'static_argnames=\("block_size",\)'):
        jax.jit(impl_jax.blockwise_attention)(q, q, q, block_size=2)


def test_triptych_turns_x64_on_for_its_own_commands(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "triptych", "run", "--backends", "jax"),
            *("--dtype", "float64", "--quiet", "--output-dir", str(tmp_path)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PASS: jax agrees with the float64 oracle in float64")
