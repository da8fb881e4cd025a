"""The word lists the semantic cache's verifier reads (``pion.semantic.verify``), curated by hand.

Why hand-written lists and not an NLP model: the words that flip a question's meaning are a small,
closed set (negators, the two poles of an opposition, the time words, units), so a list says
exactly what is checked and why a candidate was refused, costs microseconds, and needs no model
weights (spaCy's English models are separate downloads, not PyPI packages this project can
require). Word forms are matched through the Snowball English stemmer the search engine already
uses (``pion.vector.text.stem``), so "closing", "closes" and "closed" are one word here.

Each opposition is an *axis* with two or more *poles*; a word may sit on more than one axis
("add" is arithmetic and add/remove). Two texts disagree on an axis when both name it and name
different poles.
"""

from __future__ import annotations

#: negators (a token ending in n't, or starting non-/ending -free, negates too)
NEGATORS = frozenset("not no never none nobody nothing nowhere neither nor without cannot cant dont doesnt "
                     "isnt arent wasnt werent wont shouldnt couldnt wouldnt didnt hasnt havent hadnt except "
                     "excluding lack lacking".split())

#: category -> axis -> poles (each pole a space-separated list of word forms)
OPPOSITIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "comparison": {
        "size": ("big bigger biggest large larger largest huge", "small smaller smallest little tiny"),
        "dimension": ("long longer longest length", "wide wider widest width broad", "tall taller tallest height "
                      "high higher highest", "deep deeper deepest depth", "big bigger biggest large larger largest "
                      "size", "heavy heavier heaviest weight"),
        "amount": ("more most greater increase increasing increases rise rises raise gain maximum max maximize "
                   "highest higher plus", "less least fewer fewest decrease decreasing decreases fall drop lower "
                   "lowest reduce minimum min minimize minus"),
        "height": ("tall taller tallest high higher highest", "short shorter shortest low lower lowest"),
        "length": ("long longer longest", "short shorter shortest"),
        "speed": ("fast faster fastest quick quicker quickest", "slow slower slowest"),
        "age": ("old older oldest", "young younger youngest new newer newest"),
        "price": ("expensive pricier priciest costly", "cheap cheaper cheapest inexpensive affordable"),
        "quality": ("good better best", "bad worse worst"),
        "weight": ("heavy heavier heaviest", "light lighter lightest"),
        "temperature": ("hot hotter hottest warm warmer warmest heat", "cold colder coldest cool cooler coolest"),
        "strength": ("strong stronger strongest", "weak weaker weakest"),
        "timing": ("early earlier earliest", "late later latest"),
        "position": ("above over", "below under beneath"),
        "order": ("ascending ascend increasing asc", "descending descend decreasing desc reverse reversed"),
        "sign": ("positive", "negative"),
        "distance": ("far farther farthest further", "near nearer nearest close closer closest"),
        "depth": ("deep deeper deepest", "shallow shallower shallowest"),
        "width": ("wide wider widest broad", "narrow narrower narrowest"),
    },
    "direction": {
        "compass": ("north northern northward", "south southern southward", "east eastern eastward",
                    "west western westward"),
        "side": ("left", "right"),
        "vertical": ("up upward upwards upstairs uphill", "down downward downwards downstairs downhill"),
        "transfer": ("upload", "download"),
        "trade": ("import imports importing", "export exports exporting"),
        "git": ("push", "pull"),
        "message": ("send sending sent", "receive receiving received"),
        "travel": ("arrive arrival arrivals arriving inbound", "depart departure departures leave leaving outbound"),
        "lending": ("lend lending lent loan", "borrow borrowing borrowed"),
        "money": ("deposit", "withdraw withdrawal"),
        "ledger": ("credit", "debit"),
        "flow": ("input inputs", "output outputs"),
        "io": ("read reading", "write writing"),
        "breath": ("inhale", "exhale"),
        "convert": ("encode encoding", "decode decoding"),
    },
    "operator": {
        "state": ("open opening opens", "close closing closes closed shut"),
        "cooking": ("raw uncooked", "cooked roasted baked fried grilled reheat reheated"),
        "switch": ("enable enabled activate turn_on switch_on", "disable disabled deactivate turn_off switch_off"),
        "run": ("start starting begin beginning launch", "stop stopping end ending finish quit halt"),
        "setup": ("install installing installation", "uninstall uninstalling remove removal"),
        "crypto": ("encrypt encryption encrypting", "decrypt decryption decrypting"),
        "zip": ("compress compression zip", "decompress decompression unzip extract"),
        "market": ("buy buying bought purchase", "sell selling sold"),
        "sequence": ("before prior", "after"),
        "ends": ("first", "last final"),
        "recency": ("next upcoming following", "last previous preceding"),
        "edit": ("add adding insert create append", "remove removing delete deleting drop"),
        "arith": ("add plus sum +", "subtract minus difference -", "multiply multiplied times product *",
                  "divide divided quotient /"),
        "session": ("login log_in sign_in signin log_on", "logout log_out sign_out signout log_off"),
        "outcome": ("win winning won", "lose losing lost"),
        "truth": ("true", "false"),
        "sex": ("male men man boy", "female women woman girl"),
        "case": ("uppercase upper capital", "lowercase lower"),
        "sun": ("sunrise dawn", "sunset dusk"),
        "phase": ("freeze freezing frozen", "melt melting", "boil boiling"),
        "judgement": ("pros advantage advantages benefit benefits", "cons disadvantage disadvantages drawback "
                      "drawbacks risk risks"),
        "permission": ("allow allowed accept permit", "deny denied reject block forbid ban"),
        "inclusion": ("include including", "exclude excluding"),
        "visibility": ("public", "private"),
        "join": ("inner", "outer"),
        "set": ("union", "intersection"),
        "axis": ("row rows horizontal horizontally", "column columns vertical vertically"),
        "tense": ("past", "future"),
        "sync": ("synchronous sync", "asynchronous async"),
        "tier": ("frontend client", "backend server"),
        "wet": ("wet", "dry"),
        "safety": ("safe", "unsafe dangerous"),
        "legal": ("legal", "illegal"),
        "hire": ("hire hiring", "fire firing"),
        "charge": ("charge charging", "discharge"),
    },
}

#: units: canonical name -> its forms (a unit is only a unit after a number or in a unit slot)
UNITS: dict[str, str] = {
    "km": "km kilometer kilometers kilometre kilometres kms",
    "mile": "mile miles mi",
    "m": "meter meters metre metres",
    "cm": "cm centimeter centimeters centimetre centimetres",
    "mm": "mm millimeter millimeters",
    "foot": "foot feet ft",
    "inch": "inch inches",
    "yard": "yard yards",
    "kg": "kg kgs kilogram kilograms kilo kilos",
    "g": "gram grams",
    "lb": "lb lbs pound pounds",
    "oz": "oz ounce ounces",
    "stone": "stone stones",
    "ton": "ton tons tonne tonnes",
    "l": "liter liters litre litres",
    "ml": "ml milliliter milliliters millilitre millilitres",
    "gallon": "gallon gallons gal",
    "cup": "cup cups",
    "tbsp": "tablespoon tablespoons tbsp",
    "tsp": "teaspoon teaspoons tsp",
    "celsius": "celsius centigrade °c",
    "fahrenheit": "fahrenheit °f",
    "kelvin": "kelvin",
    "mph": "mph",
    "kph": "kph km/h kmh",
    "knot": "knot knots",
    "usd": "usd dollar dollars $ buck bucks",
    "eur": "eur euro euros €",
    "gbp": "gbp sterling £",
    "jpy": "jpy yen ¥",
    "inr": "inr rupee rupees",
    "btc": "btc bitcoin bitcoins",
    "percent": "percent percentage % pct",
    "byte": "byte bytes",
    "bit": "bit bits",
    "kb": "kb kilobyte kilobytes",
    "mb": "mb megabyte megabytes",
    "gb": "gb gigabyte gigabytes",
    "tb": "tb terabyte terabytes",
    "second": "second seconds sec secs",
    "minute": "minute minutes mins",
    "hour": "hour hours hr hrs",
    "day": "day days",
    "week": "week weeks",
    "month": "month months",
    "year": "year years yr yrs",
    "calorie": "calorie calories kcal cal",
    "watt": "watt watts",
    "kw": "kw kilowatt kilowatts",
    "kwh": "kwh",
    "volt": "volt volts",
    "acre": "acre acres",
    "hectare": "hectare hectares",
}

#: number words -> value (ordinals carry a ``#``)
NUMBER_WORDS: dict[str, str] = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80",
                     "ninety": "90", "hundred": "100", "thousand": "1000", "million": "1000000",
                     "billion": "1000000000", "dozen": "12", "half": "0.5", "quarter": "0.25", "twice": "2",
                     "double": "2", "triple": "3", "single": "1", "couple": "2", "pair": "2"})
ORDINALS: dict[str, str] = {w: f"#{i}" for i, w in enumerate(
    "second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split(), start=2)}

#: time words: each canonical time -> its forms
TIMES: dict[str, str] = {
    "today": "today todays", "tonight": "tonight", "tomorrow": "tomorrow tomorrows tmrw",
    "yesterday": "yesterday yesterdays", "now": "now currently right_now", "morning": "morning mornings",
    "afternoon": "afternoon", "evening": "evening evenings", "night": "night nights overnight",
    "noon": "noon midday", "midnight": "midnight", "weekend": "weekend weekends",
    "monday": "monday mondays", "tuesday": "tuesday tuesdays", "wednesday": "wednesday wednesdays",
    "thursday": "thursday thursdays", "friday": "friday fridays", "saturday": "saturday saturdays",
    "sunday": "sunday sundays", "january": "january jan", "february": "february feb", "march": "march",
    "april": "april apr", "may": "may", "june": "june", "july": "july", "august": "august aug",
    "september": "september sept", "october": "october oct", "november": "november nov",
    "december": "december dec", "spring": "spring", "summer": "summer summertime", "autumn": "autumn",
    "winter": "winter wintertime", "christmas": "christmas xmas", "easter": "easter",
}
#: words that are months only when capitalised ("may" and "march" are common words otherwise)
CAPITALISED_TIMES = frozenset({"may", "march", "spring", "jan", "feb", "apr", "aug", "sept", "oct", "nov", "dec"})
#: next/last/this + a period is its own time ("next week" is not "this week")
TIME_SHIFTS = {"next": "next", "coming": "next", "last": "last", "past": "last", "previous": "last",
               "this": "this", "current": "this"}
TIME_PERIODS = frozenset("week weekend month year quarter season summer winter spring autumn monday tuesday "
                         "wednesday thursday friday saturday sunday morning evening night".split())

#: irregular verb forms -> the verb (Snowball stems regular forms only: "wrote" is not "write")
IRREGULAR: dict[str, str] = {form: verb for verb, forms in {
    "write": "wrote written writes", "win": "won", "begin": "began begun", "buy": "bought", "go": "went gone",
    "take": "took taken", "make": "made", "give": "gave given", "speak": "spoke spoken", "eat": "ate eaten",
    "drive": "drove driven", "see": "saw seen", "know": "knew known", "grow": "grew grown", "fly": "flew flown",
    "find": "found", "build": "built", "sell": "sold", "teach": "taught", "think": "thought", "bring": "brought",
    "catch": "caught", "fall": "fell fallen", "choose": "chose chosen", "break": "broke broken",
    "steal": "stole stolen", "freeze": "froze frozen", "pay": "paid", "say": "said", "tell": "told",
    "sing": "sang sung", "swim": "swam swum", "run": "ran", "lead": "led", "lose": "lost", "send": "sent",
    "spend": "spent", "leave": "left", "feel": "felt", "keep": "kept", "sleep": "slept", "meet": "met",
    "hold": "held", "stand": "stood", "understand": "understood", "draw": "drew drawn", "hide": "hid hidden",
    "ride": "rode ridden", "rise": "rose risen", "shake": "shook shaken", "wear": "wore worn", "tear": "tore torn",
    "bear": "bore born borne", "die": "died", "be": "was were been", "do": "did done", "have": "had has",
}.items() for form in forms.split()}

#: Roman numerals read as numbers (after a capitalised word: "World War II", "Henry VIII")
ROMAN = {"ii": "2", "iii": "3", "iv": "4", "v": "5", "vi": "6", "vii": "7", "viii": "8", "ix": "9", "x": "10",
         "xi": "11", "xii": "12"}
#: times a question without one means (a question with no time asks about now)
PRESENT = frozenset({"now", "today"})

#: the question's kind: a lookup asking "when" is not answered by a cached "who"
QUESTION_KINDS = {"who": "person", "whom": "person", "whose": "person", "when": "time", "where": "place",
                  "why": "reason"}
#: "what year", "how many" ... (the word after the question word decides)
QUESTION_PAIRS = {("what", "time"): "time", ("what", "year"): "time", ("what", "date"): "time",
                  ("which", "year"): "time", ("what", "day"): "time", ("how", "many"): "quantity",
                  ("how", "much"): "quantity", ("how", "long"): "duration", ("how", "old"): "age"}

#: lower-case names people type without capitals: languages, countries, cities, software
GAZETTEER = frozenset("""
english french spanish german italian portuguese dutch russian chinese mandarin cantonese japanese korean arabic
hindi bengali urdu turkish greek latin polish swedish norwegian danish finnish hebrew thai vietnamese indonesian
france spain germany italy portugal netherlands russia china japan korea india pakistan brazil mexico canada
australia egypt turkey greece poland sweden norway denmark finland ireland scotland england wales britain uk usa
america argentina chile peru colombia nigeria kenya ethiopia morocco iran iraq israel thailand vietnam
indonesia switzerland austria belgium ukraine
paris london berlin madrid rome lisbon amsterdam moscow beijing shanghai tokyo osaka seoul delhi mumbai sydney
melbourne toronto vancouver montreal chicago boston seattle miami dallas houston denver atlanta vienna prague
dublin edinburgh barcelona milan venice athens istanbul cairo dubai singapore bangkok
python java javascript typescript kotlin rust golang ruby php perl scala haskell csharp cpp swift sql mysql
postgres postgresql sqlite mongodb redis html css json yaml xml linux ubuntu debian windows macos ios android
docker kubernetes git github numpy pandas react angular vue django flask node npm pip bash powershell excel
chrome firefox safari iphone ipad aws azure gcp tensorflow pytorch
""".split())

#: capitalised words that name no entity of their own (a title or a generic part of a name)
GENERIC_CAPITALISED = frozenset("""
i ok okay mount mt mr mrs ms dr st saint city river lake sea ocean island islands the of and a an in on at for to
united kingdom republic state states north south east west new old great ii iii
""".split())

#: words too common to carry a question's meaning on their own (for model mode's content words)
STOPWORDS = frozenset("""
a an the and or but if then so of to in on at by for with from into onto about as is are was were be been being
am do does did doing done have has had having i me my mine we us our you your yours he him his she her it its
they them their this that these those there here what which who whom whose when where why how can could should
would will shall may might must please tell explain show give get got let find know need want like make made
way ways best good some any all each every one much many more most also just than too very really s t
thing things something anything kind type sort use using used does doesnt do dont is isnt
take taking get getting go going goes turn put vs versus between together
""".split())
