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
- The Owns of DECLARED (tools/parallel_declared.py) leave out, in one
  file, the lines a framework writes its own way, quoted as written, and
  what the reference writes there.
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
