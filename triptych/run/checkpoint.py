"""`triptych run --checkpoint DIR --layer L`: a real GPT-2's layer, or a
Llama, Mistral, Qwen 2, Qwen 3, Gemma 2, Gemma 3 or gpt-oss model's (with its
variant: GQA, rotary positions, the window, soft-capping, sinks, QK-norm;
docs/variants.md), on the toy sentence. The model on disk (as
`save_pretrained` writes it: config.json, the weights, the tokenizer's files;
nothing is downloaded) tokenizes the sentence and computes, in float64, the
hidden states that enter layer L's attention (embeddings, earlier blocks, the
layer norm); the layer's parameters come through `shared.convert.params_from`.
Everything after that is `triptych run` as usual, on this fixture instead of a
preset's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from shared import registry
from triptych.common.errors import CommandError, numbered

GPT2_TYPES = ("gpt2",)
"""The transformers model types with GPT-2's layout (GPT2Model, h[L].attn)."""

LLAMA_TYPES = (
    "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "gpt_oss",
)  # fmt: skip
"""The model types with Llama's layout (layers[L].self_attn), whose attention
`shared.convert.params_from` reads with its variant."""


TRAINED_MARK = "trainer_state.json"
"""The file transformers' Trainer leaves beside the weights it trained: the
one sign a checkpoint gives that its weights were trained."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where a fixture came from: the directory, the layer, the model type,
    the layer's class, and whether the directory says its weights were trained
    (TRAINED_MARK), as results.json records them."""

    directory: str
    layer: int
    model_type: str
    source: str
    trained: bool

    def describe(self) -> str:
        weights = (
            f"trained ({TRAINED_MARK})"
            if self.trained
            else "the checkpoint's weights, as saved"
        )
        return (
            f"layer {self.layer} of the {self.model_type} checkpoint in "
            f"{self.directory} ({self.source}): {weights}"
        )


def check_directory(directory: Path) -> None:
    """That `directory` holds a checkpoint as save_pretrained writes it: at
    once, before torch and transformers are imported (seconds).

    Raises:
        CommandError: not a directory, or config.json or the weights missing.
    """
    if not directory.is_dir():
        reason = "no such directory" if not directory.exists() else "not a directory"
        raise CommandError(f"--checkpoint {directory}: {reason}")
    missing = [name for name in ("config.json",) if not (directory / name).is_file()]
    weights = ("model.safetensors", "pytorch_model.bin")
    if not any((directory / name).is_file() for name in weights):
        missing.append(" or ".join(weights))
    if missing:
        raise CommandError(
            f"--checkpoint {directory}: no {', '.join(missing)} there "
            "(a directory as save_pretrained writes it)"
        )


def load(directory: Path, layer: int, sentence: str):
    """The fixture of layer `layer` of the checkpoint in `directory` on
    `sentence`, and its Checkpoint.

    Raises:
        CommandError: not a checkpoint directory (`check_directory`),
            transformers missing, a model neither GPT-2-like nor Llama-like,
            a layer it does not have, or one with what no option gives
            (scaled rotary positions).
    """
    check_directory(directory)
    try:
        import torch
        from transformers import AutoConfig, AutoModel, AutoTokenizer
    except ImportError as error:
        raise CommandError(
            f"--checkpoint needs {error.name}: "
            + registry.install_command("torch,layers")
        ) from None
    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    if config.model_type not in GPT2_TYPES + LLAMA_TYPES:
        raise CommandError(
            f"--checkpoint {directory}: a {config.model_type} model, not GPT-2-like "
            f"({', '.join(GPT2_TYPES)}) or Llama-like ({', '.join(LLAMA_TYPES)})"
        )
    from shared.convert import scaled_rope_type, scaled_rotary_message

    rope_type = scaled_rope_type(config)
    if rope_type is not None:  # at once, before the weights are loaded
        what = f"--checkpoint {directory}: a {config.model_type} model"
        raise CommandError(scaled_rotary_message(what, rope_type))
    n_layers = config.num_hidden_layers
    if not 0 <= layer < n_layers:
        raise CommandError(
            f"--layer {layer}: the model has {numbered(n_layers, 'layer')}"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as error:
        raise CommandError(
            f"--checkpoint {directory}: no tokenizer ({error})"
        ) from None
    model = AutoModel.from_pretrained(directory, local_files_only=True)
    model = model.double().eval()
    ids = tokenizer(sentence, return_tensors="pt").input_ids  # (1, T)
    if config.model_type in GPT2_TYPES:
        attention = model.h[layer].attn
    else:
        attention = model.layers[layer].self_attn
    x = hidden_states_into(model, attention, ids, torch)  # (T, C)
    trained = (directory / TRAINED_MARK).is_file()
    try:
        fixture = fixture_of(attention, x, tokenizer, ids[0])
    except ValueError as error:  # what no option gives, e.g. rope_scaling
        raise CommandError(f"--checkpoint {directory}: {error}") from None
    return fixture, Checkpoint(
        str(directory), layer, config.model_type, type(attention).__name__, trained
    )


def hidden_states_into(model, attention, ids, torch):
    """What the model hands `attention` when it runs on `ids`: (T, C), float64."""
    captured = []

    def keep(module, args, kwargs):
        captured.append(args[0] if args else kwargs["hidden_states"])

    hook = attention.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with torch.no_grad():
            model(ids)
    finally:
        hook.remove()
    return captured[0][0].numpy()


def fixture_of(attention, x, tokenizer, ids):
    """A Fixture of the layer's parameters and x, labelled with its tokens."""
    from shared import Fixture, Preset
    from shared.convert import params_from

    params = params_from(attention)
    labels = tuple(tokenizer.decode([int(i)]).strip() or "␣" for i in ids)
    preset = Preset(
        "checkpoint", d_model=x.shape[-1], n_heads=params.n_heads, tokens=labels
    )
    return Fixture(preset, x, *params.weights, **params.biases, variant=params.variant)
