"""Hash values: fields in insertion order (as Redis's listpack keeps them), optional per-field
expiry times (Redis 7.4), and the encoding Redis would report (listpack, listpackex once a field
TTL command touched it, hashtable once a size threshold was crossed; never back, as in Redis).

Expired fields are removed lazily by ``purge``: callers purge before they read or write, so an
expired field is never returned. Also here: the x87 long-double arithmetic HINCRBYFLOAT needs to
print exactly what Redis prints (``%.17Lf`` of an 80-bit value, trailing zeros removed).
"""

from __future__ import annotations

import re
from fractions import Fraction

from pion.storage import encodings, serialize
from pion.storage.keyspace import register_type
from pion.storage.set_value import ScanIndex

LISTPACK, LISTPACKEX, HASHTABLE = "listpack", "listpackex", "hashtable"
NO_EXPIRE = 1 << 62


class HashValue:
    """A hash. ``fields`` maps field -> value; ``ttls`` field -> absolute expiry in ms."""

    __slots__ = ("fields", "ttls", "encoding", "next_expire", "scan_index", "scheduled")

    def __init__(self, fields: dict[bytes, bytes] | None = None, ttls: dict[bytes, int] | None = None,
                 encoding: str = LISTPACK) -> None:
        self.fields: dict[bytes, bytes] = fields if fields is not None else {}
        self.ttls: dict[bytes, int] = ttls if ttls is not None else {}
        self.encoding = encoding
        self.next_expire = min(self.ttls.values(), default=NO_EXPIRE)
        self.scan_index: ScanIndex | None = None
        #: the earliest time the active sweep holds for this hash (NO_EXPIRE: not scheduled)
        self.scheduled = NO_EXPIRE

    def __len__(self) -> int:
        return len(self.fields)

    def copy(self) -> HashValue:
        return HashValue(dict(self.fields), dict(self.ttls), self.encoding)

    __copy__ = dup = copy

    def __deepcopy__(self, memo: dict) -> HashValue:
        return self.copy()

    # -- expiry ------------------------------------------------------------------------

    def purge(self, now: int) -> list[bytes]:
        """Remove the fields whose time has come; returns them (cheap when none is due)."""
        if now < self.next_expire:
            return []
        expired = [field for field, when in self.ttls.items() if when <= now]
        for field in expired:
            del self.fields[field]
            del self.ttls[field]
        self.next_expire = min(self.ttls.values(), default=NO_EXPIRE)
        if expired:
            self.scan_index = None
        return expired

    def set_ttl(self, field: bytes, when: int) -> None:
        self.ttls[field] = when
        if when < self.next_expire:
            self.next_expire = when

    def clear_ttl(self, field: bytes) -> bool:
        if self.ttls.pop(field, None) is None:
            return False
        if not self.ttls:
            self.next_expire = NO_EXPIRE
        return True

    def allow_ttls(self) -> None:
        """A field-TTL command touched the hash: Redis turns listpack into listpackex."""
        if self.encoding == LISTPACK:
            self.encoding = LISTPACKEX

    # -- writes ------------------------------------------------------------------------

    def prepare(self, args: list[bytes], limits: tuple[int, int]) -> None:
        """hashTypeTryConversion: too many new pairs or a too long argument -> hashtable."""
        if self.encoding != HASHTABLE:
            entries, longest = limits
            if len(args) // 2 > entries or any(len(arg) > longest for arg in args):
                self.encoding = HASHTABLE

    def put(self, field: bytes, value: bytes, limits: tuple[int, int], keep_ttl: bool = False) -> bool:
        """Set a field (dropping its TTL unless ``keep_ttl``); True if the field is new."""
        fields = self.fields
        new = field not in fields
        fields[field] = value
        if new:
            self.scan_index = None
        elif not keep_ttl and self.ttls:
            self.clear_ttl(field)
        if self.encoding != HASHTABLE:
            entries, longest = limits
            if len(fields) > entries or len(field) > longest or len(value) > longest:
                self.encoding = HASHTABLE
        return new

    def remove(self, field: bytes) -> bool:
        if self.fields.pop(field, None) is None:
            return False
        if self.ttls:
            self.clear_ttl(field)
        self.scan_index = None
        return True

    def scan(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        """One HSCAN page of fields: everything at once unless hashtable-encoded, as Redis."""
        if self.encoding != HASHTABLE:
            return 0, list(self.fields)
        if self.scan_index is None:
            self.scan_index = ScanIndex(self.fields)
        return self.scan_index.page(cursor, count)


_limits_cache: list = [None, None]


def hash_limits(settings: object) -> tuple[int, int]:
    """(hash-max-listpack-entries, hash-max-listpack-value), cached per immutable settings."""
    if _limits_cache[0] is not settings:
        _limits_cache[1] = (
            encodings.threshold(settings, "hash-max-listpack-entries"),
            encodings.threshold(settings, "hash-max-listpack-value"),
        )
        _limits_cache[0] = settings
    return _limits_cache[1]


def _dump(value: HashValue) -> bytes:
    return serialize.pack_tree([value.encoding.encode(), value.fields, value.ttls])


def _load(body: bytes) -> HashValue:
    encoding, fields, ttls = serialize.unpack_tree(body)
    return HashValue(fields, ttls, encoding.decode())


register_type(HashValue, "hash")
encodings.register_encoding(HashValue, lambda value, settings: value.encoding)
serialize.register_codec(HashValue, 2, _dump, _load)


# -- long double (x87 80-bit) arithmetic for HINCRBYFLOAT --------------------------------------

_MANTISSA = 64
_MIN_QUANTUM = -16445  # the smallest subnormal is 2**-16445
LDBL_MAX = Fraction((1 << 64) - 1) * Fraction(2) ** (16384 - 64)
_DECIMAL = re.compile(rb"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")
_HEX = re.compile(rb"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?\d+))?")
_SPECIAL = re.compile(rb"([+-]?)(inf|infinity|nan(?:\([0-9a-zA-Z_]*\))?)", re.IGNORECASE)
INF = "inf"


def round_long_double(value: Fraction) -> Fraction | str:
    """Round an exact rational to the nearest 80-bit long double (ties to even), or 'inf'."""
    if value == 0:
        return value
    sign = -1 if value < 0 else 1
    num, den = abs(value.numerator), value.denominator
    exp = num.bit_length() - den.bit_length()
    if (num << max(0, -exp)) < (den << max(0, exp)):
        exp -= 1
    quantum = max(exp - (_MANTISSA - 1), _MIN_QUANTUM)
    if quantum >= 0:
        mant, rem = divmod(num, den << quantum)
        half = den << quantum
    else:
        mant, rem = divmod(num << -quantum, den)
        half = den
    if 2 * rem > half or (2 * rem == half and mant & 1):
        mant += 1
    result = Fraction(mant) * (Fraction(2) ** quantum)
    if result > LDBL_MAX:
        return INF
    return sign * result


def parse_long_double(raw: bytes) -> Fraction | str | None:
    """Redis's string2ld: strtold over the whole string; None if invalid, 'inf'/'-inf' allowed.
    A NUL inside refuses the whole value (strtold would stop there, short of the length)."""
    if not raw or len(raw) >= 5120 or raw[:1].isspace() or b"\x00" in raw:
        return None
    special = _SPECIAL.fullmatch(raw)
    if special:
        if special.group(2)[:1].lower() == b"n":
            return None
        return "-inf" if special.group(1) == b"-" else INF
    hexmatch = _HEX.fullmatch(raw)
    if hexmatch and (hexmatch.group(2) or hexmatch.group(3)):
        sign, whole, frac, exp = hexmatch.groups()
        frac = frac or b""
        mant = int((whole + frac) or b"0", 16)
        power = int(exp or b"0") - 4 * len(frac)
        if not mant:
            return Fraction(0)
        if abs(power) > 70000:
            return None
        return _finish(sign, Fraction(mant) * Fraction(2) ** power)
    match = _DECIMAL.fullmatch(raw)
    if not match or not (match.group(2) or match.group(3)):
        return None
    sign, whole, frac, exp = match.groups()
    frac = frac or b""
    digits = (whole + frac).lstrip(b"0")
    if not digits:
        return Fraction(0)
    power = int(exp or b"0") - len(frac)
    magnitude = len(digits) + power
    if magnitude > 4940 or magnitude < -4960:
        return None  # overflow or underflow to zero: ERANGE, refused by string2ld
    return _finish(sign, Fraction(int(digits)) * Fraction(10) ** power)


def _finish(sign: bytes, value: Fraction) -> Fraction | None:
    rounded = round_long_double(value)
    if rounded == INF or rounded == 0:
        return None  # HUGE_VAL or underflow to zero with ERANGE
    return -rounded if sign == b"-" else rounded  # type: ignore[operator]


def format_long_double(value: Fraction) -> bytes:
    """ld2string's LD_STR_HUMAN: ``%.17Lf`` with trailing zeros (and a bare dot) removed."""
    scaled = value * 10**17
    whole = scaled.numerator // scaled.denominator
    rem = scaled - whole
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and whole & 1):
        whole += 1
    negative = whole < 0
    digits = str(abs(whole)).rjust(18, "0")
    text = digits[:-17] + "." + digits[-17:]
    text = text.rstrip("0").rstrip(".")
    if negative and text != "0":
        text = "-" + text
    return text.encode()
