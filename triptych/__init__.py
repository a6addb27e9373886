"""The tool that runs the three backends side by side. Depends on impl_* and
shared; nothing depends on it. Inside, imports go one way
(docs/architecture.md): `common` (what every command may use) <- one command
(`run`, `lab`, `read`, `grad`, `train`, `bench`) <- `cli` (the command
line)."""
