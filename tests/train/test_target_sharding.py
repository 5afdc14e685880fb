"""trainer.target_sharding: which sharding a launch gets, and the settings refused with their fix."""

import pytest

from train.errors import PipelineError
from train.sharded_target import choose_sharding


@pytest.mark.parametrize(
    "setting, processes, launcher, expected",
    [
        ("auto", 8, "deepspeed_zero3", "zero3"),
        ("auto", 8, "fsdp", "fsdp"),
        ("auto", 8, "deepspeed", "replicate"),  # ZeRO-2 shards no parameters
        ("auto", 8, "other", "replicate"),  # DDP
        ("auto", 1, "deepspeed_zero3", "replicate"),
        ("fsdp", 2, "other", "fsdp"),  # FSDP2 over a DDP launch's process group
        ("zero3", 2, "fsdp", "zero3"),
        ("replicate", 8, "deepspeed_zero3", "replicate"),
    ],
)
def test_the_launch_decides_unless_the_setting_does(setting, processes, launcher, expected):
    assert choose_sharding(setting, processes, launcher) == expected


def test_sharding_over_one_process_is_refused_with_the_fix():
    with pytest.raises(
        PipelineError, match=r"1 was launched; start several with `accelerate launch --num_processes N`"
    ):
        choose_sharding("zero3", 1, "other")
    with pytest.raises(PipelineError, match=r"trainer.target_sharding='shard' is not one of"):
        choose_sharding("shard", 2, "other")
