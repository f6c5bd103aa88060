"""Adopting an existing suite: a project's own spawn helper or distributed test class,
run on rankgate's ranks without rewriting the tests.

Two ini options (or ``-o`` on the command line) name what the suite already has:

- ``rankgate_spawn_helpers``: a function the tests call with a body, a world size and
  a backend (``module:function`` and which of its arguments say what); see
  :mod:`.spawnhelper`.
- ``rankgate_world_classes``: a base class whose test methods run on ``world_size``
  ranks (a class attribute, or a marker of the project's own); see :mod:`.worldclass`.

The grammar of both lines is in :mod:`.config`; what a rank does before such a test
(the launcher's variables, the project's own set-up call) is in :mod:`.prelude`.
"""
