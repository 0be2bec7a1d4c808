"""Summarisers: hot -> warm -> cold (docs/concepts.md#layers: the warm shape, its gradient, the cold
shape).

Entities and decisions always come from ``episodes.extraction`` and are kept verbatim as lists, in
every summariser, so compression never loses a name, number or decision. Only the
prose (summary, key points, headline, tags) is chosen by the summariser.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from episodes.boundaries import shorten
from episodes.extraction import extract_decisions, extract_entities, split_sentences
from episodes.language import Language, chinese_tagged, detect, width
from memory_platform.openai_compat import post_json

from .tenant_policy import Policy

logger = logging.getLogger(__name__)

HEADLINE_MAX = 120
TAGS_MAX = 4
TAG_MAX_CHARS = 100
# Budgets are in characters as ``width`` counts them (a Chinese character as three).
MIN_PROSE_BUDGET = 160  # the prose gets about two sentences, whatever else is kept
COLD_RATIO = 12  # warm -> cold aims at 10-20x: a cold shape says what it was about, little more
MIN_COLD_CHARS = 28
MIN_HEADLINE_CHARS = 20
#: A headline never ends in fewer words than this (CJK: twice as many characters): "The bakery
#: pays…" said nothing of the rent. Its budget grows by a word at a time only until then: keeping a
#: whole short sentence, or five words always, took the cold tier's compression of LoCoMo's
#: development half from 9.5 to 5.7 and 6.5 times its warm shape (the same recall).
HEADLINE_MIN_WORDS = 4
#: What opens a sentence without saying anything of the memory ("Hey Priya!", "Thanks, ", "Congratulations
#: on "): left out of a headline when what follows still says something.
_OPENING = re.compile(
    r"^\s*(?:(?:hi|hey|hello|thanks|thank you|great|wow|oh|ok|okay|sure|yes|got it|noted|understood|"
    r"sounds good|alright|all right|привет|спасибо|отлично|здравствуйте|понял|поняла|хорошо|ладно|"
    r"你好|谢谢|好的|明白|收到)(?:\s+[^\W\d_][\w'-]*){0,2}\s*[.!?,:;，。！？：；]+\s*"
    r"|(?:congratulations|congrats)\s+(?:on|for)\s+|поздравляю\s+с\s+|恭喜你?)",
    re.IGNORECASE,
)
ENTITY_LIMIT = 1000  # high on purpose: every entity and decision is kept

_STOPWORD_TEXT = (
    "a an the and or but if then so of to in on at by for with from as is are was were be been being "
    "it its it's this that these those i me my we our you your he him his she her they them their "
    "do does did have has had not no yes oh just really very too also what when where who which how "
    "why can could would should will shall may might must about into out up down over again more most "
    "some any all each other than there here am um yeah okay ok like get got going go know think "
    "thing things lot well much many one two good great nice sure thanks thank right sorry maybe "
    "sounds cool wow hey hi hello point too though now"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")


@dataclass(frozen=True)
class WarmShape:
    summary: str
    key_points: list[str]
    entities: list[str]
    decisions: list[str]
    source: str = "extractive"

    @property
    def chars(self) -> int:
        return len(self.summary) + sum(map(len, self.key_points + self.entities + self.decisions))

    @property
    def width(self) -> int:
        return width(self.summary) + sum(map(width, self.key_points + self.entities + self.decisions))

    def with_points(self, n: int) -> WarmShape:
        """The warm gradient (docs/concepts.md#the-warm-shape): key points are ordered best first, so
        deepening trims."""
        return dataclasses.replace(self, key_points=self.key_points[: max(0, n)])

    def text(self) -> str:
        return "\n".join([self.summary, *self.key_points, *self.decisions, " ".join(self.entities)]).strip()


@dataclass(frozen=True)
class ColdShape:
    """A headline and the tags packing found. The episode stores these tags as ``keywords``, apart
    from the tags its writer gave; a cold memory shows both as its ``tags``
    (docs/concepts.md#the-cold-shape)."""

    headline: str
    tags: list[str] = field(default_factory=list)
    source: str = "extractive"

    @property
    def chars(self) -> int:
        return len(self.headline) + sum(map(len, self.tags))

    def text(self) -> str:
        return " ".join([self.headline, *self.tags]).strip()


def cold_index_text(cold: ColdShape, entities: list[str]) -> str:
    """What full text searches for a cold episode: its shape (headline and tags) plus the entity
    list every layer keeps. The shape returned to callers stays headline and tags; the names,
    dates and numbers are what a question about an old episode most often shares with it."""
    return "\n".join([cold.text(), ", ".join(entities)]).strip()


def warm_points_for_age(age_days: float, policy: Policy) -> int:
    """Key points kept: warm_points_max at hot_days falling linearly to warm_points_min at cold_days."""
    high, low = policy.warm_points_max, policy.warm_points_min
    span = policy.cold_days - policy.hot_days
    if age_days <= policy.hot_days or span <= 0:
        return int(high) if age_days <= policy.hot_days else int(low)
    if age_days >= policy.cold_days:
        return int(low)
    fraction = (age_days - policy.hot_days) / span
    return int(round(high - (high - low) * fraction))


# --- sentence ranking ---------------------------------------------------------------------------


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):  # no spaces in CJK: character bigrams stand in for words
            out.extend(word[i : i + 2] for i in range(max(1, len(word) - 1)))
        elif len(word) > 1 and word not in _STOPWORDS and not word.isdigit():
            out.append(word)
    return out


def _tfidf(sentences: Sequence[str]) -> np.ndarray:
    """L2-normalised TF-IDF rows, vocabulary in first-seen order so the result is deterministic."""
    docs = [Counter(_tokens(s)) for s in sentences]
    vocab: dict[str, int] = {}
    for doc in docs:
        for term in doc:
            vocab.setdefault(term, len(vocab))
    matrix = np.zeros((len(docs), max(1, len(vocab))), dtype=np.float64)
    df = Counter(term for doc in docs for term in doc)
    for row, doc in enumerate(docs):
        for term, tf in doc.items():
            matrix[row, vocab[term]] = (1 + math.log(tf)) * (math.log((1 + len(docs)) / (1 + df[term])) + 1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def _centrality(vectors: np.ndarray) -> np.ndarray:
    centroid = vectors.mean(axis=0)
    norm = np.linalg.norm(centroid)
    if norm == 0:
        return np.zeros(len(vectors))
    return np.clip(vectors @ (centroid / norm), 0.0, 1.0)


def sentence_scores(
    sentences: Sequence[str],
    *,
    turn_of: Sequence[int] | None = None,
    turn_embeddings: np.ndarray | None = None,
    embedder: Any = None,
) -> np.ndarray:
    """Centrality to the episode centroid, position and entity density, in [0, 1]; filler
    ("Perfect.", "Thanks Priya.") and questions are discounted, they rarely carry the fact."""
    if not sentences:
        return np.zeros(0)
    centrality = _centrality(_tfidf(sentences))
    if embedder is not None:
        try:
            centrality = _centrality(np.asarray(embedder.embed(list(sentences)), dtype=np.float64))
        except Exception:  # an unusable embedder must not stop a tick: TF-IDF is a fine ranking
            logger.warning("sentence embedding failed; ranking by TF-IDF", exc_info=True)
    elif turn_embeddings is not None and turn_of is not None and len(turn_embeddings):
        per_turn = _centrality(np.asarray(turn_embeddings, dtype=np.float64))
        centrality = 0.5 * centrality + 0.5 * per_turn[np.asarray(turn_of)]
    # Relative to this episode: in a dozen short turns every sentence is "somewhat central".
    spread = float(centrality.max() - centrality.min())
    centrality = (centrality - centrality.min()) / spread if spread > 1e-9 else np.ones(len(sentences))
    n = len(sentences)
    scores = np.zeros(n)
    for i, sentence in enumerate(sentences):
        position = 1.0 - 0.5 * i / max(1, n - 1)
        density = min(1.0, len(extract_entities(sentence)) / 3)
        score = 0.6 * centrality[i] + 0.15 * position + 0.25 * density
        if not _informative(sentence):
            score *= 0.3
        if sentence.rstrip().endswith(("?", "？")):
            score *= 0.8
        scores[i] = round(score, 9)  # rounding keeps ties (and so the order) stable across platforms
    return scores


def _words(sentence: str) -> int:
    return len(sentence.split()) if not _CJK.search(sentence) else len(sentence) // 2


def _informative(sentence: str) -> bool:
    """ "Hey Priya!" or "That's great news." fit any budget and say nothing."""
    return _words(sentence) >= 5 and len(set(_tokens(sentence))) >= 3


# --- keywords -------------------------------------------------------------------------------------


def _keywords(text: str, limit: int) -> list[str]:
    try:
        import yake
    except ImportError:  # pragma: no cover - yake is in the project's dependencies
        yake = None
    found: list[str] = []
    if yake is not None and _WORD.search(text):
        language = detect(text) or Language.ENGLISH
        ngram = 2
        if language == Language.CHINESE:  # yake reads words between spaces: one tag, one word
            text, ngram = " ".join(word for word, _ in chinese_tagged(text)), 1
        try:
            extractor = yake.KeywordExtractor(lan=str(language), n=ngram, top=limit * 3, dedupLim=0.7)
            found = [kw for kw, _ in extractor.extract_keywords(text)]
        except Exception:
            logger.warning("yake failed; using the frequency keyword scorer", exc_info=True)
            found = []
    if not found:
        counts = Counter(_tokens(text))
        found = [term for term, _ in sorted(counts.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))]
    tags: list[str] = []
    for keyword in found:
        keyword = shorten(keyword, TAG_MAX_CHARS)
        words = set(keyword.lower().split())
        # "round trip" and "miles round" say the same thing twice: one tag per word
        if keyword and not any(words & set(t.lower().split()) for t in tags):
            tags.append(keyword)
        if len(tags) == limit:
            break
    return tags


# --- the summarisers ----------------------------------------------------------------------------


class ExtractiveSummariser:
    """Offline and deterministic: the same turns always give the same shapes."""

    name = "extractive"

    def __init__(self, policy: Policy | None = None):
        self.ratio = float(getattr(policy, "warm_target_ratio", 0.25))
        self.max_points = int(getattr(policy, "warm_points_max", 8))

    def warm(
        self, texts: Sequence[str], *, embeddings: np.ndarray | None = None, embedder: Any = None
    ) -> WarmShape:
        joined = "\n".join(texts)
        entities = extract_entities(joined, limit=ENTITY_LIMIT)
        decisions = extract_decisions(joined, limit=ENTITY_LIMIT)
        decided = {d.lower() for d in decisions}
        sentences: list[str] = []
        turn_of: list[int] = []
        seen: set[str] = set()
        for turn, text in enumerate(texts):
            for sentence in split_sentences(text):
                key = sentence.lower().strip(" \t,;:.!?")
                # decisions are already kept verbatim; repeating them as key points wastes the budget
                if key and key not in seen and key not in decided:
                    seen.add(key)
                    sentences.append(sentence)
                    turn_of.append(turn)
        if not sentences:
            return WarmShape(shorten(joined, HEADLINE_MAX * 2), [], entities, decisions)
        scores = sentence_scores(sentences, turn_of=turn_of, turn_embeddings=embeddings, embedder=embedder)
        order = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
        # The whole warm shape aims at ratio x raw; entities and decisions are kept whatever they
        # cost, so the prose gets what is left (and at least about one sentence).
        kept = sum(map(width, entities + decisions))
        budget = max(MIN_PROSE_BUDGET, int(self.ratio * width(joined)) - kept)
        chosen: list[str] = []
        used = 0
        for i in order:
            if len(chosen) > self.max_points:
                break
            eligible = _informative(sentences[i]) and scores[i] >= 0.4 * scores[order[0]]
            if eligible and used + width(sentences[i]) <= budget:
                chosen.append(sentences[i])
                used += width(sentences[i])
        if not chosen:  # only small talk, or the best sentence alone is over the budget
            chosen = [shorten(sentences[order[0]], budget)]
        return WarmShape(chosen[0], chosen[1:], entities, decisions)

    def cold(self, warm: WarmShape) -> ColdShape:
        # The cold shape is the least that says what the episode was about: a headline and a few tags within
        # about a twelfth of the warm shape, never under a short phrase and a tag or two.
        target = max(MIN_COLD_CHARS, warm.width // COLD_RATIO)
        tags: list[str] = []
        for tag in _keywords(" ".join([warm.summary, *warm.key_points, *warm.decisions]), TAGS_MAX):
            if not tags or sum(map(width, tags)) + width(tag) <= target // 3:
                tags.append(tag)
        budget = min(HEADLINE_MAX, max(MIN_HEADLINE_CHARS, target - sum(map(width, tags))))
        headline = headline_of(warm.summary, budget)
        # A headline that grew past its budget to say something takes the room of the last tags
        # (one always stays).
        while len(tags) > 1 and width(headline) + sum(map(width, tags)) > target:
            tags.pop()
        return ColdShape(headline=headline, tags=tags)


def headline_of(summary: str, budget: int) -> str:
    """The headline of a summary (the episode's best sentence) within ``budget``, cut on a word or
    clause boundary: its opening left out when it only greets or thanks ("Congratulations on signing
    the lease…" reads "Signing the lease…"), and never fewer than its first ``HEADLINE_MIN_WORDS``
    words (``HEADLINE_MAX`` at most)."""
    text = " ".join(summary.split())
    rest = _OPENING.sub("", text, count=1)
    if rest != text and _words(rest) >= HEADLINE_MIN_WORDS:
        text = rest[:1].upper() + rest[1:]
    # Within the budget, unless the cut leaves fewer than HEADLINE_MIN_WORDS: then a word more at a
    # time (CJK: characters), cut on its best boundary again.
    cjk = bool(_CJK.search(text))
    words, joiner = (list(text), "") if cjk else (text.split(), " ")
    headline = shorten(text, min(HEADLINE_MAX, budget))
    n = HEADLINE_MIN_WORDS * (2 if cjk else 1)
    while _words(headline.rstrip("…")) < HEADLINE_MIN_WORDS and n <= len(words):
        limit = min(HEADLINE_MAX, max(budget, width(joiner.join(words[:n])) + 1))
        headline = shorten(text, limit)
        if limit >= HEADLINE_MAX:
            break
        n += 1
    return headline


class LlmSummariser:
    """Any OpenAI-compatible chat-completions endpoint; on any failure the extractive shapes.

    Entities and decisions never come from the model: they are extracted, so they stay 100% kept.
    """

    name = "llm"
    MAX_INPUT_CHARS = 24_000
    MAX_RESPONSE_BYTES = 1_000_000

    def __init__(self, policy: Policy):
        self.base_url = str(policy.llm_base_url or "").rstrip("/")
        self.model = str(policy.llm_model or "")
        self.api_key = str(policy.llm_api_key or "")
        self.timeout = float(policy.llm_timeout_seconds)
        self.max_points = int(policy.warm_points_max)
        self.fallback = ExtractiveSummariser(policy)

    def warm(
        self, texts: Sequence[str], *, embeddings: np.ndarray | None = None, embedder: Any = None
    ) -> WarmShape:
        try:
            data = self._complete(
                "You compress one conversation episode for an agent's long-term memory. Reply with a "
                'JSON object {"summary": "one or two sentences", "key_points": ["short factual '
                f'statements, most important first, at most {self.max_points}"]}}. Use only facts '
                "stated in the text.",
                "\n".join(texts)[: self.MAX_INPUT_CHARS],
            )
            summary = _text(data["summary"])
            if not isinstance(data["key_points"], list):
                raise ValueError("key_points is not a list")
            points = [_text(p) for p in data["key_points"]][: self.max_points]
            joined = "\n".join(texts)
            return WarmShape(
                summary,
                points,
                extract_entities(joined, limit=ENTITY_LIMIT),
                extract_decisions(joined, limit=ENTITY_LIMIT),
                source="llm",
            )
        except Exception as exc:
            logger.warning("LLM summariser failed (%s); using the extractive summary", exc)
            shape = self.fallback.warm(texts, embeddings=embeddings, embedder=embedder)
            return dataclasses.replace(shape, source="extractive-fallback")

    def cold(self, warm: WarmShape) -> ColdShape:
        try:
            data = self._complete(
                "You index a memory for an agent. Reply with a JSON object "
                f'{{"headline": "one sentence of at most {HEADLINE_MAX} characters saying what this is '
                f'about", "tags": ["at most {TAGS_MAX} salient keywords"]}}.',
                warm.text()[: self.MAX_INPUT_CHARS],
            )
            if not isinstance(data["tags"], list):
                raise ValueError("tags is not a list")
            tags = list(dict.fromkeys(shorten(_text(t), TAG_MAX_CHARS) for t in data["tags"]))[:TAGS_MAX]
            return ColdShape(headline=shorten(_text(data["headline"]), HEADLINE_MAX), tags=tags, source="llm")
        except Exception as exc:
            logger.warning("LLM summariser failed (%s); using the extractive headline", exc)
            return dataclasses.replace(self.fallback.cold(warm), source="extractive-fallback")

    def _complete(self, instruction: str, content: str) -> dict[str, Any]:
        if not self.base_url.startswith(("http://", "https://")) or not self.model:
            raise ValueError("the LLM summariser needs an http(s) llm_base_url and an llm_model")
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": instruction},
                {"role": "user", "content": content},
            ],
        }
        payload = post_json(
            self.base_url,
            "chat/completions",
            body,
            api_key=self.api_key,
            timeout=self.timeout,
            max_bytes=self.MAX_RESPONSE_BYTES,
        )
        data = json.loads(payload["choices"][0]["message"]["content"])
        if not isinstance(data, dict):
            raise ValueError("the model did not answer with a JSON object")
        return data


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r:.80}")
    return " ".join(value.split())


SUMMARISERS: dict[str, type[ExtractiveSummariser] | type[LlmSummariser]] = {
    ExtractiveSummariser.name: ExtractiveSummariser,
    LlmSummariser.name: LlmSummariser,
}


def get_summariser(policy: Policy) -> ExtractiveSummariser | LlmSummariser:
    name = getattr(policy, "summariser", "extractive")
    if name not in SUMMARISERS:
        raise ValueError(f"unknown summariser {name!r}; choose one of {sorted(SUMMARISERS)}")
    return SUMMARISERS[name](policy)
