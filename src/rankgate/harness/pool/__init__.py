"""Pool mode: world test bodies run on ranks started once per (world size, backend) and
reused.

- :class:`.session.PoolSession`: the pytest hooks (fixtures in the controller, the body
  on a pool, one verdict); :mod:`.interrupt` records a run a signal cut short.
- :class:`.registry.PoolRegistry` hands out one :class:`.pool.Pool` per key, respawned
  after a crash; :mod:`.gpus` and :mod:`.gpulease` say which GPUs a test's pool gets.
- :func:`.item_to_task.build_task` turns a test item into the
  :class:`.messages.TestTask` its ranks run; :mod:`.classstate` carries what the class's
  set-up left, :mod:`.ranklogs` and :mod:`.rankwarnings` the logging and warning rules.
- :func:`.worker.worker_main` is what runs inside each rank process; it imports only the
  standard library, torch, :mod:`.messages` and the harness's rank-side modules.
"""
