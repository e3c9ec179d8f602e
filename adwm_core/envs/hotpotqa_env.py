"""HotpotQA (Yang et al., 2018) as the question-answering environment of ReAct (Yao et al., 2023).

An episode is one multi-hop question. The agent reads pages of a small local
encyclopedia and answers:

- ``search[entity]``: if a page is titled ``entity`` (case and spacing
  ignored), its first ``PAGE_SENTENCES`` sentences, and it becomes the page
  that ``lookup`` reads; pages among the question's own context paragraphs come
  first when two share a title. Otherwise, as Wikipedia's search page does for
  ReAct, ``Could not find <entity>. Similar: [...]`` with the titles of the
  ``SIMILAR_TITLES`` best pages by BM25 (``bm25s``) over title and text; the
  page ``lookup`` reads stays the one found before.
- ``lookup[keyword]``: the next sentence of that page containing ``keyword``
  (case ignored), as ``(Result i / n) <sentence>``, then ``No more results.``
- ``finish[answer]``: ends the episode. reward = score = F1 of the answer
  against the gold answer under HotpotQA's official normalisation (lowercase,
  punctuation and the articles a/an/the removed, spaces collapsed; a yes, no or
  noanswer on either side scores 0 unless both are equal); success = exact
  match after that normalisation (EM). Every earlier step gives 0.

Action names are read case-insensitively (ReAct's prompts write ``Search[...]``).
An action of none of these forms, or with an empty argument, is refused
(``action_valid`` False, the reply names the valid forms) and the episode goes
on; a step after ``finish`` is refused too.

Data (the ``data`` option, else ``$HOTPOTQA_DATA``, else the offline set):

- a folder holding HotpotQA's ``hotpot_dev_distractor_v1.json`` (or the path
  of any questions file in that format, e.g. ``hotpot_train_v1.1.json``). One
  file gives all three splits, as the ReAct paper drew its questions from the
  dev set; its corpus is every distinct (title, sentences) context paragraph
  of the file (at most ten per question), i.e. the distractor setting
  pooled over all questions;
- ``"offline"``: 36 handwritten questions (18 bridge, 18 comparison) with 6
  paragraphs each (2 gold, 4 distractors), in the same format, shipped under
  ``data/hotpotqa/`` for tests and local cells.

A file is read, and its corpus built, once per process and shared by every
environment on it; the BM25 index is built on the first search that needs it
(about ten seconds for 74,000 paragraphs, on one core).

Splits: question ``i`` of the file (its position) belongs to train when
``i % 6`` is 0-3, dev when it is 4, test when it is 5 (4:1:1; 24/6/6 offline).
Tasks: ``bridge`` and ``comparison``, HotpotQA's question types, which
partition the questions (a cell's ``task: "*"`` takes both). A variation is
the question's position in the file.

Admissible actions, fixed per question and at most 27 (10 context titles):
``search[title]`` for the question's context titles in the file's order;
``lookup[word]`` for the first ``LOOKUP_KEYWORDS`` content words of the
question not in a context title; ``finish[c]`` for the gold answer, the context
titles, ``OTHER_ANSWERS`` answers of other questions (drawn with the question id
as seed) and, for comparison questions, yes and no, in normalised alphabetical
order so the gold answer's place tells nothing. Free text of a valid form is
accepted too.

Gold actions: ``search[title]`` for each supporting-fact title in order, then
``finish[gold answer]``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import string
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from .base import EnvironmentUnavailable, Observation, StepResult, TextEnv, check_split
from .bm25 import import_bm25s

DATA_VARIABLE = "HOTPOTQA_DATA"
OFFLINE = "offline"
OFFLINE_FILE = Path(__file__).parent / "data" / "hotpotqa" / "offline_questions.json"
OFFICIAL_FILE = "hotpot_dev_distractor_v1.json"
OFFICIAL_URL = "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json"

TASKS = ("bridge", "comparison")
SPLIT_OF_RESIDUE = ("train", "train", "train", "train", "dev", "test")  # by question position mod 6
PAGE_SENTENCES = 5
SIMILAR_TITLES = 5
LOOKUP_KEYWORDS = 2
OTHER_ANSWERS = 2
FORMS = "search[entity], lookup[keyword] or finish[answer]"
INSTRUCTIONS = (
    "Answer the question using a small encyclopedia. Actions: search[entity] shows the page titled "
    "entity (or similar titles), lookup[keyword] the next sentence of that page containing keyword, "
    "finish[answer] submits your answer and ends the episode."
)

_ACTION = re.compile(r"\s*(search|lookup|finish)\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_YES_NO = ("yes", "no", "noanswer")
# Words too common in questions to be worth a lookup.
_QUESTION_WORDS = frozenset(
    "which what where when whose whom does were was did have has than that this from with into both "
    "same more most first after before about there their they other".split()
)


# --- Answer scoring (HotpotQA's official evaluation) ---

def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, collapse spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_f1(prediction: str, gold: str) -> float:
    """Token F1 of the normalised answers; 0 when a yes/no/noanswer on either side differs."""
    predicted, expected = normalize_answer(prediction), normalize_answer(gold)
    if (predicted in _YES_NO or expected in _YES_NO) and predicted != expected:
        return 0.0
    predicted_tokens, expected_tokens = predicted.split(), expected.split()
    common = sum((Counter(predicted_tokens) & Counter(expected_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted_tokens), common / len(expected_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


# --- Questions and corpus ---

@dataclass(frozen=True)
class Page:
    title: str
    sentences: tuple[str, ...]

    def text(self, n: int | None = None) -> str:
        return " ".join(s.strip() for s in self.sentences[:n]) or f"(The page {self.title} is empty.)"


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answer: str
    type: str
    supporting_titles: tuple[str, ...]
    context: tuple[int, ...]  # page ids, in the file's order


def _title_key(text: str) -> str:
    return " ".join(text.replace("_", " ").split()).casefold()


@cache
def _stopwords() -> frozenset[str]:
    return frozenset(import_bm25s().stopwords.STOPWORDS_EN)


def _tokens(text: str) -> list[str]:
    return [w for w in re.findall(r"\w+", text.lower()) if w not in _stopwords()]


def _malformed(path: Path, what: str) -> ValueError:
    return ValueError(f"{path} is not a HotpotQA questions file: {what}")


def _check_item(path: Path, i: int, item) -> None:
    if not isinstance(item, dict):
        raise _malformed(path, f"question {i} is a {type(item).__name__}, not an object")
    for key, kind in (("_id", str), ("question", str), ("answer", str), ("supporting_facts", list), ("context", list)):
        if not isinstance(item.get(key), kind):
            raise _malformed(path, f"question {i} lacks {key!r} (a {kind.__name__})")
    if item.get("type") not in TASKS:
        raise _malformed(path, f"question {i} has type {item.get('type')!r}, not one of {', '.join(TASKS)}")
    for paragraph in item["context"]:
        if not (isinstance(paragraph, list) and len(paragraph) == 2 and isinstance(paragraph[0], str)
                and isinstance(paragraph[1], list) and all(isinstance(s, str) for s in paragraph[1])):
            raise _malformed(path, f"question {i} has a context entry that is not [title, [sentences...]]")
    for fact in item["supporting_facts"]:
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
            raise _malformed(path, f"question {i} has a supporting fact that is not [title, sentence index]")


class Corpus:
    """The questions of one file and its distinct context paragraphs, BM25-indexed on first need."""

    def __init__(self, path: Path) -> None:
        try:
            with open(path, encoding="utf-8") as f:
                items = json.load(f)
        except json.JSONDecodeError as err:
            raise _malformed(path, f"invalid JSON ({err})") from None
        if not isinstance(items, list) or not items:
            raise _malformed(path, "expected a non-empty JSON list of questions")
        self.pages: list[Page] = []
        self.by_title: dict[str, int] = {}  # first page of each title
        page_ids: dict[Page, int] = {}
        self.questions: list[Question] = []
        for i, item in enumerate(items):
            _check_item(path, i, item)
            context = []
            for title, sentences in item["context"]:
                page = Page(title, tuple(sentences))
                if page not in page_ids:
                    page_ids[page] = len(self.pages)
                    self.pages.append(page)
                    self.by_title.setdefault(_title_key(title), page_ids[page])
                context.append(page_ids[page])
            supporting = tuple(dict.fromkeys(title for title, _ in item["supporting_facts"]))
            self.questions.append(Question(item["_id"], item["question"], item["answer"], item["type"],
                                           supporting, tuple(context)))
        self._bm25 = None

    def similar(self, query: str, k: int) -> list[str]:
        """Distinct titles of the ``k`` best pages for ``query`` by BM25 (ties: corpus order)."""
        if self._bm25 is None:
            self._bm25 = import_bm25s().BM25()
            self._bm25.index([_tokens(f"{p.title} {p.text()}") for p in self.pages], show_progress=False)
        ids = self._bm25.get_tokens_ids(_tokens(query))
        if not ids:
            return []
        scores = self._bm25.get_scores_from_ids(ids)
        order = np.lexsort((np.arange(len(scores)), -scores))
        titles: list[str] = []
        for i in order:
            if scores[i] <= 0 or len(titles) == k:
                break
            if self.pages[i].title not in titles:
                titles.append(self.pages[i].title)
        return titles

    def other_answers(self, question: Question, n: int) -> list[str]:
        """``n`` distinct answers of other questions (not yes/no), drawn with the question's id as seed."""
        excluded = {normalize_answer(question.answer), *_YES_NO}
        rng = random.Random(question.id)
        picked: list[str] = []
        for j in rng.sample(range(len(self.questions)), min(len(self.questions), 4 * n + 4)):
            answer = self.questions[j].answer
            if normalize_answer(answer) not in excluded and len(picked) < n:
                picked.append(answer)
                excluded.add(normalize_answer(answer))
        return picked


_CORPORA: dict[tuple, Corpus] = {}


def load_corpus(path: Path) -> Corpus:
    """The corpus of ``path``, read once per process (per file version)."""
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_mtime_ns, stat.st_size)
    if key not in _CORPORA:
        _CORPORA[key] = Corpus(Path(path))
    return _CORPORA[key]


def resolve_data(data: str | None) -> Path:
    """The questions file named by ``data``, else ``$HOTPOTQA_DATA``, else the offline set."""
    source = data or os.environ.get(DATA_VARIABLE) or OFFLINE
    if source == OFFLINE:
        if not OFFLINE_FILE.is_file():
            raise EnvironmentUnavailable(f"the offline HotpotQA questions {OFFLINE_FILE} are missing: reinstall ADWM")
        return OFFLINE_FILE
    named = f"data={source!r}" if data else f"${DATA_VARIABLE}={source}"
    instead = "" if data else f", or unset {DATA_VARIABLE} to use the offline questions shipped with ADWM"
    path = Path(source).expanduser()
    if path.is_file():
        return path
    if not path.is_dir():
        raise EnvironmentUnavailable(
            f"{named} does not exist: point it at the folder holding HotpotQA's {OFFICIAL_FILE}{instead}"
        )
    if not (path / OFFICIAL_FILE).is_file():
        raise EnvironmentUnavailable(
            f"{named} has no {OFFICIAL_FILE}: HotpotQA's questions file must be at {path / OFFICIAL_FILE}. "
            f"Download it on a connected machine ({OFFICIAL_URL}) and copy it there{instead}."
        )
    return path / OFFICIAL_FILE


class HotpotQAEnv(TextEnv):
    name = "hotpotqa"
    react_actions = True
    reward_range = return_range = (0.0, 1.0)  # the answer's F1, paid once at finish[...]

    def __init__(self, data: str | None = None) -> None:
        """``data``: a folder holding ``hotpot_dev_distractor_v1.json``, a questions file, or
        ``"offline"``; by default ``$HOTPOTQA_DATA`` if set, else ``"offline"``."""
        self.path = resolve_data(data)
        self._corpus: Corpus | None = None
        self._index: int | None = None  # the current question
        self._admissible: tuple[str, ...] = ()
        self._page: Page | None = None  # the page lookup reads
        self._lookup: tuple[str, list[str]] | None = None  # keyword, its sentences on that page
        self._shown = 0  # of those sentences
        self._done, self._score, self._success = False, 0.0, False

    @classmethod
    def write_offline_data(cls, folder: str) -> str:
        """The offline questions (already in HotpotQA's format) as ``folder/hotpot_dev_distractor_v1.json``."""
        os.makedirs(folder, exist_ok=True)
        shutil.copyfile(resolve_data(OFFLINE), os.path.join(folder, OFFICIAL_FILE))
        return folder

    @property
    def corpus(self) -> Corpus:
        if self._corpus is None:
            self._corpus = load_corpus(self.path)
        return self._corpus

    def tasks(self) -> list[str]:
        return list(TASKS)

    def _check_task(self, task: str) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown HotpotQA task {task!r}; known: {', '.join(TASKS)}")

    def variations(self, task: str, split: str) -> list[int]:
        check_split(split)
        self._check_task(task)
        return [i for i, q in enumerate(self.corpus.questions)
                if SPLIT_OF_RESIDUE[i % 6] == split and q.type == task]

    @property
    def question(self) -> Question:
        if self._index is None:
            raise RuntimeError("call reset() first")
        return self.corpus.questions[self._index]

    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        self._check_task(task)
        questions = self.corpus.questions
        if not 0 <= variation < len(questions):
            raise ValueError(f"HotpotQA has no question {variation} in {self.path} ({len(questions)} questions)")
        if task != questions[variation].type:
            raise ValueError(f"HotpotQA question {variation} is a {questions[variation].type} question, not {task}")
        self._index = variation
        self._page, self._lookup, self._shown = None, None, 0
        self._done, self._score, self._success = False, 0.0, False
        self._admissible = self._list_admissible()
        return self._observation(f"Question: {self.question.question}")

    def _observation(self, text: str) -> Observation:
        return Observation(text, f"{INSTRUCTIONS}\nQuestion: {self.question.question}", self._admissible)

    def _context_titles(self) -> list[str]:
        return list(dict.fromkeys(self.corpus.pages[p].title for p in self.question.context))

    def _list_admissible(self) -> tuple[str, ...]:
        question, titles = self.question, self._context_titles()
        in_titles = {w for t in titles for w in re.findall(r"\w+", t.lower())}
        words = [w for w in dict.fromkeys(re.findall(r"\w+", question.question.lower()))
                 if len(w) > 3 and w not in _QUESTION_WORDS and w not in in_titles]
        candidates = [question.answer, *titles, *self.corpus.other_answers(question, OTHER_ANSWERS)]
        if question.type == "comparison":
            candidates += ["yes", "no"]
        by_norm: dict[str, str] = {}
        for candidate in candidates:  # the gold answer first: its spelling is the one listed
            by_norm.setdefault(normalize_answer(candidate), candidate)
        return (
            *(f"search[{t}]" for t in titles),
            *(f"lookup[{w}]" for w in words[:LOOKUP_KEYWORDS]),
            *(f"finish[{by_norm[k]}]" for k in sorted(by_norm)),
        )

    def _page_titled(self, entity: str) -> Page | None:
        key, pages = _title_key(entity), self.corpus.pages
        for p in self.question.context:
            if _title_key(pages[p].title) == key:
                return pages[p]
        found = self.corpus.by_title.get(key)
        return None if found is None else pages[found]

    def _search(self, entity: str) -> str:
        page = self._page_titled(entity)
        if page is None:
            return f"Could not find {entity}. Similar: {self.corpus.similar(entity, SIMILAR_TITLES)}."
        self._page, self._lookup = page, None
        return page.text(PAGE_SENTENCES)

    def _look_up(self, keyword: str) -> str:
        if self._page is None:
            return "There is no page to look up in yet: search[entity] for one first."
        key = keyword.lower()
        if self._lookup is None or self._lookup[0] != key:
            self._lookup = (key, [s.strip() for s in self._page.sentences if key in s.lower()])
            self._shown = 0
        hits = self._lookup[1]
        if self._shown >= len(hits):
            return "No more results."
        self._shown += 1
        return f"(Result {self._shown} / {len(hits)}) {hits[self._shown - 1]}"

    def _result(self, text: str, reward: float = 0.0, valid: bool = True) -> StepResult:
        return StepResult(self._observation(text), reward, self._done, self._score, self._success, valid)

    def step(self, action: str) -> StepResult:
        if self._index is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return self._result("The episode is over: finish[...] was already given.", valid=False)
        match = _ACTION.fullmatch(action)
        argument = " ".join(match.group(2).split()) if match else ""
        if not argument:
            return self._result(f"Invalid action: {action!r}. Valid actions are {FORMS}.", valid=False)
        verb = match.group(1).lower()
        if verb == "search":
            return self._result(self._search(argument))
        if verb == "lookup":
            return self._result(self._look_up(argument))
        gold = self.question.answer
        self._done, self._score, self._success = True, answer_f1(argument, gold), exact_match(argument, gold)
        verdict = "exact match" if self._success else "no exact match"
        return self._result(f"Episode finished: answer F1 {self._score:.3f}, {verdict}.", reward=self._score)

    def gold_actions(self) -> list[str]:
        question = self.question
        return [*(f"search[{t}]" for t in question.supporting_titles), f"finish[{question.answer}]"]
