"""Exercise 4, JAX: one step of the online softmax.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/04_online_softmax/online_softmax_jax.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

# ruff: noqa: F401 (a skeleton: its imports wait for your lines)

import jax.numpy as jnp


def online_softmax_step(state, q_block, k_block, v_block, future):
    """One key block into the running (m, l, acc) of one query block.

    state: m (Bq,) the running max of each query's scores, l (Bq,) the running
    sum of exp(score - m), acc (Bq, D) the running sum of exp(score - m) * v;
    on the first block m = -inf, l = 0, acc = 0. q_block (Bq, D), already
    scaled by 1 / sqrt(D); k_block, v_block (Bk, D); future (Bq, Bk) bool,
    True where the key is after the query (masked), or None off the diagonal.
    Returns the new (m, l, acc); attention's output is acc / l at the end.
    """
    # 3. scores = q @ k^T, one block
    # 5. mask the future (on the diagonal block only)
    # 6. softmax, online: the new running max, and by how much to rescale what
    #    was summed under the old one (exp(-inf) = 0 on the first block)
    # 7. weighted sum of values, accumulated
    raise NotImplementedError("steps 3 to 7 on one block: see README.md")
