"""`python -m triptych.bench.memory SPEC`: one point of the memory sweep, in
the fresh process that `triptych.bench.memory.run_point` starts."""

import sys

from triptych.bench.memory.probe import child_main

sys.exit(child_main(sys.argv[1:]))
