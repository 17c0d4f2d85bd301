"""Running inputs on a release: the one worker and the runners that drive it.

Inside a vLLM environment: ``worker`` (every tier, served over a pipe; started as
``python -m kvproof.running.worker``), ``zygote`` (imports vLLM once and forks a worker per client)
and ``warm`` (run as a plain file: a reproducer's imports done, one child per run). On the client
side: ``checking`` (the tier runner behind ``kvproof check``) and ``health`` (an environment run
on known inputs before it is called ready).
"""
