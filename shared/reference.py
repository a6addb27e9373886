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

from shared.variants import ARRAY_FIELDS, Variant, alibi_slopes


def reference_single_head(
    x, w_q, w_k, w_v, mask=None, *, scale=True, causal=True, biases=None
):
    """Single-head causal attention, looped.

    Args:
        x: (..., T, C) inputs.
        w_q, w_k, w_v: (C, D) projections.
        mask: optional boolean array broadcastable to (..., T, T).
        scale: divide scores by sqrt(D).
        causal: False to let every position attend to every position.
        biases: None, or a dict of b_q, b_k, b_v, each (D,), added to the
            projections.

    Returns:
        out (..., T, D) and weights (..., T, T), float64.
    """
    x = np.asarray(x, dtype=np.float64)
    *batch, T, _ = x.shape
    allowed = _allowed(T, mask, (*batch, T, T), causal)
    D = w_q.shape[1]
    out = np.zeros((*batch, T, D))
    weights = np.zeros((*batch, T, T))
    biases = tuple((biases or {}).get(name) for name in ("b_q", "b_k", "b_v"))
    for b in np.ndindex(*batch):
        out[b], weights[b] = _one_head(x[b], w_q, w_k, w_v, allowed[b], scale, biases)
    return out, weights


def reference_multi_head(
    x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, scale=True, causal=True,
    biases=None, variant=None,
):  # fmt: skip
    """Multi-head causal attention, looped over batch items and heads.

    Args:
        x: (..., T, C) inputs.
        w_q, w_k, w_v, w_o: (C, C) projections; head h uses columns
            h*D:(h+1)*D of w_q, w_k and w_v.
        n_heads: H; D = C // H.
        mask: optional boolean array broadcastable to (..., H, T, T).
        scale: divide scores by sqrt(D).
        causal: False to let every position attend to every position.
        biases: None, or a dict of b_q, b_k, b_v, b_o, each (C,), added to
            the projections; head h uses entries h*D:(h+1)*D of b_q, b_k, b_v.
        variant: None, or a shared.variants.Variant (docs/variants.md):
            n_kv_heads: query head h uses KV head g = h // (H / H_kv), columns
            g*D:(g+1)*D of w_k, w_v (C, H_kv * D); head_dim: D, when it is not
            C // H: w_q (C, H * D), w_o (H * D, C); rotary and positions: each
            q and k turned by its position; window: key j reaches query i only
            if i - W < j; alibi: add slope_h * (j - i) to each score; softcap:
            each scaled score s becomes c * tanh(s / c), before ALiBi and the
            mask; sinks: each head's logit in the softmax's denominator;
            q_norm, k_norm: RMSNorm over each head's q (k) with this weight,
            before rotary positions, qk_norm_eps its eps.

    Returns:
        out (..., T, C) and weights (..., H, T, T), float64.
    """
    x = np.asarray(x, dtype=np.float64)
    *batch, T, C = x.shape
    H = n_heads
    b_q, b_k, b_v, b_o = (
        (biases or {}).get(name) for name in ("b_q", "b_k", "b_v", "b_o")
    )
    given = Variant() if variant is None else variant
    D = C // H if given.head_dim is None else given.head_dim
    G = given.groups(H)  # query heads per KV head
    allowed = _allowed(T, mask, (*batch, H, T, T), causal)
    variant = _looped_variant(given, (*batch, T))
    out = np.zeros((*batch, T, C))
    weights = np.zeros((*batch, H, T, T))
    for b in np.ndindex(*batch):
        heads = []
        for h in range(H):
            columns = slice(h * D, (h + 1) * D)
            g = h // G  # the key/value head of query head h (h itself without GQA)
            kv = slice(g * D, (g + 1) * D)
            head_out, weights[(*b, h)] = _one_head(
                x[b],
                w_q[:, columns],
                w_k[:, kv],
                w_v[:, kv],
                allowed[(*b, h)],
                scale,
                tuple(
                    None if a is None else a[c]
                    for a, c in ((b_q, columns), (b_k, kv), (b_v, kv))
                ),
                None if variant is None else _head_variant(variant, b, h, H),
            )
            heads.append(head_out)
        merged = np.concatenate(heads, axis=-1)  # (T, H * D)
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


def _one_head(
    x, w_q, w_k, w_v, allowed, scale, biases=(None, None, None), variant=None
):
    """One sequence, one head: x (T, C) -> out (T, D), weights (T, T); with a
    `variant` (_head_variant), the options of docs/variants.md."""
    T = x.shape[0]
    D = w_q.shape[1]
    # 1. project x into queries, keys and values (plus their biases, if any)
    q, k, v = (
        [x[i] @ w + (0.0 if b is None else b) for i in range(T)]
        for w, b in zip((w_q, w_k, w_v), biases, strict=True)
    )
    if variant is not None:
        q, k, allowed = _queries_keys_allowed(q, k, allowed, variant)
    out = np.zeros((T, D))
    weights = np.zeros((T, T))
    divisor = math.sqrt(D) if scale else 1.0
    for i in range(T):
        keys = np.flatnonzero(allowed[i]).tolist()  # the j that row i may attend
        if not keys:
            continue  # nothing to attend to: zero weights, zero output
        # 3. scores = q @ k^T, 4. scale by 1 / sqrt(D), 5. mask (only allowed keys)
        # (q[i].dot(k[j]) is q[i] @ k[j], the same BLAS dot, with less overhead)
        scores = {j: float(q[i].dot(k[j])) / divisor for j in keys}
        if variant is not None:
            scores = {j: _adjusted(s, i, j, variant) for j, s in scores.items()}
        # 6. softmax into weights
        sink = [] if variant is None or variant["sink"] is None else [variant["sink"]]
        top = max([*scores.values(), *sink])
        exps = {j: math.exp(s - top) for j, s in scores.items()}
        total = math.fsum([*exps.values(), *(math.exp(s - top) for s in sink)])
        for j in keys:
            weights[i, j] = exps[j] / total
        # 7. weighted sum of values: each product weights[i, j] * v[j][d] in
        #    float64, each sum over j exactly rounded (fsum, in any order)
        products = weights[i, keys][:, None] * np.asarray([v[j] for j in keys])
        for d, column in enumerate(products.T.tolist()):
            out[i, d] = math.fsum(column)
    return out, weights


def _looped_variant(variant, rows):
    """The variant's options as the loops read them, by name (arrays in
    float64, the positions broadcast to `rows`), or None for plain
    attention."""
    options = dict(
        rotary=variant.rotary, window=variant.window, alibi=variant.alibi or None,
        softcap=variant.softcap, sinks=variant.sinks, q_norm=variant.q_norm,
        k_norm=variant.k_norm,
    )  # fmt: skip
    if all(option is None for option in options.values()):
        return None  # plain attention
    options = {
        n: np.asarray(a, dtype=np.float64) if n in ARRAY_FIELDS and a is not None else a
        for n, a in options.items()
    }
    positions = np.arange(rows[-1]) if variant.positions is None else variant.positions
    return options | dict(
        positions=np.broadcast_to(positions, rows), qk_norm_eps=variant.qk_norm_eps
    )


def _head_variant(variant, b, h, H):
    """The options of head h of batch item b: its sink, its ALiBi slope, its
    row of positions."""
    slopes = alibi_slopes(H) if variant["alibi"] else None
    sinks = variant["sinks"]
    return {
        **variant,
        "positions": variant["positions"][b],
        "slope": None if slopes is None else slopes[h],
        "sink": None if sinks is None else float(sinks[h]),
    }


def _queries_keys_allowed(q, k, allowed, variant):
    """QK-norm, then rotary positions, on each q and k; the window on `allowed`."""
    eps = variant["qk_norm_eps"]
    if variant["q_norm"] is not None:
        q = [_rms_norm(row, variant["q_norm"], eps) for row in q]
    if variant["k_norm"] is not None:
        k = [_rms_norm(row, variant["k_norm"], eps) for row in k]
    if variant["rotary"] is not None:
        rotary, positions = variant["rotary"], variant["positions"]
        q = [_rotate(row, p, rotary) for row, p in zip(q, positions, strict=True)]
        k = [_rotate(row, p, rotary) for row, p in zip(k, positions, strict=True)]
    if variant["window"] is not None:
        T = len(q)
        W = variant["window"]
        near = np.array([[i - W < j for j in range(T)] for i in range(T)])
        allowed = allowed & near
    return q, k, allowed


def _rms_norm(row, weight, eps):
    """row / sqrt(mean(row ** 2) + eps) * weight, over the head width."""
    row = row.tolist()  # Python floats: the same float64 arithmetic, less overhead
    mean_square = math.fsum(a * a for a in row) / len(row)
    root = math.sqrt(mean_square + eps)
    return np.array([a / root for a in row]) * weight


def _rotate(row, position, rotary):
    """Each pair of the first R features of `row` turned by position * base **
    (-2m / R): pair m is (m, m + R/2) in the NeoX style, (2m, 2m + 1) in GPT-J's."""
    D = len(row)
    R = int(rotary.fraction * D)
    row = row.tolist()  # Python floats, as in _rms_norm
    turned = list(row)
    for m in range(R // 2):
        a, b = (m, m + R // 2) if rotary.style == "neox" else (2 * m, 2 * m + 1)
        angle = float(position) * rotary.base ** (-2 * m / R)
        cos, sin = math.cos(angle), math.sin(angle)
        turned[a] = row[a] * cos - row[b] * sin
        turned[b] = row[a] * sin + row[b] * cos
    return np.array(turned)


def _adjusted(score, i, j, variant):
    """A scaled score of query i and key j soft-capped, then ALiBi's bias added."""
    if variant["softcap"] is not None:
        cap = variant["softcap"]
        score = cap * math.tanh(score / cap)
    if variant["slope"] is not None:
        score += variant["slope"] * (j - i)
    return score


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
