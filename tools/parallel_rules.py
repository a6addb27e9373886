"""What tools/check_parallel.py lets differ between the impl_* copies of a file,
each with why: the policy, where check_parallel.py is the mechanism
(docs/architecture.md, "Parallel files").

- IDIOMS, for every file, in order, and the Idioms of DECLARED, for one file,
  rewrite a framework's spelling into the one compared (np.where( and
  torch.where( both read xp.where(). An idiom's regex sees a line as the
  check reads it: a statement wrapped by ruff format is one line, its
  comments after it ("  # ..."), the spaces between symbols taken out
  (`x = f(a, b)` reads `x=f(a,b)`); a docstring is a line per sentence. An
  idiom that rewrites a line to nothing leaves it out.
- The Owns of DECLARED leave out, in one file, the lines a framework writes
  its own way, quoted as written, and what the reference writes there.
- A declaration that finds nothing fails: a declared line that changes (by
  a character) is compared again.
- OUTLINE: the files compared in outline only (the names of their
  definitions, their numbered comments); LEFT_OUT: those not compared.
"""

from __future__ import annotations

from dataclasses import dataclass

FRAMEWORKS = ("numpy", "torch", "jax")  # the first copy is the reference
ALL = " ".join(FRAMEWORKS)


@dataclass(frozen=True)
class Idiom:
    """In `frameworks`' copies, `spelling` (a regex) reads as `reads_as`."""

    frameworks: str
    spelling: str
    reads_as: str
    why: str


@dataclass(frozen=True)
class Own:
    """Lines that `frameworks` write their own way, left out, and why. Each of
    `lines` is a line as written (a statement, a comment or a docstring's
    sentence; spaces do not count; "..." at its start or end stands for any
    rest), or `def NAME`, a whole definition (NAME a regex of its name), or
    `code of NAME`, its code (its comments and docstring are compared still).
    `instead`: the lines the reference writes there, left out where it is
    compared with these frameworks (as a definition of NAME is)."""

    frameworks: str
    lines: tuple[str, ...]
    why: str
    instead: tuple[str, ...] = ()


IDIOMS = (
    Idiom(ALL, r"^(import|from) (?!impl_|shared).*", "", "its framework's modules"),
    Idiom(ALL, r"\bimpl_(numpy|torch|jax)\b", "impl_X", "each imports its own"),
    Idiom("torch", r"getattr\(torch,(\w+)\)", r"xp.dtype(\1)", "a dtype by name"),
    Idiom(ALL, r"\b(np|jnp|torch)\.", "xp.", "the array module"),
    Idiom(ALL, r"\b(?:xp|math)\.(inf|nan)\b", r"\1", "torch's are math's"),
    Idiom(ALL, r"\b(NumPy|PyTorch|JAX)\b", "FRAMEWORK", "prose names its own"),
    Idiom(ALL, r"\btorch\b(?!\.)|\bjax\.numpy\b", "FRAMEWORK", "the same"),
    Idiom(ALL, r"\bxp\.(ndarray|Tensor)\b|\bjax\.Array\b", "Array", "array types"),
    Idiom(
        "torch",
        r"(,\*)?,device=(None|[\w.]+)(?=\))|,device=(None|[\w.]+)",
        "",
        "torch makes a tensor on a device; NumPy's and JAX's have one here",
    ),
    Idiom("torch", r"\bdim=", "axis=", "torch's axis="),
    Idiom("torch", r"\bkeepdim=", "keepdims=", "torch's keepdims="),
    Idiom("torch", r"\.transpose\(", ".swapaxes(", "torch's swapaxes"),
    Idiom("torch", r"\.to\(", ".astype(", "torch's astype"),
    Idiom("torch", r"\.amax\(", ".max(", "torch's max(dim=) returns indices too"),
    Idiom("torch", r"\bxp\.cat\(", "xp.concatenate(", "torch's concatenate"),
    Idiom("torch", r"\.clone\(\)", ".copy()", "torch's copy"),
    Idiom("torch", r"\bxp\.tensor\(", "xp.asarray(", "torch's asarray of a list"),
    Idiom("torch", r"\bxp\.bool\b", "bool", "torch's bool"),
    Idiom("numpy", r"\bnp_dtype\(", "xp.dtype(", "a dtype by name, bfloat16 too"),
    Idiom(
        "torch",
        r"(xp\.(empty|zeros|ones)\((\([^()]*\)|[^()])*?),dtype=",
        r"\1,",
        "torch's dtype is keyword-only",
    ),
    Idiom(
        "torch",
        r"xp\.ones\((\w+),(\w+),bool\)\.tril\(\)",
        r"xp.tril(xp.ones((\1,\2),bool))",
        "torch's tril is a method too, and its sizes are arguments",
    ),
    Idiom("numpy jax", r"\bdtype=bool\b", "bool", "as torch's reads"),
    Idiom("torch", r"\((~[\w&~ ]+)\)\.cumsum\(", r"xp.cumsum(\1,", "a method"),
    Idiom(
        "torch",
        r"xp\.asarray\((.*?),dtype=xp\.float64\)",
        r"xp.asarray(\1)",
        "torch makes Python floats float32, NumPy and JAX float64",
    ),
    Idiom("numpy", r",copy=False\)", ")", "NumPy's astype copies unless told"),
    Idiom(
        "jax",
        r"^(\w+)=\1\.at\[(.*?)\]\.add\((.*?)\)(?=  #|$)",
        r"\1[\2]+=\3",
        "JAX arrays are immutable: .at[].add makes a new one",
    ),
    Idiom("jax", r"^\w+_jit=jax\.jit\(.*", "", "JAX's jitted twins"),
    Idiom("jax", r"^require_x64_for\(.*|,require_x64_for\b", "", "x64 for float64"),
)

LEFT_OUT = {  # file: (frameworks, why)
    "arrays.py": (ALL, "each framework's way in and out of NumPy: all different"),
    "extras.py": (ALL, "what each framework adds to the lesson: all different"),
    "tuned.py": (ALL, "each framework tuned for speed its own way, off the path"),
    "backend.py": (ALL, "each framework's own hooks (tests/test_registry.py)"),
    "backward.py": ("numpy", "by hand, where torch and JAX use autodiff"),
}

OUTLINE = {  # file: why
    "module.py": "each framework's module system: a plain class, an nn.Module, "
    "an nnx.Module, each holding its weights its own way",
    "sharded.py": "three engines: NumPy plays the devices in turn in one process, "
    "torch runs a process per device, JAX one program over a mesh",
    "train.py": "NumPy's gradients and Adam by hand, torch's and JAX's autodiff "
    "and optimizers",
}

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
                "code of blockwise_attention",
                "# (a fori_loop with the static bound n_unmasked: ...",
                "# block is a dynamic slice, always a full one of B positions)",
                "Under `jax.jit` the loops are built into the program: ...",
                "... are not in the compiled program at all (docs/blockwise.md, ...",
            ),
            "under jax.jit the loop over key blocks is a lax.fori_loop on dynamic "
            "slices, a visit is a callback, the query blocks are joined at the end",
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
            ),
            "how Triton writes, compiles and runs a kernel, on pointers",
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
                "k_cache, v_cache = cache.k, cache.v  # (..., H, L, D)",
                "k_cache[..., slot, :] = k[..., 0, :]",
                "v_cache[..., slot, :] = v[..., 0, :]",
            ),
        ),
    ),
}
