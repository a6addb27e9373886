"""Presets: the sizes and seeds every backend, test and command shares.

`tiny` and `full` are the original build script's two modes on its toy sentence;
`batched` adds two leading batch axes; `long` has T in the hundreds for the
numerics. A preset is a frozen dataclass, so a command-line override is
`dataclasses.replace(PRESETS["tiny"], d_model=48)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.validation.variants import check_heads

TOY_SENTENCE = ("the", "cat", "sat", "on", "the", "mat", ".", "and")


@dataclass(frozen=True)
class Preset:
    """One configuration of inputs and parameters.

    Attributes:
        name: the preset's name (also the golden file's name).
        d_model: C, the model width.
        n_heads: H, the number of heads; D = C // H.
        seed: seed of the one `numpy.random.default_rng` that makes everything.
        tokens: the toy sentence, one embedding per distinct word; None for
            random inputs of length `seq_len`.
        seq_len: T when `tokens` is None.
        batch: leading batch axes of x, () for a single sequence.
    """

    name: str
    d_model: int
    n_heads: int
    seed: int = 0
    tokens: tuple[str, ...] | None = None
    seq_len: int | None = None
    batch: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if (self.tokens is None) == (self.seq_len is None):
            raise ValueError("a preset has either tokens or seq_len, not both")
        if self.T < 1:
            raise ValueError(f"a preset needs at least 1 token, got T = {self.T}")
        if self.d_model < 1:
            raise ValueError(f"d_model must be >= 1, got {self.d_model}")
        check_heads(self.d_model, self.n_heads)

    @property
    def T(self) -> int:
        """Sequence length."""
        return len(self.tokens) if self.tokens is not None else self.seq_len

    @property
    def d_head(self) -> int:
        """D, the width of one head."""
        return self.d_model // self.n_heads


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", d_model=32, n_heads=4, seed=0, tokens=TOY_SENTENCE),
        Preset("full", d_model=64, n_heads=8, seed=0, tokens=TOY_SENTENCE),
        Preset("batched", d_model=32, n_heads=4, seed=1, seq_len=16, batch=(2, 3)),
        Preset("long", d_model=64, n_heads=4, seed=2, seq_len=256),
    )
}
