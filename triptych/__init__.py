"""The tool that runs the three backends side by side (command line, report,
plots, benchmark). Depends on impl_* and shared; nothing depends on it."""
