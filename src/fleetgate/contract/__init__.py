"""The request contract: the ground floor every other package builds on.

It imports nothing of fleetgate but `fleetgate.errors`; what it needs of the floors above it
names as a Protocol. Its modules:

- `fleetgate.contract.principal`: who is calling (`Principal`, `Authenticator`,
  `bearer_token`);
- `fleetgate.contract.request`: one request and what happened to it (`GatewayRequest`,
  `Outcome`, `Endpoint`, the stream and response filters, the client's wire format);
- `fleetgate.contract.tool`: a call to a tool server instead of a model (`ToolCall`: its
  limits, the text the checks see, `ToolResult`);
- `fleetgate.contract.stages`: the steps around the upstream call (`Stage`, `StageRun`);
- `fleetgate.contract.dispatch`: a stage's say in replica choice and sending (`DispatchHook`);
- `fleetgate.contract.flow`: where a request turns (gate, interrupt, requeue, cached answer).
"""
