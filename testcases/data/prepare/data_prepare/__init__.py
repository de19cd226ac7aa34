"""data/prepare: corpus preparation launched like a training case (options and rules, the job)."""
