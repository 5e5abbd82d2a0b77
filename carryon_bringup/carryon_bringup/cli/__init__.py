"""`carryon`, the operator CLI: `main` wires the parser, one module per command group."""
