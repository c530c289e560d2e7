"""Native code out of the gateway's process: supervised worker processes.

``pool.NativeWorkerPool`` (gateway side) starts ``child`` processes that speak the frames of
``wire``. Nothing is imported here, so a worker process starts light.
"""

__all__: list[str] = []
