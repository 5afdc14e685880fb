"""The one exception type eval raises for bad user input."""


class EvalError(ValueError):
    """Bad eval input (config, prompts, drafter): the message names the problem and the fix."""
