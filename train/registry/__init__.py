"""train/registry."""
