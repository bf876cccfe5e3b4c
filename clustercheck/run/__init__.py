"""Running a suite: the session (platform, pools, record, exclusion), the runner (a check's rounds of rank
groups), the rank pools and their failures, the launchers, the rank process (`worker`), the sealed wire
between them, GPU binding, signals, scopes and pairings, and the memory fit checked before anything runs."""
