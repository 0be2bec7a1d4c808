"""Summarisers: what is kept, how much smaller, determinism, and the LLM path with its fallback."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from episodes.extraction import extract_decisions, extract_entities
from lifecycle.compression import (
    HEADLINE_MAX,
    ExtractiveSummariser,
    LlmSummariser,
    WarmShape,
    get_summariser,
    warm_points_for_age,
)
from lifecycle.models import MemoryPolicy
from memory_platform.embeddings import EmbeddingError

# A planning chat written for these tests: names, money, dates, a few decisions and small talk.
CONVERSATION = [
    "Hey Priya! I finally booked the cabin near Lake Tahoe for the second week of August. It has three "
    "bedrooms and a small dock, and it is only twenty minutes from the trailhead we talked about.",
    "That's great news, Marco. How much did it end up costing? Last time you mentioned the prices were "
    "going up because of the summer season and the wildfire smoke warnings.",
    "It was $1,450 for six nights, so about $240 each if all six of us come. The owner said the smoke has "
    "cleared this year and the park service reopened the Rubicon Trail in early July.",
    "Perfect. I can bring my camping stove and the two kayaks. Do you think Daniel will be able to drive "
    "up on Friday, or is he still stuck with that release at work?",
    "He told me the release of the billing service slipped to August 9, so he might only make it for the "
    "weekend. He said he would confirm by Monday after talking to his manager.",
    "Okay. For food, I was thinking we cook most dinners at the cabin. My sister Ana sent me a recipe for "
    "grilled trout with lemon and herbs that she learned at a cooking class in Portland.",
    "Sounds delicious. I'm vegetarian now though, remember? Since March I stopped eating fish and meat, "
    "so maybe we also plan a few veggie skewers and a big pasta night.",
    "Oh right, sorry! We decided to do two shared dinners and let everyone handle their own breakfast. "
    "I'll make a shopping list in our group chat so nobody buys the same things twice.",
    "Good plan. What about the hike itself? The Rubicon Trail is about 16 miles round trip if we go all "
    "the way to Emerald Bay, which might be too much for Ana's kids.",
    "Let's do the shorter loop to Vikingsholm on Tuesday with everyone, and the long version on Thursday "
    "just for the people who want a real workout. We can leave around 7 am to avoid the heat.",
    "Good point about the parking too. Last year the lot at the state park was full by 9 am and we had "
    "to walk an extra mile along the highway, so an early start helps with that as well.",
    "Thanks Priya. I'm really looking forward to it, it has been almost two years since we all went on a "
    "trip together, not since the wedding in Santa Fe.",
]
RAW = sum(map(len, CONVERSATION))


@pytest.fixture
def policy() -> MemoryPolicy:
    return MemoryPolicy()


def test_entities_and_decisions_are_all_kept(policy):
    warm = ExtractiveSummariser(policy).warm(CONVERSATION)
    joined = "\n".join(CONVERSATION)
    assert set(extract_entities(joined, limit=10_000)) <= set(warm.entities)
    for turn in CONVERSATION:
        assert set(extract_entities(turn, limit=10_000)) <= set(warm.entities)
        assert set(extract_decisions(turn, limit=10_000)) <= set(warm.decisions)
    assert {"Lake Tahoe", "$1,450", "August 9", "Rubicon Trail", "Santa Fe"} <= set(warm.entities)
    assert any("two shared dinners" in d for d in warm.decisions)


def test_warm_is_three_to_ten_times_smaller(policy):
    warm = ExtractiveSummariser(policy).warm(CONVERSATION)
    assert 3 <= RAW / warm.chars <= 10, (RAW, warm.chars)
    assert warm.summary and len(warm.key_points) <= policy.warm_points_max
    # decisions are kept in their own list, never repeated as key points
    assert not set(warm.key_points) & set(warm.decisions)


def test_cold_is_much_smaller_than_warm_and_has_a_short_headline(policy):
    summariser = ExtractiveSummariser(policy)
    warm = summariser.warm(CONVERSATION).with_points(policy.warm_points_min)
    cold = summariser.cold(warm)
    assert 0 < len(cold.headline) <= HEADLINE_MAX
    assert 1 <= len(cold.tags) <= 5
    assert warm.chars / cold.chars >= 5, (warm.chars, cold.chars)
    long_sentence = "word " * 200
    assert len(summariser.cold(summariser.warm([long_sentence])).headline) <= HEADLINE_MAX


@pytest.mark.parametrize(
    ("summary", "headline"),
    [
        (
            "Got it: up to 1,750 EUR a month for the flat in Arroios, close to the metro and the river",
            "Up to 1,750 EUR…",
        ),
        (
            "Prefers email over phone calls for support, and answers within a day on weekdays only.",
            "Prefers email over phone…",
        ),
        (
            "Бюджет на квартиру: до 1 750 евро в месяц, лучше в районе Арройуш рядом с метро и рекой",
            "Бюджет на квартиру: до 1 750 евро в месяц…",
        ),
        (
            "我们决定使用PostgreSQL作为主数据库，Redis作为缓存，下周一开始迁移，并在月底之前完成所有服务的切换和验证工作",
            "我们决定使用PostgreSQL…",
        ),
        ("Prefers email over phone calls for support.", "Prefers email over phone…"),
    ],
)
def test_a_short_headline_ends_on_a_word_or_a_clause(policy, summary, headline):
    # A one-sentence episode's headline gets about 20 characters: the cut is on a boundary
    # (episodes.boundaries), never "Got it: up to 1…"; a reply's opening is left out, and at least
    # the sentence's first words are kept.
    assert ExtractiveSummariser(policy).cold(WarmShape(summary, [], [], [])).headline == headline


def test_a_sentence_over_the_prose_budget_is_cut_on_a_boundary_and_loses_no_entity(policy):
    sentence = (
        "We agreed on a budget of up to 1,750 EUR a month for the flat in Arroios with Marta Ribeiro, "
        + "and the agency in Lisbon said the contract would be ready on March 14 if the deposit of 3,500 "
        + "EUR is paid by Friday, which Marta confirmed she can do from her account at Millennium BCP "
        + "without any trouble at all, so we will sign on Monday morning."
    )
    warm = ExtractiveSummariser(policy).warm([sentence])
    assert warm.summary.endswith("…") and sentence.startswith(warm.summary[:-1])
    assert warm.summary[-2].isalnum() and not sentence[len(warm.summary) - 1].isalnum()
    assert set(extract_entities(sentence, limit=10_000)) <= set(warm.entities)


def test_extractive_is_deterministic(policy):
    first = ExtractiveSummariser(policy)
    second = ExtractiveSummariser(MemoryPolicy())
    assert first.warm(CONVERSATION) == second.warm(list(CONVERSATION))
    assert first.cold(first.warm(CONVERSATION)) == second.cold(second.warm(CONVERSATION))


def test_short_and_empty_episodes_are_handled(policy):
    summariser = ExtractiveSummariser(policy)
    tiny = summariser.warm(["Hi!"])
    assert tiny.summary == "Hi!" and tiny.key_points == []
    assert summariser.cold(tiny).headline == "Hi!"
    empty = summariser.warm([])
    assert empty.summary == "" and empty.entities == [] and summariser.cold(empty).headline == ""
    one = summariser.warm(["I moved to Berlin in 2021 and started working at Zalando as a data engineer."])
    assert "Berlin" in one.summary and "Berlin" in one.entities


def test_chinese_and_russian_text(policy):
    summariser = ExtractiveSummariser(policy)
    warm = summariser.warm(
        ["我们决定下周一发布新版本。测试已经全部通过了。", "Мы решили перенести встречу на пятницу."]
    )
    assert any("决定" in d for d in warm.decisions) and any("решили" in d for d in warm.decisions)
    assert len(summariser.cold(warm).headline) <= HEADLINE_MAX


def test_gradient_of_key_points(policy):
    # 8 key points at 14 days falling linearly to 3 at 90 days
    assert warm_points_for_age(0, policy) == 8
    assert warm_points_for_age(14, policy) == 8
    assert warm_points_for_age(33, policy) == 7  # 8 − 5·19/76 = 6.75
    assert warm_points_for_age(90, policy) == 3
    assert warm_points_for_age(400, policy) == 3
    values = [warm_points_for_age(d, policy) for d in range(0, 120)]
    assert values == sorted(values, reverse=True)
    warm = ExtractiveSummariser(policy).warm(CONVERSATION)
    assert warm.with_points(1).key_points == warm.key_points[:1]


class FakeEmbedder:
    dim = 8

    def __init__(self, fail: bool = False):
        self.fail = fail

    def embed(self, texts):
        if self.fail:
            raise EmbeddingError("model unavailable", retryable=True)
        rows = [
            [float(len(t) % (i + 2)) + (1.0 if "Tahoe" in t else 0.0) for i in range(self.dim)] for t in texts
        ]
        array = np.asarray(rows, dtype=np.float32) + 0.1
        return array / np.linalg.norm(array, axis=1, keepdims=True)


def test_embeddings_change_the_ranking_and_failures_fall_back(policy):
    summariser = ExtractiveSummariser(policy)
    plain = summariser.warm(CONVERSATION)
    assert summariser.warm(CONVERSATION, embedder=FakeEmbedder(fail=True)) == plain
    with_vectors = summariser.warm(CONVERSATION, embedder=FakeEmbedder())
    assert with_vectors.entities == plain.entities and with_vectors.decisions == plain.decisions
    turn_vectors = FakeEmbedder().embed(CONVERSATION)
    assert summariser.warm(CONVERSATION, embeddings=turn_vectors) == summariser.warm(
        CONVERSATION, embeddings=turn_vectors
    )


def test_local_embedder_ranking_is_deterministic(policy):
    from memory_platform.embeddings import get_embedder

    embedder = get_embedder("local")
    summariser = ExtractiveSummariser(policy)
    first = summariser.warm(CONVERSATION, embedder=embedder)
    assert first == summariser.warm(CONVERSATION, embedder=embedder)
    assert 3 <= RAW / first.chars <= 10


# --- the LLM summariser against a local chat-completions server -------------------------------


class ChatHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output quiet
        pass

    def do_POST(self):
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up: "slow"
            self._answer()

    def _answer(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        mode = server.mode
        if mode == "500":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"internal error")
            return
        if mode == "slow":
            time.sleep(1.5)
        if mode == "garbage":
            payload = b"<html>not json</html>"
        else:
            system = body["messages"][0]["content"]
            if mode == "missing":
                content = {"summary": "only a summary"}
            elif "headline" in system:
                content = {
                    "headline": "Lake Tahoe cabin trip planning " * 10,
                    "tags": ["tahoe", "cabin", "hike"],
                }
            else:
                content = {
                    "summary": "Marco and Priya plan a Lake Tahoe cabin trip in August.",
                    "key_points": [
                        "The cabin costs $1,450 for six nights.",
                        "Daniel may come only for the weekend.",
                    ],
                    "entities": ["INVENTED BY THE MODEL"],
                }
            payload = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": json.dumps(content)}}
                    ],
                }
            ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def chat_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatHandler)
    server.daemon_threads = True
    server.mode = "ok"
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def llm_policy(server) -> MemoryPolicy:
    policy = MemoryPolicy(
        summariser="llm", llm_model="tiny-model", llm_api_key="sk-test", llm_timeout_seconds=0.5
    )
    policy.llm_base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return policy


def test_llm_summariser_uses_the_model_but_not_for_entities(chat_server):
    summariser = get_summariser(llm_policy(chat_server))
    assert isinstance(summariser, LlmSummariser)
    warm = summariser.warm(CONVERSATION)
    assert warm.source == "llm"
    assert warm.summary == "Marco and Priya plan a Lake Tahoe cabin trip in August."
    assert warm.key_points[0] == "The cabin costs $1,450 for six nights."
    expected = ExtractiveSummariser().warm(CONVERSATION)
    assert warm.entities == expected.entities and "INVENTED BY THE MODEL" not in warm.entities
    assert warm.decisions == expected.decisions
    cold = summariser.cold(warm)
    assert cold.source == "llm" and cold.tags == ["tahoe", "cabin", "hike"]
    assert len(cold.headline) <= HEADLINE_MAX
    request = chat_server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "tiny-model"
    assert request["body"]["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("mode", ["500", "garbage", "missing", "slow"])
def test_llm_failures_fall_back_to_extractive(chat_server, mode):
    chat_server.mode = mode
    summariser = get_summariser(llm_policy(chat_server))
    warm = summariser.warm(CONVERSATION)
    expected = ExtractiveSummariser(llm_policy(chat_server)).warm(CONVERSATION)
    assert warm.source == "extractive-fallback"
    assert (warm.summary, warm.key_points, warm.entities, warm.decisions) == (
        expected.summary,
        expected.key_points,
        expected.entities,
        expected.decisions,
    )
    cold = summariser.cold(warm)
    assert cold.source == "extractive-fallback" and len(cold.headline) <= HEADLINE_MAX


def test_llm_without_an_endpoint_falls_back_and_unknown_summariser_is_refused():
    warm = LlmSummariser(MemoryPolicy(summariser="llm")).warm(CONVERSATION)
    assert warm.source == "extractive-fallback"
    unreachable = MemoryPolicy(summariser="llm", llm_model="m", llm_base_url="http://127.0.0.1:9/v1")
    assert LlmSummariser(unreachable).warm(["We decided to ship on Monday."]).source == "extractive-fallback"
    assert isinstance(get_summariser(MemoryPolicy()), ExtractiveSummariser)
    with pytest.raises(ValueError, match="unknown summariser"):
        get_summariser(MemoryPolicy(summariser="magic"))


BAKERY = [
    "The bakery pays 1900 euros monthly rent.",
    "Rent for the bakery is 1,900 euros per month.",
    "Tomas prefers invoices as PDF by email.",
    "Lena's oven is a Rational combi oven bought in 2019.",
    "Congratulations on signing the lease at 1,750 a month!",
    "Hey Lena! My supplier for rye flour is Kornmühle Weber in Leipzig, and they deliver every Tuesday "
    "morning before six, which is why the first bake starts late that day.",
    "Привет! Аренда пекарни стоит 1900 евро в месяц.",
    "谢谢！面包店的房租是每月1900欧元。",
]
GREETINGS = (
    "hey",
    "hi ",
    "hello",
    "thanks",
    "thank you",
    "congratulations",
    "congrats",
    "привет",
    "спасибо",
    "谢谢",
    "你好",
    "恭喜",
)


@pytest.mark.parametrize("text", BAKERY)
def test_a_cold_headline_says_what_the_memory_is_about(text):
    summariser = ExtractiveSummariser()
    cold = summariser.cold(summariser.warm([text]))
    headline = cold.headline
    assert not headline.lower().startswith(GREETINGS), headline
    said = headline.rstrip("…").split()
    assert len(said) >= 4 or (len(said) == 1 and len(headline) >= 10), headline  # Chinese: no spaces
