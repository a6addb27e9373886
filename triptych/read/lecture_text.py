"""The words of the lecture's chapters (triptych.read.lecture measures them):
chapter 0's build-up, the fused forms at the lesson's end, what each
framework adds, and "predict the stripe". As in text.py, every difference
names the test that runs it."""

from __future__ import annotations

from triptych.read.text import Difference

ROW_TITLES = {
    "average_loop": "stage 1: the average of the past, a loop",
    "average_matmul": "stage 2: the same, one lower-triangular matmul",
    "average_softmax": "stage 3: the same weights, from a softmax over -inf",
    "dot_product": "stage 4: the weights from the data, q[i] . k[j]",
    "scaled": "stage 5: the scale, 1 / sqrt(D)",
    "one_head": "stage 6: one head of the lesson",
    "reversed_past": "stage 7: positions, the earlier tokens reversed",
    "softmax": "the softmax the stages share",
    "fused": "the framework's own lines: fused attention",
    "heads_of": "each head's columns of a projection",
    "every_head": "every head at once: broadcasting, or vmap",
    "gradient": "a gradient: by hand, the tape, or the trace transposed",
    "trace": "the program JAX traces (jaxpr)",
    "compiled": "the lesson compiled (jax.jit)",
    "compiled_heads": "n_heads static under jax.jit",
    "as_layer": "torch's own layer, loaded with the lesson's weights",
    "call_layer": "the layer called as a layer",
}
"""The title beside a lecture row's function name."""

BEFORE = {
    "average_matmul": "stage 1",
    "average_softmax": "stage 2",
    "dot_product": "stage 3",
    "scaled": "stage 4",
    "one_head": "stage 5",
    "reversed_past": "stage 6's last row",
    "fused": "the lesson",
}
"""What a row is read against, besides the oracle."""
STAGE_GIVES = {"reversed_past": "what the last token receives (1, D)"}
"""A stage's measured table's caption, where it is not every token's (T, D)."""

LECTURE_TEXT = {
    "buildup": (
        "Before the lesson, attention built up as Karpathy's and Raschka's "
        "lectures build it, in seven stages, each a function of "
        "impl_*/buildup.py, the same in the three frameworks, run here on the "
        "page's model and sentence (the one-head lesson's head). Every stage "
        "returns what each token receives, (T, D). Stage 1 gives each token "
        "the average of the values up to it, with a loop; 2 computes the same "
        "average as one matmul whose weights are a lower-triangular matrix "
        "with rows summing to 1; 3 makes those weights with a softmax of 0 for "
        "the past and -inf for the future; 4 replaces the zeros by how well "
        "query i matches key j, so that the weights depend on the data; 5 "
        "divides those scores by sqrt(D); 6 is the lesson's one head, the "
        "same computation written as its seven steps. Stage 7 shows what "
        "attention alone cannot tell: with the earlier tokens reversed, the "
        "last token's output does not move, since the scores weigh a set of "
        "keys; whatever a head knows of order is in x, where the model added "
        "a learned position embedding (`embed[token] + pos[t]`), and that is "
        "how a head can look one position back.\n\n"
        "Under each stage, each framework's largest distance from the stage "
        "before (the same, within the dtype's tolerance, for 2, 3, 6 and 7; a new "
        "idea, far from it, for 4 and 5) and from the float64 oracle of what "
        "the stage computes (the average, attention without the scale, "
        "attention), all measured when the page was built.",
        [
            Difference(
                "The stages are the lesson's lines, spelled as in the lesson: "
                "torch's mask is made on x's device and its softmax takes "
                "`amax(dim=-1, keepdim=True)`; the three files are held line "
                "for line by tools/check_parallel.py.",
                "tests/test_buildup.py::test_each_stage_equals_the_one_before_and_its_oracle",
            ),
        ],
    ),
    "frameworks": (
        "The lessons are parallel, so their diff shows spelling only. What a "
        "framework really adds stands around them, in impl_*/extras.py, each "
        "function run here on the page's model and compared with the float64 "
        "oracle. Every head at once: NumPy needs no loop over the heads, the "
        "one-head lesson given stacked (H, C, D) weights broadcasts over them; "
        "torch and JAX map it over the heads with `vmap`. A gradient: NumPy "
        "has no autodiff and calls the backward written by hand "
        "(backward.py); torch runs each line of the lesson when Python "
        "reaches it and records it on its autograd tape, which `backward` "
        "replays in reverse; JAX traces the function once, on stand-ins with "
        "a shape and no values, into a program (its jaxpr, printed below), "
        "which `jax.grad` transposes, `jax.vmap` maps and `jax.jit` compiles. "
        "An argument that decides a shape (`n_heads`, a reshape) must be "
        "static under `jax.jit`: it is part of the program, not an input. "
        "torch's own layer, `nn.MultiheadAttention`, runs the lesson's "
        "weights (transposed: it keeps (out, in)). torch compiles too "
        "(`torch.compile`), left off this page because one compile takes "
        "tens of seconds (docs/bench.md); NumPy has no compiler.",
        [
            Difference(
                "NumPy gives every head by broadcasting, bit for bit a loop "
                "over the heads; torch and JAX write `vmap`.",
                "tests/test_extras.py::test_numpy_needs_no_loop_over_heads_the_lesson_broadcasts",
            ),
            Difference(
                "The gradient: by hand in NumPy, from the tape in torch, "
                "from the transposed trace in JAX; the three agree with the "
                "float64 backward.",
                "tests/test_extras.py::test_each_frameworks_gradient_equals_the_float64_backward",
            ),
            Difference(
                "torch records a line on the tape only when an input asks "
                "(`requires_grad`).",
                "tests/test_torch_prose.py::test_torch_records_the_lessons_lines_on_a_tape_only_when_asked",
            ),
            Difference(
                "`jax.jit` runs the Python once per new shape, then the "
                "program; with `n_heads` traced, not static, it fails.",
                "tests/test_jax_prose.py::test_a_traced_n_heads_fails_under_jit",
            ),
        ],
    ),
}
"""Per lecture chapter: what it shows, and the differences to notice."""

FUSED_TEXT = (
    "The lesson's seven steps are how attention is computed; a framework that "
    "has a fused attention runs steps 3 to 7 in one call, which may never "
    "store the (T, T) weights (FlashAttention, Dao et al. 2022): "
    "`F.scaled_dot_product_attention(q, k, v, is_causal=True)` in torch, "
    "`jax.nn.dot_product_attention(q, k, v, is_causal=True)` in JAX; NumPy "
    "has none. The lines live in impl_*/extras.py, so that the lessons stay "
    "the seven steps. They are the framework's code, not ours: a distance "
    "beyond the tolerance is shown, and leaves the exit code alone (JAX's "
    "runs its softmax in float32 whatever the dtype, so with --dtype float64 "
    "it is only float32-close)."
)
"""Above the lesson chapter's last row."""

PREDICT_TEXT = (
    "Predict the stripe, before the lesson's heatmaps show it. The model "
    'reads "{sentence}". From row {first} on, each row\'s token has occurred '
    "before; an induction head (head {head}, the one-head lesson's) attends "
    "the token that followed its last occurrence. Write down, for every row "
    "from {first} on, the column you expect it to attend most; then open the "
    'answer. On a sentence of your own: `triptych read --tokens "..."` (a '
    "run of words of the model's vocabulary, said twice; docs/teaching.md)."
)
"""The exercise at chapter 0's end (trained weights only)."""
