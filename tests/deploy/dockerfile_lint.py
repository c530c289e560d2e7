"""A structural Dockerfile linter for deploy/Dockerfile (no container builder needed).

It reads instructions (joining ``\\`` continuations), splits them into stages, and returns the
problems it finds in the final stage: running as root, build tools, missing EXPOSE,
HEALTHCHECK or STOPSIGNAL, and an ``EXTRAS`` build argument that is not empty by default.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

BUILD_TOOLS = ("gcc", "g++", "cc1", "build-essential", "clang", "make", "cmake", "rustc", "cargo")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def instructions(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            keyword, _, rest = full.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def stages(text: str) -> tuple[list[tuple[str, str]], list[Stage]]:
    """(instructions before the first FROM, the stages)."""
    preamble: list[tuple[str, str]] = []
    found: list[Stage] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            found.append(Stage(words[0], name))
        elif found:
            found[-1].instructions.append((keyword, rest))
        else:
            preamble.append((keyword, rest))
    return preamble, found


def _root(user: str) -> bool:
    name = user.split(":")[0].strip()
    return name in ("", "root", "0")


def problems(text: str) -> list[str]:
    """Everything wrong with the Dockerfile's shape; empty when it passes."""
    preamble, found = stages(text)
    if len(found) < 2:
        return ["needs a builder stage and a runtime stage (multi-stage)"]
    final = found[-1]
    errors: list[str] = []
    users = final.args("USER")
    if not users or _root(users[-1]):
        errors.append("the final stage must end with a non-root USER")
    for run in final.args("RUN"):
        for word in re.split(r"[\s;&|]+", run):
            if word in BUILD_TOOLS:
                errors.append(f"the final stage installs or runs a build tool: {word}")
    for copy in final.args("COPY"):
        origin = re.search(r"--from=(\S+)", copy)
        if origin and origin.group(1) not in {s.name for s in found[:-1]}:
            errors.append(f"COPY --from={origin.group(1)} names no earlier stage")
    errors += _runtime_problems(final)
    extras = [a for s in found for a in s.args("ARG") if a.split("=")[0] == "EXTRAS"]
    extras += [a for kw, a in preamble if kw == "ARG" and a.split("=")[0] == "EXTRAS"]
    if not extras or any(shlex.split(a.partition("=")[2] or "''") != [""] for a in extras):
        errors.append("ARG EXTRAS must exist and default to empty (no torch by default)")
    return errors


def _runtime_problems(final: Stage) -> list[str]:
    errors = [
        f"the final stage has no {keyword}"
        for keyword in ("EXPOSE", "HEALTHCHECK", "STOPSIGNAL", "ENTRYPOINT")
        if not final.args(keyword)
    ]
    if any("SIGTERM" not in s for s in final.args("STOPSIGNAL")):
        errors.append("STOPSIGNAL must be SIGTERM")
    if not any("/health/live" in h for h in final.args("HEALTHCHECK")):
        errors.append("the HEALTHCHECK must probe /health/live")
    return errors
