"""The question weighs the turns an answer shows (retrieval.evidence.Clues): among turns on the same
topic, the one said by the person the question names, and for a "when" or "how long" question the
one that says a time or a duration, is shown first. A turn whose text is not read weighs as before."""

from dataclasses import dataclass, field

import pytest

from episodes.stores.rows import TurnRow
from retrieval.evidence import Budget, Clues, choose, turn_tokens

from .test_search import pack, turns
from .test_snippets import cost


@dataclass
class FakeHit:
    score: float = 1.0
    relevance: float = 1.0
    matched: list[tuple[int, float]] = field(default_factory=list)


def rows(*texts, start=1):
    return [
        TurnRow(pk=start + i, episode_id=1, seq=i, public_id=f"t{start + i}", text=t)
        for i, t in enumerate(texts)
    ]


def shown(question, texts, scores=None):
    """The texts ``choose`` shows when only one of ``texts`` fits, each its own hit at ``scores``."""
    hits, lists = [], []
    for n, text in enumerate(texts):
        row = rows(text, start=10 * n)
        hits.append(FakeHit(matched=[(row[0].pk, (scores or [1.0] * len(texts))[n])]))
        lists.append(row)
    budget = Budget(tokens=max(turn_tokens(r[0]) for r in lists), neighbours=0)
    chosen = choose(hits, lists, budget, question=question)
    return [lists[h][i].text for h, positions in enumerate(chosen) for i in positions]


def test_a_turn_said_by_the_person_the_question_names_is_shown_first():
    texts = ["Leo: We adopted a cat from the shelter.", "Maya: We adopted a cat from the shelter."]
    assert shown("What pet did Maya adopt?", texts, scores=[1.0, 0.9]) == [texts[1]]
    assert shown("What pet did Leo adopt?", texts, scores=[0.9, 1.0]) == [texts[0]]
    # A question that names no one keeps the order of the scores.
    assert shown("What pet was adopted?", texts, scores=[1.0, 0.9]) == [texts[0]]


def test_a_when_question_prefers_a_time_and_a_how_long_question_a_duration():
    texts = ["Maya: The race was a great experience", "Maya: The race was last Saturday, so fun"]
    assert shown("When did Maya run the race?", texts, scores=[1.0, 0.9]) == [texts[1]]
    assert shown("What did Maya think of the race?", texts, scores=[1.0, 0.9]) == [texts[0]]
    kept = ["Nate: The turtles are calm and fun to watch", "Nate: I've had the turtles for 3 years now"]
    assert shown("How long has Nate had his turtles?", kept, scores=[1.0, 0.9]) == [kept[1]]


def test_a_turn_that_says_the_questions_rare_words_is_shown_first():
    texts = [
        "Melanie: My family has been awesome, so much love and support.",
        "Melanie: Family time matters to me.",
        "Melanie: My family and I love camping by the lake.",
        "Melanie: The roadtrip with my family was insane, we were so lucky.",
    ]
    scores = [1.0, 0.9, 0.9, 0.6]
    # Every turn says "family" and "Melanie"; one says "roadtrip": it answers.
    assert shown("What happened on Melanie's family roadtrip?", texts, scores) == [texts[3]]
    # A question whose words every candidate says keeps the order of the scores.
    assert shown("What does Melanie say about her family?", texts, scores) == [texts[0]]
    # A word is said by the words that begin with it, less its last two letters ("skyped", "skype").
    skype = ["Tim: I met a lot of people.", "Tim: Skype was fun."]
    assert shown("Who did Tim meet when he skyped?", skype, [1.0, 0.5]) == [skype[1]]


def test_the_rarity_of_a_word_is_counted_among_the_candidates():
    clues = Clues.of("What did Maya paint at the lake?")
    assert clues.terms == {"maya", "pain", "lake"}  # stopwords ("what", "did", "at", "the") tell nothing
    weighed = clues.among(rows("Maya: I love the lake", "Maya: I painted it", "Maya: hello"))
    assert weighed.rarity["pain"] == weighed.rarity["lake"] > weighed.rarity["maya"]
    # A turn whose text was not read, or a question with no word that tells, weighs as before.
    assert weighed.lift(TurnRow(pk=99, episode_id=1, seq=0, public_id="t99", chars=40)) == 1.0
    assert Clues.of("what did they do?").among(rows("Maya: I painted it")).lift(rows("Maya: x")[0]) == 1.0


def test_clues_read_only_what_the_question_says():
    assert Clues.of("when did we meet?").answer is not None
    assert Clues.of("How long ago did she move?").answer is Clues.of("When did she move?").answer
    assert Clues.of("Что подарил Нейт?").answer is None
    # "may" the verb is not a month; a turn whose text was not read weighs as before.
    when = Clues.of("When did Maya move?")
    assert when.lift(rows("Bo: we may go")[0]) == 1.0
    assert when.lift(TurnRow(pk=1, episode_id=1, seq=0, public_id="t1", chars=40)) == 1.0


@pytest.mark.django_db(transaction=True)
def test_search_reads_a_packed_hits_candidates_to_weigh_them_by_the_question(caller):
    said = [
        "Leo: We adopted a cat! A grey cat from the shelter.",
        "Maya: Yes, we got a grey one from the shelter.",
    ]
    episode_id = turns(caller, "s1", said)["episode_ids"][0]
    pack(episode_id, "warm")
    response = caller.post(
        "/api/v1/search", {"query": "What cat did Maya adopt?", "max_tokens": max(cost(t) for t in said)}
    )
    assert response.status_code == 200, response.json()
    text = next(h for h in response.json()["results"] if h["episode_id"] == episode_id)["text"]
    assert said[1] in text and said[0] not in text
