"""The interLink target: pods for an interLink virtual node, through Kubernetes or REST.

Main API: :func:`rankgate.dispatch.interlink.dispatch.run_stage` (a stage, end to end)
and :func:`~rankgate.dispatch.interlink.dispatch.run_canary`;
:func:`~rankgate.dispatch.interlink.manifest.build_pod` (the pod);
:class:`~rankgate.dispatch.interlink.rest.InterlinkREST` (the REST client);
:mod:`~rankgate.dispatch.interlink.backends` (REST and Kubernetes behind one interface).
"""
