"""Processes: the one place rankgate starts a command, shows progress, and measures load.

Main API:

- :mod:`rankgate.proc.command` — every subprocess goes through it, and every failure is
  a :class:`~rankgate.proc.command.CommandFailed` (the command, its code, its words):
  ``run`` (a pipeline command on the terminal or a stage's log), ``finish`` (output
  captured, ended whole past its deadline), ``output`` and ``capture`` (quiet queries),
  ``stop_all`` (end every command still running).
- :class:`rankgate.proc.progress.Progress` — progress of long work (the gate's stages,
  benchmark runs) on stderr: GitHub groups, rich, or plain lines.
- :mod:`rankgate.proc.contention` — how much of the machine other work took while a
  benchmark ran (``Window``, ``contended``, ``PROBE_KEY``).

It imports nothing else of rankgate: every other package stands on it.
"""
