"""`triptych check` on torch targets: our backend and module, the lesson,
F.scaled_dot_product_attention and nn.MultiheadAttention (their policies a
NOTE by default, a FAIL with --profile strict, as docs/differences.md has
them), and the code people write (tests/known_torch.py): nanoGPT's block as
its model.py has it (B, T, C = x.size(), a config), a timm-style module,
transformers' GPT-2 attention, a kernel on (B, H, T, D) only; and gradients
cut from the graph (tests/broken_attention.py's torch versions), named only
where they are. About 25 s on 2 busy cores."""

from __future__ import annotations

import broken_attention
import known_torch
import model_attention
import pytest
import torch
import torch.nn.functional as F

import impl_torch
from triptych.check.adapters import adapter_for
from triptych.check.properties import Settings, property_ids, run_property

FEW = Settings(examples=3)
STRICT = Settings(examples=3, profile="strict")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """As the command's child runs torch (triptych.check.runner.one_thread):
    on 2 busy cores torch's second thread makes these small calls up to 100
    times slower. Restored after this module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def statuses(target, ids=None, settings=FEW, framework="auto") -> dict:
    adapter = adapter_for(target, framework)
    found = {
        id: run_property(adapter, settings, id) for id in ids or property_ids(settings)
    }
    return {id: (r.status, r.diagnosis) for id, r in found.items()}


def test_our_torch_backend_passes_every_property_gradients_included():
    found = statuses(impl_torch.multi_head_attention)
    assert {status for status, _ in found.values()} == {"PASS"}


def test_our_torch_module_passes_through_from_weights():
    ids = ["oracle:float32", "mask", "fully masked rows", "gradients"]
    found = statuses(impl_torch.CausalSelfAttention, ids)
    assert {status for status, _ in found.values()} == {"PASS"}


def test_the_torch_lesson_passes_the_course_and_leaks_a_nan_when_strict():
    from impl_torch import lesson

    course = Settings(examples=3, profile="course")
    course = statuses(lesson.single_head_attention, settings=course)
    assert {status for status, _ in course.values()} <= {"PASS", "SKIP"}
    strict = statuses(lesson.single_head_attention, ["NaN behind the mask"], STRICT)
    assert strict["NaN behind the mask"][0] == "FAIL"


def test_sdpa_passes_the_default_profile_its_nan_policy_noted():
    ids = ["oracle:float64", "oracle:float16", "causality", "mask", "fully masked rows"]
    ids += ["rows sum to 1", "NaN behind the mask", "gradients"]
    found = statuses(F.scaled_dot_product_attention, ids)
    adapter = adapter_for(F.scaled_dot_product_attention)
    assert adapter.describe() == "qkv, torch, q (..., H, T, D)"
    assert {id: s for id, (s, _) in found.items()} == {
        **dict.fromkeys(ids, "PASS"),
        "rows sum to 1": "SKIP",  # it returns no weights
        "NaN behind the mask": "NOTE",
    }
    assert found["NaN behind the mask"][1].startswith(
        "a nan value behind the causal mask reaches earlier rows: 0 * NaN = NaN"
    )
    strict = statuses(F.scaled_dot_product_attention, ["NaN behind the mask"], STRICT)
    assert strict["NaN behind the mask"][0] == "FAIL"


def test_nn_multihead_attention_gives_nan_for_a_fully_masked_row():
    """Its mask is read the other way (True = may NOT attend): the adapter
    turns ours over, so the mask passes; the path that returns weights
    gives NaN where no key is allowed (docs/differences.md): a NOTE, a FAIL
    when strict. It takes (T, C) and (B, T, C)."""
    ids = ["oracle:float32", "rows sum to 1", "mask", "fully masked rows"]
    found = statuses(torch.nn.MultiheadAttention, ids)
    assert {id: s for id, (s, _) in found.items()} == {
        **dict.fromkeys(ids, "PASS"),
        "fully masked rows": "NOTE",
    }
    assert found["fully masked rows"][1].startswith("NaN from a fully masked row")
    strict = statuses(torch.nn.MultiheadAttention, ["fully masked rows"], STRICT)
    assert strict["fully masked rows"][0] == "FAIL"
    assert adapter_for(torch.nn.MultiheadAttention).batch_ranks == (0, 1)


def test_a_module_instance_is_checked_at_its_own_widths():
    module = torch.nn.MultiheadAttention(8, 2, batch_first=False)  # with biases
    adapter = adapter_for(module)
    assert adapter.fixed == (8, 2)
    result = run_property(adapter, FEW, "oracle:float64")
    assert result.status == "PASS", result.reason


@pytest.mark.parametrize(
    "name", ["nanogpt", "nanogpt_slow", "CausalSelfAttention", "timm_style"]
)
def test_nanogpt_as_written_and_a_timm_style_module_pass_every_property(name):
    """B, T, C = x.size(): one batch axis, found by calling it; nanoGPT's
    class built from a config, its instances at their own widths."""
    target = getattr(known_torch, name)
    adapter = adapter_for(target)
    assert adapter.describe().endswith(", torch, x (B, T, C)")
    found = statuses(target)
    assert {s for s, _ in found.values()} <= {"PASS", "NOTE", "SKIP"}, found
    assert found["oracle:float64"][0] == found["gradients"][0] == "PASS"


@pytest.mark.parametrize("name", ["gpt2_eager", "gpt2_sdpa"])
def test_transformers_gpt2_attention_passes(name):
    """Its causal mask comes from the model around it: the adapter gives it,
    additive, with the problem's; a fully masked row is uniform (NOTE)."""
    ids = ["oracle:float32", "causality", "mask", "fully masked rows", "gradients"]
    found = statuses(getattr(known_torch, name), ids)
    assert {id: s for id, (s, _) in found.items()} == {
        **dict.fromkeys(ids, "PASS"),
        "fully masked rows": "NOTE",
    }


def test_a_kernel_of_one_batch_axis_passes():
    adapter = adapter_for(known_torch.bhtd_attention)
    assert adapter.describe() == "qkv, torch, q (B, H, T, D)"
    ids = ["oracle:float64", "causality", "mask", "independence"]
    found = statuses(known_torch.bhtd_attention, ids)
    assert {s for s, _ in found.values()} == {"PASS"}


@pytest.mark.parametrize("name", list(broken_attention.TORCH_EXPECTED))
def test_gradients_name_what_is_cut_and_only_that(name):
    """dW_q = dW_k = 0 is the truth at T = 1: a cut is named only where a
    longer problem tells it; a wrong forward says so instead of guessing."""
    id, words = broken_attention.TORCH_EXPECTED[name]
    found = statuses(getattr(broken_attention, name), [id], framework="torch")
    assert found[id][0] == "FAIL"
    assert words in found[id][1]


def test_a_gradient_cut_is_not_named_on_code_whose_forward_is_right():
    found = statuses(broken_attention.torch_attention, ["gradients"], framework="torch")
    assert found["gradients"] == ("PASS", None)


def test_zero_gradients_of_w_q_and_w_k_at_t_1_are_not_called_a_cut():
    """At T = 1 the weights are 1 whatever q and k: dW_q = dW_k = 0 is the
    truth. A gradient wrong there for another reason (w_v's, doubled) gets no
    "cut from the graph", on T = 1 itself or drawn."""
    from triptych.check.problems import Problem
    from triptych.check.properties.gradients import gradient_diagnosis
    from triptych.check.properties.search import Case

    adapter = adapter_for(broken_attention.doubled_value_gradient, "torch")
    case = Case(Problem((), 1, 1, 2, 0))
    assert gradient_diagnosis(adapter, case, FEW) is None
    found = run_property(adapter, FEW, "gradients")
    assert found.status == "FAIL" and found.diagnosis is None


def test_ours_told_the_variant_passes_with_its_arrays_as_tensors():
    """The sinks and norm weights reach torch as tensors of the dtype under
    test, and the gradients' oracle computes the variant too. One problem
    each: the gradients' takes 12,480 calls of the float64 oracle (every
    entry of x and the weights, moved both ways, at 6 heads of width 8)."""
    from shared import Rotary
    from triptych.check.variant import Variant

    variant = Variant(2, Rotary(style="gptj"), 3, 5.0, True, True, True)
    settings = Settings(dtypes=("float64", "float32"), examples=1, variant=variant)
    adapter = adapter_for(impl_torch.multi_head_attention, variant=variant)
    ids = ["oracle:float32", "window", "gradients"]
    found = {id: run_property(adapter, settings, id).status for id in ids}
    assert found == dict.fromkeys(ids, "PASS")


MODEL_FILE = '''
import torch
from torch.nn.functional import scaled_dot_product_attention as attention


class CausalSelfAttention(torch.nn.Module):
    """nanoGPT's block, its kernel the library's, imported as `attention`."""

    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = torch.nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = torch.nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))
        y = attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
'''


def test_grading_a_folder_of_variant_targets_without_their_options(tmp_path, capsys):
    """The rotary target is one ERROR row naming --rotary; a model file is
    graded through its module class, not the library function it imports as
    `attention`."""
    import json
    import shutil
    from pathlib import Path

    import jsonschema

    from triptych.cli import main

    folder = tmp_path / "submissions"
    folder.mkdir()
    shutil.copy(model_attention.__file__, folder / "llama.py")
    (folder / "llama.py").write_text(
        (folder / "llama.py").read_text() + "\nattention = rotary_right\n"
    )
    (folder / "nanogpt.py").write_text(MODEL_FILE)
    out = tmp_path / "out"
    code = main(["check", f"{folder}/*.py:attention", "--grade", "--properties",
                 "oracle:float64", "--examples", "2", "--output-dir", str(out)])  # fmt: skip
    stderr = capsys.readouterr().err
    assert code == 2
    doc = json.loads((out / "results.json").read_text())
    schema = Path(__file__).resolve().parents[1] / "docs" / "check.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    llama, nanogpt = doc["targets"]
    assert llama["status"] == "ERROR" and "give --rotary STYLE" in llama["error"]
    assert "their rows say why" in stderr
    assert nanogpt["adapter"].startswith("module (CausalSelfAttention), torch")
    assert nanogpt["status"] == "PASS"
