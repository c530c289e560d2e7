"""``/openapi.json``, generated from the request schemas."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel

from fleetgate.api.schemas import ChatCompletionRequest, CompletionRequest, EmbeddingRequest

__all__ = ["build_openapi", "openapi_json"]

_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
            "required": ["message", "type"],
        }
    },
}


def _post(summary: str, schema: type[BaseModel]) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{schema.__name__}"}
    errors = {
        str(code): {"description": desc, "content": {"application/json": {"schema": _ERROR}}}
        for code, desc in (
            (400, "Invalid request"), (401, "Missing or invalid key"), (404, "Unknown model"),
            (413, "Body too large"), (429, "Rate limited"), (502, "Upstream failed"),
            (503, "No healthy deployment"), (504, "Upstream timed out"),
        )
    }  # fmt: skip
    return {
        "post": {
            "summary": summary,
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref}}},
            "responses": {
                "200": {
                    "description": "OK (JSON, or server-sent events when stream is true)",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                **errors,
            },
        }
    }


def build_openapi() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in (ChatCompletionRequest, CompletionRequest, EmbeddingRequest):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    ok = {"200": {"description": "OK", "content": {"application/json": {"schema": {}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "fleetgate", "version": "0.1.0"},
        "paths": {
            "/v1/chat/completions": _post("Create a chat completion", ChatCompletionRequest),
            "/v1/completions": _post("Create a completion", CompletionRequest),
            "/v1/embeddings": _post("Create embeddings", EmbeddingRequest),
            "/v1/messages": {
                "post": {
                    "summary": "Create a message (Anthropic Messages API; errors in its shape)",
                    "security": [{"bearer": []}, {"x-api-key": []}],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["model", "messages", "max_tokens"],
                                }
                            }
                        },
                    },
                    "responses": ok,
                }
            },
            "/v1/responses": {
                "post": {
                    "summary": "Create a response (OpenAI Responses API, bridged to chat)",
                    "security": [{"bearer": []}],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"type": "object", "required": ["model"]}
                            }
                        },
                    },
                    "responses": ok,
                }
            },
            "/v1/responses/{id}": {
                "get": {
                    "summary": "Retrieve a stored response",
                    "security": [{"bearer": []}],
                    "responses": ok,
                },
                "delete": {
                    "summary": "Delete a stored response",
                    "security": [{"bearer": []}],
                    "responses": ok,
                },
            },
            "/v1/models": {
                "get": {"summary": "List models", "security": [{"bearer": []}], "responses": ok}
            },
            "/health": {"get": {"summary": "Health (as vLLM and LiteLLM)", "responses": ok}},
            "/health/live": {"get": {"summary": "Liveness", "responses": ok}},
            "/health/ready": {"get": {"summary": "Readiness", "responses": ok}},
            "/health/region": {"get": {"summary": "Region readiness", "responses": ok}},
        },  # fmt: skip
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
    }


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=orjson.dumps(build_openapi()), content_type="application/json")
