"""Signing in to a tern that has an API key: without the key the page shows a sign-in form
and no data; a wrong key is refused with an alert; the right one is kept in session storage
only (never a cookie, local storage or the URL) and opens the live link; Sign out forgets it."""

from __future__ import annotations

import pytest

from tests.browser.support import ARTIFACTS, expect

pytestmark = pytest.mark.slow

# Chromium logs every refused fetch on the console; a refusal is what these tests expect. (The
# events socket opens only once a call has succeeded: a refused WebSocket is still a problem.)
REFUSED = ("status of 401",)


def sign_in_form(page):
    return page.get_by_role("form", name="Sign in")


def sign_in(page, key: str) -> None:
    form = sign_in_form(page)
    form.get_by_label("API key").fill(key)
    form.get_by_role("button", name="Sign in").click()


def test_without_the_key_the_page_shows_the_form_and_no_data(watched, keyed):
    url, _ = keyed
    watched.allowed.extend(REFUSED)
    page = watched.page
    page.goto(url + "/#/overview")
    form = sign_in_form(page)
    expect(form).to_be_visible()
    expect(form.get_by_label("API key")).to_have_attribute("type", "password")
    # a daemon with a key takes no local token: the form names where the key comes from instead
    expect(form.get_by_role("note", name="Where the key is")).to_contain_text("$TERN_API_KEY")
    expect(form).not_to_contain_text("local token")
    page.screenshot(path=str(ARTIFACTS / "sign-in.png"))
    text = page.locator("body").inner_text()
    assert "Replies with the message it was sent" not in text and "writer" not in text, text
    expect(page.get_by_role("status", name="Connection")).to_have_text("Offline")
    page.set_viewport_size({"width": 375, "height": 812})
    width = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1], f"the sign-in form scrolls sideways at 375 px: {width}"


def test_a_wrong_key_is_refused(watched, keyed):
    url, key = keyed
    watched.allowed.extend(REFUSED)
    page = watched.page
    page.goto(url + "/#/overview")
    form = sign_in_form(page)
    sign_in(page, key + "-wrong")
    expect(page.get_by_role("alert")).to_be_visible()
    expect(form).to_be_visible()
    assert "writer" not in page.locator("body").inner_text()
    assert key not in page.url


def test_the_right_key_signs_in_and_sign_out_forgets_it(watched, keyed):
    url, key = keyed
    watched.allowed.extend(REFUSED)  # the first load, before the key is given
    page = watched.page
    addresses: list[str] = []
    page.on("request", lambda request: addresses.append(request.url))
    page.on("websocket", lambda socket: addresses.append(socket.url))
    page.goto(url + "/#/overview")
    form = sign_in_form(page)
    sign_in(page, key)
    expect(form).to_have_count(0)
    main = page.locator("#main")
    expect(main).to_contain_text("writer")
    expect(page.get_by_role("status", name="Connection")).to_have_text("Live")  # the WebSocket took the key too
    assert page.evaluate("() => sessionStorage.getItem('tern.key')") == key
    assert page.evaluate("() => localStorage.length") == 0
    assert page.context.cookies() == []
    assert any(a.endswith("/api/events") for a in addresses), addresses
    assert not [a for a in addresses if key in a]
    page.reload()  # the key lives as long as the tab
    expect(main).to_contain_text("writer")
    page.get_by_role("button", name="Sign out").click()
    expect(sign_in_form(page)).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('tern.key')") is None
    assert "writer" not in page.locator("body").inner_text()


@pytest.mark.parametrize("wrong", ["ключ", "k" * 5000, "key with spaces\t", "<img src=x>"],
                         ids=["not-latin-1", "5000-chars", "whitespace", "markup"])
def test_a_hostile_key_is_refused_without_breaking_the_page(watched, keyed, wrong):
    """A key no header can carry (not Latin-1), one far too long, whitespace, markup: an
    alert each time, no uncaught exception, and the form still signs in with the right key."""
    url, key = keyed
    watched.allowed.extend(REFUSED)
    page = watched.page
    page.goto(url + "/#/overview")
    sign_in(page, wrong)
    expect(page.get_by_role("alert")).to_be_visible()
    assert page.locator("#main img").count() == 0
    sign_in(page, key)
    expect(page.locator("#main")).to_contain_text("writer")
