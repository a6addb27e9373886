"""What a wrong answer to exercises 4 to 6 looks like, in words a student can
act on: each exercise's known mistakes computed in float64 NumPy (the
`mistake` argument of `fold`, `backward` and `decode`), the one whose output
the answer's equals, else the pattern of its right and wrong rows ("the last
token right, the earlier ones wrong"). exercises/grade.py prints the cause
first and the rows it explains under it (exercises 1 to 3: check's own
causes, triptych/check/causes.py); exercises/README.md lists them.
"""

from __future__ import annotations

import ast
import math

import numpy as np

from shared.tolerances import tolerance

DTYPE = "float32"
WORDS = {  # framework: the spellings a diagnosis names, in its own words
    "numpy": {"keep": "sum(axis=-1, keepdims=True)", "write": "k_cache[:, t] = k"},
    "torch": {"keep": "sum(dim=-1, keepdim=True)", "write": "k_cache[:, t] = k"},
    "jax": {"keep": "sum(axis=-1, keepdims=True)", "write": "k_cache.at[:, t].set(k)"},
}


def near(got, expected) -> np.ndarray:
    """Entry by entry: within float32's tolerance of `expected`, NaN where
    NaN is expected included."""
    level = tolerance(DTYPE)
    ok = np.abs(got - expected) <= level.atol + level.rtol * np.abs(expected)
    return ok | (np.isnan(got) & np.isnan(expected))


def first_match(got, right, candidates: dict) -> str | None:
    """The first candidate (name: its output) that `got` equals where the
    candidate differs from `right`, the correct output."""
    for name, wrong in candidates.items():
        if not near(wrong, right).all() and near(got, wrong).all():
            return name
    return None


def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# Exercise 4: one online-softmax step -------------------------------------

ONLINE = {
    "no rescale": "what was summed under the old max is not rescaled: l and acc "
    "need the factor exp(m - m') whenever the max grows",
    "acc not rescaled": "acc is not rescaled by exp(m - m') when the max grows (l is)",
    "l not rescaled": "l is not rescaled by exp(m - m') when the max grows (acc is)",
    "rescale inverted": "the rescale is upside down: exp(m' - m) where "
    "exp(m - m') belongs",
    "mask missing": "the future is not masked: on the diagonal block, -inf "
    "belongs where `future` is True",
    "mask inverted": "the mask is the wrong way round: -inf where `future` is "
    "False, not where it is True",
    "scaled twice": "q_block is already divided by sqrt(D): the scores are "
    "scaled a second time",
}


def online_step(state, q, k, v, future, mistake=None):
    """Exercise 4's step in float64, right or with `mistake` (of ONLINE)."""
    m, l, acc = state  # noqa: E741 (the l of the literature: the running sum)
    s = q @ k.T / (math.sqrt(q.shape[-1]) if mistake == "scaled twice" else 1)
    if future is not None and mistake != "mask missing":
        s = np.where(~future if mistake == "mask inverted" else future, -np.inf, s)
    new_m = np.maximum(m, s.max(axis=-1))
    with np.errstate(invalid="ignore", over="ignore"):
        grow = np.exp(new_m - m) if mistake == "rescale inverted" else np.exp(m - new_m)
        p = np.exp(s - new_m[:, None])
        l_kept = l if mistake in ("no rescale", "l not rescaled") else l * grow
        acc_kept = acc if mistake in ("no rescale", "acc not rescaled") else (
            acc * grow[:, None]
        )  # fmt: skip
    return new_m, l_kept + p.sum(axis=-1), acc_kept + p @ v


def fold(step, q, k, v, block: int, mistake=None):
    """acc / l of every query, `step` folding the key blocks up to the
    diagonal into each query block, as the grader runs the answer."""
    T, D = q.shape
    rows = []
    for start in range(0, T, block):
        qb = q[start : start + block]
        state = (np.full(len(qb), -np.inf), np.zeros(len(qb)), np.zeros((len(qb), D)))
        for key in range(0, start + len(qb), block):
            kb, vb = k[key : key + block], v[key : key + block]
            future = (
                np.arange(key, key + len(kb))[None]
                > np.arange(start, start + len(qb))[:, None]
            )
            state = step(state, qb, kb, vb, future if future.any() else None, mistake)
        _, row_sum, acc = state
        with np.errstate(invalid="ignore", divide="ignore"):
            rows.append(acc / row_sum[:, None])
    return np.concatenate(rows)


def online(got, q, k, v, block: int) -> str:
    """Why acc / l (`got`, every query) is wrong, blocks of `block`."""
    right = fold(online_step, q, k, v, block)
    wrong = {name: fold(online_step, q, k, v, block, name) for name in ONLINE}
    found = first_match(got, right, wrong)
    if found:
        return ONLINE[found]
    if np.isnan(got).any():
        row = int(np.argwhere(np.isnan(got))[0][0])
        return (
            f"NaN from query {row} on: on the first block m = -inf, and "
            "exp(-inf - (-inf)) is NaN; rescale by exp(m - m'), m' finite"
        )
    bad = ~near(got, right).all(axis=-1)
    if not bad[:block].any():
        return (
            "the first query block (one key block, the diagonal) is right and "
            "later blocks wrong: the fold of a second key block into (m, l, acc) "
            "is wrong"
        )
    return (
        "wrong on the first query block already, which sees one key block: "
        "the scores, the mask or the softmax of one block"
    )


# Exercise 5: the backward by hand ----------------------------------------

BACKWARD = {
    "no rowsum": "the softmax's backward lacks its second term: d_S = P * "
    "(d_P - rowsum(d_P * P)), not P * d_P",
    "rowsum axis": "the softmax's rowsum runs over the query axis: sum over the "
    "last axis, {keep}",
    "scale missing": "d_S not divided by sqrt(D), though the scores were",
    "scale times": "d_S multiplied by sqrt(D) where it is divided",
    "scale always": "d_S divided by sqrt(D) though scale is False",
    "d_P untransposed": "d_P = d_out @ v where d_out @ v.mT belongs",
    "d_v untransposed": "d_v = P @ d_out where P.mT @ d_out belongs",
    "d_q transposed": "d_q = d_S.mT @ k where d_S @ k belongs",
    "d_k untransposed": "d_k = d_S @ q where d_S.mT @ q belongs",
}


def backward(q, k, v, P, d_out, scale, mistake=None):
    """Exercise 5's answer in float64, right or with `mistake` (of BACKWARD)."""
    d_P = d_out @ (v if mistake == "d_P untransposed" else v.T)
    d_v = (P if mistake == "d_v untransposed" else P.T) @ d_out
    axis = -2 if mistake == "rowsum axis" else -1
    rowsum = (d_P * P).sum(axis=axis, keepdims=True)
    d_S = P * d_P if mistake == "no rowsum" else P * (d_P - rowsum)
    root = math.sqrt(q.shape[-1])
    if (scale and mistake not in ("scale missing", "scale times")) or (
        mistake == "scale always"
    ):
        d_S = d_S / root
    elif scale and mistake == "scale times":
        d_S = d_S * root
    d_q = (d_S.T if mistake == "d_q transposed" else d_S) @ k
    d_k = (d_S if mistake == "d_k untransposed" else d_S.T) @ q
    return d_q, d_k, d_v


def by_hand(got, args, scale, framework: str) -> list[str]:
    """The causes that explain the wrong ones of `got` (d_q, d_k, d_v)."""
    right = backward(*args, scale)
    causes = []
    for i in range(3):
        if near(got[i], right[i]).all():
            continue
        wrong = {n: backward(*args, scale, n)[i] for n in BACKWARD}
        found = first_match(got[i], right[i], wrong)
        text = BACKWARD[found].format(**WORDS[framework]) if found else None
        if text is None:
            text = ("d_q", "d_k", "d_v")[i] + " is wrong, and none of the known "
            text += "mistakes explains it: go over its step again"
        if text not in causes:
            causes.append(text)
    return causes


AUTODIFF = {
    "vjp", "grad", "value_and_grad", "jacrev", "jacfwd", "jvp", "linearize",
    "autograd", "backward", "requires_grad_", "func",
}  # fmt: skip


def autodiff_in(source: str) -> str | None:
    """The first use of a framework's autodiff in an answer's source
    ("jax.vjp, line 12"): exercise 5 is by hand."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in AUTODIFF:
            if node.attr == "func" and ast.unparse(node) != "torch.func":
                continue
            return f"{ast.unparse(node)}, line {node.lineno}"
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            module = node.module or ""
            if module.startswith("impl_"):  # the library's backward: the answer
                return f"from {module} import {', '.join(names)}, line {node.lineno}"
            if module.startswith(("torch.autograd", "torch.func")) or (
                module.startswith("jax") and AUTODIFF & set(names)
            ):
                return f"from {module} import {', '.join(names)}, line {node.lineno}"
    return None


# Exercise 6: one KV-cache step -------------------------------------------

DECODE = {
    "empty slots": "the empty cache slots are not masked: the slots after "
    "`length` hold zeros, and a zero key still gets weight exp(0)",
    "own slot masked": "the new token cannot attend itself: its slot is "
    "`length`, so the filled slots are arange(L) <= length, not < length",
    "not advanced": "the cache does not grow: return the new cache with "
    "length + 1, so the next token writes the next slot",
    "value not written": "the new value is not written into v's cache (the key is)",
    "scale sqrt(C)": "scores divided by sqrt(C), the model width, instead of "
    "sqrt(D), the head width (D = C // H)",
    "scale missing": "scores not divided by sqrt(D)",
}


def decode(x, w_q, w_k, w_v, w_o, H: int, mistake=None):
    """Every token's output, decoded one at a time from an empty cache, in
    float64: right or with `mistake` (of DECODE)."""
    T, C = x.shape
    D, L = C // H, T
    k_cache, v_cache, length, rows = np.zeros((H, L, D)), np.zeros((H, L, D)), 0, []
    for t in range(T):
        q = (x[t] @ w_q).reshape(H, 1, D)
        k, v = (x[t] @ w_k).reshape(H, D), (x[t] @ w_v).reshape(H, D)
        k_cache[:, length] = k
        if mistake != "value not written":
            v_cache[:, length] = v
        filled = np.arange(L) <= length
        if mistake == "own slot masked":
            filled = np.arange(L) < length
        elif mistake == "empty slots":
            filled = np.ones(L, bool)
        root = {"scale sqrt(C)": math.sqrt(C), "scale missing": 1.0}
        s = q @ k_cache.transpose(0, 2, 1) / root.get(mistake, math.sqrt(D))
        with np.errstate(invalid="ignore"):
            weights = softmax(np.where(filled, s, -np.inf))
        rows.append((weights @ v_cache).reshape(C) @ w_o)
        length += mistake != "not advanced"
    return np.stack(rows)


def decoding(got, problem) -> str:
    """Why the token-by-token outputs `got` (T, C) are wrong."""
    right = decode(*problem)
    found = first_match(got, right, {n: decode(*problem, n) for n in DECODE})
    if found:
        return DECODE[found]
    bad = ~near(got, right).all(axis=-1)
    if not bad[-1] and bad[:-1].any():
        return "the last token right, the earlier wrong: " + DECODE["empty slots"]
    if not bad[0]:
        return (
            "the first token right, later ones wrong: the earlier tokens' keys "
            "and values are lost (the cache not written, written at another "
            "slot than `length`, or its length not advanced)"
        )
    return (
        "wrong from the first token, which attends only itself: look at the "
        "scores, the scale (sqrt(D), D = C // H) and the merge"
    )
