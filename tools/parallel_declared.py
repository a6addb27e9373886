"""What each impl_* file lets one framework write its own way (DECLARED),
for tools/check_parallel.py: the rules of tools/parallel_rules.py, file by
file, each with why."""

from __future__ import annotations

from parallel_rules import ALL, Idiom, Own

IMMUTABLE = "JAX arrays are immutable: a write makes a new one"
DECLARED: dict[str, tuple[Idiom | Own, ...]] = {
    "__init__.py": (
        Own(ALL, ("Causal self-attention in ...",), "what each package imports"),
        Own("jax", ("Importing it changes no JAX setting: ...",), "x64's"),
        Idiom("jax", r',"?\w+_jit\b"?', "", "JAX exports the jitted twins too"),
    ),
    "lesson.py": (
        Own("numpy", ("NumPy is the plain reference: ...",), "what it does"),
        Own("torch", ("torch runs each line on x's device, ...",), "the same"),
        Own("jax", ("JAX's functions are pure: jax.jit traces ...",), "the same"),
    ),
    "attention.py": (
        Own("jax", ("JAX's functions are pure, so `jax.jit` ...",), "the jit twins"),
        Own(
            "jax",
            ("# the variant's choices are static: ...", "# (impl_jax/variants.py ..."),
            "how the jit twins take a Variant",
        ),
        Idiom("torch", r" \(on `device`\)", "", "torch's device argument"),
    ),
    "variants.py": (
        Own(
            "jax",
            (
                "from shared.variants import ( ARRAY_FIELDS, ...",
                "# A Variant is a pytree: its choices are static, ...",
                "# jax.jit traces the arrays and compiles a program ...",
                "jax.tree_util.register_dataclass( ...",
            ),
            "jax.jit keeps a Variant's choices static: JAX is told it is a pytree",
            instead=("from shared.variants import inverse_frequencies, rotary_width",),
        ),
        Idiom(
            "torch",
            r"(\w+)\.repeat_interleave\(",
            r"xp.repeat(\1,",
            "torch's repeat tiles; repeat_interleave is NumPy's repeat",
        ),
        Idiom(
            "torch",
            r"xp\.asarray\((inverse_frequencies\(.*\)),dtype=t\.dtype\)",
            r"\1.astype(t.dtype)",
            "shared's NumPy array, made a tensor (NumPy and JAX take it as it is)",
        ),
        Idiom("numpy torch", r"\bstart\.copy\(\)", "start", IMMUTABLE),
    ),
    "blockwise.py": (
        Idiom(
            "torch",
            r"^(\w+)\.masked_fill_\((.*?),(-?\w+)\)",
            r"xp.copyto(\1,\3,where=\2)",
            "torch's copyto",
        ),
        Idiom("torch", r"=(\w+)\.exp_\(\)", r"=xp.exp(\1,out=\1)", "in place"),
        Idiom("jax", r" jittable,", "", "JAX's is jitted too"),
        Own("torch", ("device = q_block.device",), "torch makes its positions there"),
        Own(
            "jax",
            ("k_block = lax.dynamic_slice_in_dim(k, ...", "v_block = lax.dyn..."),
            "under jax.jit start is traced in the fori_loop: a dynamic slice",
            instead=("k_block = k[..., start : start + size, :] ...", "v_block = v..."),
        ),
        Own(
            "jax",
            (
                "out = jnp.where(attends_nonfinite[..., None], jnp.nan, out) ...",
                "scores = jnp.where(future, -jnp.inf, scores)",
                "weights = jnp.exp(scores - shift[..., None]) ...",
                "acc = acc * rescale[..., None]  # (..., Bq, D)",
                "acc = acc + weights @ v_block ...",
            ),
            IMMUTABLE + ", where NumPy and torch write in place",
            instead=(
                "np.copyto(out, np.nan, where=attends_nonfinite[..., None]) ...",
                "np.copyto(scores, -np.inf, where=future)",
                "scores -= shift[..., None] ...",
                "weights = np.exp(scores, out=scores) ...",
                "acc *= rescale[..., None]",
                "acc += weights @ v_block ...",
            ),
        ),
        Own(
            "jax",
            (
                "out_blocks, lse_blocks = [], [] ...",
                "for i in range(n_blocks):  # a Python loop: unrolled at trace time",
                "# what unmasked_blocks keeps static: ...",
                "static_variant = None if variant is None else ...",
                "if n_unmasked > first: ...",
                "blocks = (first, n_unmasked) ...",
                "state = unmasked_blocks( state, q_block, k, v, i, blocks, B, ...",
                "def unmasked_blocks",
                "if visit is not None:",
                "jax.debug.callback(visit, i, last) ...",
                "out_blocks.append(acc / row_sum[..., None]) ...",
                "lse_blocks.append(row_max + jnp.log(row_sum)) ...",
                "out = jnp.concatenate(out_blocks, axis=-2) ...",
                "lse = jnp.concatenate(lse_blocks, axis=-1) ...",
                "Under `jax.jit` the loops are built into the program: ...",
                "... are not in the compiled program at all (docs/blockwise.md, ...",
            ),
            "under jax.jit the loop over key blocks is a lax.fori_loop on dynamic "
            "slices, jitted on its own so that an eager call compiles it once, a "
            "visit is a callback, the query blocks are joined at the end",
            instead=(
                "out = np.empty(q.shape, q.dtype) ...",
                "lse = np.empty(q.shape[:-1], q.dtype) ...",
                "for i in range(n_blocks):",
                "for j in range(first, n_unmasked):",
                "if visit is not None:",
                "visit(i, j)",
                "state = key_block(state, q_block, k, v, rows, j * B, B, None, ...",
                "visit(i, last)",
                "out[..., rows, :] = acc / row_sum[..., None] ...",
                "lse[..., rows] = row_max + np.log(row_sum) ...",
            ),
        ),
    ),
    "backward.py": (
        Own(
            "torch",
            (
                "The backward pass in PyTorch: ...",
                "impl_numpy/backward.py writes each step's gradient by hand, ...",
                "# fresh leaves of the tape, so that no caller's graph or ...",
                "leaves, bias_leaves = fresh_leaves(inputs), ...",
                "with torch.enable_grad():",
                "out, _ = single_head_attention( **leaves, ...",
                "out, _ = multi_head_attention( **leaves, ...",
                "return gradients(out, d_out, leaves | bias_leaves)",
                "def fresh_leaves|gradients",
            ),
            "autograd records the forward on fresh leaves and walks the tape back",
        ),
        Own(
            "jax",
            (
                "The backward pass in JAX: ...",
                "impl_numpy/backward.py writes each step's gradient by hand, ...",
                "def forward(inputs, biases):",
                "out, _ = single_head_attention(**inputs, ...",
                "out, _ = multi_head_attention( **inputs, ...",
                "return out",
                "biases = given(biases)",
                "_, out_vjp = jax.vjp(forward, inputs, biases)",
                "grads, bias_grads = out_vjp(d_out)",
                "return in_order(grads | bias_grads, (*inputs, *biases))",
                "def in_order",
            ),
            "jax.vjp traces the forward as a function and returns its transpose",
        ),
        Idiom("torch jax", r", (recorded by autograd|traced by jax\.vjp)$", "", "so"),
    ),
    "module.py": (
        Idiom("torch", r"^def forward\(", "def __call__(", "nn.Module's call runs it"),
    ),
    "sharded.py": (
        Own("numpy torch", ("def part",), "a bias's columns, which JAX's mesh takes"),
        Own("torch", ("def pass_on|gather_rows|sum_rows",), "torch's messages"),
        Own("jax", ("def make_mesh|pass_on|row_specs",), "JAX's mesh and messages"),
        Own(
            "jax", ("def ring_on_device(...",), "the ring's body, which shard_map runs"
        ),
        Own("jax", ("def before|after",), "the ring step's branches, for lax.cond"),
    ),
    "train.py": (
        Own("numpy", ("def adam_step",), "Adam by hand; torch and JAX use theirs"),
        Own("torch jax", ("def compile_train_step",), "torch.compile, jax.jit"),
    ),
    "kernel.py": (
        Idiom("torch jax", r"\b(Triton|Pallas)\b", "KERNELS", "the kernel language"),
        Idiom("torch", r"\bSOFTCAP\b", "softcap", "Triton's constants are capitals"),
        Idiom("jax", "Tp and Dp T and D padded", "Dp D padded", "Pallas pads T too"),
        Idiom("jax", "or all n_blocks;", "or all of them;", "its bound, not T"),
        Idiom(
            "torch jax",
            r"a xp\.autograd\.Function|a jax\.custom_vjp",
            "a gradient rule",
            "torch's autograd.Function, JAX's custom_vjp",
        ),
        Idiom(
            "torch",
            r"=(\w+)\.masked_fill\((.*?),(-?\w+)\)",
            r"=xp.where(\2,\3,\1)",
            "torch's where, as a method",
        ),
        Own(
            "torch",
            (
                "Triton (`triton.jit`) writes that program on pointers: ...",
                "On a GPU it compiles; on CPU tensors it runs in Triton's ...",
                "This module needs Triton (the `kernels` extra); ...",
                "interpret: Triton's interpreter (True), the kernel compiled ...",
                "One program: query block i of row n against the key blocks ...",
                "Every address and mask by hand.",
                "inputs: the pointers of q, k, v and keep; outputs: ...",
                '"ieee": float32 multiplies exactly, not in TF32, on a GPU.',
                "try:",
                "except ImportError:",
                'raise ImportError( "impl_torch.kernel needs Triton, ...',
                "from shared.registry import install_command",
            ),
            "how Triton writes, compiles and runs a kernel, on pointers (and what "
            "installs it)",
        ),
        Own(
            "jax",
            (
                "Pallas (`jax.experimental.pallas`) writes that program in ...",
                "interpret: Pallas's interpreter (True), the compiled kernel ...",
                "Under jit or jax.export, False compiles for the platform ...",
                "One program: query block i against the key blocks up to ...",
                "The refs are this program's blocks.",
            ),
            "how Pallas writes, lowers and runs a kernel, on blocks",
        ),
        Own(
            "torch jax",
            (
                "def flash_forward",
                "code of flash_kernel|key_blocks|online_softmax_step",
            ),
            "the kernel and its launch, in Triton and in Pallas",
        ),
        Own("torch", ("def soft_cap_kernel|check_triton_runs",), "Triton's limits"),
        Own("jax", ("def divide|matmul",), "lax.div, lax.dot_general: Mosaic's"),
        Own(
            "jax",
            ("def choose_interpret", "interpret = choose_interpret(interpret, q)"),
            "JAX decides None by the host's backend, torch by the tensors' device",
            instead=(
                "interpret = check_interpret( ...",
                "check_triton_runs(interpret, q.dtype) ...",
            ),
        ),
        Own(
            "torch",
            (
                "def FlashAttentionCore",
                "flash_attention_core = FlashAttentionCore.apply",
            ),
            "torch's gradient rule, an autograd.Function",
        ),
        Own(
            "jax",
            (
                r"def flash_attention_core\w*",
                "flash_attention_core.defvjp( ...",
            ),
            "JAX's gradient rule, a custom_vjp; the jit twins' static settings",
        ),
    ),
    "kv_cache.py": (
        Own("numpy", ("NumPy writes in place: ...",), "how it writes the cache"),
        Own("torch", ("torch writes in place: ...",), "the same, in its words"),
        Own(
            "jax",
            (
                "JAX arrays are immutable: a new cache comes back, ...",
                "A write past max_len is dropped without a word, ...",
            ),
            "the same",
        ),
        Own("numpy", ("from shared.dtypes import np_dtype",), "a dtype by name"),
        Own(
            "torch",
            ("... n_heads = H, on `device`; with a variant, ...",),
            "torch's device argument",
            instead=("... and n_heads = H; with a variant, ...",),
        ),
        Own(
            "jax",
            ("return KVCache(k, v, jnp.zeros((), int)) ...",),
            "JAX makes int64 only with x64 on, int32 without",
            instead=("return KVCache(k, v, np.zeros((), np.int64))",),
        ),
        Own(
            "jax",
            ("A full cache does not raise.",),
            "JAX's .at[].set drops a write out of bounds",
            instead=("A full cache raises IndexError.",),
        ),
        Idiom("jax", r"\(a new array\)$", "(in place)", IMMUTABLE),
        Own(
            "jax",
            (
                "k_cache = cache.k.at[..., slot, :].set(k[..., 0, :]) ...",
                "v_cache = cache.v.at[..., slot, :].set(v[..., 0, :]) ...",
            ),
            IMMUTABLE + ": .at[].set",
            instead=(
                "k_cache, v_cache = cache.k, cache.v  # (..., H_kv, L, D)",
                "k_cache[..., slot, :] = k[..., 0, :]",
                "v_cache[..., slot, :] = v[..., 0, :]",
            ),
        ),
    ),
}
