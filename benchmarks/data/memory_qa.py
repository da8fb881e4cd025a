"""The in-repo memory QA set: 200 facts about 40 people spread over 20 sessions, and 100 questions
that paraphrase 100 of them (other words; half call the person by a nickname or first name only:
"Ben" for "Benjamin Carter"; some ask about dates in other terms). Deterministic (fixed seed):
``python benchmarks/data/memory_qa.py`` writes ``memory_qa.json`` next to it, which the benchmark
and the tests read.

Each template is (fact, question, values); a fact is about one person, a question names the
fact it is about (``answer``: the fact's index), so recall@k is whether that fact (or, for
``search_nodes``, its person's entity) is among the first k results.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

PEOPLE = [
    ("Benjamin Carter", "Ben"), ("Katherine Novak", "Kate"), ("William Osei", "Bill"),
    ("Alexander Lindqvist", "Alex"), ("Elizabeth Moreau", "Liz"), ("Robert Tanaka", "Bob"),
    ("Margaret Okafor", "Maggie"), ("Jonathan Reyes", "Jon"), ("Victoria Haas", "Vicky"),
    ("Nicholas Petrov", "Nick"), ("Samantha Duarte", "Sam"), ("Christopher Walsh", "Chris"),
    ("Jennifer Kowalski", "Jen"), ("Matthew Adeyemi", "Matt"), ("Rebecca Sato", "Becky"),
    ("Anthony Russo", "Tony"), ("Patricia Gallagher", "Pat"), ("Daniel Mbeki", "Dan"),
    ("Susannah Fischer", "Sue"), ("Frederick Olsen", "Fred"), ("Amara Nwosu", "Amara"),
    ("Lucas Ferreira", "Lucas"), ("Ingrid Johansson", "Ingrid"), ("Rajesh Iyer", "Rajesh"),
    ("Mei Chen", "Mei"), ("Omar Haddad", "Omar"), ("Sofia Rossi", "Sofia"), ("Tobias Becker", "Tobias"),
    ("Leila Karimi", "Leila"), ("Hugo Lambert", "Hugo"), ("Yuki Watanabe", "Yuki"),
    ("Carmen Vidal", "Carmen"), ("Felix Brandt", "Felix"), ("Nadia Petrenko", "Nadia"),
    ("Kwame Asante", "Kwame"), ("Aisling Byrne", "Aisling"), ("Diego Castillo", "Diego"),
    ("Hannah Schulz", "Hannah"), ("Arjun Mehta", "Arjun"), ("Zara Ahmed", "Zara"),
]

TEMPLATES = [
    ("{p} is allergic to {v}.", "What food gives {q} an allergic reaction?",
     ["peanuts", "shellfish", "strawberries", "sesame seeds"]),
    ("{p} has a {v} called Pepper.", "What kind of pet does {q} own?",
     ["beagle", "tabby cat", "grey parrot", "golden retriever"]),
    ("{p} works as {v}.", "What is {q}'s job?", ["a nurse", "a welder", "an airline pilot", "an accountant"]),
    ("{p} grew up in {v}.", "Where did {q} spend their childhood?", ["Lisbon", "Osaka", "Nairobi", "Quebec"]),
    ("{p} plays the {v} in a community orchestra.", "Which instrument does {q} perform?",
     ["cello", "trumpet", "violin", "flute"]),
    ("{p}'s favourite cuisine is {v}.", "What type of food does {q} like best?",
     ["Thai", "Ethiopian", "Italian", "Korean"]),
    ("{p} drives a {v}.", "What car does {q} have?",
     ["red Volvo estate", "blue Tesla Model 3", "white pickup truck", "green Mini Cooper"]),
    ("{p} is learning {v} on weekends.", "Which foreign language is {q} studying?",
     ["Japanese", "Portuguese", "Arabic", "Swahili"]),
    ("{p} ran the {v} marathon last year.", "Which marathon race did {q} complete?",
     ["Boston", "Berlin", "Tokyo", "Chicago"]),
    ("{p} follows a {v} diet.", "What are {q}'s eating habits?", ["vegan", "keto", "gluten-free", "pescatarian"]),
    ("{p}'s birthday is on {v}.", "When does {q} celebrate turning a year older?",
     ["3 March", "17 July", "9 November", "28 January"]),
    ("{p} supports {v} football club.", "Which soccer team is {q} a fan of?",
     ["Arsenal", "Benfica", "Ajax", "Celtic"]),
    ("{p} is afraid of {v}.", "What is {q} scared of?", ["spiders", "heights", "deep water", "snakes"]),
    ("{p} moved to {v} in March 2023.", "Which city did {q} relocate to in early 2023?",
     ["Berlin", "Toronto", "Singapore", "Melbourne"]),
    ("{p} graduated in {v} from the University of Leeds.", "What subject did {q} study at university?",
     ["chemistry", "philosophy", "civil engineering", "economics"]),
    ("{p} drinks {v} every morning.", "What's {q}'s usual morning beverage?",
     ["black coffee", "matcha", "chai", "orange juice"]),
    ("{p} is married to {v}.", "Who is {q}'s spouse?", ["Priya", "Marcus", "Elena", "Tomas"]),
    ("{p} collects {v}.", "What does {q} like to collect as a hobby?",
     ["vintage stamps", "vinyl records", "old coins", "comic books"]),
    ("{p} has {v} children.", "How many kids does {q} have?", ["two", "three", "four", "five"]),
    ("{p} takes {v} for migraines.", "What medicine does {q} use for bad headaches?",
     ["ibuprofen", "sumatriptan", "paracetamol", "aspirin"]),
    ("{p} prefers {v} mode in every code editor.", "Which colour theme does {q} like in their IDE?",
     ["dark", "light", "high-contrast", "solarized"]),
    ("{p}'s flight to {v} leaves on Friday.", "Where is {q} flying at the end of the week?",
     ["Reykjavik", "Cairo", "Bogota", "Hanoi"]),
    ("{p} volunteers at the {v} on Sundays.", "Where does {q} do volunteer work?",
     ["animal shelter", "food bank", "public library", "children's hospital"]),
    ("{p} is reading a book about {v}.", "What topic is {q}'s current book on?",
     ["Roman history", "black holes", "mushrooms", "jazz"]),
    ("{p} broke their {v} skiing in 2021.", "Which bone did {q} fracture on the slopes?",
     ["left wrist", "right ankle", "collarbone", "shin"]),
    ("{p} uses {v} on their laptop.", "Which operating system does {q} run on their computer?",
     ["Linux", "Windows", "macOS", "ChromeOS"]),
    ("{p} is saving money to buy a {v}.", "What is {q} putting money aside for?",
     ["sailboat", "house in the country", "grand piano", "motorbike"]),
    ("{p} takes the {v} to work.", "How does {q} commute to the office?", ["train", "bus", "ferry", "tram"]),
    ("{p}'s password hint is the name of their first {v}.", "What does {q}'s password hint refer to?",
     ["teacher", "school", "goldfish", "street"]),
    ("{p} speaks {v} at home with their parents.", "Which language does {q} use with family?",
     ["Polish", "Tamil", "Greek", "Cantonese"]),
    ("{p} hates the taste of {v}.", "Which flavour does {q} dislike?",
     ["coriander", "olives", "liquorice", "blue cheese"]),
    ("{p} started a job at {v} in September.", "Which employer did {q} join in the autumn?",
     ["Siemens", "Spotify", "a local bakery", "the city council"]),
    ("{p} grows {v} in the back garden.", "What does {q} cultivate at home?",
     ["tomatoes", "roses", "chilli peppers", "lavender"]),
    ("{p}'s favourite film is {v}.", "Which movie does {q} love most?",
     ["Casablanca", "Spirited Away", "The Matrix", "Amelie"]),
    ("{p} is planning a trip to {v} in August.", "Where is {q} going for their summer holiday?",
     ["Iceland", "Peru", "Vietnam", "Morocco"]),
    ("{p} has a dentist appointment on {v}.", "When is {q} seeing the dentist?",
     ["Tuesday at 9", "Thursday afternoon", "Monday morning", "the 14th"]),
    ("{p}'s shoe size is {v}.", "What size shoes does {q} wear?", ["42", "38", "45", "40"]),
    ("{p} paints {v} in watercolour.", "What subject does {q} like to paint?",
     ["landscapes", "birds", "portraits", "boats"]),
    ("{p} once met {v} at an airport.", "Which celebrity did {q} bump into while travelling?",
     ["Serena Williams", "Keanu Reeves", "Yo-Yo Ma", "Malala Yousafzai"]),
    ("{p} sells {v} at the farmers' market.", "What goods does {q} offer at a market stall?",
     ["sourdough bread", "honey", "handmade soap", "pickles"]),
    ("{p} is training for a {v} certification.", "Which qualification is {q} preparing for?",
     ["scuba diving", "AWS", "first aid", "sommelier"]),
    ("{p} lives on the {v} floor of their building.", "Which storey is {q}'s flat on?",
     ["third", "tenth", "ground", "seventh"]),
    ("{p} practises {v} three times a week.", "Which sport does {q} do regularly?",
     ["yoga", "rock climbing", "swimming", "boxing"]),
    ("{p} was born in {v}.", "In what year was {q} born?", ["1984", "1991", "1977", "2000"]),
    ("{p} owes their sister {v} euros.", "How much money does {q} owe a sibling?", ["50", "200", "1200", "75"]),
    ("{p} is the manager of the {v} team.", "Which department does {q} lead?",
     ["marketing", "payroll", "security", "design"]),
    ("{p} listens to {v} while working.", "What music does {q} put on at work?",
     ["jazz", "heavy metal", "classical music", "lo-fi beats"]),
    ("{p} had {v} surgery last winter.", "What operation did {q} have a few months ago?",
     ["knee", "appendix", "cataract", "back"]),
    ("{p}'s home wifi network is called {v}.", "What is the name of {q}'s wireless network at home?",
     ["PrettyFlyForAWifi", "Skynet", "Hogwarts", "TheLAN"]),
    ("{p} quit smoking in {v}.", "When did {q} give up cigarettes?", ["2015", "2019", "2008", "2022"]),
]


def build(seed: int = 17) -> dict:
    rng = random.Random(seed)
    assert len(TEMPLATES) == 50 and len(PEOPLE) == 40
    people = list(range(len(PEOPLE)))
    facts, questions = [], []
    slots = [p for p in people for _ in range(5)]  # every person gets 5 facts
    rng.shuffle(slots)
    for t, (fact, question, values) in enumerate(TEMPLATES):
        chosen = slots[4 * t:4 * t + 4]
        for i, person in enumerate(chosen):
            name, nick = PEOPLE[person]
            facts.append({"id": len(facts), "person": name, "session": f"s{person % 20:02d}",
                          "text": fact.format(p=name, v=values[i])})
        for i in rng.sample(range(4), 2):
            person = chosen[i]
            name, nick = PEOPLE[person]
            asked = nick if len(questions) % 2 else name.split()[0]
            questions.append({"question": question.format(q=asked), "answer": len(facts) - 4 + i,
                              "person": name, "nickname": asked != name.split()[0]})
    return {"about": __doc__.strip().splitlines()[0], "facts": facts, "questions": questions}


if __name__ == "__main__":
    out = Path(__file__).with_name("memory_qa.json")
    out.write_text(json.dumps(build(), indent=1) + "\n")
    data = json.loads(out.read_text())
    print(f"{out}: {len(data['facts'])} facts, {len(data['questions'])} questions")
