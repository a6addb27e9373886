"""The words of the side-by-side page: one paragraph per step, and per chapter
what it shows and the differences between the frameworks a reader should
notice. The code on the page comes from the files; only these words are
written here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Difference:
    """A difference between the frameworks that a chapter lists: its words,
    the test that runs the alternative (pytest's node id), and whether it is
    a style choice of this code rather than something a framework imposes."""

    text: str
    checked_by: str
    style: bool = False


STEP_TEXT = {
    1: "Each token's vector x[i] is multiplied by three matrices: its query (what "
    "it looks for), its key (what it offers) and its value (what it passes on). "
    "Our weights are (in, out), so a projection is x @ w in every framework.",
    2: "With H heads, the C columns of q, k and v are cut into H groups of D = C // H "
    "and moved in front of T, so that every head attends on its own, in one "
    "batched matmul. One head has nothing to split.",
    3: "The score of query i for key j is the dot product q[i] . k[j]: all T x T "
    "of them in one matmul of q with k transposed (k.mT: the last two axes "
    "swapped, any batch axes kept).",
    4: "At initialisation, the entries of q and k are roughly independent with "
    "unit variance, and a dot product of D of them has variance D: dividing by "
    "sqrt(D) brings the scores back to unit size, where the softmax is not yet "
    "saturated and its gradient flows. It is a scale for the start of "
    "training, not a bound: this trained model's scaled scores (the heatmap "
    "below) reach far past unit size, and its weights are saturated, nearly "
    "one-hot rows, on purpose.",
    5: "Causal: query i may only attend keys j <= i. The scores above the diagonal "
    "become -inf, so that the softmax gives them exactly 0 weight.",
    6: "Softmax over each row: exp(score - row max) / sum. Subtracting the row's max "
    "changes nothing mathematically and keeps every exp in [0, 1], so nothing "
    "overflows. Each row of the weights sums to 1.",
    7: "Each output row is the weighted sum of the value rows it attends. With H "
    "heads, the heads are merged back to (T, C) and mixed by the output "
    "projection w_o.",
}
"""What each step does and why, in the project's words."""


CHAPTER_TEXT = {
    "lesson": (
        "Attention lets each token gather what it needs from the tokens before "
        "it. Every position asks a question (its query), every earlier position "
        "offers a label (its key) and a content (its value); how well a query "
        "matches a key decides how much of that value flows in. The seven steps "
        "below are the whole mechanism, each row one step in the three "
        "frameworks (shown once where the three are the same lines); under the "
        "row, what it computed on a real model (scores and weights drawn, each "
        "token labelled with its index) and each framework's distance from the "
        "float64 oracle.\n\n"
        "Positions. Attention alone does not know order: the scores compare "
        "vectors, so shuffling the earlier tokens shuffles the keys and values "
        "with them and leaves each weighted sum the same; the causal mask says "
        "which keys are earlier, not how far back. The trained model adds a "
        "learned position embedding to each token's (`embed[token] + pos[t]`, "
        "shared/train.py), so x[i] carries what token i is and where it "
        "stands, and a head can learn to look one position back.\n\n"
        "Induction heads. The model was trained on one task: a run of distinct "
        "tokens, repeated, where a token of the repeat can only be predicted by "
        "copying. Two kinds of heads appear, as Olsson et al. found in language "
        "models (2022, In-context learning and induction heads): in layer 0 a "
        "previous-token head attends the token just before, writing 'the token "
        "before me' into each position; in layer 1 an induction head uses it to "
        "find the earlier place whose previous token is the current token, and "
        "attends the token after it. By default the page shows layer 1 reading "
        "'the cat sat on a mat and slept' twice: at the second 'the' (row 8) an "
        "induction head attends column 1 'cat', the word that followed 'the', "
        "and so predicts 'cat'; each row of the second half attends the column "
        "7 back, a stripe below the diagonal. In the first half (rows 0 to 7) no "
        "word has come before, nothing to copy: the heads park their weight on "
        "the first tokens ('the', 'cat'). Each head's line above says how much "
        "of its weight lands where its pattern says, measured on 256 held-out "
        "sequences, against 'a uniform row': what a head spreading its weight "
        "evenly over the keys it may attend would put there.",
        [
            Difference(
                "What a framework adds is around these lines, not in them. torch "
                "runs each line when Python reaches it, on x's device, and, when an "
                "input requires a gradient, records it on its autograd tape "
                "(`out.grad_fn`), which `backward` replays.",
                "tests/test_torch_prose.py::test_torch_records_the_lessons_lines_on_a_tape_only_when_asked",
            ),
            Difference(
                "`jax.jit` runs the lesson once on abstract arrays, keeps the trace "
                "(a jaxpr: `jax.make_jaxpr`) and compiles it; later calls of the same"
                " shapes run the program, not the Python; `jax.grad` and `jax.vmap` "
                "transform the same trace (docs/teaching.md shows each).",
                "tests/test_jax_prose.py::test_jit_traces_the_lesson_once_into_a_program_then_runs_it",
            ),
            Difference(
                "Every head from the one-head lesson: torch and JAX map it over the "
                "heads (`vmap`); NumPy needs no map and no loop: given stacked (H, "
                "C, D) weights the lesson broadcasts, bit for bit a loop's result.",
                "tests/test_extras.py::test_numpy_needs_no_loop_over_heads_the_lesson_broadcasts",
            ),
            Difference(
                "torch's lesson writes `transpose(-3, -2)` where NumPy writes "
                "`swapaxes(-3, -2)`; torch has `swapaxes` too, the same operation, "
                "and JAX keeps NumPy's name.",
                "tests/test_torch_prose.py::test_swapaxes_is_transpose_in_torch",
                style=True,
            ),
            Difference(
                "torch's lesson writes `-math.inf`, Python's; `torch.inf` exists as"
                " well, and `np.where` / `torch.where` / `jnp.where` are the same "
                "select.",
                "tests/test_torch_prose.py::test_torch_inf_is_math_inf",
                style=True,
            ),
            Difference(
                "torch's lesson says `dim=` and `keepdim=`; torch takes NumPy's "
                "`axis=` and `keepdims=` too.",
                "tests/test_torch_prose.py::test_torch_takes_axis_and_keepdims",
                style=True,
            ),
            Difference(
                "torch's lesson takes the row max with `amax`: its `max(dim=-1)` "
                "returns the values and their indices, where NumPy's and JAX's "
                "`max(axis=-1)` return the values.",
                "tests/test_torch_prose.py::test_torch_max_over_a_dim_returns_indices_too",
            ),
            Difference(
                "torch makes the causal mask on x's device (`device=x.device`): a "
                "torch tensor lives on a device, and an operation on tensors of two"
                " devices fails; NumPy has no device, and JAX puts a new array on "
                "its default device.",
                "tests/test_torch_prose.py::test_a_mask_on_another_device_fails_in_torch",
            ),
        ],
    ),
    "attention": (
        "The library's attention: the same steps, bit for bit the lesson's, with "
        "what a library adds behind named helpers (validation, masks, rows with "
        "nothing to attend, NaN behind a mask, half precision). The contract of "
        "each helper is in docs/contract.md.",
        [
            Difference(
                "JAX's file ends with the `_jit` twins: `n_heads` and `scale` are "
                "static because they decide a reshape and a Python branch; "
                "`jax.jit` of the plain function with `n_heads` traced fails.",
                "tests/test_jax_prose.py::test_a_traced_n_heads_fails_under_jit",
            ),
            Difference(
                "JAX's `at_least_float32` also refuses float64 while JAX's 64-bit "
                "mode is off, where JAX would silently compute in float32.",
                "tests/test_jax_prose.py::test_float64_becomes_float32_without_x64",
            ),
            Difference(
                "torch passes `device=` down to the masks it makes (see the lesson).",
                "tests/test_torch_prose.py::test_a_mask_on_another_device_fails_in_torch",
            ),
        ],
    ),
    "backward": (
        "The backward pass: NumPy writes each step's gradient by hand, with its "
        "math; torch records the forward on its autograd tape and replays it "
        "backward (`torch.autograd.grad`); JAX traces the pure forward and "
        "transposes it (`jax.vjp`). The hand-written rows have no autodiff "
        "counterpart.",
        [
            Difference(
                "torch needs fresh leaves (`detach().requires_grad_()`) and "
                "`torch.autograd.grad`, so that no caller's graph or `.grad` is "
                "touched (`.backward()` would fill the caller's `.grad`); JAX's "
                "functions have no state to protect.",
                "tests/test_torch_prose.py::test_backward_fills_the_callers_grad_and_autograd_grad_does_not",
            ),
            Difference(
                "JAX's `vjp` returns a function: the backward of one forward, "
                "called with d_out.",
                "tests/test_jax_prose.py::test_vjp_returns_a_function",
            ),
        ],
    ),
    "blockwise": (
        "Blockwise attention: the online softmax, one block of queries against one "
        "block of keys at a time, never building the (T, T) scores and never "
        "computing a block above the diagonal (docs/blockwise.md).",
        [
            Difference(
                "NumPy and torch loop in Python and write into a preallocated "
                "output; JAX unrolls the query blocks at trace time and runs the "
                "key blocks in a `lax.fori_loop`, then concatenates: its arrays are"
                " immutable.",
                "tests/test_jax_prose.py::test_jax_arrays_are_immutable",
            ),
            Difference(
                "NumPy and torch work in place (`np.exp(..., out=)`, `exp_()`, "
                "`masked_fill_`); JAX cannot (its `exp` takes no `out=`), and XLA "
                "fuses instead.",
                "tests/test_jax_prose.py::test_jax_exp_takes_no_out",
            ),
            Difference(
                "JAX's `visit` callback runs through `jax.debug.callback`, when the"
                " compiled loop runs, not when it is traced.",
                "tests/test_jax_prose.py::test_debug_callback_runs_at_every_call",
            ),
        ],
    ),
    "kv_cache": (
        "Decoding one token at a time with a cache of keys and values: project the "
        "new token, write its key and value, attend over the filled positions "
        "(`attend` of attention.py, given the one query).",
        [
            Difference(
                "NumPy and torch write into the cache in place; JAX returns a new "
                "cache (`.at[...].set`), and its jitted step donates the old one so"
                " that XLA may reuse the memory.",
                "tests/test_jax_prose.py::test_jax_arrays_are_immutable",
            ),
            Difference(
                "Past max_len, NumPy and torch raise IndexError; JAX drops the write.",
                "tests/test_jax_prose.py::test_jax_drops_a_write_out_of_bounds",
            ),
        ],
    ),
    "variants": (
        "The variants of modern attention (Llama, Qwen 3, Mistral, Gemma, gpt-oss),"
        " each a few lines that attention.py, blockwise.py and kv_cache.py call "
        "only when an option is given: query head h reads key/value head "
        "h // (H / H_kv); QK-norm, then rotary positions, on q and k; the window "
        "in the mask; soft-capping, then ALiBi, on the scaled scores; the sinks in"
        " the softmax's denominator (docs/variants.md).",
        [
            Difference(
                "torch repeats each key/value head with `repeat_interleave`: its "
                "`Tensor.repeat` tiles the heads instead (0, 1, 0, 1 rather than 0,"
                " 0, 1, 1), which groups query head h with KV head h % H_kv; NumPy's"
                " and JAX's `repeat` repeat each one in place.",
                "tests/test_torch_prose.py::test_torch_repeat_tiles_where_repeat_interleave_groups",
            ),
            Difference(
                "torch's row max over the scores is `amax`: `max(dim=)` returns "
                "the indices too.",
                "tests/test_torch_prose.py::test_torch_max_over_a_dim_returns_indices_too",
            ),
            Difference(
                "The blockwise state starts at the sinks: NumPy copies the "
                "broadcast view and torch clones it, since the loop updates them in"
                " place; JAX's arrays are immutable, so the view is used as it is.",
                "tests/test_jax_prose.py::test_jax_arrays_are_immutable",
            ),
        ],
    ),
    "module": (
        "The module forms: a plain class in NumPy, an `nn.Module` over four "
        "`nn.Linear` in torch, an `nnx.Module` over four `nnx.Linear` in flax. "
        "Every method calls the functions above.",
        [
            Difference(
                "torch's `nn.Linear` stores (out, in), so the module hands the "
                "functions `weight.T`; flax's kernel is (in, out) already.",
                "tests/test_jax_prose.py::test_linear_layouts_of_torch_and_flax",
            ),
            Difference(
                "torch calls `forward` through `__call__` (which runs its hooks); "
                "flax and the NumPy class define `__call__` itself.",
                "tests/test_torch_prose.py::test_torch_calls_forward_through_call",
            ),
            Difference(
                "torch's `decode_step` runs under `torch.no_grad()`: a cache "
                "written in place must not carry a graph from step to step.",
                "tests/test_torch_prose.py::test_an_in_place_write_carries_the_graph_without_no_grad",
            ),
        ],
    ),
    "sharded": (
        "The same attention split across N devices, two ways. The ring cuts the "
        "sequence: each device keeps its queries and passes its block of keys "
        "and values on to the next device, N times, merging each block with the "
        "online softmax of blockwise.py, so no device ever holds the (T, T) "
        "scores. The heads way gathers every row, gives each device H / N heads, "
        "and sums the heads' outputs back (docs/sharding.md).",
        [
            Difference(
                "NumPy plays the N devices as a list of shards, one array each, and "
                "passes a block on by turning the list; torch runs one process per "
                "device and sends with `dist.batch_isend_irecv` of `isend`/`irecv` "
                "(`pass_on`), gathers with `all_gather_single`, sums with "
                "`reduce_scatter_single`; JAX writes one program over a `Mesh` and "
                "`shard_map` runs `ring_on_device` on every device at once, passing "
                "blocks with `lax.ppermute`.",
                "tests/test_sharded.py::test_each_strategy_equals_the_oracle_and_one_device",
            ),
            Difference(
                "JAX's heads way names no collective at all: "
                "`lax.with_sharding_constraint` says where each array must live, "
                "and XLA inserts the all-gather and the reduce-scatter.",
                "tests/test_sharded.py::test_each_strategy_equals_the_oracle_and_one_device",
            ),
            Difference(
                "NumPy and torch take `n_devices` or a process `group`; JAX takes "
                "the `mesh`: the devices are part of the array's type, not of the "
                "call.",
                "tests/test_sharded.py::test_every_option_away_from_its_default_reaches_every_device",
            ),
        ],
    ),
    "train": (
        "One training step of the tiny attention-only model (two layers of "
        "`multi_head_attention` on a residual stream): forward, loss, backward, "
        "Adam. NumPy writes the backward and Adam by hand; torch and JAX call "
        "their autodiff and their optimizer library (docs/train.md).",
        [
            Difference(
                "torch's step changes the parameters in place: `loss.backward()` "
                "fills each `.grad`, `adam.step()` updates the tensors; JAX's "
                "`train_step` returns new parameters and a new Adam state, and "
                "`jax.value_and_grad` gives the loss and the gradients in one call.",
                "tests/test_torch_prose.py::test_adam_steps_the_parameters_in_place",
            ),
            Difference(
                "optax's Adam is a pair of pure functions, `init` and `update`, with "
                "its state apart as data; `torch.optim.Adam` keeps its state inside "
                "the optimizer object.",
                "tests/test_jax_prose.py::test_optax_adam_is_two_pure_functions",
            ),
            Difference(
                "Compiling: `torch.compile` compiles the loss (its backward through "
                "AOTAutograd) and leaves Adam eager; `jax.jit` compiles the whole "
                "step, backward and Adam, into one program.",
                "tests/test_torch_train.py::test_compiled_training_follows_numpy_and_eager_step_for_step",
            ),
        ],
    ),
    "train_flax": (
        "The same step in flax: the parameters live in an `nnx.Module`, the "
        "optimizer's state in an `nnx.Optimizer` beside it. Only the pieces whose "
        "code differs from JAX's train.py are here; NumPy's and torch's are "
        "beside them for comparison.",
        [
            Difference(
                "flax's `train_step` changes `model` and `adam` in place, as torch "
                "does, though JAX's arrays never change: nnx swaps each variable's "
                "new value in.",
                "tests/test_jax_train.py::test_jax_and_flax_follow_numpy_step_for_step_eager_and_jitted",
            ),
            Difference(
                "`nnx.value_and_grad(loss)(model, tokens)` differentiates with "
                "respect to the module's `nnx.Param`s; JAX's version takes a "
                "dictionary of arrays.",
                "tests/test_jax_train.py::test_jax_and_flax_follow_numpy_step_for_step_eager_and_jitted",
            ),
            Difference(
                "`nnx.jit` carries the module's state into and out of one compiled "
                "program; `jax.jit` sees only arrays.",
                "tests/test_jax_train.py::test_jax_and_flax_follow_numpy_step_for_step_eager_and_jitted",
            ),
        ],
    ),
    "kernel": (
        "The online softmax of blockwise.py as a GPU kernel: one program per "
        "query block keeps its m, l and acc on chip while it loops over the key "
        "blocks up to the diagonal. NumPy has no kernel language: its column is "
        "blockwise.py, the reference the kernels are read against "
        "(docs/kernels.md).",
        [
            Difference(
                "Triton (torch) finds its block with pointers: `tl.program_id`, the "
                "addresses `row + rows * D + dims`, and a `mask=` on every load and "
                "store past the end.",
                "tests/test_torch_kernel.py::test_multi_head_gradients_equal_the_naive_attentions",
            ),
            Difference(
                "Pallas (JAX) is handed its block: the BlockSpecs of `pallas_call` "
                "decide what `q_ref` holds, and the loop slices the keys with `pl.ds`.",
                "tests/test_jax_kernel.py::test_eager_equals_jit",
            ),
            Difference(
                "The kernels mask every key block (padding and the key mask), and "
                "guard a row that has attended nothing yet (`shift`); blockwise.py "
                "masks the diagonal block only.",
                "tests/test_torch_kernel.py::test_gradients_with_a_key_mask_equal_the_naive_attentions",
            ),
        ],
    ),
}
"""Per chapter: what it shows, and the differences to notice (each one checked
by running the alternative: tests/test_read.py holds every `checked_by` to a
test that exists)."""
