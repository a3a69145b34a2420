"""docs/recipe-24gb.md: every server row is accepted by the OpenAI-compatible controller, and the plan's
JSON schema reaches a server in the response_format form the row names."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from respec.controller import load_backend
from respec.controller.schemas import restoration_schema
from test_controller_openai import ChatServer

DOC = Path(__file__).resolve().parent.parent / "docs" / "recipe-24gb.md"


def recipe_rows() -> list[dict]:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- recipe-servers:.*?-->\n(.*?)<!-- /recipe-servers -->", text, re.S).group(1)
    lines = [ln for ln in block.strip().splitlines() if ln.startswith("|")][2:]
    keys = ("server", "base_url", "model", "response_format")
    return [dict(zip(keys, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines]


def test_the_recipe_names_three_servers():
    assert [r["server"] for r in recipe_rows()] == ["llama.cpp server", "Ollama", "vLLM"]


@pytest.mark.parametrize("row", recipe_rows(), ids=lambda r: r["server"])
def test_each_recipe_row_configures_the_controller_and_sends_the_schema(row):
    backend = load_backend("openai", row["model"], base_url=row["base_url"], response_format=row["response_format"])
    assert backend.url == row["base_url"] + "/chat/completions"
    server = ChatServer()
    try:
        local = load_backend("openai", row["model"], base_url=server.url, response_format=row["response_format"],
                             backoff=0.0, retries=0, timeout=5.0)
        local.chat(["plan"], json_schema=restoration_schema(3))
        body = server.requests[-1]["body"]
    finally:
        server.close()
    assert body["model"] == row["model"]
    assert body["response_format"]["type"] == row["response_format"]
    if row["response_format"] == "json_schema":
        assert body["response_format"]["json_schema"]["schema"] == restoration_schema(3)
