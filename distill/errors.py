"""The one exception type the distill stage raises for bad user input."""


class DistillError(ValueError):
    """Bad input (config, prompts file, target): the message names the problem and the fix."""
