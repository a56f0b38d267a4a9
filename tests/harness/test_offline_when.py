"""The time a report gives for the start of a problem: read in English and Chinese, with or
without a date, a year or a zone, and resolved against the evidence's timestamps."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from harness.llm.offline.when import YEARS_BACK, StatedTime, resolve, stated_time


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Since about 10:00 UTC on 3 November customers cannot pay", StatedTime(10, 0, month_day=(11, 3))),
        ("Since about 08:45 UTC on 9 February, bookings stay pending", StatedTime(8, 45, month_day=(2, 9))),
        (
            "Checkout broke on March 3rd, 2026 at 10am UTC+8",
            StatedTime(10, 0, day=date(2026, 3, 3), shift_minutes=-480),
        ),
        ("errors since 2026-11-03T10:00:00Z", StatedTime(10, 0, day=date(2026, 11, 3))),
        ("on 2026-11-03 around 09:55 the API went down", StatedTime(9, 55, day=date(2026, 11, 3))),
        ("since 2:05 pm the queue grows", StatedTime(14, 5)),
        ("since 12:30 am nothing is indexed", StatedTime(0, 30)),
        ("3月16日13点（UTC）过后，一部分学员打开课程视频时提示播放失败", StatedTime(13, 0, month_day=(3, 16))),
        ("从 14:05 开始订单服务大量报错", StatedTime(14, 5)),
        ("北京时间下午3点半开始支付超时", StatedTime(15, 30, shift_minutes=-480)),
        ("2026年12月1日上午9点起退款失败", StatedTime(9, 0, day=date(2026, 12, 1))),
    ],
)
def test_the_stated_time_is_read(question: str, expected: StatedTime) -> None:
    assert stated_time(question) == expected


@pytest.mark.parametrize(
    "question",
    [
        "Payments are failing, what is going on?",
        "we see 20-40 minute delays and 503s",
        "version 1.2.3 broke checkout",
        "支付接口一直超时，帮我排查原因",
        "the p99 went from 250 to 900 ms",
    ],
)
def test_no_time_is_read_where_the_question_gives_none(question: str) -> None:
    assert stated_time(question) is None


def _at(day: int, hour: int, minute: int = 0, *, month: int = 2, year: int = 2027) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def test_a_date_without_a_year_takes_the_year_of_the_evidence() -> None:
    seen = [_at(9, 7), _at(9, 9, 10)]

    assert resolve(StatedTime(8, 45, month_day=(2, 9)), seen) == _at(9, 8, 45)


def test_a_time_without_a_date_takes_the_day_with_the_most_evidence_around_it() -> None:
    seen = [_at(8, 20), _at(9, 8), _at(9, 9, 10), _at(9, 9, 20)]

    assert resolve(StatedTime(8, 30), seen) == _at(9, 8, 30)
    assert resolve(StatedTime(19, 30), seen) == _at(8, 19, 30)


def test_a_time_without_a_date_weighs_each_line_by_how_much_of_the_question_it_says() -> None:
    # two lines around 10:00 on the 8th, one on the 9th that says three times as much of what
    # the question describes
    seen = [_at(8, 9, 50), _at(8, 10, 10), _at(9, 10, 5)]

    assert resolve(StatedTime(10, 0), seen) == _at(8, 10, 0)
    assert resolve(StatedTime(10, 0), seen, weights=[1.0, 1.0, 3.0]) == _at(9, 10, 0)


def test_a_time_far_from_all_evidence_is_not_guessed() -> None:
    assert resolve(StatedTime(3, 0), [_at(9, 12), _at(9, 13)]) is None
    assert resolve(StatedTime(3, 0), []) is None


def test_a_full_date_needs_no_evidence_and_a_zone_is_converted() -> None:
    stated = StatedTime(10, 0, day=date(2026, 3, 3), shift_minutes=-480)

    assert resolve(stated, []) == datetime(2026, 3, 3, 2, 0, tzinfo=UTC)


def test_a_date_without_a_year_is_never_after_all_the_evidence() -> None:
    # evidence of May of one year and January of the next, none near 21 August: it is the past August
    seen = [datetime(2026, 5, 1, 13, 0, tzinfo=UTC), datetime(2027, 1, 14, 13, 0, tzinfo=UTC)]
    assert resolve(StatedTime(14, 5, month_day=(8, 21)), seen) == datetime(2026, 8, 21, 14, 5, tzinfo=UTC)
    # and a day after all of it is in the first year it covers, not a later one
    assert resolve(StatedTime(20, 0, month_day=(11, 24)), seen[:1]) == datetime(2026, 11, 24, 20, 0, tzinfo=UTC)


def test_a_date_with_a_part_of_the_day_stands_for_about_then() -> None:
    assert stated_time("slow now and then since yesterday afternoon (5 March)") == StatedTime(14, 0, month_day=(3, 5))
    assert stated_time("1 月 14 日上午开始，model-api 每隔一个多小时就重启一次") == StatedTime(9, 0, month_day=(1, 14))
    # without a date, a part of the day says too little to pick a window
    assert stated_time("slow since the afternoon") is None


def test_a_date_without_a_year_whose_window_was_read_empty_is_taken_a_year_earlier() -> None:
    # a store whose latest warnings are all of 2027: "3 November" is first taken as 2027-11-03;
    # once that day's window has been read and holds nothing, it is the year before
    seen = [datetime(2027, 11, 20, 9, 0, tzinfo=UTC), datetime(2026, 11, 3, 10, 5, tzinfo=UTC)]
    stated = StatedTime(10, 0, month_day=(11, 3))
    window = (datetime(2027, 11, 3, 9, 0, tzinfo=UTC), datetime(2027, 11, 3, 10, 15, tzinfo=UTC))

    assert resolve(stated, seen[:1]) == datetime(2027, 11, 3, 10, 0, tzinfo=UTC)
    assert resolve(stated, seen[:1], [window]) == datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
    assert resolve(stated, seen, [window]) == datetime(2026, 11, 3, 10, 0, tzinfo=UTC)


def test_a_date_without_a_year_steps_back_a_year_for_each_empty_window_up_to_a_limit() -> None:
    # a store whose latest warnings are of 2028, where 20 October of 2028 and 2027 were read empty
    seen = [datetime(2028, 11, 20, 9, 0, tzinfo=UTC)]
    stated = StatedTime(10, 0, month_day=(10, 20))

    def window(year: int) -> tuple[datetime, datetime]:
        return datetime(year, 10, 20, 9, 0, tzinfo=UTC), datetime(year, 10, 20, 10, 15, tzinfo=UTC)

    assert resolve(stated, seen, [window(2028), window(2027)]) == datetime(2026, 10, 20, 10, 0, tzinfo=UTC)
    # …but not for ever: past YEARS_BACK years before the evidence's, the date is not placed
    tried = [window(year) for year in range(2028, 2028 - YEARS_BACK - 1, -1)]
    assert resolve(stated, seen, tried) is None
