"""Run by LiteLLM's own Python (its SDK is not a dependency of fleetgate): calls a gateway the
ways LiteLLM's SDK calls a LiteLLM proxy and prints what came back as one JSON line.

Usage: python litellm_client.py BASE_URL KEY
"""

from __future__ import annotations

import json
import sys

import litellm  # type: ignore[import-not-found]


def main(base: str, key: str) -> None:
    hello = [{"role": "user", "content": "hello"}]
    out: dict[str, object] = {}
    # the litellm_proxy provider: base_url as a LiteLLM proxy's, without /v1
    chat = litellm.completion(
        model="litellm_proxy/tiny", api_base=base, api_key=key, messages=hello, max_tokens=4
    )
    out["proxy_chat"] = chat.choices[0].message.content
    stream = litellm.completion(
        model="litellm_proxy/tiny", api_base=base, api_key=key, messages=hello, max_tokens=4,
        stream=True,
    )  # fmt: skip
    out["proxy_stream"] = "".join(c.choices[0].delta.content or "" for c in stream)
    emb = litellm.embedding(model="litellm_proxy/tiny", api_base=base, api_key=key, input=["hi"])
    out["proxy_embedding"] = len(emb.data[0]["embedding"])
    # an OpenAI-compatible endpoint, /v1 included
    chat = litellm.completion(
        model="openai/tiny", api_base=base + "/v1", api_key=key, messages=hello, max_tokens=4
    )
    out["openai_chat"] = chat.choices[0].message.content
    try:
        litellm.completion(
            model="litellm_proxy/tiny", api_base=base, api_key="sk-fg-wrong", messages=hello,
            max_tokens=4, num_retries=0,
        )  # fmt: skip
        out["wrong_key"] = "accepted"
    except litellm.AuthenticationError:
        out["wrong_key"] = "AuthenticationError"
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
