"""Same-dtype references in other operation orders: the yardstick of every
derived tolerance (docs/suite.md, "How a tolerance is derived").

Two correct float32 attentions differ because each sums its dot products and
softmax rows in an order of its own (a BLAS blocks and vectorises its sums, a
GPU splits them across threads), and how much that matters depends on the
inputs: scores of 1e4 move the weights a thousand times more than scores of 10.
So the suite asks what the dtype itself gets wrong on the very inputs of a
test: attention computed here in that dtype, rounded where the project's
precision policy rounds (docs/contract.md, "Dtypes"), but with every sum taken
in an order fixed here, N_ORDERS times in N_ORDERS orders. The largest error of
these references against the float64 oracle, times a multiple, is the
tolerance (`shared.tolerances.derived_tolerance`).

Every sum is a loop of NumPy elementwise additions, never a BLAS call, so the
references give the same bits on every IEEE machine: the tolerance a test
derives here is the tolerance it derives everywhere. (A yardstick computed by
the machine's own matmul was one sample of one BLAS's order: on a CPU where
OpenBLAS chose another kernel it came out 40 times smaller, and correct
backends failed; docs/suite.md has the numbers.)

`matmul="tf32"` rounds every matmul operand to TF32 (10 bits of mantissa, as
NVIDIA's tensor cores read float32 with TF32 on): the references of a GPU that
computes float32 matmuls that way.

The package, one idea a module: orders.py, the orders and the sums taken in
them; forward.py, attention and entropy; backward.py, their gradients;
table.py, the tolerance table's check (`python -m shared.reordered`).
"""

from shared.reordered.backward import (
    reordered_attention_backward,
    reordered_multi_head_backward,
    reordered_single_head_backward,
)
from shared.reordered.forward import (
    reordered_attention,
    reordered_entropy,
    reordered_multi_head,
    reordered_single_head,
    wide_dtype,
)
from shared.reordered.orders import (
    MATMUL_PRECISIONS,
    N_ORDERS,
    ORDER_SEED,
    ordered_matmul,
    ordered_sum,
    references,
    summation_order,
    to_tf32,
)
from shared.reordered.table import (
    TABLE_PROBLEMS,
    main,
    preset_problems,
    random_problem,
    random_problems,
    table_rows,
    worst_errors,
)

__all__ = [
    "MATMUL_PRECISIONS",
    "N_ORDERS",
    "ORDER_SEED",
    "TABLE_PROBLEMS",
    "main",
    "ordered_matmul",
    "ordered_sum",
    "preset_problems",
    "random_problem",
    "random_problems",
    "references",
    "reordered_attention",
    "reordered_attention_backward",
    "reordered_entropy",
    "reordered_multi_head",
    "reordered_multi_head_backward",
    "reordered_single_head",
    "reordered_single_head_backward",
    "summation_order",
    "table_rows",
    "to_tf32",
    "wide_dtype",
    "worst_errors",
]
