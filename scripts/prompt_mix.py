"""The scale prompt mix of peagle-lab: >= 5,000 prompts written for this project, built from lists and templates.

Kinds (the field ``kind``), towards what people ask a small instruct model:

* ``code_write``    -- "write code that ..." in several languages and phrasings;
* ``code_complete`` -- complete a function from its signature and docstring (HumanEval's *style*: none of its
  problems; ``tests/core/test_prompts.py`` checks the overlap);
* ``code_explain``  -- explain, review or fix a short snippet;
* ``chat``          -- explanations, advice, emails, plans, summaries;
* ``reasoning``     -- short word problems with numbers from a fixed seed, and logic questions;
* ``multi_turn``    -- a first user turn, a short assistant turn written here, and a follow-up (``history``).

Every record gets ``split``: ``val`` for a deterministic 5% (by a hash of the text), else ``train``.
"""

from __future__ import annotations

import hashlib
import random

VAL_PERCENT = 5

LANGS = ["Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C#", "Ruby"]

WRITE_TASKS = [
    "parses a date written as 'DD/MM/YYYY' and returns the day of the year",
    "removes duplicate entries from a list while keeping the original order",
    "counts the distinct email domains in a list of addresses",
    "converts a temperature table from Celsius to Fahrenheit",
    "validates that a username has 3 to 16 letters, digits or underscores",
    "reads a text file and prints its ten longest lines",
    "computes the median of a stream of numbers as they arrive",
    "finds all files with a given extension below a directory",
    "turns a list of (key, value) pairs into a dictionary of lists",
    "checks whether two strings are one edit apart",
    "splits a sentence into words and returns them in reverse order",
    "computes simple statistics (min, max, mean, standard deviation) of a list of floats",
    "parses a log line of the form '2024-05-01 12:00:03 ERROR message' into its parts",
    "groups sales records by month and sums the amounts",
    "implements a queue with two stacks",
    "implements a binary search tree with insert and in-order traversal",
    "implements a trie with insert and prefix search",
    "implements a circular buffer of fixed capacity",
    "implements a simple event emitter with on, off and emit",
    "implements a min-heap without library support",
    "implements union-find with path compression",
    "finds the connected components of an undirected graph",
    "computes the shortest paths from one node with Dijkstra's algorithm",
    "detects a cycle in a directed graph",
    "pretty-prints a nested dictionary with indentation",
    "compares two version strings such as '1.10.2' and '1.9'",
    "generates a random password of a given length from letters, digits and symbols",
    "escapes the HTML special characters of a string",
    "extracts all hashtags from a tweet",
    "computes the checksum digit of an ISBN-10 number",
    "converts a number of seconds into 'HH:MM:SS'",
    "finds the two numbers in a list whose sum is closest to a target",
    "returns the longest run of equal consecutive elements in a list",
    "computes the dot product of two sparse vectors stored as dictionaries",
    "normalises the whitespace of a string to single spaces",
    "builds a histogram of word lengths in a text",
    "shuffles a list in place with the Fisher-Yates algorithm",
    "samples k items uniformly from a stream of unknown length",
    "merges k sorted lists into one sorted list",
    "computes the running total of a list",
    "rounds prices to the nearest five cents",
    "converts a hex colour such as '#ff8800' to an RGB tuple",
    "computes the area of a polygon from its vertices",
    "checks whether a point lies inside a rectangle",
    "converts a list of words into a sentence with commas and 'and'",
    "finds the most common character in a string, ignoring spaces",
    "paginates a list into pages of a given size and returns one page",
    "debounces a function so it runs only after calls stop for a given delay",
    "memoises a function of one argument",
    "reads environment variables with defaults into a configuration object",
    "parses command-line flags of the form --name=value into a dictionary",
    "writes a list of dictionaries to a CSV file with a header row",
    "computes the number of days between two dates",
    "validates a simple arithmetic expression for balanced parentheses and known operators",
    "zips two lists into a list of pairs, padding the shorter one with None",
    "computes the Jaccard similarity of two sets of words",
    "truncates a string to a given length, adding an ellipsis",
    "counts the vowels and consonants of every word in a sentence",
    "computes the product of all numbers in a list except the one at each index",
    "finds the missing number in a list containing 1..n with one gap",
    "moves all zeros of a list to its end, keeping the order of the rest",
    "finds the maximum sum of a contiguous sub-list",
    "checks whether a Sudoku row, column and box are valid",
    "computes the binomial coefficient n choose k without overflow",
    "simulates rolling two dice many times and reports the frequencies",
    "converts Markdown headings into an HTML table of contents",
    "tokenises a string into identifiers, numbers and symbols",
    "implements a stopwatch class with start, stop and elapsed",
    "implements a bank account class with deposit, withdraw and a history of transactions",
    "implements a to-do list class that can add, complete and list tasks",
    "schedules meetings in free time slots of a calendar",
    "computes a letter grade from a numeric score",
    "finds the intersection of two sorted lists in linear time",
    "computes the power set of a small list",
    "encodes and decodes a string with a Caesar shift",
    "generates the rows of Pascal's triangle",
    "checks whether a year is a leap year",
    "counts the inversions in a list",
    "computes the greatest element to the right of each element of a list",
]

WRITE_FRAMES = [
    "Write {lang} code that {t}.",
    "Write a {lang} function that {t}. Add a short comment for each step.",
    "In {lang}, how would I write code that {t}? Show the code and explain it briefly.",
    "Give me a small, idiomatic {lang} solution that {t}.",
    "Write {lang} code that {t}, and show an example call with its output.",
]

# code completion: signature + docstring, built from pieces (names and wording of our own)
AGGREGATES = [("sum", "the sum", "int"), ("product", "the product", "int"), ("count", "how many", "int"),
              ("largest", "the largest", "int"), ("smallest", "the smallest", "int"), ("mean", "the mean", "float")]
FILTERS = [("even", "even"), ("odd", "odd"), ("positive", "positive"), ("negative", "negative"),
           ("above_limit", "greater than `limit`"), ("below_limit", "smaller than `limit`"),
           ("multiple_of_three", "divisible by three"), ("square", "perfect squares")]
STRING_OPS = [
    ("strip_digits", "text: str", "str", "Return `text` without any digit characters.", "'a1b22c'", "'abc'"),
    ("swap_case_words", "text: str", "str", "Return `text` with the case of every letter swapped.", "'Hi There'",
     "'hI tHERE'"),
    ("initials", "full_name: str", "str", "Return the upper-case initials of a name, joined by dots.",
     "'ada lovelace'", "'A.L.'"),
    ("collapse_spaces", "text: str", "str", "Return `text` with every run of spaces replaced by one space.",
     "'a   b  c'", "'a b c'"),
    ("middle_char", "word: str", "str", "Return the middle character, or the middle two for even lengths.",
     "'python'", "'th'"),
    ("repeat_each", "text: str, times: int", "str", "Return `text` with every character repeated `times` times.",
     "'ab', 2", "'aabb'"),
    ("longest_word", "sentence: str", "str", "Return the longest word of `sentence`; the first one on ties.",
     "'a quick brown fox'", "'quick'"),
    ("camel_to_snake", "name: str", "str", "Convert a camelCase identifier to snake_case.", "'parseHttpHeader'",
     "'parse_http_header'"),
    ("kebab_case", "text: str", "str", "Return the words of `text` in lower case joined by hyphens.",
     "'Hello Big World'", "'hello-big-world'"),
    ("mask_email", "address: str", "str", "Keep the first letter and the domain of an email, masking the rest.",
     "'jane@example.org'", "'j***@example.org'"),
    ("digit_sum_text", "text: str", "int", "Return the sum of all digits that appear in `text`.", "'a1b2c3'", "6"),
    ("count_capitals", "text: str", "int", "Return how many upper-case letters `text` contains.", "'HeLLo'", "3"),
    ("word_lengths", "sentence: str", "list[int]", "Return the length of every word in `sentence`.",
     "'to be or'", "[2, 2, 2]"),
    ("alternate_case", "text: str", "str", "Return `text` with letters alternating upper and lower case.",
     "'abcd'", "'AbCd'"),
    ("remove_adjacent_duplicates", "text: str", "str", "Remove characters equal to the one before them.",
     "'aabbbc'", "'abc'"),
]
LIST_OPS = [
    ("pairwise_differences", "values: list[int]", "list[int]", "Return the differences between neighbours.",
     "[1, 4, 9]", "[3, 5]"),
    ("clamp_all", "values: list[float], low: float, high: float", "list[float]",
     "Return every value clamped to the range [low, high].", "[-1.0, 0.5, 2.0], 0.0, 1.0", "[0.0, 0.5, 1.0]"),
    ("second_largest", "values: list[int]", "int", "Return the second largest distinct value.", "[3, 9, 9, 4]", "4"),
    ("chunk_sums", "values: list[int], size: int", "list[int]", "Return the sum of every chunk of `size` values.",
     "[1, 2, 3, 4, 5], 2", "[3, 7, 5]"),
    ("interleave", "first: list, second: list", "list", "Return the items of both lists taken in turn.",
     "[1, 2], ['a', 'b']", "[1, 'a', 2, 'b']"),
    ("cumulative_max", "values: list[int]", "list[int]", "Return the running maximum of `values`.",
     "[2, 1, 5, 3]", "[2, 2, 5, 5]"),
    ("index_of_min", "values: list[float]", "int", "Return the index of the smallest value; the first on ties.",
     "[3.0, 1.0, 1.0]", "1"),
    ("rotate_left", "values: list, steps: int", "list", "Return `values` rotated left by `steps` places.",
     "[1, 2, 3, 4], 1", "[2, 3, 4, 1]"),
    ("run_lengths", "values: list", "list[int]", "Return the lengths of the runs of equal values.",
     "[1, 1, 2, 3, 3, 3]", "[2, 1, 3]"),
    ("keep_every_nth", "values: list, n: int", "list", "Return every `n`-th item, starting with the first.",
     "[1, 2, 3, 4, 5], 2", "[1, 3, 5]"),
    ("normalise_scores", "scores: list[float]", "list[float]", "Scale the scores so that they sum to one.",
     "[1.0, 3.0]", "[0.25, 0.75]"),
    ("top_n_indices", "values: list[float], n: int", "list[int]", "Return the indices of the `n` largest values.",
     "[0.1, 0.9, 0.5], 2", "[1, 2]"),
]
DICT_OPS = [
    ("invert_mapping", "mapping: dict", "dict", "Return a dictionary with keys and values swapped.",
     "{'a': 1, 'b': 2}", "{1: 'a', 2: 'b'}"),
    ("merge_counts", "first: dict[str, int], second: dict[str, int]", "dict[str, int]",
     "Return the counts of both dictionaries added key by key.", "{'x': 1}, {'x': 2, 'y': 1}", "{'x': 3, 'y': 1}"),
    ("keys_with_value", "mapping: dict, value", "list", "Return the keys whose value equals `value`, sorted.",
     "{'a': 1, 'b': 2, 'c': 1}, 1", "['a', 'c']"),
    ("group_by_length", "words: list[str]", "dict[int, list[str]]", "Group words by their length.",
     "['hi', 'yo', 'hey']", "{2: ['hi', 'yo'], 3: ['hey']}"),
    ("nested_get", "data: dict, path: str", "object",
     "Follow a dotted `path` such as 'a.b.c' through nested dictionaries; None when a key is missing.",
     "{'a': {'b': 3}}, 'a.b'", "3"),
    ("price_total", "prices: dict[str, float], basket: dict[str, int]", "float",
     "Return the cost of the basket: quantity times price for each item.", "{'tea': 2.0}, {'tea': 3}", "6.0"),
]
COMPLETE_FRAMES = [
    "Complete the body of this Python function:\n```python\n{code}```",
    "Implement this function so that it does what its docstring says:\n```python\n{code}```",
    "Fill in the missing code:\n```python\n{code}```",
    "Write the body of this function. Reply with the whole function.\n```python\n{code}```",
]

SNIPPETS = [
    ("Python", "squares = {n: n * n for n in range(5)}\nprint(squares[3])"),
    ("Python", "names = ['b', 'a', 'c']\nnames.sort(reverse=True)\nprint(names[0])"),
    ("Python", "def g(*args, **kwargs):\n    return len(args), sorted(kwargs)\nprint(g(1, 2, x=3, a=4))"),
    ("Python", "stack = []\nfor ch in '(()':\n    if ch == '(':\n        stack.append(ch)\n    else:\n        stack.pop()\n"
               "print(len(stack))"),
    ("Python", "with open('data.txt') as fh:\n    rows = [line.split(',') for line in fh if line.strip()]"),
    ("Python", "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n    def __repr__(self):\n"
               "        return f'Point({self.x}, {self.y})'\nprint(Point(1, 2))"),
    ("Python", "import functools\n@functools.lru_cache(maxsize=None)\ndef steps(n):\n    return 0 if n == 1 else 1 + "
               "steps(n // 2 if n % 2 == 0 else 3 * n + 1)\nprint(steps(6))"),
    ("Python", "values = [3, 1, 2]\nresult = sorted(values) == values\nprint(result)"),
    ("Python", "text = 'banana'\nprint(text.find('an'), text.rfind('an'), text.count('a'))"),
    ("Python", "matrix = [[1, 2], [3, 4]]\nprint([sum(col) for col in zip(*matrix)])"),
    ("Python", "from dataclasses import dataclass\n@dataclass\nclass Item:\n    name: str\n    qty: int = 1\n"
               "print(Item('pen'))"),
    ("Python", "gen = (x * 2 for x in range(3))\nprint(next(gen), list(gen))"),
    ("Python", "try:\n    value = int('12a')\nexcept ValueError as err:\n    value = -1\nprint(value)"),
    ("Python", "a, *rest = [10, 20, 30]\nprint(a, rest)"),
    ("Python", "print(any(x > 3 for x in [1, 2, 5]), all(x > 0 for x in []))"),
    ("JavaScript", "const nums = [1, 2, 3];\nconst doubled = nums.map(n => n * 2);\nconsole.log(doubled);"),
    ("JavaScript", "console.log([10, 1, 2].sort());"),
    ("JavaScript", "let count = 0;\nconst inc = () => ++count;\ninc(); inc();\nconsole.log(count);"),
    ("JavaScript", "const user = { name: 'Ana', age: 31 };\nconst { name, ...rest } = user;\nconsole.log(rest);"),
    ("JavaScript", "console.log(0.1 + 0.2 === 0.3);"),
    ("JavaScript", "async function load() {\n  const res = await fetch('/api/items');\n  return res.json();\n}"),
    ("Go", "func sum(xs []int) int {\n    total := 0\n    for _, x := range xs {\n        total += x\n    }\n"
           "    return total\n}"),
    ("Go", "m := map[string]int{\"a\": 1}\nv, ok := m[\"b\"]\nfmt.Println(v, ok)"),
    ("Rust", "let v = vec![1, 2, 3];\nlet total: i32 = v.iter().sum();\nprintln!(\"{}\", total);"),
    ("Rust", "fn first_word(s: &str) -> &str {\n    s.split_whitespace().next().unwrap_or(\"\")\n}"),
    ("SQL", "SELECT department, COUNT(*) AS n\nFROM employees\nGROUP BY department\nHAVING COUNT(*) > 5;"),
    ("SQL", "SELECT c.name, SUM(o.total)\nFROM customers c\nLEFT JOIN orders o ON o.customer_id = c.id\n"
            "GROUP BY c.name;"),
    ("Bash", "for f in *.log; do\n  gzip \"$f\"\ndone"),
    ("Bash", "grep -c ERROR app.log | tee errors.txt"),
    ("Java", "List<String> names = new ArrayList<>();\nnames.add(\"x\");\nSystem.out.println(names.size());"),
]
EXPLAIN_FRAMES = [
    "Explain what this {lang} code does, line by line:\n```\n{c}\n```",
    "What is the output of this {lang} code, if any, and why?\n```\n{c}\n```",
    "Review this {lang} code and suggest one improvement:\n```\n{c}\n```",
    "Rewrite this {lang} code to make it clearer, and explain the change:\n```\n{c}\n```",
    "Add comments to this {lang} code:\n```\n{c}\n```",
]

TOPICS = [
    "photosynthesis", "the water cycle", "how vaccines work", "black holes", "the French Revolution",
    "inflation", "compound interest", "the immune system", "plate tectonics", "how a bill becomes a law",
    "the greenhouse effect", "how the internet works", "DNA", "the Roman Empire", "electric cars",
    "how airplanes fly", "the stock market", "machine learning", "the moon's phases", "recycling",
    "the human heart", "volcanoes", "how batteries work", "the printing press", "sleep", "coral reefs",
    "supply and demand", "renewable energy", "the solar system", "antibiotics", "earthquakes",
    "the Industrial Revolution", "how a refrigerator works", "bees and pollination", "tides", "rainbows",
    "the Silk Road", "cryptography", "time zones", "democracy", "the periodic table", "glaciers",
    "how credit scores work", "composting", "the Olympic Games", "the Great Wall of China", "nutrition labels",
    "how GPS works", "the scientific method", "rain forests", "hurricanes", "the human brain", "bread baking",
    "noise-cancelling headphones", "password managers", "public transport", "the history of chess",
    "container ships", "how elections are counted", "microplastics", "typing with ten fingers",
]
TOPIC_FRAMES = [
    "Explain {s} in simple words.",
    "Give me three key facts about {s}.",
    "Write a short paragraph about {s} for a school newsletter.",
    "What are common misconceptions about {s}?",
    "Summarize {s} in five bullet points.",
    "Write three quiz questions, with answers, about {s}.",
    "What would a beginner find most surprising about {s}?",
]
ADVICE = [
    "stay focused while working from home", "prepare for a job interview", "start running as a beginner",
    "save money on groceries", "learn a new language as an adult", "sleep better", "keep houseplants alive",
    "plan a small wedding", "reduce screen time", "make friends in a new city", "organise a messy garage",
    "write a good CV", "give a short speech without notes", "study for an exam in two weeks",
    "negotiate a salary", "cook healthy meals on a budget", "travel with only hand luggage",
    "keep a journal", "deal with a difficult coworker", "learn to play the guitar", "get started with budgeting",
    "teach a child to ride a bicycle", "choose a first laptop", "prepare for a long hike",
    "run an effective meeting", "back up family photos", "start a vegetable garden", "learn touch typing",
]
ADVICE_FRAMES = [
    "How can I {a}?",
    "Give me five practical tips to {a}.",
    "I want to {a}. Where should I start?",
    "What mistakes do people make when they try to {a}?",
]
PEOPLE = ["my landlord", "a colleague", "a hiring manager", "my child's teacher", "a customer", "my team",
          "a neighbour", "my manager", "a supplier", "a client", "the school principal", "my doctor's office",
          "a new team member", "an old friend", "the building manager", "a volunteer group"]
MATTERS = ["a meeting that has to move to next week", "a late payment", "a thank-you for their help",
           "a request for a short extension", "a change of address", "a project update", "a cancelled booking",
           "an invitation to a small party", "a broken heating system", "feedback on a recent event",
           "a question about an invoice", "a reminder about a deadline"]
EMAIL_FRAMES = ["Write a short, polite email to {who} about {what}.",
                "Draft a friendly message to {who} about {what}. Keep it under 100 words."]
CITIES = ["Lisbon", "Kyoto", "Vancouver", "Istanbul", "Edinburgh", "Mexico City", "Cape Town", "Prague",
          "Seoul", "Buenos Aires", "Marrakech", "Copenhagen", "Hanoi", "Vienna", "Lima", "Dublin", "Oslo",
          "Singapore", "Athens", "Montreal"]
CITY_FRAMES = ["Suggest a {d}-day itinerary for a first visit to {city}, on a modest budget.",
               "What should a visitor to {city} eat, see and avoid?"]
WRITING = ["a haiku about {s}", "a limerick about {s}", "a four-line poem about {s}",
           "a short story opening about {s}", "a product description for {s}", "a tweet announcing {s}"]
WRITING_SUBJECTS = ["autumn leaves", "a lost umbrella", "a robot learning to cook", "the first day of school",
                    "a city at night", "a lighthouse keeper", "a reusable water bottle", "a new coffee shop",
                    "a quiet library", "a rainy Monday", "a cat that hates mornings", "a mountain lake",
                    "a bicycle repair shop", "a community garden", "an old train station", "a winter market"]

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemi", "Liam",
         "Mara", "Noor", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]
ITEMS = ["pencils", "apples", "notebooks", "tickets", "muffins", "stickers", "candles", "plant pots", "books",
         "oranges", "batteries", "postcards"]
LOGIC_Q = [
    "If all bloops are razzies and all razzies are lazzies, are all bloops lazzies?",
    "A farmer has 17 sheep and all but 9 run away. How many are left?",
    "Which weighs more, a kilogram of feathers or a kilogram of iron?",
    "If you overtake the person in second place in a race, what place are you in?",
    "A man looks at a photo and says: 'Brothers and sisters I have none, but that man's father is my father's "
    "son.' Who is in the photo?",
    "How many times can you subtract 5 from 25?",
    "There are three boxes labelled apples, oranges and mixed, and every label is wrong. You may take one fruit "
    "from one box. How do you relabel them?",
    "Is the number of people who have ever shaken an odd number of hands even or odd? Explain.",
    "If a week from tomorrow is Saturday, what day is it today?",
    "You have a 3-litre and a 5-litre jug. How do you measure exactly 4 litres?",
    "What is the next number: 1, 1, 2, 3, 5, 8, ...? Explain the rule.",
    "What is the next letter: A, C, F, J, O, ...? Explain the rule.",
    "If 3 cats catch 3 mice in 3 minutes, how many cats catch 100 mice in 100 minutes?",
    "Can a square be a rectangle? Can a rectangle be a square? Explain.",
    "Tom is older than Ann. Ann is older than Raj. Is Raj older than Tom?",
]

FOLLOW_UPS = ["Can you make it shorter?", "Now explain it as if I were a beginner.", "Can you add an example?",
              "What are the edge cases?", "Can you write it with type hints?", "Why did you choose that approach?",
              "Make it more formal, please.", "Now give me a version for a child.", "What could go wrong?",
              "Turn that into a bulleted list.", "Can you give a second, different answer?",
              "How would you test that?", "Translate your answer into plain English for a manager.",
              "Is there a faster way?"]
FIRST_TURNS = [
    ("Write a Python function that reverses the words of a sentence.",
     "Here is one way:\n```python\ndef reverse_words(sentence):\n    return ' '.join(sentence.split()[::-1])\n```"),
    ("What is a hash map?", "A hash map stores key-value pairs and finds a value by hashing its key, usually in "
                            "constant time."),
    ("Give me a tip for better sleep.", "Keep the same bedtime every day, even at the weekend."),
    ("Write an SQL query that counts orders per customer.",
     "```sql\nSELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id;\n```"),
    ("Explain recursion in one sentence.", "Recursion is when a function solves a problem by calling itself on "
                                           "smaller versions of the same problem."),
    ("Suggest a name for a bakery.", "How about 'The Rising Crumb'?"),
    ("What is 15% of 80?", "15% of 80 is 12."),
    ("Write a JavaScript function that checks if a number is even.",
     "```javascript\nfunction isEven(n) {\n  return n % 2 === 0;\n}\n```"),
    ("What does a CPU cache do?", "It keeps recently used data close to the processor so that it can be read much "
                                  "faster than from main memory."),
    ("Write a short thank-you note to a teacher.", "Dear Ms. Lee, thank you for your patience and encouragement "
                                                   "this year. I learned a lot in your class."),
    ("How do I list files in a directory in Python?",
     "Use `os.listdir(path)` or, for more control, `pathlib.Path(path).iterdir()`."),
    ("What is the capital of Australia?", "The capital of Australia is Canberra."),
    ("Write a Python class for a simple counter.",
     "```python\nclass Counter:\n    def __init__(self):\n        self.value = 0\n    def increment(self):\n"
     "        self.value += 1\n```"),
    ("Explain what an API is.", "An API is a set of rules that lets one program ask another program for data or "
                                "actions."),
    ("Give me a quick dinner idea.", "Try a vegetable stir-fry with rice: it takes about 20 minutes."),
    ("What is the difference between a list and a tuple in Python?",
     "A list can be changed after it is created; a tuple cannot."),
]


def _split(text: str) -> str:
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return "val" if h % 100 < VAL_PERCENT else "train"


def _signature(name, args, ret, doc, ex_in, ex_out) -> str:
    return (f"def {name}({args}) -> {ret}:\n    \"\"\"{doc}\n\n    >>> {name}({ex_in})\n    {ex_out}\n    \"\"\"\n")


def _completions() -> list[str]:
    specs = []
    for agg_name, agg_text, ret in AGGREGATES:
        for f_name, f_text in FILTERS:
            args = "values: list[int], limit: int" if "limit" in f_name else "values: list[int]"
            ret_t = "float" if agg_name == "mean" else "int"
            doc = f"Return {agg_text} of the values in `values` that are {f_text}."
            if agg_name == "count":
                doc = f"Return how many values in `values` are {f_text}."
            ex_in = "[1, 2, 3, 4, 9], 2" if "limit" in f_name else "[1, 2, 3, 4, 9]"
            specs.append((f"{agg_name}_of_{f_name}", args, ret_t, doc, ex_in, "..."))
    specs += STRING_OPS + LIST_OPS + DICT_OPS
    out = []
    for i, spec in enumerate(specs):
        code = _signature(*spec)
        for j in range(4):  # four framings each
            out.append(COMPLETE_FRAMES[(i + j) % len(COMPLETE_FRAMES)].format(code=code))
    # class stubs: a method to finish
    for i, (cls, method, doc) in enumerate([
        ("Inventory", "remove(self, item: str, qty: int) -> None", "Remove `qty` of `item`; raise ValueError if too few."),
        ("Playlist", "shuffle(self, seed: int) -> list[str]", "Return the songs in a random order fixed by `seed`."),
        ("Thermostat", "set_target(self, celsius: float) -> None", "Set the target, clamped to 10..30 degrees."),
        ("Library", "checkout(self, title: str, member: str) -> bool", "Lend a free copy; False when none is free."),
        ("Matrix", "transpose(self) -> 'Matrix'", "Return a new matrix with rows and columns swapped."),
        ("Timer", "lap(self) -> float", "Return the seconds since the last lap (or since start)."),
        ("Cart", "total(self, tax_rate: float) -> float", "Return the price of all items, tax included."),
        ("Graph", "neighbours(self, node: str) -> list[str]", "Return the nodes joined to `node`, sorted."),
    ]):
        code = f"class {cls}:\n    ...\n\n    def {method}:\n        \"\"\"{doc}\"\"\"\n"
        for j in range(2):
            out.append(COMPLETE_FRAMES[(i + j) % len(COMPLETE_FRAMES)].format(code=code))
    return out


def _arithmetic(rng: random.Random, n: int) -> list[str]:
    def change():
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        price, count = rng.randint(2, 9), rng.randint(3, 12)
        paid = (price * count // 10 + 1 + rng.randint(0, 3)) * 10
        return f"{name} buys {count} {item} at ${price} each and pays with ${paid}. How much change does {name} get?"

    def speed():
        km, h = rng.randint(60, 600), rng.choice([1.5, 2, 2.5, 3, 4, 5])
        return f"A bus covers {km} km in {h} hours. What is its average speed, and how long would {km + 100} km take?"

    def share():
        total, a, b = rng.choice([60, 90, 120, 150, 240]), rng.randint(1, 4), rng.randint(1, 5)
        x, y = rng.sample(NAMES, 2)
        return f"{x} and {y} share ${total} in the ratio {a}:{b}. How much does each get?"

    def percent():
        base, pct = rng.randint(40, 900), rng.choice([5, 10, 12, 15, 20, 25, 30, 35])
        return f"A price of ${base} rises by {pct}%. What is the new price?"

    def rate():
        litres, minutes = rng.randint(20, 300), rng.randint(4, 30)
        return f"A tap fills {litres} litres in {minutes} minutes. How long does it take to fill {litres * 3} litres?"

    def ages():
        a, b = rng.sample(NAMES, 2)
        k, years = rng.randint(2, 4), rng.randint(3, 12)
        return f"{a} is {k} times as old as {b}. In {years} years, {a} will be twice as old as {b}. How old is {b} now?"

    def area():
        w, h = rng.randint(2, 30), rng.randint(2, 30)
        return f"A garden is {w} m long and {h} m wide. A path 1 m wide runs around it. What is the area of the path?"

    def schedule():
        h, m, d = rng.randint(6, 21), rng.choice([0, 10, 25, 40, 55]), rng.randint(35, 500)
        return f"A meeting starts at {h:02d}:{m:02d} and lasts {d} minutes. When does it end?"

    def average():
        scores = [rng.randint(50, 100) for _ in range(rng.randint(3, 6))]
        return f"A student scores {', '.join(map(str, scores))} in tests. What is the average score?"

    def unit():
        n = rng.randint(2, 50)
        what = rng.choice([f"{n} miles into kilometres", f"{n * 100} grams into kilograms",
                           f"{n} hours into seconds", f"{n} feet into metres", f"{n * 10} minutes into hours"])
        return f"Convert {what}."

    draws = [change, speed, share, percent, rate, ages, area, schedule, average, unit]
    out: dict[str, None] = {}
    suffixes = [" Think step by step.", " Show your working.", " Explain your answer."]
    while len(out) < n:
        out[rng.choice(draws)() + rng.choice(suffixes)] = None
    return list(out)


def build(seed: int, exclude: set[str]) -> list[dict]:
    """The mix, minus any text in ``exclude`` (the core prompts that come first in the scale file)."""
    rng = random.Random(seed)
    kinds: dict[str, list] = {k: [] for k in
                              ("code_write", "code_complete", "code_explain", "chat", "reasoning", "multi_turn")}
    for i, task in enumerate(WRITE_TASKS):
        for j, lang in enumerate(LANGS):  # three of the five phrasings per (task, language), rotating
            for r in range(3):
                kinds["code_write"].append(WRITE_FRAMES[(i + j + 2 * r) % len(WRITE_FRAMES)].format(lang=lang, t=task))
    kinds["code_complete"] = _completions()
    for i, (lang, code) in enumerate(SNIPPETS):
        for j, frame in enumerate(EXPLAIN_FRAMES):
            kinds["code_explain"].append(frame.format(lang=lang, c=code))
    chat = kinds["chat"]
    for s in TOPICS:
        chat += [f.format(s=s) for f in TOPIC_FRAMES]
    for a in ADVICE:
        chat += [f.format(a=a) for f in ADVICE_FRAMES]
    for i, who in enumerate(PEOPLE):
        for j, what in enumerate(MATTERS):
            chat.append(EMAIL_FRAMES[(i + j) % 2].format(who=who, what=what))
    for i, city in enumerate(CITIES):
        chat += [CITY_FRAMES[0].format(d=2 + i % 4, city=city), CITY_FRAMES[1].format(city=city)]
    for w in WRITING:
        chat += ["Write " + w.format(s=s) + "." for s in WRITING_SUBJECTS]
    kinds["reasoning"] = _arithmetic(rng, 1150) + [q + " Reason it through before you answer." for q in LOGIC_Q]
    for i, (user, assistant) in enumerate(FIRST_TURNS):
        for j, follow in enumerate(FOLLOW_UPS):
            kinds["multi_turn"].append({"history": [{"role": "user", "content": user},
                                                    {"role": "assistant", "content": assistant}],
                                        "prompt": follow})
    records = []
    for kind, items in kinds.items():
        seen = set()
        for k, item in enumerate(items):
            rec = item if isinstance(item, dict) else {"prompt": item}
            key = repr(rec)
            if key in seen or rec["prompt"] in exclude and "history" not in rec:
                continue
            seen.add(key)
            text = "\n".join([m["content"] for m in rec.get("history", [])] + [rec["prompt"]])
            records.append({"id": f"{kind}-{k:04d}", "category": kind, **rec, "split": _split(text)})
    rng.shuffle(records)
    return records


def build_wave2(seed: int, exclude: set[str], n_write: int = 420, n_reasoning: int = 300) -> list[dict]:
    """A second wave appended after :func:`build` (so every earlier index keeps its prompt and its distilled
    answer): code-writing tasks in the two phrasings the first wave left out, and fresh word problems."""
    rng = random.Random(seed + 1)
    write = []
    for i, task in enumerate(WRITE_TASKS):
        for j, lang in enumerate(LANGS):
            used = {(i + j + 2 * r) % len(WRITE_FRAMES) for r in range(3)}
            write += [f.format(lang=lang, t=task) for k, f in enumerate(WRITE_FRAMES) if k not in used]
    rng.shuffle(write)
    reasoning = _arithmetic(rng, 4 * n_reasoning)
    records, seen = [], set(exclude)
    for kind, items, n in (("code_write", write, n_write), ("reasoning", reasoning, n_reasoning)):
        k = 0
        for text in items:
            if k == n:
                break
            if text in seen:
                continue
            seen.add(text)
            records.append({"id": f"{kind}-w2-{k:04d}", "category": kind, "prompt": text, "split": _split(text)})
            k += 1
    rng.shuffle(records)
    return records
