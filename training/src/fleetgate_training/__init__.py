"""fleetgate's tooling, apart from the runtime: training the safety classifier (its corpus and
hand-written examples), evaluating guardrails on red-team and benign sets, and the
``fleetgate safety eval`` command. The runtime (``fleetgate``) ships only the fitted artefacts
it loads; this distribution is installed next to it for development (``make`` does) or by an
operator who evaluates or retrains (``pip install -e training``)."""
