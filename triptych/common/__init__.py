"""What every command of `triptych` may use, and nothing that belongs to one
command: backends loaded by name, the CLI's errors and parser, output files
staged, report tables, line plots. Imports shared and impl_*, never a command
(tests/test_architecture.py checks)."""
