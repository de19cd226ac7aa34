"""launch_training's overhead on the lab against a bare sbatch: ``python -m bench.launch_overhead.run``."""
