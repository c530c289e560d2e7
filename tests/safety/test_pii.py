from __future__ import annotations

import pytest

from fleetgate.safety.base import Action, CheckContext
from fleetgate.safety.checks.pii import PIICheck, china_id_valid, luhn_valid

# GB 11643 example ID (checksum X) and a Visa test number.
CN_ID = "11010519491231002X"
CARD = "4111 1111 1111 1111"


def test_china_id_checksum() -> None:
    assert china_id_valid(CN_ID)
    assert china_id_valid(CN_ID.lower())
    assert not china_id_valid("110105194912310021")  # wrong check digit
    assert not china_id_valid("110105194913310028")  # month 13
    assert not china_id_valid("11010519491231002")  # 17 digits


def test_luhn() -> None:
    assert luhn_valid(CARD.replace(" ", ""))
    assert not luhn_valid("4111111111111112")


@pytest.mark.parametrize(
    ("text", "masked", "category"),
    [
        ("mail li.wei@example.com.cn now", "mail [EMAIL] now", "pii_email"),
        ("call 13812345678", "call [PHONE]", "pii_phone"),
        ("call +86 138 1234 5678", "call [PHONE]", "pii_phone"),
        ("call +44 20 7946 0958", "call [PHONE]", "pii_phone"),
        ("call (415) 555-2671", "call [PHONE]", "pii_phone"),
        (f"card {CARD}", "card [CARD]", "pii_card"),
        (f"身份证号{CN_ID}", "身份证号[NATIONAL_ID]", "pii_national_id"),
        ("ssn 123-45-6789", "ssn [SSN]", "pii_ssn"),
        ("key sk-proj-abcdefghijklmnopqrstuvwxyz123456", "key [SECRET]", "pii_secret"),
        ("AKIAIOSFODNN7EXAMPLE", "[SECRET]", "pii_secret"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[SECRET]", "pii_secret"),
        ("token aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5", "token [SECRET]", "pii_secret"),
    ],
)
async def test_mask_mode_replaces_pii(text: str, masked: str, category: str) -> None:
    verdict = await PIICheck(mode="mask").check(text, CheckContext())
    assert verdict.action is Action.MASK
    assert verdict.masked_text == masked
    assert category in verdict.categories


async def test_block_mode_blocks() -> None:
    verdict = await PIICheck(mode="block").check(f"my id is {CN_ID}", CheckContext())
    assert verdict.action is Action.BLOCK
    assert verdict.categories == ("pii_national_id",)


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112",  # fails Luhn
        "110105194912310021",  # fails ID checksum
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",  # git sha, not a secret
        "version 3.11.2, year 2024, price 12.50",
        "order number 20240101",
    ],
)
async def test_look_alikes_are_left_alone(text: str) -> None:
    assert (await PIICheck().check(text, CheckContext())).action is Action.ALLOW


async def test_kinds_limit_detection() -> None:
    check = PIICheck(kinds=["email"])
    verdict = await check.check("a@b.io 13812345678", CheckContext())
    assert verdict.masked_text == "[EMAIL] 13812345678"


def test_every_one_of_thousands_of_addresses_is_masked() -> None:
    # each new match is checked against the taken ones in one walk (was: against every one)
    text = " ".join(f"user{i}@example.com or 4111 1111 1111 1111" for i in range(5_000))
    masked, kinds = PIICheck().mask(text)
    assert masked == " ".join(["[EMAIL] or [CARD]"] * 5_000)
    assert kinds == ["card", "email"]
