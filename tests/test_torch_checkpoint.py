"""`triptych run --checkpoint DIR --layer L` on a tiny random GPT-2 made here
with transformers and saved as `save_pretrained` saves it (nothing is
downloaded): the hidden states the model hands the layer, the layer's own
weights and biases, the model's tokens; and one clear line for every bad
checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
import torch

from shared import assert_close
from triptych.cli import main

pytestmark = pytest.mark.every_backend

SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "results.schema.json"
SENTENCE = "the cat sat on the mat . and"


def _tokenizer():
    """A byte-level BPE tokenizer trained on the toy sentence."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
    )
    bpe.train_from_iterator([SENTENCE + " the dog ran"] * 10, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A 2-layer GPT-2 (C 64, 4 heads) with random weights and a byte-level
    BPE tokenizer trained on the toy sentence, saved in a directory."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = _tokenizer()
    directory = tmp_path_factory.mktemp("gpt2")
    tokenizer.save_pretrained(directory)
    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_positions=32,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def test_run_takes_a_layer_of_the_checkpoint(checkpoint, tmp_path, selected_names):
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path / "out"
    argv = ["run", "--checkpoint", str(checkpoint), "--layer", "1"]
    argv += ["--backends", ",".join(selected_names), "--dtype", "float64"]
    assert main([*argv, "--output-dir", str(out), "--quiet"]) == 0
    document = json.loads((out / "results.json").read_text())
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert document["input"]["checkpoint"] == {
        "directory": str(checkpoint),
        "layer": 1,
        "model_type": "gpt2",
        "source": "GPT2Attention",
        "trained": False,  # random weights, and no trainer_state.json says otherwise
    }
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    ids = tokenizer(SENTENCE, return_tensors="pt").input_ids
    labels = [tokenizer.decode([int(i)]).strip() for i in ids[0]]
    assert document["input"]["tokens"] == labels
    assert document["input"]["n_heads"] == 4 and document["input"]["d_model"] == 64
    log = (out / "run_log.txt").read_text()
    assert "weights: layer 1 of the gpt2 checkpoint" in log
    assert "(GPT2Attention): the checkpoint's weights, as saved" in log
    assert "trained" not in log.split("weights: ")[1].splitlines()[0]
    assert AutoModel  # the model's own numbers: the next test


def test_the_checkpoint_fixture_is_what_the_models_layer_sees_and_does(
    checkpoint, backend
):
    """x is what the model hands layer 1's attention, and our attention of x
    with the layer's parameters is what that attention returns, weights and
    output (the model run here with eager attention, to return its weights)."""
    from transformers import AutoModel, AutoTokenizer

    from triptych.run import checkpoint as loader

    fixture, where = loader.load(checkpoint, 1, SENTENCE)
    assert where.describe().startswith("layer 1 of the gpt2 checkpoint")
    trained = dataclasses.replace(where, trained=True)
    assert trained.describe().endswith(": trained (trainer_state.json)")
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    ids = tokenizer(SENTENCE, return_tensors="pt").input_ids
    model = (
        AutoModel.from_pretrained(
            checkpoint, local_files_only=True, attn_implementation="eager"
        )
        .double()
        .eval()
    )
    seen = {}

    def keep(module, args, output):  # returns None: the output stays as it is
        seen["out"] = output[0]

    model.h[1].attn.register_forward_hook(keep)
    with torch.no_grad():
        attentions = model(ids, output_attentions=True).attentions
    args = [backend.from_numpy(a) for a in (fixture.x, *fixture.params.values())]
    biases = {n: backend.from_numpy(b) for n, b in fixture.biases.items()}
    assert sorted(biases) == ["b_k", "b_o", "b_q", "b_v"]
    out, weights = backend.multi_head_attention(*args, 4, biases=biases)
    assert_close(backend.to_numpy(weights), attentions[1][0].numpy(), "float64", "w")
    assert_close(backend.to_numpy(out), seen["out"][0].numpy(), "float64", "out")


@pytest.fixture
def selected_names(request):
    return list(request.config.selected_backends)


def a_file(directory):
    """A file where the checkpoint's directory should be."""
    (directory / "a file").write_text("")
    return directory / "a file"


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda d: d / "nothing", [], "nothing: no such directory"),
        (a_file, [], "a file: not a directory"),
        (lambda d: d, [], "no config.json, model.safetensors or pytorch_model.bin"),
        (None, ["--layer", "2"], "--layer 2: the model has 2 layers, 0 and 1"),
        (None, ["--full"], "--checkpoint takes its sizes and weights from the model"),
        (None, ["--seed", "3"], "drop --seed"),
    ],
)
def test_a_bad_checkpoint_is_one_line_exit_2(
    checkpoint, tmp_path, capsys, make, extra, message
):
    directory = checkpoint if make is None else make(tmp_path)
    argv = ["run", "--checkpoint", str(directory), *extra, "--backends", "numpy"]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("triptych run: error: ") and err.count("\n") == 1
    assert message in err
    assert not (tmp_path / "out").exists()


def test_a_model_that_is_not_gpt2_like_is_refused(tmp_path, capsys):
    from transformers import BertConfig

    BertConfig(hidden_size=32, num_attention_heads=4).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    argv = ["run", "--checkpoint", str(tmp_path), "--backends", "numpy"]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "a bert model, not GPT-2-like (gpt2) or Llama-like" in err


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """A 2-layer Qwen 3 (C 32, 4 query heads, 2 KV heads of width 12, QK-norm,
    rotary positions) with random weights, saved with the same tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = _tokenizer()
    directory = tmp_path_factory.mktemp("qwen3")
    tokenizer.save_pretrained(directory)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, max_position_embeddings=32,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():  # norms away from their unit initialization
        for layer in model.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(directory)
    return directory


def test_run_takes_a_layer_of_a_qwen3_checkpoint_with_its_variant(
    qwen3, tmp_path, backend, selected_names
):
    """A Llama-like model: the layer's GQA, head_dim, QK-norm and rotary
    positions come from its config, and our attention of what the model
    hands the layer is what the layer returns (its eager attention)."""
    from transformers import AutoModel, AutoTokenizer

    from triptych.run import checkpoint as loader

    out = tmp_path / "out"
    argv = ["run", "--checkpoint", str(qwen3), "--layer", "1", "--dtype", "float64"]
    argv += ["--backends", ",".join(selected_names), "--output-dir", str(out)]
    assert main([*argv, "--quiet"]) == 0
    document = json.loads((out / "results.json").read_text())
    assert document["input"]["checkpoint"]["source"] == "Qwen3Attention"
    assert document["verdict"] == "PASS"
    fixture, _ = loader.load(qwen3, 1, SENTENCE)
    assert fixture.variant.n_kv_heads == 2 and fixture.variant.head_dim == 12
    tokenizer = AutoTokenizer.from_pretrained(qwen3, local_files_only=True)
    ids = tokenizer(SENTENCE, return_tensors="pt").input_ids
    model = AutoModel.from_pretrained(
        qwen3, local_files_only=True, attn_implementation="eager"
    )
    model = model.double().eval()
    seen = {}

    def keep(module, args, output):
        seen["out"], seen["weights"] = output

    model.layers[1].self_attn.register_forward_hook(keep)
    with torch.no_grad():
        model(ids)
    args = [backend.from_numpy(a) for a in (fixture.x, *fixture.params.values())]
    arrays = {n: backend.from_numpy(a) for n, a in fixture.variant.arrays.items()}
    variant = dataclasses.replace(fixture.variant, **arrays)
    ours, weights = backend.multi_head_attention(*args, 4, variant=variant)
    # float32's tolerance: transformers' rotary cos and sin and its RMSNorm
    # are float32 whatever the model's dtype
    assert_close(backend.to_numpy(weights), seen["weights"][0].numpy(), "float32", "w")
    assert_close(backend.to_numpy(ours), seen["out"][0].numpy(), "float32", "out")


def test_a_checkpoint_with_scaled_rotary_positions_is_one_line_exit_2(tmp_path, capsys):
    from transformers import LlamaConfig, LlamaModel

    scaled = dict(rope_type="linear", rope_theta=10000.0, factor=2.0)
    config = LlamaConfig(
        vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, rope_parameters=scaled,
    )  # fmt: skip
    LlamaModel(config).save_pretrained(tmp_path)
    _tokenizer().save_pretrained(tmp_path)
    capsys.readouterr()  # save_pretrained's progress bar
    argv = ["run", "--checkpoint", str(tmp_path), "--backends", "numpy"]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "a llama model with rope_type 'linear' (rope_scaling)" in err
