"""The float64 oracle: causal self-attention as plain loops, written to be obvious.

Every backend is checked against these functions (and against the golden files
made from them). They follow the same seven steps as the backends, one query
row and one key at a time, in float64, with `math.fsum` for every softmax sum
so the normalizer is correctly rounded. They are slow on purpose: nothing here
is shared with the code under test except the idea.

Same contract as the backends (docs/contract.md): mask=None means causal; a given
boolean mask (True = may attend) is combined with the causal mask; a row with
nothing to attend to gets all-zero weights and a zero output. `causal=False`
drops the causal mask (every position may attend to every position), for the
non-causal blockwise attention.
"""

from __future__ import annotations

import math

import numpy as np


def reference_single_head(
    x,
    w_q,
    w_k,
    w_v,
    mask=None,
    *,
    scale=True,
    causal=True,
    b_q=None,
    b_k=None,
    b_v=None,
):
    """Single-head causal attention, looped.

    Args:
        x: (..., T, C) inputs.
        w_q, w_k, w_v: (C, D) projections.
        mask: optional boolean array broadcastable to (..., T, T).
        scale: divide scores by sqrt(D).
        causal: False to let every position attend to every position.
        b_q, b_k, b_v: None, or (D,) biases added to the projections.

    Returns:
        out (..., T, D) and weights (..., T, T), float64.
    """
    x = np.asarray(x, dtype=np.float64)
    *batch, T, _ = x.shape
    allowed = _allowed(T, mask, (*batch, T, T), causal)
    D = w_q.shape[1]
    out = np.zeros((*batch, T, D))
    weights = np.zeros((*batch, T, T))
    biases = (b_q, b_k, b_v)
    for b in np.ndindex(*batch):
        out[b], weights[b] = _one_head(x[b], w_q, w_k, w_v, allowed[b], scale, biases)
    return out, weights


def reference_multi_head(
    x,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    mask=None,
    *,
    scale=True,
    causal=True,
    b_q=None,
    b_k=None,
    b_v=None,
    b_o=None,
):
    """Multi-head causal attention, looped over batch items and heads.

    Args:
        x: (..., T, C) inputs.
        w_q, w_k, w_v, w_o: (C, C) projections; head h uses columns
            h*D:(h+1)*D of w_q, w_k and w_v.
        n_heads: H; D = C // H.
        mask: optional boolean array broadcastable to (..., H, T, T).
        scale: divide scores by sqrt(D).
        causal: False to let every position attend to every position.
        b_q, b_k, b_v, b_o: None, or (C,) biases added to the projections;
            head h uses entries h*D:(h+1)*D of b_q, b_k and b_v.

    Returns:
        out (..., T, C) and weights (..., H, T, T), float64.
    """
    x = np.asarray(x, dtype=np.float64)
    *batch, T, C = x.shape
    H, D = n_heads, C // n_heads
    allowed = _allowed(T, mask, (*batch, H, T, T), causal)
    out = np.zeros((*batch, T, C))
    weights = np.zeros((*batch, H, T, T))
    for b in np.ndindex(*batch):
        heads = []
        for h in range(H):
            columns = slice(h * D, (h + 1) * D)
            head_out, weights[(*b, h)] = _one_head(
                x[b],
                w_q[:, columns],
                w_k[:, columns],
                w_v[:, columns],
                allowed[(*b, h)],
                scale,
                tuple(None if a is None else a[columns] for a in (b_q, b_k, b_v)),
            )
            heads.append(head_out)
        merged = np.concatenate(heads, axis=-1)  # (T, C)
        for i in range(T):
            out[(*b, i)] = merged[i] @ w_o + (0.0 if b_o is None else b_o)
    return out, weights


def reference_entropy(weights):
    """Entropy in nats of each row of `weights`, with 0 * log 0 = 0."""
    weights = np.asarray(weights, dtype=np.float64)
    entropy = np.zeros(weights.shape[:-1])
    for row in np.ndindex(*weights.shape[:-1]):
        entropy[row] = -math.fsum(p * math.log(p) for p in weights[row] if p > 0)
    return entropy


def _allowed(T, mask, shape, causal=True):
    """Causal mask (unless causal=False) and the given one, broadcast to `shape`."""
    allowed = np.ones((T, T), dtype=bool)
    if causal:
        allowed = np.tril(allowed)
    if mask is not None:
        allowed = allowed & np.asarray(mask, dtype=bool)
    return np.broadcast_to(allowed, shape)


def _one_head(x, w_q, w_k, w_v, allowed, scale, biases=(None, None, None)):
    """One sequence, one head: x (T, C) -> out (T, D), weights (T, T)."""
    T = x.shape[0]
    D = w_q.shape[1]
    # 1. project x into queries, keys and values (plus their biases, if any)
    q, k, v = (
        [x[i] @ w + (0.0 if b is None else b) for i in range(T)]
        for w, b in zip((w_q, w_k, w_v), biases, strict=True)
    )
    out = np.zeros((T, D))
    weights = np.zeros((T, T))
    for i in range(T):
        keys = [j for j in range(T) if allowed[i, j]]
        if not keys:
            continue  # nothing to attend to: zero weights, zero output
        # 3. scores = q @ k^T, 4. scale by 1 / sqrt(D), 5. mask (only allowed keys)
        scores = {
            j: float(q[i] @ k[j]) / (math.sqrt(D) if scale else 1.0) for j in keys
        }
        # 6. softmax into weights
        top = max(scores.values())
        exps = {j: math.exp(s - top) for j, s in scores.items()}
        total = math.fsum(exps.values())
        for j in keys:
            weights[i, j] = exps[j] / total
        # 7. weighted sum of values
        for d in range(D):
            out[i, d] = math.fsum(weights[i, j] * v[j][d] for j in keys)
    return out, weights


def reference_steps(x, w_q, w_k, w_v, w_o=None, n_heads=1):
    """What each step of the lesson gives on one sequence, looped in float64.

    Args:
        x: (T, C) inputs. w_q, w_k, w_v: (C, D) projections, D = C for one head.
        w_o: None for one head; else (C, C), with `n_heads` heads.

    Returns:
        {step number: {name: array}}, with the names of impl_*/lesson.py: 1: q, k,
        v (T, D); 2: q, k, v (H, T, D) (multi-head only); 3: scores q k^T, 4:
        scores scaled, 5: causal (T, T) and scores with -inf above the diagonal,
        6: exp (each row's exp(score - row max)) and weights; 7: out, (T, D) for
        one head, (T, C) after w_o for several, and for several out_heads
        (H, T, D), the weighted sum of each head before the merge. Heads come
        first in 3 to 6.
    """
    x = np.asarray(x, dtype=np.float64)
    T = x.shape[0]
    H = n_heads
    D = w_q.shape[1] // H
    q, k, v = (np.array([x[i] @ w for i in range(T)]) for w in (w_q, w_k, w_v))
    steps = {1: {"q": q, "k": k, "v": v}}
    heads = [slice(h * D, (h + 1) * D) for h in range(H)]
    if w_o is not None:
        steps[2] = {n: np.stack([a[:, c] for c in heads]) for n, a in steps[1].items()}
    raw = np.zeros((H, T, T))
    for h, c in enumerate(heads):
        for i in range(T):
            for j in range(T):
                raw[h, i, j] = math.fsum(q[i, c] * k[j, c])
    causal = np.tril(np.ones((T, T), dtype=bool))
    scaled = raw / math.sqrt(D)
    masked = np.where(causal, scaled, -np.inf)
    exp = np.zeros((H, T, T))
    weights = np.zeros((H, T, T))
    out = np.zeros((T, H * D))
    for h in range(H):
        for i in range(T):
            top = max(masked[h, i, : i + 1])
            exp[h, i, : i + 1] = [math.exp(s - top) for s in masked[h, i, : i + 1]]
            weights[h, i] = exp[h, i] / math.fsum(exp[h, i])
            for d in range(D):
                values = v[: i + 1, h * D + d]  # (i + 1,): column d of head h
                out[i, h * D + d] = math.fsum(weights[h, i, : i + 1] * values)
    one = (lambda a: a[0]) if w_o is None else (lambda a: a)
    steps[3] = {"scores": one(raw)}
    steps[4] = {"scores": one(scaled)}
    steps[5] = {"causal": causal, "scores": one(masked)}
    steps[6] = {"exp": one(exp), "weights": one(weights)}
    steps[7] = {"out": out if w_o is None else out @ w_o}
    if w_o is not None:
        steps[7]["out_heads"] = np.stack([out[:, c] for c in heads])  # (H, T, D)
    return steps
