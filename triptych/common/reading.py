"""The reading order: the parallel files in the order a reader meets them.
README.md and docs/reading.md list it, `triptych read` has a chapter for each
(triptych.read.chapters), `triptych lab` names the file after the lesson;
tests/test_read.py holds them to this one list."""

ORDER = (
    ("lesson.py", "the seven steps"),
    ("attention.py", "the library's attention"),
    ("backward.py", "by hand and by autodiff"),
    ("blockwise.py", "the online softmax"),
    ("kv_cache.py", "decoding with a cache"),
    ("variants.py", "GQA, rotary positions, windows, caps, sinks"),
    ("module.py", "the module forms"),
    ("sharded.py", "attention across devices"),
    ("train.py", "one training step"),
    ("kernel.py", "the online softmax as a kernel"),
)
"""(file, what it holds), in the reading order."""
