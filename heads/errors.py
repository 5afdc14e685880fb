"""The one exception type heads raise for bad user input."""


class HeadsError(ValueError):
    """Bad drafter config or checkpoint: the message names the problem and the fix."""
