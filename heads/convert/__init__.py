"""Converters from other projects' drafter layouts into ours (scripts/convert_medusa.py is the command)."""
