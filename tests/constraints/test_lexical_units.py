"""The lexical constraints (`constraints/lexical/constraints.py`) one at a time, without a
model: what each judges, under which word rules, what it tells the layout, how a spec entry
becomes one, and what the checks of a spec's entries refuse, in their words."""

from __future__ import annotations

import pytest

from cdd_cli.constraints.descriptor import ConstraintSpec, Key
from cdd_cli.constraints.lexical import constraints as lexical
from cdd_cli.constraints.lexical.constraints import (
    Count,
    Exclude,
    Include,
    SentenceCount,
    WordAt,
    WordCount,
    check_count,
    check_counts,
    check_lexical_together,
    check_word_at,
    check_words,
    lexical_from_spec,
)
from cdd_cli.constraints.lexical.layout import WordLayout
from cdd_cli.errors import InputError

# COLLIE reads "don't" as two words ("do", "n't") and compares words lower-cased; the plain
# rules read it as one and compare as written.
TEXT = "The whale don't sleep"
# COLLIE: "?" and "!" always end a sentence ('"Oh!" he said.' is two); plain: a sentence
# ends only before a word that is not lower-case (one).
SAID = '"Oh!" he said.'


def spec(type_: str, where: str = "s.yaml:3", **options) -> ConstraintSpec:
    return ConstraintSpec(type=type_, options=options, where=where)


# --------------------------------------------------------------------------------------------
# The judges


def test_word_at_judges_the_word_at_a_position_under_its_word_rules():
    plain = WordAt(position=1, word="the")
    collie = WordAt(position=1, word="the", scheme="collie")
    assert plain.judge([TEXT, "the whale"]) == [0.0, 1.0]
    assert collie.judge([TEXT, "the whale"]) == [1.0, 1.0]
    assert plain.explain(TEXT) == "word 1 is 'The', not 'the'"
    assert collie.explain(TEXT) == "word 1 is 'the'"
    # From the end: COLLIE's last-but-one word is "n't", the plain rules' is "don't".
    assert WordAt(position=-2, word="don't").judge([TEXT]) == [1.0]
    assert WordAt(position=-2, word="n't", scheme="collie").judge([TEXT]) == [1.0]
    assert WordAt(position=-2, word="don't", scheme="collie").judge([TEXT]) == [0.0]
    assert WordAt(position=5, word="x").explain(TEXT) == (
        "word 5 should be 'x', but the text has 4 words"
    )
    assert WordAt(position=5, word="x", scheme="collie").explain(TEXT) == (
        "word 5 is 'sleep', not 'x'"
    )


def test_word_at_pins_its_word_and_is_labelled_with_it():
    c = WordAt(position=-1, word="harpooneer")
    assert c.pinned() == {-1: "harpooneer"}
    assert c.included() == () and c.forbidden() == ()
    assert c.word_bounds() == (None, None) and c.sentence_bounds() == (None, None)
    assert c.label() == "word -1 = 'harpooneer'"
    assert c.closed_form() is WordLayout
    assert c.tau == 1.0 and not c.upper_bound and c.name == "word_at"
    assert c.satisfied(1.0) and not c.satisfied(0.0) and c.accepts("a harpooneer")


def test_include_judges_that_every_word_occurs():
    plain = Include(words=("whale", "the"))
    collie = Include(words=("whale", "the"), scheme="collie")
    assert plain.judge([TEXT, "the whale", "whale"]) == [0.0, 1.0, 0.0]
    assert collie.judge([TEXT, "the whale", "whale"]) == [1.0, 1.0, 0.0]
    assert plain.explain(TEXT) == "missing 1 word(s): ['the']"
    assert collie.explain(TEXT) == "all 2 word(s) present"
    assert plain.included() == ("whale", "the") and plain.pinned() == {}
    assert plain.forbidden() == () and plain.label() == "includes whale, the"
    assert plain.name == "include"


def test_exclude_judges_that_no_word_occurs():
    plain = Exclude(words=("the", "sleep"))
    collie = Exclude(words=("the", "n't"), scheme="collie")
    assert plain.judge([TEXT, "The whale"]) == [0.0, 1.0]
    assert collie.judge([TEXT, "The whale"]) == [0.0, 0.0]
    assert Exclude(words=("n't",)).judge([TEXT]) == [1.0]
    assert plain.explain(TEXT) == "contains forbidden word(s): ['sleep']"
    assert collie.explain(TEXT) == "contains forbidden word(s): ['the', \"n't\"]"
    assert plain.explain("The whale") == "none of 2 forbidden word(s) present"
    assert plain.forbidden() == ("the", "sleep") and plain.included() == ()
    assert plain.label() == "excludes the, sleep" and plain.name == "exclude"


@pytest.mark.parametrize(
    ("bounds", "plain", "collie"),
    [
        # TEXT is 4 plain words, 5 COLLIE words.
        ({"min": 5}, 0.0, 1.0),
        ({"min": 4}, 1.0, 1.0),
        ({"max": 4}, 1.0, 0.0),
        ({"max": 5}, 1.0, 1.0),
        ({"equals": 4}, 1.0, 0.0),
        ({"equals": 5}, 0.0, 1.0),
        ({"min": 3, "max": 4}, 1.0, 0.0),
        ({"min": 5, "max": 6}, 0.0, 1.0),
    ],
)
def test_word_count_judges_the_number_of_words_under_its_rules(bounds, plain, collie):
    assert WordCount(**bounds).judge([TEXT]) == [plain]
    assert WordCount(**bounds, scheme="collie").judge([TEXT]) == [collie]


def test_word_count_says_the_count_and_what_it_wanted():
    assert WordCount(min=5).explain(TEXT) == "4 words (wanted >= 5)"
    assert WordCount(max=3, scheme="collie").explain(TEXT) == "5 words (wanted <= 3)"
    assert WordCount(equals=1).explain("whale") == "1 word (wanted == 1)"


@pytest.mark.parametrize(
    ("c", "bounds", "label"),
    [
        (WordCount(min=2), (2, None), "2..any words"),
        (WordCount(max=5), (None, 5), "0..5 words"),
        (WordCount(min=2, max=5), (2, 5), "2..5 words"),
        (WordCount(equals=3), (3, 3), "3..3 words"),
        (WordCount(equals=0), (0, 0), "0..0 words"),
        (WordCount(min=0, max=0), (0, 0), "0..0 words"),
    ],
)
def test_word_count_bounds_and_label(c: WordCount, bounds, label):
    assert c.bounds() == bounds and c.word_bounds() == bounds
    assert c.sentence_bounds() == (None, None)
    assert c.label() == label and c.name == "word_count"


@pytest.mark.parametrize(
    ("bounds", "plain", "collie"),
    [
        # SAID is 1 plain sentence, 2 COLLIE sentences.
        ({"min": 2}, 0.0, 1.0),
        ({"max": 1}, 1.0, 0.0),
        ({"equals": 1}, 1.0, 0.0),
        ({"equals": 2}, 0.0, 1.0),
        ({"min": 1, "max": 1}, 1.0, 0.0),
        ({"min": 2, "max": 3}, 0.0, 1.0),
    ],
)
def test_sentence_count_judges_the_number_of_sentences_under_its_rules(bounds, plain, collie):
    assert SentenceCount(**bounds).judge([SAID]) == [plain]
    assert SentenceCount(**bounds, scheme="collie").judge([SAID]) == [collie]


def test_sentence_count_tells_the_layout_sentences_not_words():
    c = SentenceCount(min=2, max=4)
    assert c.sentence_bounds() == (2, 4) and c.word_bounds() == (None, None)
    assert SentenceCount(equals=3).sentence_bounds() == (3, 3)
    assert c.label() == "2..4 sentences" and SentenceCount(max=1).label() == "0..1 sentences"
    assert SentenceCount(min=1).label() == "1..any sentences"
    assert c.name == "sentence_count"
    assert SentenceCount(min=2).explain(SAID) == "1 sentence (wanted >= 2)"
    assert SentenceCount(max=1, scheme="collie").explain(SAID) == "2 sentences (wanted <= 1)"


# --------------------------------------------------------------------------------------------
# count: the question from the spec or the prompt

STRAWBERRY = "How many r's are in strawberry?"


def test_count_with_letter_and_word_keeps_them_and_takes_the_prompt():
    c = Count(letter="R", word="StRawbeRry").with_prompt("Anything at all", 7)
    assert c.resolved == ("R", "StRawbeRry")
    assert c.prompt == "Anything at all" and c.prompt_length == 7
    assert c.answer() == 3  # case-insensitive, both ways
    assert c.pinned() == {1: "3"}
    assert c.label() == "count of 'R' in 'StRawbeRry'"
    assert c.judge(["It has 3 of them.", "It has 2.", "none"]) == [1.0, 0.0, 0.0]
    assert c.explain("It has 3.") == "first number is 3; 'R' occurs 3 time(s) in 'StRawbeRry'"


def test_count_reads_what_the_spec_leaves_out_from_the_prompt():
    asked = Count().with_prompt(STRAWBERRY, 9)
    assert asked.resolved == ("r", "strawberry") and asked.prompt_length == 9
    assert asked.prompt == STRAWBERRY and asked.answer() == 3
    assert Count(letter="e").with_prompt(STRAWBERRY, 9).resolved == ("e", "strawberry")
    assert Count(word="banana").with_prompt(STRAWBERRY, 9).resolved == ("r", "banana")
    assert Count(letter="a", word="banana").with_prompt(STRAWBERRY, 9).answer() == 3


def test_count_without_a_question_is_refused_saying_why():
    with pytest.raises(InputError) as no_prompt:
        Count().with_prompt("", 0)
    assert str(no_prompt.value) == (
        "count: no 'letter' and 'word' in the spec, and there is no prompt "
        '(e.g. "How many r\'s are in strawberry?")'
    )
    with pytest.raises(InputError) as not_asked:
        Count(letter="r").with_prompt("Tell me a story", 4)
    assert str(not_asked.value) == (
        "count: no 'letter' and 'word' in the spec, and the prompt 'Tell me a story' does not "
        'ask one (e.g. "How many r\'s are in strawberry?")'
    )


def test_count_before_its_question_is_known_cannot_judge_or_answer():
    c = Count()
    assert c.label() == "count" and c.name == "count"
    for call in (c.answer, lambda: c.check("3"), lambda: c.judge(["3"])):
        with pytest.raises(InputError) as unknown:
            call()
        assert str(unknown.value) == "count: letter and word are unknown (no prompt given)"


def test_count_compares_as_equal_whatever_it_resolved():
    assert Count(letter="r", word="berry") == Count(letter="r", word="berry", resolved=("r", "x"))


# --------------------------------------------------------------------------------------------
# From a spec entry


@pytest.mark.parametrize("words", ["plain", "collie"])
def test_each_spec_entry_becomes_its_constraint_under_the_spec_word_rules(words):
    rules = {"scheme": words, "judge_name": f"{words}-words"}
    made = {
        "word_at": lexical_from_spec("word_at", {"position": -2, "word": "whale"}, words),
        "include": lexical_from_spec("include", {"words": ["a", "b"]}, words),
        "exclude": lexical_from_spec("exclude", {"words": ["c"]}, words),
        "word_count": lexical_from_spec("word_count", {"min": 2, "max": 9}, words),
        "sentence_count": lexical_from_spec("sentence_count", {"equals": 3}, words),
    }
    assert made == {
        "word_at": WordAt(position=-2, word="whale", **rules),
        "include": Include(words=("a", "b"), **rules),
        "exclude": Exclude(words=("c",), **rules),
        "word_count": WordCount(min=2, max=9, **rules),
        "sentence_count": SentenceCount(equals=3, **rules),
    }
    assert type(made["word_count"]) is WordCount
    assert type(made["sentence_count"]) is SentenceCount
    assert made["word_count"].equals is None and made["sentence_count"].min is None
    assert lexical_from_spec("word_count", {"max": 4}, words).bounds() == (None, 4)
    assert lexical_from_spec("sentence_count", {"min": 1}, words).bounds() == (1, None)


def test_a_count_entry_is_resolved_when_it_gives_letter_and_word():
    whole = lexical_from_spec("count", {"letter": "r", "word": "berry"}, "collie")
    assert whole.resolved == ("r", "berry") and whole.scheme == "collie"
    assert whole.judge_name == "plain-words"  # counting reads digits and letters, not words
    assert whole.letter == "r" and whole.word == "berry" and whole.answer() == 2
    for options in ({}, {"letter": "r"}, {"word": "berry"}):
        partial = lexical_from_spec("count", options, "plain")
        assert partial.resolved is None and partial.letter == options.get("letter")
        assert partial.word == options.get("word")


def test_a_type_that_is_not_lexical_is_refused():
    with pytest.raises(InputError) as refused:
        lexical_from_spec("regex", {"pattern": "a"}, "plain")
    assert str(refused.value) == "constraint type 'regex' is not lexical"


def test_build_makes_the_one_constraint_of_an_entry():
    entry = spec("include", words=["whale"])
    assert lexical.build(entry, None, "cpu", "collie") == [
        Include(words=("whale",), scheme="collie", judge_name="collie-words")
    ]


def test_each_descriptor_is_a_text_type_checked_with_the_others():
    by_name = {d.name: d for d in lexical.DESCRIPTORS}
    assert list(by_name) == [
        "word_at",
        "include",
        "exclude",
        "word_count",
        "sentence_count",
        "count",
    ]
    for d in lexical.DESCRIPTORS:
        assert d.domain == "text" and d.build is lexical.build
        assert d.check_together is check_lexical_together
        assert d.spec_only == (d.name != "count")
    made = lexical._lexical("x", "what x is", {"k": Key((int,))}, check_words)
    assert (made.name, made.description, made.domain) == ("x", "what x is", "text")
    assert made.keys == {"k": Key((int,))} and made.check is check_words
    assert made.spec_only and made.build is lexical.build
    assert made.check_together is check_lexical_together
    assert not lexical._lexical("y", "", {}, check_count, spec_only=False).spec_only


# --------------------------------------------------------------------------------------------
# Checks of one entry


def test_word_at_needs_a_position_other_than_0_and_a_word():
    check_word_at(spec("word_at", position=-1, word="whale"))
    check_word_at(spec("word_at", position=1, word="a"))
    with pytest.raises(InputError) as zero:
        check_word_at(spec("word_at", position=0, word="whale"))
    assert str(zero.value) == "s.yaml:3: key 'position': 1-based (negative from the end), not 0"
    with pytest.raises(InputError) as blank:
        check_word_at(spec("word_at", position=2, word=" \t"))
    assert str(blank.value) == "s.yaml:3: key 'word' is empty"


@pytest.mark.parametrize("words", [[], ["whale", ""], ["  "], ["whale", 3], [None]])
def test_include_and_exclude_need_a_list_of_non_empty_words(words):
    with pytest.raises(InputError) as refused:
        check_words(spec("include", words=words))
    assert str(refused.value) == "s.yaml:3: key 'words' must be a list of non-empty words"


def test_include_and_exclude_take_non_empty_words():
    check_words(spec("exclude", words=["whale"]))
    check_words(spec("include", words=["a", " b "]))


@pytest.mark.parametrize(
    "bounds",
    [{"min": 0}, {"max": 0}, {"equals": 0}, {"min": 3}, {"max": 3}, {"min": 3, "max": 3}],
)
def test_counts_take_bounds_that_some_count_meets(bounds):
    check_counts(spec("word_count", **bounds))
    check_counts(spec("sentence_count", **bounds))


@pytest.mark.parametrize(
    ("type_", "bounds", "message"),
    [
        ("word_count", {}, "word_count needs min, max or equals"),
        ("sentence_count", {"tau": 1.0}, "sentence_count needs min, max or equals"),
        ("word_count", {"min": -1}, "word counts must be >= 0"),
        ("word_count", {"max": -2}, "word counts must be >= 0"),
        ("sentence_count", {"equals": -1}, "sentence counts must be >= 0"),
        ("word_count", {"min": 1, "max": -1}, "word counts must be >= 0"),
        ("word_count", {"equals": 2, "min": 1}, "give 'equals' alone, or 'min'/'max'"),
        ("sentence_count", {"equals": 2, "max": 3}, "give 'equals' alone, or 'min'/'max'"),
        ("word_count", {"min": 4, "max": 3}, "min 4 > max 3"),
        ("word_count", {"min": 1, "max": 0}, "min 1 > max 0"),
    ],
)
def test_counts_refuse_bounds_no_count_meets_saying_why(type_, bounds, message):
    with pytest.raises(InputError) as refused:
        check_counts(spec(type_, **bounds))
    assert str(refused.value) == f"s.yaml:3: {message}"


@pytest.mark.parametrize(
    "options", [{}, {"letter": "r", "word": "berry"}, {"letter": "R", "word": " x "}]
)
def test_count_takes_a_whole_question_or_none(options):
    check_count(spec("count", **options))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"letter": "rr", "word": "berry"}, "key 'letter' must be one character"),
        ({"letter": "", "word": "berry"}, "key 'letter' must be one character"),
        ({"letter": "r"}, "give both 'letter' and 'word', or neither (prompt)"),
        ({"word": "berry"}, "give both 'letter' and 'word', or neither (prompt)"),
        ({"letter": "r", "word": " "}, "key 'word' is empty"),
        ({"letter": "r", "word": ""}, "key 'word' is empty"),
    ],
)
def test_count_refuses_half_a_question_saying_why(options, message):
    with pytest.raises(InputError) as refused:
        check_count(spec("count", **options))
    assert str(refused.value) == f"s.yaml:3: {message}"


# --------------------------------------------------------------------------------------------
# Checks of the entries together


def refused_together(entries: list[ConstraintSpec], words: str) -> str | None:
    try:
        check_lexical_together(entries, words)
    except InputError as exc:
        return str(exc)
    return None


def test_one_word_slot_cannot_hold_two_words():
    entries = [
        spec("word_at", "a:1", position=2, word="whale"),
        spec("word_at", "a:5", position=2, word="Whale"),
    ]
    assert refused_together(entries, "plain") == (
        "a:5: word 2 cannot be 'Whale': a:1 makes it 'whale'"
    )
    assert refused_together(entries, "collie") is None  # the same word, lower-cased
    assert refused_together(entries[::-1], "collie") is None
    assert refused_together(entries[::-1], "plain") == (
        "a:1: word 2 cannot be 'whale': a:5 makes it 'Whale'"
    )
    assert (
        refused_together([*entries[:1], spec("word_at", "a:7", position=-2, word="sea")], "plain")
        is None
    )
    assert refused_together([entries[0], entries[0]], "plain") is None
    three = [*entries, spec("word_at", "a:9", position=2, word="fish")]
    assert refused_together(three, "collie") == "a:9: word 2 cannot be 'fish': a:5 makes it 'Whale'"


def test_a_word_required_and_excluded_is_refused_with_both_places():
    exclude = spec("exclude", "a:9", words=["sea", "The"])
    for required in (
        spec("include", "a:1", words=["whale", "The"]),
        spec("word_at", "a:1", position=1, word="The"),
    ):
        for order in ([required, exclude], [exclude, required]):
            assert refused_together(order, "plain") == (
                "a:1: 'The' is required here but excluded at a:9"
            )
    # COLLIE compares lower-cased: "the" required is "The" excluded, and the other way round.
    assert refused_together(
        [spec("include", "a:3", words=["The"]), spec("exclude", "a:8", words=["the"])], "collie"
    ) == ("a:3: 'The' is required here but excluded at a:8")
    lower = spec("include", "a:2", words=["the"])
    assert refused_together([lower, exclude], "collie") == (
        "a:2: 'the' is required here but excluded at a:9"
    )
    assert refused_together([lower, exclude], "plain") is None
    assert (
        refused_together(
            [spec("include", "a:1", words=["sea"]), spec("exclude", "a:4", words=["whale"])],
            "plain",
        )
        is None
    )


def test_a_word_the_rules_read_as_several_is_refused():
    for kind, options in (
        ("include", {"words": ["whale", "don't"]}),
        ("exclude", {"words": ["don't"]}),
        ("word_at", {"position": 1, "word": "don't"}),
    ):
        entry = spec(kind, "b:4", **options)
        assert refused_together([entry], "collie") == (
            'b:4: "don\'t" is not one word under the collie word rules (it reads as '
            "['do', \"n't\"])"
        )
        assert refused_together([entry], "plain") is None
    assert refused_together([spec("include", "b:4", words=["sea whale"])], "plain") == (
        "b:4: 'sea whale' is not one word under the plain word rules (it reads as ['sea', 'whale'])"
    )
    # Punctuation the rules strip leaves one word, compared by its key.
    assert refused_together([spec("include", "b:4", words=["whale,"])], "collie") is None


def test_entries_of_other_types_are_left_alone():
    entries = [spec("regex", "c:1", pattern="a b"), spec("word_count", "c:2", min=1)]
    assert refused_together(entries, "plain") is None
    assert refused_together([], "collie") is None


def test_the_word_rules_are_plain_unless_given():
    assert lexical_from_spec("include", {"words": ["a"]}) == Include(words=("a",))
    assert lexical_from_spec("word_at", {"position": 1, "word": "a"}).judge_name == "plain-words"
    assert lexical_from_spec("count", {"letter": "r", "word": "ray"}).scheme == "plain"
    assert check_lexical_together([spec("include", words=["don't"])]) is None
    with pytest.raises(InputError, match="'The' is required here but excluded"):
        check_lexical_together([spec("include", words=["The"]), spec("exclude", words=["The"])])
    entries = [spec("word_at", position=1, word="A"), spec("word_at", position=1, word="a")]
    with pytest.raises(InputError, match="word 1 cannot be 'a'"):
        check_lexical_together(entries)
