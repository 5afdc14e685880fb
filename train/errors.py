"""The one exception type the train package raises for bad run setups."""


class PipelineError(ValueError):
    """Bad run setup (stages, run directory, publish gate): the message names the problem and the fix."""
