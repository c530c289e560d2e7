"""fleetgate as the endpoint picker (EPP) of a Kubernetes inference gateway.

Envoy (or any gateway speaking the Endpoint Picker Protocol over ext_proc) relays the bytes;
fleetgate decides: it authenticates, applies limits, budgets and input checks, picks the
engine with its own strategies and scheduler, and bills from the response's usage. Run it with
``fleetgate epp`` (`fleetgate.cli.epp`); the parts:

- `protocol`: the protocol's names and the ext_proc replies;
- `picker`: the pick (and fallbacks) with the dispatcher's routing;
- `exchange`: one ext_proc stream, the request path around the pick;
- `meter`: usage and chunks read from the streamed response body;
- `lease`: the leader lease that readiness follows with several replicas;
- `pool`, `pool_api`, `pool_watch`, `pool_follow`: with ``--pool-name``, the InferencePool's
  ready pods, watched through the Kubernetes API, as the deployments of the alias it serves;
- `server`: the grpc.aio server, ext_proc and health.

Needs the ``epp`` extra (``grpcio``, ``grpcio-health-checking``, ``xds-protos``); watching the
pool, the ``kube`` extra too.
"""
