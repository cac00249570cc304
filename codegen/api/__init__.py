"""IR types -> target-language types, one module per target."""
