"""train/stages."""
