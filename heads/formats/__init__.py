"""Export formats, one module per consumer format."""
