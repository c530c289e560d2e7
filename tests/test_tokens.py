"""Token estimates know scripts: CJK is about one token per character, not four."""

from __future__ import annotations

from typing import Any

from fleetgate.tokens import estimate_prompt_tokens, estimate_text_tokens
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream

CHINESE = "我们的平台为每个业务线提供统一的模型网关。" * 130  # about 2,700 characters


def test_chinese_counts_about_one_token_per_character() -> None:
    assert len(CHINESE) > 2600
    body = {"messages": [{"role": "user", "content": CHINESE}]}
    assert estimate_prompt_tokens(body) >= len(CHINESE)
    assert estimate_text_tokens(CHINESE) >= len(CHINESE)


def test_ascii_is_still_about_four_characters_per_token() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 40
    assert estimate_text_tokens(text) == (len(text) + 3) // 4


def test_other_scripts_count_between() -> None:
    russian = "Привет, как дела? " * 50
    tokens = estimate_text_tokens(russian)
    assert len(russian) / 4 < tokens <= len(russian)


async def test_a_long_chinese_prompt_is_not_sent_to_a_2048_token_deployment(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    small = {"provider": "openai", "model": "s", "api_base": upstream.url, "name": "small",
             "context_window": 2048}  # fmt: skip
    big = {"provider": "openai", "model": "b", "api_base": upstream_b.url, "name": "big",
           "context_window": 32768}  # fmt: skip
    config: dict[str, Any] = {
        "models": [{"alias": "chat", "deployments": [small], "fallbacks": ["long"]},
                   {"alias": "long", "deployments": [big]}],
        "tenancy": {"enabled": False},
    }  # fmt: skip
    client = await gateway(config)
    body = {"model": "chat", "max_tokens": 64,
            "messages": [{"role": "user", "content": CHINESE}]}  # fmt: skip
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    assert resp.headers["x-fleetgate-deployment"] == "big"
    assert not upstream.seen


async def test_max_output_tokens_of_a_deployment_is_respected(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    short = {"provider": "openai", "model": "s", "api_base": upstream.url, "name": "short",
             "max_output_tokens": 256}  # fmt: skip
    long = {"provider": "openai", "model": "l", "api_base": upstream_b.url, "name": "long"}
    config: dict[str, Any] = {
        "models": [{"alias": "chat", "deployments": [short], "fallbacks": ["more"]},
                   {"alias": "more", "deployments": [long]}],
        "tenancy": {"enabled": False},
    }  # fmt: skip
    client = await gateway(config)
    for max_tokens, served_by in ((100, "short"), (1000, "long")):
        body = {"model": "chat", "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        assert resp.status == 200
        assert resp.headers["x-fleetgate-deployment"] == served_by


async def test_a_deployment_with_a_tokenizer_is_checked_with_the_exact_count(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream, tmp_path: Any
) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    # A tokenizer whose every character is a token: far more than the estimate's 4 per token.
    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz:")}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    exact = {"provider": "openai", "model": "s", "api_base": upstream.url, "name": "small",
             "context_window": 2048, "tokenizer": str(path)}  # fmt: skip
    big = {"provider": "openai", "model": "b", "api_base": upstream_b.url, "name": "big"}
    config: dict[str, Any] = {
        "models": [{"alias": "chat", "deployments": [exact], "fallbacks": ["long"]},
                   {"alias": "long", "deployments": [big]}],
        "tenancy": {"enabled": False},
    }  # fmt: skip
    client = await gateway(config)
    text = "abcd" * 1000  # ~1,000 tokens by the estimate, 4,000 by this tokenizer
    body = {"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200
    assert resp.headers["x-fleetgate-deployment"] == "big"
    short = {"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": "abc"}]}
    resp = await client.post("/v1/chat/completions", json=short, headers=AUTH)
    assert resp.headers["x-fleetgate-deployment"] == "small"
