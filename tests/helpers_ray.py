"""A local Ray cluster for the Ray tests (each test module starts one)."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def local_ray(sleep: str):
    """Ray on two CPUs, its actors' worker processes sleeping `sleep` seconds per run of a
    sleepy config: they inherit AUTOTUNE_TEST_SLEEP from the environment the cluster
    starts with, which is restored afterwards."""
    import ray

    saved = os.environ.get("AUTOTUNE_TEST_SLEEP")
    os.environ["AUTOTUNE_TEST_SLEEP"] = sleep
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("AUTOTUNE_TEST_SLEEP", None)
        else:
            os.environ["AUTOTUNE_TEST_SLEEP"] = saved
