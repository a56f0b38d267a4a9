"""When the reporter says the problem began: "since about 10:00 UTC on 3 November",
"3月16日13点（UTC）过后", "from 2:05 pm", "2026-11-03T10:00Z".

An on-call engineer starts from the time in the report: what began around then is the incident,
what was already there is noise. A report seldom gives the year, and sometimes not the day, so
the time is resolved against the timestamps the evidence shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",),
            ("jun", "june"), ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"),
            ("oct", "october"), ("nov", "november"), ("dec", "december"),
        ),
        start=1,
    )
    for name in names
}  # fmt: skip
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))

#: Offsets from UTC of the zone names a report may use (hours).
_ZONES = {
    "utc": 0, "gmt": 0, "z": 0, "bst": 1, "cet": 1, "cest": 2, "eet": 2, "eest": 3, "ist": 5.5,
    "sgt": 8, "jst": 9, "kst": 9, "aest": 10, "est": -5, "edt": -4, "cdt": -5, "mst": -7,
    "mdt": -6, "pst": -8, "pdt": -7, "北京时间": 8, "东八区": 8,
}  # fmt: skip

_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?)?\s*(Z|[+-]\d{2}:?\d{2})?")
_CLOCK = re.compile(r"(?<![\d:.])(\d{1,2}):(\d{2})(?::\d{2})?(?![\d:])\s*(a\.?m\.?|p\.?m\.?)?", re.IGNORECASE)
_HOUR_AMPM = re.compile(r"(?<![\d:.])(\d{1,2})\s*(a\.?m\.?|p\.?m\.?)(?![a-z])", re.IGNORECASE)
_CHINESE_CLOCK = re.compile(r"(凌晨|早上|上午|中午|下午|傍晚|晚上)?\s*(\d{1,2})\s*[点時时]\s*(?:(半)|(\d{1,2})\s*分?)?")
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\.?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_CHINESE_DATE = re.compile(r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
_ZONE = re.compile(
    r"(北京时间|东八区)|\b(UTC|GMT)\s*([+-]\s*\d{1,2}(?::?\d{2})?)?|\b("
    + "|".join(z for z in _ZONES if z.isascii() and z != "z")
    + r")\b",
    re.IGNORECASE,
)

#: How many years before the evidence's a date without a year is looked for, once the days of
#: the years the evidence shows were read and held nothing.
YEARS_BACK = 3
#: The window of the evidence's timestamps in which a time of day without a date is looked for.
_NEAR = timedelta(hours=2)


@dataclass(frozen=True, slots=True)
class StatedTime:
    """A time of day in UTC, with as much of the date as the report gave."""

    hour: int
    minute: int
    day: date | None = None  # the whole date, when the report gave a year
    month_day: tuple[int, int] | None = None  # month and day without a year
    #: minutes to add to the stated wall-clock time to get UTC
    shift_minutes: int = 0

    def on(self, day: date) -> datetime:
        at = datetime(day.year, day.month, day.day, self.hour, self.minute, tzinfo=UTC)
        return at + timedelta(minutes=self.shift_minutes)


def stated_time(question: str) -> StatedTime | None:
    """The first time of day the question gives, with its date and zone when it gives them."""
    iso = _ISO.search(question)
    if iso and iso.group(4):
        y, mo, d, hour, minute = (int(iso.group(i)) for i in range(1, 6))
        shift = _offset_minutes(iso.group(6)) if iso.group(6) else _zone_shift(question)
        return _valid(hour, minute, day=_date(y, mo, d), shift=shift)
    clock = _clock(question)
    if clock is None and (iso or any(p.search(question) for p in (_CHINESE_DATE, _DAY_MONTH, _MONTH_DAY))):
        clock = _part_of_day(question)  # "on 5 March in the afternoon": about then
    if clock is None:
        return None
    hour, minute = clock
    shift = _zone_shift(question)
    if iso:
        return _valid(hour, minute, day=_date(*(int(iso.group(i)) for i in range(1, 4))), shift=shift)
    for pattern, order in ((_CHINESE_DATE, "ymd"), (_DAY_MONTH, "dmy"), (_MONTH_DAY, "mdy")):
        found = pattern.search(question)
        if found is None:
            continue
        year: str | None
        if order == "ymd":
            year, month, day = found.group(1), int(found.group(2)), int(found.group(3))
        elif order == "dmy":
            day, month, year = int(found.group(1)), _MONTHS[found.group(2).lower()], found.group(3)
        else:
            month, day, year = _MONTHS[found.group(1).lower()], int(found.group(2)), found.group(3)
        if year:
            return _valid(hour, minute, day=_date(int(year), month, day), shift=shift)
        if 1 <= month <= 12 and 1 <= day <= 31:
            return _valid(hour, minute, month_day=(month, day), shift=shift)
    return _valid(hour, minute, shift=shift)


def resolve(
    stated: StatedTime,
    seen: Sequence[datetime],
    empty: Sequence[tuple[datetime, datetime]] = (),
    weights: Sequence[float] = (),
) -> datetime | None:
    """The stated time as a UTC instant, its missing year or day taken from the evidence's
    timestamps ``seen``: the candidate with the most evidence around it (each time counted by its
    weight, 1 when ``weights`` gives none: how much of what the question describes its line
    says), the latest on a tie (a day without a year not after all the evidence, when it can
    be). A candidate inside one of the ``empty`` windows (read, and holding no warning at all)
    is not the day: a date without a year is then taken a year earlier."""
    if stated.day is not None:
        return stated.on(stated.day)
    if not seen:
        return None
    days = sorted({ts.astimezone(UTC).date() for ts in seen})
    if stated.month_day is not None:
        month, day = stated.month_day
        # the day in a year the evidence covers, but not after all of it (a report is of the
        # past), unless every such day is: then the first of them
        dated = [d for year in sorted({d.year for d in days}) if (d := _date(year, month, day)) is not None]
        candidates = [d for d in dated if d <= days[-1] + timedelta(days=1)] or dated[:1]
        # every such day read and empty: the year before the earliest (and so on, as each is
        # read and found empty, up to YEARS_BACK years)
        year = candidates[0].year if candidates else None
        while year is not None and candidates and all(_inside(stated.on(d), empty) for d in candidates):
            year -= 1
            earlier = _date(year, month, day) if dated[0].year - year <= YEARS_BACK else None
            candidates = [earlier] if earlier is not None else []
        candidates = [d for d in candidates if not _inside(stated.on(d), empty)]
    else:
        candidates = sorted({d + timedelta(days=k) for d in days for k in (-1, 0, 1)})
    weighed = list(zip(seen, [*weights, *[1.0] * (len(seen) - len(weights))], strict=True))
    best: tuple[float, datetime] | None = None
    for day_ in candidates:
        at = stated.on(day_)
        near = sum(weight for ts, weight in weighed if abs(ts - at) <= _NEAR)
        if best is None or near >= best[0]:
            best = (near, at)
    if best is None or (stated.month_day is None and best[0] == 0):
        return None
    return best[1]


def _inside(at: datetime, windows: Sequence[tuple[datetime, datetime]]) -> bool:
    return any(start <= at <= end for start, end in windows)


def _clock(question: str) -> tuple[int, int] | None:
    found = [(m.start(), _ampm(int(m.group(1)), m.group(3)), int(m.group(2))) for m in _CLOCK.finditer(question)] + [
        (m.start(), _ampm(int(m.group(1)), m.group(2)), 0) for m in _HOUR_AMPM.finditer(question)
    ]
    for m in _CHINESE_CLOCK.finditer(question):
        hour = int(m.group(2))
        if m.group(1) in ("下午", "傍晚", "晚上") and hour < 12:
            hour += 12
        minute = 30 if m.group(3) else int(m.group(4) or 0)
        found.append((m.start(), hour, minute))
    for _, hour, minute in sorted(found):
        if 0 <= hour <= 23 and 0 <= minute <= 59:
            return hour, minute
    return None


#: the hour a part of the day stands for, when a report gives a date but no time
_PARTS_OF_DAY = {
    "morning": 9, "noon": 12, "midday": 12, "lunchtime": 12, "afternoon": 14, "evening": 19,
    "night": 22, "overnight": 2,
    "凌晨": 3, "早上": 8, "上午": 9, "中午": 12, "下午": 14, "傍晚": 18, "晚上": 20, "夜里": 22,
}  # fmt: skip
_PART_OF_DAY = re.compile(
    r"\b(?:morning|noon|midday|lunchtime|afternoon|evening|night|overnight)\b|凌晨|早上|上午|中午|下午|傍晚|晚上|夜里",
    re.I,
)


def _part_of_day(question: str) -> tuple[int, int] | None:
    found = _PART_OF_DAY.search(question)
    return (_PARTS_OF_DAY[found.group(0).lower()], 0) if found else None


def _ampm(hour: int, marker: str | None) -> int:
    if not marker:
        return hour
    pm = marker.lower().startswith("p")
    if hour == 12:
        return 12 if pm else 0
    return hour + 12 if pm else hour


def _zone_shift(question: str) -> int:
    found = _ZONE.search(question)
    if found is None:
        return 0
    if found.group(1):
        hours: float = _ZONES[found.group(1)]
    elif found.group(2):
        return _offset_minutes(found.group(3).replace(" ", "")) if found.group(3) else 0
    else:
        hours = _ZONES[found.group(4).lower()]
    return -round(hours * 60)


def _offset_minutes(text: str) -> int:
    """``+08:00`` → -480: the minutes to add to a wall-clock time at that offset to get UTC."""
    if text.upper() == "Z":
        return 0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = (int(digits[:2]), int(digits[2:4] or 0)) if len(digits) > 2 else (int(digits), 0)
    return -sign * (hours * 60 + minutes)


def _date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _valid(
    hour: int,
    minute: int,
    *,
    day: date | None = None,
    month_day: tuple[int, int] | None = None,
    shift: int = 0,
) -> StatedTime | None:
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        return None
    return StatedTime(hour, minute, day=day, month_day=month_day, shift_minutes=shift)
