"""`GET /admin/config` shows no secret, wherever in the config it sits."""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.config.redact import REDACTED, redact_config
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream

SECRETS = [
    "sk-upstream-secret",
    "hdr-secret-value",
    "salt-secret-value",
    "redispass1",
    "redispass2",  # a credential in a deployment's URL
    "T0SECRETPATH",
    "asr-secret-key",
    "guard-secret-key",
    "querysecret",
]


def _config(up: FakeUpstream) -> dict[str, Any]:
    return {
        "models": [{"alias": "tiny", "deployments": [{
            "provider": "openai", "model": "m", "api_base": up.url, "api_key": SECRETS[0],
            "extra_headers": {"Authorization": f"Bearer {SECRETS[1]}", "X-Org": "acme"},
        }]}, {"alias": "other", "deployments": [{
            "provider": "openai", "model": "m", "api_base": f"http://u:{SECRETS[4]}@127.0.0.1:1/v1",
        }]}],
        "routing": {"salt_secret": SECRETS[2], "redis_url": f"redis://:{SECRETS[3]}@127.0.0.1:1/0"},
        "tenancy": {"enabled": False, "alert_webhook": f"https://hooks.example/T0/{SECRETS[5]}"},
        "multimodal": {"asr": {"backend": "openai", "url": "http://asr:8000/v1",
                               "model": "whisper", "api_key": SECRETS[6]}},
        "safety": {"checks": {"guard": {"type": "llama_guard", "options": {
            "base_url": f"http://guard:8000/v1?api-key={SECRETS[8]}", "model": "lg",
            "api_key": SECRETS[7]}}},
            "policies": {"default": {"input": ["guard"]}}},
    }  # fmt: skip


async def test_admin_config_redacts_every_secret_bearing_field_and_url_credential(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    resp = await client.get("/admin/config", headers=AUTH)
    assert resp.status == 200
    raw = await resp.text()
    for secret in SECRETS:
        assert secret not in raw, secret
    config = orjson.loads(raw)["config"]
    dep = config["models"][0]["deployments"][0]
    assert dep["api_key"] == REDACTED
    assert dep["extra_headers"] == {"Authorization": REDACTED, "X-Org": REDACTED}
    assert config["routing"]["redis_url"] == f"redis://:{REDACTED}@127.0.0.1:1/0"
    assert dep["api_base"] == upstream.url  # what is not secret stays readable


def test_redaction_keeps_token_counts_and_plain_urls() -> None:
    data = {"max_tokens": 128, "interval_tokens": 50, "api_base": "http://h:8000/v1", "x": None}
    assert redact_config(data) == data
    assert redact_config({"api_key": None}) == {"api_key": None}
