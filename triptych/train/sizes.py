"""Sizes `triptych train` refuses before any work: those whose NumPy trainer
no memory can hold (`triptych.common.limits`, docs/commands.md#sizes)."""

from __future__ import annotations

import argparse


def refuse_what_cannot_fit(args: argparse.Namespace, command_defaults: dict) -> None:
    """Sizes whose NumPy trainer (it runs always) no memory can hold: one line
    (`triptych.common.limits`). Each layer keeps its (B, H, T, T) weights for
    the backward pass; the logits are (B, T, V); the embeddings (V, C)."""
    import numpy as np

    from triptych.common import limits

    B, T, V = args.batch, args.seq_len, args.vocab
    C, H, L = args.d_model, args.n_heads, args.n_layers
    size = np.dtype(args.dtype).itemsize
    flag = {key: f"--{key.replace('_', '-')}" for key in command_defaults}
    asked = {flag[key]: getattr(args, key) for key in command_defaults}
    defaults = {flag[key]: value for key, value in command_defaults.items()}
    limits.refuse_unless_fits(
        [
            limits.Array(
                "each layer's (B, H, T, T) weights",
                (L, B, H, T, T),
                size,
                ("--seq-len", "--batch", "--n-heads", "--n-layers"),
            ),
            limits.Array(
                "the (B, T, V) logits",
                (B, T, V),
                size,
                ("--vocab", "--seq-len", "--batch"),
            ),
            limits.Array(
                "the (V, C) embedding", (V, C), size, ("--vocab", "--d-model")
            ),
            limits.Array(
                "each layer's four (C, C) weights",
                (L, 4, C, C),
                size,
                ("--d-model", "--n-layers"),
            ),
        ],
        asked,
        defaults,
    )
