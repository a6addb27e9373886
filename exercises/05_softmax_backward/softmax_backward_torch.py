"""Exercise 5, PyTorch: the backward of attention by hand, the softmax's above all.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/05_softmax_backward/softmax_backward_torch.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

# ruff: noqa: F401, F841 (a skeleton: its names wait for your lines)

import math


def attend_backward(q, k, v, weights, d_out, scale):
    """Steps 7 to 3 in reverse, one head: d_out (T, D) -> d_q, d_k, d_v (T, D).

    q, k, v (T, D); weights P (T, T) the forward's softmax (0 above the
    diagonal); scale: whether the scores were divided by sqrt(D).
    """
    D = q.shape[-1]
    # 7. out = P @ v: d_P = d_out @ v^T, and d_v = P^T @ d_out
    # 6. the softmax: d_S[i, l] = P[i, l] * (d_P[i, l] - sum_j d_P[i, j] * P[i, j])
    # 5. nothing to undo: where P = 0 (masked) the factor P makes d_S 0
    # 4. S was divided by sqrt(D) (if scale), so d_S is too
    # 3. S = q @ k^T: d_q = d_S @ k, d_k = d_S^T @ q
    raise NotImplementedError("steps 7 to 3 in reverse: see README.md")
