"""Drive wrk: write the Lua script for a chat-completions POST, run it, parse its report.

The Lua ``done`` hook prints one ``FGBENCH {json}`` line with the counts and latency
percentiles, so nothing depends on wrk's human-readable output. With a request limit the
script stops its thread after that many responses (run with ``-t1``), which bounds the
memory-growth loops by count as well as by time.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import orjson

WRK = "/usr/bin/wrk"
MARKER = "FGBENCH "
PROMPT = [{"role": "user", "content": "Say hello."}]

LUA = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
wrk.headers["Content-Type"] = "application/json"
{auth}
local limit = {limit}
local seen = 0
if limit > 0 then
  response = function(status, headers, body)
    seen = seen + 1
    if seen >= limit then wrk.thread:stop() end
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\n{marker}{{"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,' ..
    '"write":%d,"status":%d,"timeout":%d,"mean_us":%.1f,"p50_us":%d,"p90_us":%d,' ..
    '"p99_us":%d,"max_us":%d}}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
"""


def request_body(stream: bool) -> bytes:
    """The chat-completions request every target receives."""
    body: dict[str, object] = {"model": "tiny", "messages": PROMPT, "max_tokens": 16}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def write_script(path: Path, stream: bool, api_key: str | None, limit: int = 0) -> Path:
    """Write the Lua script for one mode; ``limit`` > 0 stops after that many responses."""
    auth = f'wrk.headers["Authorization"] = "Bearer {api_key}"' if api_key else ""
    path.write_text(
        LUA.format(body=request_body(stream).decode(), auth=auth, limit=limit, marker=MARKER)
    )
    return path


@dataclass(frozen=True)
class WrkResult:
    """One wrk run, with field names that follow ``vllm bench serve`` where they overlap."""

    completed: int
    failed: int
    duration: float
    request_throughput: float
    mean_e2el_ms: float
    median_e2el_ms: float
    p90_e2el_ms: float
    p99_e2el_ms: float
    max_e2el_ms: float

    @classmethod
    def parse(cls, output: str) -> WrkResult:
        """Parse the ``FGBENCH`` line printed by the Lua ``done`` hook."""
        for line in output.splitlines():
            if line.startswith(MARKER):
                raw = json.loads(line[len(MARKER) :])
                break
        else:
            raise RuntimeError(f"wrk printed no {MARKER.strip()} line:\n{output[-2000:]}")
        failed = raw["status"] + raw["read"] + raw["write"] + raw["timeout"] + raw["connect"]
        completed = max(0, raw["requests"] - raw["status"])
        duration = raw["duration_us"] / 1e6
        return cls(
            completed=completed,
            failed=failed,
            duration=duration,
            request_throughput=completed / duration if duration > 0 else 0.0,
            mean_e2el_ms=raw["mean_us"] / 1e3,
            median_e2el_ms=raw["p50_us"] / 1e3,
            p90_e2el_ms=raw["p90_us"] / 1e3,
            p99_e2el_ms=raw["p99_us"] / 1e3,
            max_e2el_ms=raw["max_us"] / 1e3,
        )


def run(url: str, script: Path, connections: int, duration_s: float, timeout_s: int = 10) -> str:
    """Run wrk with one thread and return its output."""
    argv = [
        WRK,
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={timeout_s}s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=duration_s + timeout_s + 30, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout
