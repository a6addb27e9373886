"""One point of `triptych bench --memory`, measured in the fresh process that
`triptych.bench.memory.run_point` starts (`python -P -m triptych.bench.memory
SPEC`): steps 1 to 4 of the method in `triptych.bench.memory`. The result is
one line on stdout, CHILD_MARK and then JSON."""

from __future__ import annotations

import json
import time
from typing import Any

from triptych.bench.modes import MODES
from triptych.bench.problem import make_problem
from triptych.common.backends import load_backend
from triptych.common.resident import release_free_memory, reset_peak, status_kib
from triptych.common.threads import thread_limits

CHILD_MARK = "triptych-memory-result "


def measure_point(spec: dict[str, Any]) -> dict[str, Any]:
    """Steps 1 to 4 of `triptych.bench.memory`, for one mode at one T."""
    import numpy as np

    mode = MODES[spec["mode"]]
    with thread_limits(spec["threads"]):
        load_backend(mode.framework)
        problem = make_problem(
            spec["T"],
            d_model=spec["d_model"],
            n_heads=spec["n_heads"],
            batch=spec["batch"],
            dtype=spec["dtype"],
            device="cpu",
        )
        runner = mode.build(problem)
        del problem
        release_free_memory()
        # 2. the first call (compile included)
        reset_peak()
        before_first = status_kib("VmRSS")
        result = (runner.first_call or runner.call)()
        first_peak = status_kib("VmHWM")
        # 3. give back what it freed
        del result
        release_free_memory()
        # 4. one more call against the resident set just before it
        reset_peak()
        baseline = status_kib("VmRSS")
        start = time.perf_counter()
        result = runner.call()
        call_s = time.perf_counter() - start
        peak = status_kib("VmHWM")
        out, _ = runner.to_numpy(result)
        finite = bool(np.isfinite(out).all())
    return dict(
        status="ok" if finite else "wrong",
        reason=None if finite else "the output has NaN or inf",
        baseline_mib=baseline / 1024,
        extra_mib=(peak - baseline) / 1024,
        first_call_extra_mib=(first_peak - before_first) / 1024,
        peak_rss_gib=max(peak, first_peak) / 2**20,
        call_s=call_s,
    )


def child_main(argv: list[str]) -> int:
    """`python -m triptych.bench.memory SPEC`: measure one point, print it as
    JSON on the line that starts with CHILD_MARK."""
    spec = json.loads(argv[0])
    try:
        fields = measure_point(spec)
    except Exception as error:  # reported as the point's error, not a crash
        message = (str(error).strip().splitlines() or [""])[0]
        fields = dict(status="error", reason=f"{type(error).__name__}: {message}")
    print(CHILD_MARK + json.dumps(fields), flush=True)
    return 0
