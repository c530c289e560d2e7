import pytest

from fleetgate.multimodal.prompt.assembler import PromptAssembler
from fleetgate.multimodal.prompt.config import PromptConfig, RetrievalConfig
from fleetgate.multimodal.prompt.retrieval import DocumentIndex, split_text
from fleetgate.resources import MiniLMEmbedder

DOCS = {
    "vacation": "Employees get 25 days of paid vacation per year. Unused days expire in March.",
    "expenses": "Travel expenses are reimbursed within 30 days when receipts are uploaded.",
    "security": "Laptops must use full disk encryption and lock after five minutes idle.",
}


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    model = MiniLMEmbedder()
    model.encode(["warm up"])  # load the model once for the module
    return model


async def test_cosine_top_k_finds_the_right_document(embedder: MiniLMEmbedder) -> None:
    index = DocumentIndex(embedder)
    for doc_id, body in DOCS.items():
        assert await index.add("team-a", doc_id, body) == 1
    hits = await index.search("team-a", "How many holidays do I get?", k=2)
    assert hits[0].doc_id == "vacation"
    assert hits[0].score > hits[1].score
    assert await index.search("team-b", "holidays") == []  # teams are separate
    await index.remove("team-a", "vacation")
    hits = await index.search("team-a", "How many holidays do I get?", k=3)
    assert "vacation" not in {h.doc_id for h in hits}


async def test_retrieved_context_lands_in_the_prompt(embedder: MiniLMEmbedder) -> None:
    index = DocumentIndex(embedder)
    for doc_id, body in DOCS.items():
        await index.add("team-a", doc_id, body)
    config = PromptConfig(system_prompt="Be helpful.", retrieval=RetrievalConfig(top_k=1))
    prompt = await PromptAssembler(config, index=index).assemble(
        question="Does my laptop need encryption?", team="team-a"
    )
    assert "[security] Laptops must use full disk encryption" in prompt.messages[0]["content"]
    assert [c["doc_id"] for c in prompt.debug()["retrieved"]] == ["security"]


def test_split_text_keeps_chunks_bounded() -> None:
    text = "First para. " * 40 + "\n\n" + "Second para sentence! " * 5
    chunks = split_text(text, max_chars=100)
    assert all(len(c) <= 100 for c in chunks)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "").replace("\n", "")


async def test_the_semantic_routers_retrieval_decision_drives_retrieval(
    embedder: MiniLMEmbedder,
) -> None:
    index = DocumentIndex(embedder)
    for doc_id, body in DOCS.items():
        await index.add("team-a", doc_id, body)
    question = "Does my laptop need encryption?"
    on = PromptAssembler(PromptConfig(retrieval=RetrievalConfig(top_k=1)), index=index)
    off = PromptAssembler(
        PromptConfig(retrieval=RetrievalConfig(top_k=1, enabled=False)), index=index
    )
    assert (await on.assemble(question=question, team="team-a")).retrieved
    assert not (await on.assemble(question=question, team="team-a", retrieve=False)).retrieved
    assert not (await off.assemble(question=question, team="team-a")).retrieved
    assert (await off.assemble(question=question, team="team-a", retrieve=True)).retrieved


async def test_document_set_mode_leads_every_prompt_with_the_whole_set(
    embedder: MiniLMEmbedder,
) -> None:
    index = DocumentIndex(embedder)
    changes: list[str] = []
    index.listeners.append(changes.append)
    for doc_id, body in DOCS.items():
        await index.add("team-a", doc_id, body)
    config = PromptConfig(
        system_prompt="Be helpful.", retrieval=RetrievalConfig(mode="document_set")
    )
    assembler = PromptAssembler(config, index=index)
    found = await assembler.shared_prefix("team-a")
    assert found is not None
    doc_set, prefix = found
    assert [d for d, _ in doc_set.documents] == sorted(DOCS)  # a stable order
    lead = prefix[0]["content"]
    for question, profile in (("How many holidays?", None), ("Laptop rules?", "Lives in Oslo")):
        prompt = await assembler.assemble(question=question, team="team-a", profile=profile)
        system = prompt.messages[0]["content"]
        assert system.startswith(lead) and all(body in system for body in DOCS.values())
        assert prompt.document_set == doc_set and prompt.retrieved == []
    assert await assembler.shared_prefix("team-b") is None
    # a set too large for the window falls back to the closest chunks
    small = config.model_copy(update={"context_window": 64, "reserve_output_tokens": 4})
    prompt = await PromptAssembler(small, index=index).assemble(
        question="How many holidays do I get?", team="team-a"
    )
    assert prompt.document_set is None and prompt.retrieved[0].doc_id == "vacation"
    await index.remove("team-a", "security")
    assert changes == ["team-a"] * 4
    changed = await assembler.shared_prefix("team-a")
    assert changed is not None and changed[0].version > doc_set.version
    assert "full disk encryption" not in changed[1][0]["content"]
