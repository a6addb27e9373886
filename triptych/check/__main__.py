"""`python -m triptych.check JOB EVENTS`: one target, checked in the fresh
process that `triptych.check.runner.check` starts."""

import sys

from triptych.check.runner import child_main

sys.exit(child_main(sys.argv[1:]))
