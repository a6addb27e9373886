"""The known mistakes of attention, each with the one-line diagnosis that
names it, the property it breaks and what a signature needs to show it
(MISTAKES, by name in BY_NAME), and FILL, the one only hostile magnitudes
tell.
"""

from __future__ import annotations

from typing import NamedTuple


class Mistake(NamedTuple):
    """A known mistake: its name, the one-line diagnosis, the property it
    breaks, and what it needs to show: "projections" (a signature that takes
    x and the weights), "heads" (several heads), "narrow" (a head narrower
    than x: several heads, or one head of width D < C), "mask" (a signature that
    takes a mask), "batch" (two batch items), a variant's option
    ("n_kv_heads", "rotary", "window", "softcap", "alibi": given to the
    check), or "" (anything)."""

    name: str
    text: str
    property: str
    needs: str = ""


MISTAKES = (
    Mistake(
        "transposed",
        "weights are transposed: x @ w.T where the contract has x @ w, w (in, out)",
        "oracle",
        "projections",
    ),
    Mistake("scale missing", "scale missing: scores not divided by sqrt(D)", "scale"),
    Mistake("scale 1/D", "scores divided by D instead of sqrt(D)", "scale"),
    Mistake(
        "scale 1/sqrt(C)",
        "scores divided by sqrt(C), the model width, instead of sqrt(D), the "
        "head width",
        "scale",
        "narrow",
    ),
    Mistake("scale times", "scores multiplied by sqrt(D) instead of divided", "scale"),
    Mistake(
        "query axis",
        "softmax over the query axis (dim -2) instead of the key axis (dim -1)",
        "rows sum to 1",
    ),
    Mistake(
        "mask inverted", "mask inverted: True read as may NOT attend", "mask", "mask"
    ),
    Mistake(
        "mask ignored",
        "the given mask is ignored: only the causal mask",
        "mask",
        "mask",
    ),
    Mistake(
        "mask replaces causal",
        "the given mask replaces the causal mask instead of narrowing it",
        "mask",
        "mask",
    ),
    Mistake(
        "mask transposed",
        "mask transposed: its query and key axes swapped",
        "mask",
        "mask",
    ),
    Mistake(
        "offset 1",
        "future leaks at offset 1: query i sees key i + 1 (causal mask off by one)",
        "causality",
    ),
    Mistake(
        "diagonal masked",
        "the diagonal is masked: a query cannot attend itself (causal mask off "
        "by one the other way)",
        # no output depends on the future, so causality passes: the oracle's
        # rows tell, each one without its own token
        "oracle",
    ),
    Mistake(
        "causal reversed",
        "causal mask reversed: query i sees keys i to T - 1, the future, instead of "
        "0 to i (triu where tril belongs)",
        "causality",
    ),
    Mistake(
        "causal inverted",
        "causal mask inverted: query i sees only the keys after it (the mask's "
        "polarity flipped: masked_fill where the causal mask is 1, not 0)",
        "causality",
    ),
    Mistake(
        "denominator",
        "the future leaks through the softmax's denominator: the numerator is "
        "masked, but the sum it is divided by runs over every key",
        "causality",
    ),
    Mistake(
        "batch flattened",
        "batch items attend each other: the batch is flattened into one sequence "
        "(a reshape that merges B and T), so a later item sees the earlier ones",
        "independence",
        "batch",
    ),
    Mistake("not causal", "no causal mask: every query sees every key", "causality"),
    Mistake(
        "split",
        "heads split without the transpose: (..., T, C) reshaped straight to "
        "(..., H, T, D)",
        "independence",
        "heads",
    ),
    Mistake(
        "merge",
        "heads merged without the transpose: (..., H, T, D) reshaped straight to "
        "(..., T, C)",
        "independence",
        "heads",
    ),
    Mistake(
        "window W+1",
        "window off by one: W + 1 keys reach each query (key i - W too) where "
        "the window is W keys, i - W < j <= i (attention-gym's q_idx - kv_idx <= "
        "window_size, or FlashAttention's window_size=(W, 0), given W)",
        "window",
        "window",
    ),
    Mistake(
        "window W-1",
        "window off by one: W - 1 keys reach each query (not key i - W + 1) "
        "where the window is W keys, i - W < j <= i (a bound i - j < W - 1, or "
        "FlashAttention's (W - 1, 0) read as exclusive)",
        "oracle",
        "window",
    ),
    Mistake(
        "window ignored",
        "the window is ignored: every earlier key reaches each query",
        "window",
        "window",
    ),
    Mistake(
        "rotary style",
        "rotary positions in the other style: NeoX's halves (m, m + R/2) and "
        "GPT-J's adjacent pairs (2m, 2m + 1) swapped (transformers' rotate_half "
        "against FlashAttention's interleaved=True)",
        "oracle",
        "rotary",
    ),
    Mistake(
        "gqa order",
        "GQA heads grouped in the wrong order: query head h reads KV head h % "
        "H_kv (the KV heads tiled: Tensor.repeat, np.tile) instead of h // (H / "
        "H_kv) (repeat_interleave, transformers' repeat_kv)",
        "independence",
        "n_kv_heads",
    ),
    Mistake(
        "softcap after mask",
        "soft-cap after the mask: a masked score becomes c tanh(-inf / c) = -c, "
        "and the masked keys reach the softmax (cap the scaled scores, then mask)",
        "soft-cap",
        "softcap",
    ),
    Mistake(
        "softcap before scale",
        "soft-cap before the scale: c tanh(q.k / c) / sqrt(D) instead of c "
        "tanh((q.k / sqrt(D)) / c)",
        "soft-cap",
        "softcap",
    ),
    Mistake(
        "softcap ignored",
        "the soft-cap is ignored: scores are not capped",
        "soft-cap",
        "softcap",
    ),
    Mistake(
        "alibi ignored",
        "ALiBi's bias is missing: no slope_h (j - i) reaches the scores (or "
        "one that varies only with the query, slope_h i, which the softmax "
        "cancels)",
        "oracle",
        "alibi",
    ),
    Mistake(
        "alibi sign",
        "ALiBi's bias has the wrong sign: slope_h (i - j) is added, so older "
        "keys score higher, where slope_h (j - i) = -slope_h |i - j| belongs "
        "(the distance taken as query - key)",
        "oracle",
        "alibi",
    ),
    Mistake(
        "alibi reversed",
        "ALiBi's slopes in reverse head order: head 0 takes the last head's "
        "slope, where the steepest, 2^(-8/H), belongs to head 0",
        "oracle",
        "alibi",
    ),
    Mistake(
        "alibi from 0",
        "ALiBi's slopes off by one: 2^(-8h/H) from h = 0, a first slope of 1, "
        "where 2^(-8(h + 1)/H) begins at 2^(-8/H)",
        "oracle",
        "alibi",
    ),
    Mistake(
        "alibi geometric",
        "ALiBi's slopes 2^(-8(h + 1)/H) at a head count that is not a power "
        "of two (attention-gym's at every H): that rule is for powers of two; "
        "for H = 6 the paper takes the 4 slopes of 4 heads, then every other "
        "slope of 8 (Press et al.'s get_slopes)",
        "oracle",
        "alibi",
    ),
    Mistake(
        "alibi truncated",
        "ALiBi's slopes for a head count that is not a power of two taken as "
        "the first H slopes of the next power of two: for H = 6 the paper "
        "takes the 4 slopes of 4 heads, then every other slope of 8 (Press et "
        "al.'s get_slopes)",
        "oracle",
        "alibi",
    ),
    Mistake(
        "alibi repeated",
        "ALiBi's slopes past the power of two P below H repeat P's own: every "
        "other slope of 2P taken from its 2nd ([1::2]), where the paper takes "
        "its 1st, 3rd, ... ([0::2]), the slopes between P's",
        "oracle",
        "alibi",
    ),
    Mistake(
        "alibi before scale",
        "ALiBi's bias added before the scale: (q.k + slope_h (j - i)) / "
        "sqrt(D), where q.k / sqrt(D) + slope_h (j - i) belongs",
        "oracle",
        "alibi",
    ),
)
BY_NAME = {m.name: m for m in MISTAKES}
FILL = Mistake(
    "mask fill -1e4",
    "masked scores filled with -1e4 instead of -inf (minGPT's masked_bias)",
    "hostile magnitudes",
)
"""Right at ordinary scores (exp(-1e4) is 0): only hostile magnitudes can
tell it, so it is named there and not among MISTAKES."""
