"""`Sectioned`: a config model whose keys beyond its own fields are feature sections, and the
error paths of config validation (`field_path`, `section_problems`).

`fleetgate.config.schema` declares the YAML; the two models that hold feature sections
(`AliasConfig`, `GatewayConfig`) are built on `Sectioned`, and each feature's declaration
(`fleetgate.config.sections`) reads its section through `Sectioned.read_section`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from fleetgate.errors import ConfigError

__all__ = ["Sectioned", "StrictModel", "field_path", "section_problems"]


class StrictModel(BaseModel):
    """No unknown keys, and immutable once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Sectioned(StrictModel):
    """A model whose keys beyond its own fields are feature sections, kept raw in
    ``sections`` and validated by the feature's declaration (`fleetgate.config.sections`).

    The validated models are kept once read; dumps show every section at its own key, as in
    the YAML (the validated form, defaults included, where it has been read)."""

    sections: dict[str, Any] = Field(
        default_factory=dict,
        description="Feature sections by name, raw until the feature's declaration reads them.",
    )
    # name -> (the raw value it was read from, the validated model): a copy with other
    # sections (``model_copy``) never serves a stale one
    _read: dict[str, tuple[Any, BaseModel | None]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gather_sections(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        own = set(cls.model_fields)
        found = {k: v for k, v in data.items() if k not in own}
        if not found:
            return data
        kept = {k: v for k, v in data.items() if k in own}
        kept["sections"] = {**(data.get("sections") or {}), **found}
        return kept

    @model_serializer(mode="wrap")
    def _flatten_sections(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        raw = data.pop("sections", None) or {}
        for name, value in raw.items():
            data[name] = value
        for name, (raw_value, model) in self._read.items():
            if model is not None and raw_value is self.sections.get(name):
                data[name] = model.model_dump(mode=info.mode)
        return data

    def read_section(self, name: str, model: type[BaseModel], *, optional: bool) -> Any:
        """The section ``name`` validated as ``model``: ``None`` when absent and ``optional``,
        else the model's defaults; a `ConfigError` names each bad field (``safety.x.y``)."""
        raw = self.sections.get(name)
        if name in self._read and self._read[name][0] is raw:
            return self._read[name][1]
        if raw is None and optional:
            value: BaseModel | None = None
        else:
            try:
                value = model.model_validate({} if raw is None else raw)
            except ValidationError as exc:
                raise ConfigError(
                    "invalid config:\n  " + "\n  ".join(section_problems(name, raw, exc))
                ) from None
        self._read[name] = (raw, value)
        return value

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; an ``update`` key that is no field of the model replaces that feature
        section (a section model or its raw mapping)."""
        fields = {k: v for k, v in (update or {}).items() if k in type(self).model_fields}
        moved = {
            k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
            for k, v in (update or {}).items()
            if k not in fields
        }
        if moved:
            fields["sections"] = {**fields.get("sections", self.sections), **moved}
        copied = super().model_copy(update=fields or None, deep=deep)
        copied._read = dict(self._read)  # its own: reading a replaced section keeps ours
        return copied


def section_problems(name: str, raw: Any, exc: ValidationError) -> list[str]:
    """One ``path: message`` line per error of the section ``name`` (`ValidationError`)."""
    return [f"{field_path({name: raw}, (name, *e['loc']))}: {e['msg']}" for e in exc.errors()]


def field_path(raw: Any, loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location like models[0](alias=fast).deployments[1].api_base."""
    out = ""
    node = raw
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict) and "alias" in node:
                out += f"(alias={node['alias']})"
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(root)"
