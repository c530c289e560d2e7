"""The batch lane: the OpenAI Files and Batch APIs, run by the gateway on idle capacity."""
