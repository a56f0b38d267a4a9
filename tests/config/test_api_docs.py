"""/api/docs works offline: Swagger UI comes from our own static files, not a CDN, and the
schema it loads is generated without a warning."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db

#: an absolute or protocol-relative URL: another host
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def test_the_docs_page_loads_nothing_from_another_host() -> None:
    response = Client().get("/api/docs")
    assert response.status_code == 200
    page = _References()
    page.feed(response.content.decode())
    assert page.urls, "the page references no script or stylesheet at all"
    assert [url for url in page.urls if _EXTERNAL.match(url)] == []
    assert not re.search(r"https?://", "".join(page.scripts))  # nor does its inline script fetch one
    for url in page.urls:
        assert url.startswith("/static/"), url
        assert finders.find(url.removeprefix("/static/")), f"{url} is not among the static files"


def test_the_schema_is_generated_without_warnings() -> None:
    GENERATOR_STATS.reset()
    SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    assert not GENERATOR_STATS, dict(GENERATOR_STATS._warn_cache) | dict(GENERATOR_STATS._error_cache)


def test_the_schema_the_docs_page_loads_is_generated_without_warnings() -> None:
    GENERATOR_STATS.reset()
    response = Client().get("/api/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert response.json()["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    assert not GENERATOR_STATS, dict(GENERATOR_STATS._warn_cache) | dict(GENERATOR_STATS._error_cache)
