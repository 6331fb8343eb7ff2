"""More tasks for the scale prompt mix: about 27,000 prompts written for this project from lists, templates and
seeded random data, appended after ``prompt_mix``'s two parts (every earlier index keeps its prompt and its
distilled answer).

Kinds, as in :mod:`prompt_mix`: ``code_write`` (new tasks, and every task with a constraint), ``code_complete``
(function stubs built from verbs, objects and conditions), ``code_explain`` (small programs with random literals:
what do they print?), ``chat`` (new topics and frames, comparisons, rewrites in another tone), ``reasoning`` (more
word problems, sequences, probabilities), ``data`` (a small random table, then a question or a coding task about
it) and ``multi_turn`` (new follow-ups). HumanEval problems never appear: ``make_prompts.py`` drops any prompt that
shares a 6-word run or a function name with one (the same test ``peagle_lab.prompts.humaneval_overlap`` applies).
"""

from __future__ import annotations

import random

import prompt_mix as pm

NEW_TASKS = [
    "validates an IPv4 address written as four dotted numbers",
    "converts a Roman numeral such as 'MCMXCIV' to an integer",
    "converts an integer between 1 and 3999 to a Roman numeral",
    "finds the longest common prefix of a list of strings",
    "rotates a square matrix by 90 degrees clockwise",
    "flattens a nested list of arbitrary depth",
    "computes the Levenshtein distance between two words",
    "checks whether the brackets (), [] and {} in a string are balanced",
    "returns the n-th Fibonacci number using iteration",
    "finds all anagram groups in a list of words",
    "counts the lines, words and characters of a text file",
    "parses a query string such as 'a=1&b=two' into a dictionary",
    "builds a URL from a base address and a dictionary of query parameters",
    "computes the great-circle distance between two latitude/longitude points",
    "finds the first non-repeating character of a string",
    "converts snake_case identifiers to camelCase",
    "converts camelCase identifiers to snake_case",
    "splits a list into two lists by a predicate",
    "retries a function up to three times with exponential backoff",
    "limits the rate of calls to a function to N per second",
    "implements a least-recently-used cache with a fixed capacity",
    "implements a stack that also returns its minimum in constant time",
    "implements a simple key-value store that saves itself to a JSON file",
    "implements a to-do list with add, complete and list commands",
    "implements a bank account class that refuses overdrafts",
    "implements a matrix multiplication without libraries",
    "implements binary search on a sorted list",
    "implements insertion sort and counts the swaps it makes",
    "implements merge sort on a list of records by one field",
    "implements a simple tokenizer for arithmetic expressions",
    "evaluates an arithmetic expression with +, -, * and parentheses",
    "generates all subsets of a small set",
    "generates all permutations of a short string",
    "finds the longest increasing subsequence of a list of numbers",
    "computes the number of ways to climb n stairs taking 1 or 2 steps",
    "finds the majority element of a list, if there is one",
    "checks whether a sentence is a pangram",
    "masks all but the last four digits of a card number",
    "computes the age in years from a birth date",
    "groups a list of people by the first letter of their name",
    "finds duplicate files in a folder by comparing their hashes",
    "renames every file in a folder to lower case",
    "writes a list of dictionaries to a CSV file with a header row",
    "reads a CSV file and returns the average of one column",
    "computes the moving average of a time series with a given window",
    "detects outliers in a list of numbers with the interquartile range",
    "draws a text progress bar for a percentage",
    "formats a number with thousands separators",
    "converts a duration like '2h 15m 30s' into seconds",
    "checks whether a year is a leap year",
    "computes the day of the week for a given date",
    "lists the dates of all Mondays in a given month",
    "merges two dictionaries, summing the values of shared keys",
    "inverts a dictionary, collecting keys that share a value into lists",
    "finds the k most frequent words of a text",
    "wraps a long text to lines of at most 60 characters",
    "centres a title inside a box drawn with '*' characters",
    "simulates rolling two dice 1000 times and prints the distribution of sums",
    "implements a simple state machine for a traffic light",
    "serialises a binary tree to a string and back",
]
CONSTRAINTS = [
    "Use only the standard library.",
    "Add type hints and a short test.",
    "Handle invalid input with a clear error message.",
    "Keep it under 25 lines.",
    "Explain its time complexity afterwards.",
    "Write it as a small, well-named function with a docstring.",
    "Avoid recursion.",
    "Make it readable for a beginner, with comments.",
    "Include two example calls and their results.",
    "Write a unit test for it as well.",
    "Do not use any loops; use built-in functions instead.",
    "Make it work for very large inputs too.",
]

VERBS = [("count", "how many", "int"), ("keep", "only", "list"), ("drop", "all but", "list"),
         ("first", "the first of", "str"), ("longest", "the longest of", "str"), ("join", "a comma-separated string of", "str")]
OBJECTS = [("words", "text: str", "the words of `text`"), ("lines", "text: str", "the lines of `text`"),
           ("names", "names: list[str]", "the names in `names`"), ("codes", "codes: list[str]", "the codes in `codes`"),
           ("tags", "tags: list[str]", "the tags in `tags`"), ("titles", "titles: list[str]", "the titles in `titles`")]
CONDITIONS = [("capitalised", "that start with a capital letter"), ("with_digits", "that contain a digit"),
              ("short", "shorter than four characters"), ("palindromic", "that read the same backwards"),
              ("with_vowel_start", "that begin with a vowel"), ("upper", "written entirely in upper case"),
              ("with_hyphen", "that contain a hyphen"), ("doubled", "that contain a doubled letter")]
STUB_FRAMES = [
    "Complete this Python function:\n```python\n{code}```",
    "Finish the body of this function so that its docstring holds:\n```python\n{code}```",
    "Implement the following stub and show one call:\n```python\n{code}```",
]

PROGRAM_BODIES = [
    "print(sum(x for x in xs if x % {k} == 0))",
    "print(sorted(xs)[-{j}:])",
    "print([x * {k} for x in xs if x > {t}])",
    "print(max(xs) - min(xs), len(set(xs)))",
    "print({{x: xs.count(x) for x in xs if xs.count(x) > 1}})",
    "total = 0\nfor i, x in enumerate(xs):\n    if i % 2 == 0:\n        total += x\nprint(total)",
    "print(list(zip(xs[::2], xs[1::2])))",
    "ys = [x for x in xs if x < {t}]\nprint(len(ys), ys[:{j}])",
    "print(xs.index(max(xs)), xs[::-1][:{j}])",
    "acc = []\nfor x in xs:\n    acc.append(x if x % 2 else -x)\nprint(acc)",
    "print(sum(xs) / len(xs) > {t})",
    "from itertools import accumulate\nprint(list(accumulate(xs))[-1])",
]
PROGRAM_FRAMES = [
    "What does this Python program print? Explain briefly.\n```python\nxs = {xs}\n{body}\n```",
    "Trace this Python code step by step and give its output:\n```python\nxs = {xs}\n{body}\n```",
    "Predict the output of this snippet, then say what it computes in one sentence:\n```python\nxs = {xs}\n{body}\n```",
]

NEW_TOPICS = [
    "how a dishwasher cleans", "the life cycle of a star", "why the sky is blue", "how a bicycle stays upright",
    "the history of the bicycle", "how coffee is roasted", "why leaves change colour", "how a compass works",
    "the metric system", "how wind turbines make electricity", "the Apollo missions", "how a lock and key work",
    "what a mortgage is", "how insurance works", "the basics of budgeting", "how a library catalogue works",
    "what an operating system does", "how spam filters work", "what open-source software is",
    "how version control helps programmers", "the history of the telephone", "how 3D printers work",
    "why we have leap years", "how fireworks get their colours", "the migration of birds", "how soap cleans",
    "the invention of paper", "what a carbon footprint is", "how a vaccine trial is run", "how rain forms",
    "what makes a good habit", "how a podcast is produced", "what a spreadsheet is good for", "how yeast works",
    "the history of the Internet", "what inflation means for savings", "how a heat pump works",
    "the basics of first aid", "how to read a weather map", "why cats purr", "how memory works in the brain",
    "the rules of football", "the rules of chess", "what a budget deficit is", "how tea is made",
    "the difference between weather and climate", "how noise affects health", "why bridges have expansion joints",
    "how a touchscreen works", "what a database is", "how QR codes store information", "what an algorithm is",
    "how sailing boats move against the wind", "the basics of photography", "how a museum cares for paintings",
    "what a food chain is", "how mountains form", "the history of the alphabet", "how a camera lens focuses",
    "why the ocean is salty",
]
NEW_TOPIC_FRAMES = [
    "Explain {s} to a ten-year-old.",
    "What is the most surprising thing about {s}?",
    "Write three quiz questions, with answers, about {s}.",
    "Give a short analogy that explains {s}.",
    "List the main steps involved in {s}.",
    "Write a tweet-length summary of {s}.",
    "What should a beginner read first to understand {s}?",
    "Explain {s}, then give one everyday example.",
    "Describe {s} in exactly three sentences.",
    "What questions do people often ask about {s}? Answer two of them.",
]
COMPARE_FRAMES = ["Compare {a} and {b}: what do they have in common, and how do they differ?",
                  "Which is easier to explain to a child, {a} or {b}? Explain both briefly."]
SENTENCES = [
    "We need the report by Friday.", "The meeting is cancelled.", "Your order has shipped.",
    "Please stop parking in my space.", "The new software update fixes several bugs.", "I will be late today.",
    "The price of the service will increase next month.", "Thanks for your help with the move.",
    "The library will be closed for renovations.", "Our team won the regional competition.",
    "The train was delayed by forty minutes.", "I cannot attend the party on Saturday.",
    "The printer on the second floor is broken again.", "We are hiring two new engineers.",
    "Remember to water the plants while I am away.", "The results of the survey are in.",
    "The café now opens at seven.", "Your password will expire in three days.",
    "The concert sold out in an hour.", "Please send me the invoice again.",
]
TONES = ["formal", "friendly", "enthusiastic", "apologetic", "very short", "humorous", "neutral news-style",
         "polite but firm"]
NEW_SUBJECTS = ["a rainy Monday", "an old lighthouse", "a cat watching birds", "the smell of bread", "city lights",
                "a quiet library", "a broken clock", "the last day of summer", "a paper boat", "snow on a mountain",
                "a busy kitchen", "a long train journey", "a garden at dawn", "an empty playground", "the sea at night",
                "a first snowfall", "a lost key", "a street market", "a kite in the wind", "a cup of tea"]
NEW_FOLLOW_UPS = ["Can you give me a concrete example?", "What would you do differently?",
                  "Summarise that in one sentence.", "Can you put that in a table?", "What is a common mistake here?",
                  "Explain it again, step by step.", "How would this work in JavaScript?", "Give me a harder variant.",
                  "What should I read next?", "Is that always true?", "Can you check your answer?",
                  "Write it as a numbered list.", "Now do the same for a different case.",
                  "What are the pros and cons?", "Make it friendlier.", "How long would that take?"]

FIRST_NAMES = pm.NAMES + ["Maya", "Noah", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera",
                          "Wen", "Yusuf", "Zoe"]
COLUMNS = [("score", 40, 100), ("age", 18, 70), ("sales", 100, 999), ("hours", 1, 60), ("visits", 0, 40),
           ("price", 5, 300), ("rating", 1, 5), ("distance_km", 1, 120)]
DATA_QUESTIONS = [
    "Which row has the highest {c}? Answer, then explain how you found it.",
    "What is the average {c}? Show your working.",
    "Write Python code that loads this CSV with the csv module and prints the rows sorted by {c}.",
    "Write a SQL query that returns the names whose {c} is above the average, for a table with these columns.",
    "Summarise this table in two sentences.",
    "How many rows have a {c} above {t}?",
    "Write pandas code that groups this data by city and computes the mean {c}.",
    "Convert this CSV to a JSON list of objects.",
]
CITIES_SHORT = ["Lyon", "Oslo", "Porto", "Graz", "Turin", "Ghent", "Cork", "Bern"]


def _code_write(rng: random.Random) -> list[str]:
    out = []
    for i, task in enumerate(pm.WRITE_TASKS):
        for j, lang in enumerate(pm.LANGS):
            for r in range(6):
                c = CONSTRAINTS[(i + 2 * j + r) % len(CONSTRAINTS)]
                out.append(pm.WRITE_FRAMES[(i + j + r) % len(pm.WRITE_FRAMES)].format(lang=lang, t=task) + " " + c)
    for i, task in enumerate(NEW_TASKS):
        for j, lang in enumerate(pm.LANGS):
            for f in pm.WRITE_FRAMES:
                out.append(f.format(lang=lang, t=task))
            for r in range(3):
                c = CONSTRAINTS[(3 * i + j + r) % len(CONSTRAINTS)]
                out.append(pm.WRITE_FRAMES[(i + r) % len(pm.WRITE_FRAMES)].format(lang=lang, t=task) + " " + c)
    return out


def _code_complete() -> list[str]:
    out = []
    for verb, vtext, ret in VERBS:
        for obj, arg, otext in OBJECTS:
            for cond, ctext in CONDITIONS:
                name = f"{verb}_{cond}_{obj}"
                rtype = {"int": "int", "list": "list[str]", "str": "str"}[ret]
                doc = f"Return {vtext} {otext} {ctext}."
                code = f"def {name}({arg}) -> {rtype}:\n    \"\"\"{doc}\"\"\"\n"
                for k, frame in enumerate(STUB_FRAMES):
                    out.append(frame.format(code=code))
    return out


def _code_explain(rng: random.Random, n: int) -> list[str]:
    out: dict[str, None] = {}
    while len(out) < n:
        xs = [rng.randint(-5, 30) for _ in range(rng.randint(4, 9))]
        body = rng.choice(PROGRAM_BODIES).format(k=rng.randint(2, 5), j=rng.randint(2, 4), t=rng.randint(3, 15))
        out[rng.choice(PROGRAM_FRAMES).format(xs=xs, body=body)] = None
    return list(out)


def _chat(rng: random.Random) -> list[str]:
    out = [f.format(s=s) for s in pm.TOPICS + NEW_TOPICS for f in NEW_TOPIC_FRAMES]
    out += [f.format(s=s) for s in NEW_TOPICS for f in pm.TOPIC_FRAMES]
    topics = pm.TOPICS + NEW_TOPICS
    pairs = [(a, b) for i, a in enumerate(topics) for b in topics[i + 1:]]
    rng.shuffle(pairs)
    out += [COMPARE_FRAMES[i % 2].format(a=a, b=b) for i, (a, b) in enumerate(pairs[:1800])]
    out += [f"Rewrite this sentence in a {tone} tone: \"{s}\"" for s in SENTENCES for tone in TONES]
    out += ["Write " + w.format(s=s) + "." for w in pm.WRITING for s in NEW_SUBJECTS]
    for who in pm.PEOPLE:
        for what in pm.MATTERS:
            out.append(f"Draft a brief message to {who} about {what}. Keep it under 80 words.")
    return out


def _reasoning(rng: random.Random, n: int, exclude: set[str]) -> list[str]:
    def sequence():
        a, d = rng.randint(1, 9), rng.randint(2, 7)
        kind = rng.choice(["arith", "square", "double"])
        if kind == "arith":
            xs = [a + d * i for i in range(5)]
        elif kind == "square":
            xs = [(a + i) ** 2 for i in range(5)]
        else:
            xs = [a * 2 ** i for i in range(5)]
        return f"What number comes next in the sequence {', '.join(map(str, xs))}? Explain the pattern."

    def dice():
        s = rng.randint(3, 11)
        return f"Two fair dice are rolled. What is the probability that their sum is {s}?"

    def coins():
        n, k = rng.randint(3, 6), rng.randint(1, 3)
        return f"A fair coin is tossed {n} times. What is the probability of getting exactly {k} heads?"

    def interest():
        p, r, y = rng.choice([500, 1000, 2500, 4000]), rng.choice([2, 3, 4, 5, 6]), rng.randint(2, 6)
        return f"${p} is saved at {r}% interest per year, compounded yearly. How much is there after {y} years?"

    def workers():
        w, d = rng.randint(2, 8), rng.randint(3, 12)
        return f"{w} workers build a wall in {d} days. How long would {w * 2} workers take at the same pace?"

    def discount():
        p, a, b = rng.randint(20, 400), rng.choice([10, 20, 25]), rng.choice([5, 10, 15])
        return f"A coat costs ${p}. It is reduced by {a}%, then by a further {b}%. What is the final price?"

    draws = [sequence, dice, coins, interest, workers, discount]
    suffixes = [" Think step by step.", " Show your working.", " Explain your answer.", " Answer, then check it."]
    out: dict[str, None] = {}
    for text in pm._arithmetic(rng, n // 2):
        if text not in exclude:
            out[text] = None
    while len(out) < n:
        text = rng.choice(draws)() + rng.choice(suffixes)
        if text not in exclude:
            out[text] = None
    return list(out)


def _data(rng: random.Random, n: int) -> list[str]:
    out: dict[str, None] = {}
    while len(out) < n:
        col, lo, hi = rng.choice(COLUMNS)
        rows = rng.sample(FIRST_NAMES, rng.randint(3, 6))
        table = "name,city," + col + "\n" + "\n".join(
            f"{r},{rng.choice(CITIES_SHORT)},{rng.randint(lo, hi)}" for r in rows)
        q = rng.choice(DATA_QUESTIONS).format(c=col, t=(lo + hi) // 2)
        out[f"Here is a small CSV table:\n```\n{table}\n```\n{q}"] = None
    return list(out)


def build_more_tasks(seed: int, exclude: set[str]) -> list[dict]:
    """The third wave's records (ids ``<kind>-w3-NNNNN``), in a seeded order, without any text in ``exclude``."""
    rng = random.Random(seed + 3)
    kinds = {
        "code_write": _code_write(rng),
        "code_complete": _code_complete(),
        "code_explain": _code_explain(rng, 2600),
        "chat": _chat(rng),
        "reasoning": _reasoning(rng, 5200, exclude),
        "data": _data(rng, 3600),
    }
    multi = [{"history": [{"role": "user", "content": u}, {"role": "assistant", "content": a}], "prompt": f}
             for u, a in pm.FIRST_TURNS for f in NEW_FOLLOW_UPS]
    records, seen = [], set(exclude)
    for kind, items in kinds.items():
        for k, text in enumerate(items):
            if text in seen:
                continue
            seen.add(text)
            records.append({"id": f"{kind}-w3-{k:05d}", "category": kind, "prompt": text, "split": pm._split(text)})
    for k, rec in enumerate(multi):
        text = "\n".join([m["content"] for m in rec["history"]] + [rec["prompt"]])
        records.append({"id": f"multi_turn-w3-{k:05d}", "category": "multi_turn", **rec, "split": pm._split(text)})
    rng.shuffle(records)
    return records
