"""Launch description, process launcher, operator CLI, recorder and replay of CarryOn: what a
robot PC runs (the benchmarks are carryon_bench, which adds `carryon bench`)."""
