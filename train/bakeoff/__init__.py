"""The drafter bake-off (bakeoff.recipes): several recipes' drafters, one target, one dataset, one evaluation, one
verdict. run.py drives it (dispatched from train/__main__.py), contenders.py composes and checks each contender,
verdicts.py decides and render.py writes the comparison. Nothing is imported here: the registry's pages read the
verdicts without loading the driver."""
