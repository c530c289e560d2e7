"""Which requests the caches may answer, and how they are keyed."""

from __future__ import annotations

from fleetgate.cache.keys import context_hash, deterministic, exact_key, last_user_text, reusable


def _body(content: object = "hi", **fields: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **fields}


def test_the_key_ignores_transport_fields_and_text_part_splitting() -> None:
    base = exact_key("team", "m", _body("hello world", temperature=0))
    assert exact_key("team", "m", _body("hello world", temperature=0, stream=True,
                                        stream_options={"include_usage": True}, user="u",
                                        metadata={"a": 1}, seed=None)) == base  # fmt: skip
    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]
    assert exact_key("team", "m", _body(parts, temperature=0)) == base
    assert exact_key("other-team", "m", _body("hello world", temperature=0)) != base
    assert exact_key("team", "other-alias", _body("hello world", temperature=0)) != base
    assert exact_key("team", "m", _body("hello world", temperature=0, max_tokens=5)) != base


def test_determinism_and_reuse() -> None:
    assert deterministic(_body(temperature=0)) and deterministic(_body(temperature=0.0))
    assert deterministic(_body(seed=3)) and not deterministic(_body(seed=True))
    assert not deterministic(_body()) and not deterministic(_body(temperature=0.2))
    assert reusable(_body()) and reusable(_body(n=1))
    assert not reusable(_body(tools=[{"type": "function"}])) and not reusable(_body(n=3))
    assert not reusable(_body(logprobs=True)) and not reusable({"model": "m", "prompt": "x"})


def test_semantic_text_and_context() -> None:
    assert last_user_text(_body("What is up?")) == "What is up?"
    image = [{"type": "image_url", "image_url": {"url": "http://x"}}]
    assert last_user_text(_body(image)) is None
    assert last_user_text({"messages": [{"role": "assistant", "content": "x"}]}) is None
    one = {"messages": [{"role": "system", "content": "be brief"},
                        {"role": "user", "content": "first question"}]}  # fmt: skip
    two = {"messages": [{"role": "system", "content": "be brief"},
                        {"role": "user", "content": "a paraphrase"}]}  # fmt: skip
    other = {"messages": [{"role": "system", "content": "be verbose"},
                          {"role": "user", "content": "first question"}]}  # fmt: skip
    assert context_hash(one) == context_hash(two) != context_hash(other)
    assert context_hash({**one, "temperature": 0.5}) != context_hash(one)
