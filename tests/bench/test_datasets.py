"""Synthetic lengths and shared prefixes, JSONL, ShareGPT and trace files."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fleetgate.bench import load_azure, load_jsonl, load_mooncake, load_sharegpt, synthetic
from fleetgate.bench.lengths import parse_length_dist as dist
from fleetgate.bench.traces import parse_azure_timestamp
from fleetgate.errors import InvalidRequest
from fleetgate.sim.tokenizer import Tokenizer


def test_synthetic_lengths_are_token_exact_for_the_simulator_tokenizer() -> None:
    specs = synthetic(20, dist("uniform:10-50"), dist("normal:30,5"), seed=2)
    tok = Tokenizer()
    for s in specs:
        assert len(tok.encode(s.prompt)) == s.input_len
        assert 10 <= s.input_len <= 50 and s.output_len >= 1


def test_prefix_groups_share_prefixes() -> None:
    specs = synthetic(6, dist("fixed:40"), dist("fixed:4"), prefix_groups=2, prefix_len=30)
    heads = [s.prompt.split()[:30] for s in specs]
    assert heads[0] == heads[2] == heads[4] and heads[1] == heads[3]
    assert heads[0] != heads[1]
    assert specs[0].prompt != specs[2].prompt  # suffixes differ


def test_stream_ratio_mixes_evenly() -> None:
    specs = synthetic(10, dist("4"), dist("4"), stream_ratio=0.3)
    assert sum(s.stream for s in specs) == 3


def test_bad_length_spec() -> None:
    with pytest.raises(InvalidRequest, match="length"):
        dist("gauss:1,2")


def test_jsonl_and_sharegpt(tmp_path: Path) -> None:
    j = tmp_path / "p.jsonl"
    j.write_text(
        '{"prompt": "hello there", "output_len": 7}\n\n{"messages": '
        '[{"role": "user", "content": "hi"}]}\n'
    )
    specs = load_jsonl(j, n=3, default_output_len=16)
    assert [s.output_len for s in specs] == [7, 16, 7]
    assert specs[1].messages == ({"role": "user", "content": "hi"},)
    g = tmp_path / "sg.json"
    g.write_bytes(
        orjson.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "one two three"},
                        {"from": "gpt", "value": "a b c d e f"},
                    ]
                },
                {"conversations": [{"from": "gpt", "value": "skipped"}]},
            ]
        )
    )
    sg = load_sharegpt(g, n=None)
    assert len(sg) == 1 and sg[0].prompt == "one two three" and sg[0].output_len == 8


def test_mooncake_trace_shares_blocks_and_keeps_timestamps(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 1000, "input_length": 20, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 15, "output_length": 3, "hash_ids": [1, 3]},
    ]
    f.write_text("\n".join(orjson.dumps(r).decode() for r in rows))
    specs = load_mooncake(f, block_size=10, speedup=2.0)
    assert [s.at for s in specs] == [0.0, 0.25]
    tok = Tokenizer()
    assert [len(tok.encode(s.prompt)) for s in specs] == [20, 15]
    assert specs[0].prompt.split()[:10] == specs[1].prompt.split()[:10]
    assert specs[0].prompt.split()[10:15] != specs[1].prompt.split()[10:15]


def test_azure_trace(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,100,20\n2023-11-16 18:15:47.1805900,50,10\n"
    )
    specs = load_azure(f)
    assert [s.input_len for s in specs] == [100, 50]
    assert specs[1].at == pytest.approx(0.5)
    assert parse_azure_timestamp("2023-11-16 18:15:46") % 1 == 0
