"""python -m shared.reordered [--problems N]: the tolerance table's check."""

from shared.reordered.table import main

main()
