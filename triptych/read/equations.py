"""The equations the page sets beside the steps, in MathML: Chromium, Firefox
and Safari lay it out themselves, with no script and no font from elsewhere.

Written with a few tag helpers so that each equation reads close to its
formula. Each says what the code beside it computes, in the code's names:
q, k, v, D the head width, S the scores, P the weights, m and l the online
softmax's running max and sum.
"""

from __future__ import annotations

import html


def i(name: str) -> str:
    """An identifier: a variable or a function's name."""
    return f"<mi>{name}</mi>"


def n(number: str) -> str:
    return f"<mn>{number}</mn>"


def o(operator: str) -> str:
    return f"<mo>{operator}</mo>"


def t(text: str) -> str:
    """Words; MathML trims a token's edge spaces, so they become no-break ones."""
    inner = text.strip(" ")
    lead = len(text) - len(text.lstrip(" "))
    trail = len(text) - len(inner) - lead  # all spaces: every one counted once
    return f"<mtext>{'&#xA0;' * lead}{inner}{'&#xA0;' * trail}</mtext>"


def row(*parts: str) -> str:
    return f"<mrow>{''.join(parts)}</mrow>"


def sub(base: str, index: str) -> str:
    return f"<msub>{base}{index}</msub>"


def sup(base: str, power: str) -> str:
    return f"<msup>{base}{power}</msup>"


def frac(top: str, bottom: str) -> str:
    return f"<mfrac>{top}{bottom}</mfrac>"


def sqrt(inside: str) -> str:
    return f"<msqrt>{inside}</msqrt>"


def paren(*inside: str) -> str:
    return row(o("("), *inside, o(")"))


def space() -> str:
    return '<mspace width="1.2em"></mspace>'


def math(*parts: str, label: str) -> str:
    """A display equation; `label` is what a screen reader says for it."""
    return (
        f'<math display="block" aria-label="{html.escape(label)}">{row(*parts)}</math>'
    )


IJ = row(i("i"), i("j"))
S_IJ, P_IJ = sub(i("S"), IJ), sub(i("P"), IJ)
K_T = sup(i("K"), i("T"))
SOFTMAX = row(i("softmax"), o("&#x2061;"))  # function application


def cases(*pairs: tuple[str, str]) -> str:
    """{ value if condition, ... } as a two-column table."""
    rows = "".join(f"<mtr><mtd>{a}</mtd><mtd>{b}</mtd></mtr>" for a, b in pairs)
    return row(o("{"), f'<mtable columnalign="left">{rows}</mtable>')


MASK = row(
    S_IJ,
    o("&#x2190;"),
    cases(
        (S_IJ, row(t("if "), i("j"), o("&#x2264;"), i("i"))),
        (row(o("&#x2212;"), i("&#x221E;")), row(t("if "), i("j"), o(">"), i("i"))),
    ),
)
"""Step 5: keys after the query get minus infinity, exp of which is 0."""

ATTENTION = math(
    i("out"),
    o("="),
    SOFTMAX,
    paren(frac(row(i("Q"), K_T), sqrt(i("D"))), o("+"), i("M")),
    i("V"),
    o(","),
    space(),
    sub(i("M"), IJ),
    o("="),
    cases(
        (n("0"), row(t("if "), i("j"), o("&#x2264;"), i("i"))),
        (row(o("&#x2212;"), i("&#x221E;")), t("otherwise (the future)")),
    ),
    label="out = softmax(Q K^T / sqrt(D) + M) V, M_ij = 0 if j <= i, else -infinity",
)
"""The whole of causal attention, as the lesson computes it for one head."""

SOFTMAX_ROW = math(
    P_IJ,
    o("="),
    frac(
        sup(i("e"), row(S_IJ, o("&#x2212;"), sub(i("m"), i("i")))),
        row(
            sub(o("&#x2211;"), i("j&#x2032;")),
            sup(
                i("e"),
                row(
                    sub(i("S"), row(i("i"), i("j&#x2032;"))),
                    o("&#x2212;"),
                    sub(i("m"), i("i")),
                ),
            ),
        ),
    ),
    o(","),
    space(),
    sub(i("m"), i("i")),
    o("="),
    sub(i("max"), i("j")),
    S_IJ,
    label="P_ij = exp(S_ij - m_i) / sum over j' of exp(S_ij' - m_i), m_i = max_j S_ij",
)

LESSON = {
    1: math(
        i("Q"),
        o("="),
        i("X"),
        sub(i("W"), i("q")),
        o(","),
        space(),
        i("K"),
        o("="),
        i("X"),
        sub(i("W"), i("k")),
        o(","),
        space(),
        i("V"),
        o("="),
        i("X"),
        sub(i("W"), i("v")),
        label="Q = X W_q, K = X W_k, V = X W_v",
    ),
    3: math(
        i("S"),
        o("="),
        i("Q"),
        K_T,
        o(","),
        space(),
        S_IJ,
        o("="),
        sub(i("q"), i("i")),
        o("&#x22C5;"),
        sub(i("k"), i("j")),
        label="S = Q K^T, S_ij = q_i . k_j",
    ),
    4: math(
        i("S"),
        o("&#x2190;"),
        frac(i("S"), sqrt(i("D"))),
        label="S becomes S / sqrt(D)",
    ),
    5: math(MASK, label="S_ij stays if j <= i, becomes -infinity if j > i"),
    6: SOFTMAX_ROW,
    7: math(
        i("out"),
        o("="),
        i("P"),
        i("V"),
        o(","),
        space(),
        sub(i("out"), i("i")),
        o("="),
        sub(o("&#x2211;"), row(i("j"), o("&#x2264;"), i("i"))),
        P_IJ,
        sub(i("v"), i("j")),
        label="out = P V, out_i = sum over j <= i of P_ij v_j",
    ),
}
"""One equation per step of the lesson (step 2, a reshape, has none)."""

MERGE = math(
    i("out"),
    o("="),
    paren(
        sub(i("out"), n("0")),
        o("&#x2223;"),
        o("&#x22EF;"),
        o("&#x2223;"),
        sub(i("out"), row(i("H"), o("&#x2212;"), n("1"))),
    ),
    sub(i("W"), i("o")),
    label="out = (out_0 | ... | out_H-1) W_o: the heads side by side, projected",
)
"""Step 7 (continued) of multi-head attention."""

ONLINE = math(
    sup(i("m"), o("&#x2032;")),
    o("="),
    i("max"),
    paren(i("m"), o(","), sub(i("max"), i("j")), S_IJ),
    o(","),
    space(),
    sup(i("l"), o("&#x2032;")),
    o("="),
    sup(i("e"), row(i("m"), o("&#x2212;"), sup(i("m"), o("&#x2032;")))),
    i("l"),
    o("+"),
    sub(o("&#x2211;"), i("j")),
    sup(i("e"), row(S_IJ, o("&#x2212;"), sup(i("m"), o("&#x2032;")))),
    o(","),
    space(),
    sup(i("acc"), o("&#x2032;")),
    o("="),
    sup(i("e"), row(i("m"), o("&#x2212;"), sup(i("m"), o("&#x2032;")))),
    i("acc"),
    o("+"),
    sub(o("&#x2211;"), i("j")),
    sup(i("e"), row(S_IJ, o("&#x2212;"), sup(i("m"), o("&#x2032;")))),
    sub(i("v"), i("j")),
    label="m' = max(m, max_j S_ij), l' = exp(m - m') l + sum_j exp(S_ij - m'), "
    "acc' = exp(m - m') acc + sum_j exp(S_ij - m') v_j, over one key block",
)
"""The online softmax's update over one block of keys j."""

NORMALIZE = math(
    i("out"),
    o("="),
    frac(i("acc"), i("l")),
    label="out = acc / l, after the last key block",
)

SOFTMAX_BACKWARD = math(
    sub(i("dS"), IJ),
    o("="),
    P_IJ,
    paren(
        sub(i("dP"), IJ),
        o("&#x2212;"),
        sub(o("&#x2211;"), i("k")),
        sub(i("P"), row(i("i"), i("k"))),
        sub(i("dP"), row(i("i"), i("k"))),
    ),
    o(","),
    space(),
    i("dP"),
    o("="),
    i("dout"),
    sup(i("V"), i("T")),
    label="dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), dP = dout V^T",
)
"""The softmax's backward: its Jacobian, summed out row by row."""

VARIANTS = math(
    S_IJ,
    o("="),
    i("c"),
    i("tanh"),
    o("&#x2061;"),
    paren(
        frac(
            row(sub(i("q"), i("i")), o("&#x22C5;"), sub(i("k"), i("j"))),
            row(i("c"), sqrt(i("D"))),
        )
    ),
    o("+"),
    sub(i("s"), i("h")),
    paren(i("j"), o("&#x2212;"), i("i")),
    o(","),
    space(),
    P_IJ,
    o("="),
    frac(
        sup(i("e"), S_IJ),
        row(
            sup(i("e"), sub(i("sink"), i("h"))),
            o("+"),
            sub(o("&#x2211;"), i("j&#x2032;")),
            sup(i("e"), sub(i("S"), row(i("i"), i("j&#x2032;")))),
        ),
    ),
    o(","),
    space(),
    i("i"),
    o("&#x2212;"),
    i("W"),
    o("&lt;"),
    i("j"),
    o("&#x2264;"),
    i("i"),
    o(","),
    space(),
    i("g"),
    o("="),
    row(
        o("&#x230A;"),
        i("h"),
        o("/"),
        paren(i("H"), o("/"), sub(i("H"), i("kv"))),
        o("&#x230B;"),
    ),
    label="S_ij = c tanh(q_i . k_j / (c sqrt(D))) + s_h (j - i), "
    "P_ij = exp(S_ij) / (exp(sink_h) + sum over j' of exp(S_ij')), "
    "for i - W < j <= i; k and v from key/value head g = floor(h / (H / H_kv))",
)
"""The variants together, for query head h: soft-capped scores plus ALiBi's
slope, the window, the sink in the denominator, the KV head of GQA (q and k
after QK-norm and rotary positions)."""

CHAPTER = {
    "lesson": ATTENTION,
    "blockwise": ONLINE,
    "backward": SOFTMAX_BACKWARD,
    "variants": VARIANTS,
}
"""The equation under a chapter's title: what the whole chapter computes."""


def for_row(slug: str, function: str, step: int | None, words: str) -> str | None:
    """The equation beside a row, if it has one."""
    if step is None:
        return None
    continued = words.startswith("(continued)")
    if slug == "lesson":
        if continued:
            return MERGE
        if step == 2:
            return None
        return LESSON[step]
    if slug == "backward" and function == "attend_backward" and step == 6:
        return SOFTMAX_BACKWARD
    if slug == "blockwise" and function == "online_softmax_step" and step == 6:
        return ONLINE
    if slug == "blockwise" and words.startswith("(end) normalize"):
        return NORMALIZE
    return None
