"""The interLink target: pods for an interLink virtual node, through Kubernetes or REST.

Main API: :class:`~rankgate.dispatch.interlink.target.InterlinkTarget` (a
:class:`~rankgate.dispatch.target.Target`), run through
:func:`rankgate.dispatch.run.run_stage`; :func:`~rankgate.dispatch.interlink.canary.run_canary`;
:func:`~rankgate.dispatch.interlink.manifest.build_pod` (the pod);
:class:`~rankgate.dispatch.interlink.rest.InterlinkREST` (the REST client);
:mod:`~rankgate.dispatch.interlink.backends` (REST and Kubernetes behind one interface).
"""
