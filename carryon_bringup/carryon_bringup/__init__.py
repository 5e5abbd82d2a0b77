"""Launch description, process launcher, operator CLI and benchmarks of CarryOn."""
