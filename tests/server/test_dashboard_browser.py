"""The dashboard in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven
by Selenium): the page loads, a prefix a test stores shows within a refresh, the table sorts and
pages on the server, a tenant sees only its own, a wrong password is refused.

Outside CI the tests skip, with the reason, when the browser is absent; in CI (``make test``
installs it through the Makefile's APT_PACKAGES) they fail instead.
"""

from __future__ import annotations

import os

import pytest
import redis
from tests.support.browser import browser_missing, chromium, severe_console
from tests.support.dashboard_data import hit, store_many, store_prefix
from tests.support.servers import free_port

MISSING = browser_missing()
if MISSING and os.environ.get("CI") != "true":
    pytest.skip(f"no browser to drive: {MISSING}", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

PASSWORD = "browser-admin"
#: generous: the page polls every 3 s; at load average 10+ a poll and its drawing can take seconds
WAIT = 30


@pytest.fixture
def browser():
    with chromium() as driver:
        yield driver


def url(srv) -> str:
    return f"http://127.0.0.1:{srv.settings.dashboard_port}/"


def rows(driver) -> list[str]:
    """The table's namespaces, read in one script call (a poll replaces the rows: no stale elements)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#prefix-table tbody tr'))"
        ".map((tr) => tr.dataset.ns).filter(Boolean)")


def cells(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#prefix-table tbody tr:first-child td')).map((td) => td.innerText)")


def wait_rows(driver, check) -> list[str]:
    """The table's namespaces once ``check(namespaces)`` holds (a poll redraws it)."""
    WebDriverWait(driver, WAIT).until(lambda d: check(rows(d)))
    return rows(driver)


def log_in(driver, user: str, password: str) -> None:
    WebDriverWait(driver, WAIT).until(ec.visibility_of_element_located((By.ID, "login-form")))
    name = driver.find_element(By.ID, "login-user")
    name.clear()
    name.send_keys(user)
    driver.find_element(By.ID, "login-password").send_keys(password)
    driver.find_element(By.ID, "login-submit").click()


def errors_besides_refusals(driver) -> list[str]:
    """Console errors, less the 401/403 answers a login page gets by design."""
    return [m for m in severe_console(driver) if "status of 401" not in m and "status of 403" not in m]


def test_the_page_loads_and_shows_a_stored_prefix_within_a_refresh(make_server, browser):
    srv = make_server(dashboard_port=free_port())
    browser.get(url(srv))
    WebDriverWait(browser, WAIT).until(ec.visibility_of_element_located((By.ID, "dashboard")))
    assert browser.title == "Pion dashboard"
    assert browser.find_element(By.ID, "login").is_displayed() is False  # loopback, no password: open
    wait_rows(browser, lambda names: names == [] and "no prefixes" in browser.find_element(By.ID, "prefix-table").text)
    with redis.Redis(port=srv.port) as r:
        store_prefix(r, "fresh-prefix", 24, prefill_ms=900)
        hit(r, "fresh-prefix", 3)
    assert wait_rows(browser, lambda names: names == ["fresh-prefix"]) == ["fresh-prefix"]
    shown = WebDriverWait(browser, WAIT).until(lambda d: (lambda c: c if c[6:7] == ["3"] else None)(cells(d)))
    assert shown == ["default", "fresh-prefix", "–", "24", "fp16", shown[5], "3", shown[7], ""]
    assert shown[5].endswith("KiB") and shown[7].endswith("s ago")
    WebDriverWait(browser, WAIT).until(lambda d: d.find_element(By.ID, "card-hit-rate").text == "100.0 %")
    assert browser.find_element(By.ID, "card-saved").text == "2.70 s"  # 3 hits x 900 ms
    assert browser.find_element(By.ID, "card-prefixes").text == "1"
    assert browser.find_element(By.ID, "replication").is_displayed()  # the main keyspace's user sees it
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-hit-rate line")  # the SVG chart is drawn
    assert severe_console(browser) == []  # no script error, nothing the page's CSP refused


def test_the_table_sorts_and_pages_on_the_server(make_server, browser):
    srv = make_server(dashboard_port=free_port())
    with redis.Redis(port=srv.port) as r:
        store_many(r, 130)  # p00000 ... p00129
        store_prefix(r, "hot", 8)
        hit(r, "hot", 5)
        store_prefix(r, "warm", 8)
        hit(r, "warm", 2)
    browser.get(url(srv))
    first = wait_rows(browser, lambda names: len(names) == 50)
    assert first[:3] == ["hot", "warm", "p00000"]  # hits, most first; ties by namespace
    assert browser.find_element(By.ID, "prefix-total").text == "132 total"
    assert browser.find_element(By.ID, "page-info").text == "page 1 of 3"
    header = browser.find_element(By.CSS_SELECTOR, '#prefix-table th[data-sort="ns"]')
    header.click()
    by_name = wait_rows(browser, lambda names: names[:1] == ["hot"] and names[1:2] == ["p00000"])
    assert by_name[:3] == ["hot", "p00000", "p00001"] and "sorted" in header.get_attribute("class")
    header.click()  # again: the other way
    assert wait_rows(browser, lambda names: names[:1] == ["warm"])[:3] == ["warm", "p00129", "p00128"]
    browser.find_element(By.ID, "page-next").click()
    page2 = wait_rows(browser, lambda names: names[:1] == ["p00080"])
    assert page2[-1] == "p00031" and browser.find_element(By.ID, "page-info").text == "page 2 of 3"
    Select(browser.find_element(By.ID, "page-size")).select_by_value("100")
    assert len(wait_rows(browser, lambda names: len(names) == 100)) == 100
    assert browser.find_element(By.ID, "page-info").text == "page 1 of 2"
    assert browser.find_element(By.ID, "page-prev").get_attribute("disabled") == "true"
    assert severe_console(browser) == []


def test_a_tenant_sees_only_its_prefixes(make_server, browser):
    srv = make_server(dashboard_port=free_port(), requirepass=PASSWORD,
                      tenants=("acme:acme-pass", "globex:globex-pass"))
    with redis.Redis(port=srv.port, username="acme", password="acme-pass") as acme, \
            redis.Redis(port=srv.port, username="globex", password="globex-pass") as globex, \
            redis.Redis(port=srv.port, password=PASSWORD) as admin:
        store_prefix(acme, "acme-one", 8)
        store_prefix(acme, "acme-two", 8)
        store_prefix(globex, "globex-secret", 8)
        store_prefix(admin, "server-own", 8)
    browser.get(url(srv))
    log_in(browser, "acme", "acme-pass")
    assert sorted(wait_rows(browser, lambda names: len(names) == 2)) == ["acme-one", "acme-two"]
    assert browser.find_element(By.ID, "whoami").text == "tenant acme"
    assert not browser.find_element(By.ID, "replication").is_displayed()  # server-wide panels: not a tenant's
    assert not browser.find_element(By.ID, "slowlog-table").is_displayed()
    assert not browser.find_element(By.CSS_SELECTOR, '#prefix-table th[data-sort="space"]').is_displayed()
    assert "globex" not in browser.find_element(By.TAG_NAME, "body").text
    assert browser.find_element(By.ID, "card-prefixes").text == "2"
    browser.find_element(By.ID, "logout").click()
    log_in(browser, "default", PASSWORD)
    everyone = wait_rows(browser, lambda names: len(names) == 4)
    assert sorted(everyone) == ["acme-one", "acme-two", "globex-secret", "server-own"]
    assert errors_besides_refusals(browser) == []


def test_a_wrong_password_is_refused(make_server, browser):
    srv = make_server(dashboard_port=free_port(), requirepass=PASSWORD)
    with redis.Redis(port=srv.port, password=PASSWORD) as r:
        store_prefix(r, "behind-the-login", 8)
    browser.get(url(srv))
    log_in(browser, "default", "not-the-password")
    error = WebDriverWait(browser, WAIT).until(lambda d: d.find_element(By.ID, "login-error").text)
    assert error == "WRONGPASS invalid username-password pair or user is disabled."
    assert not browser.find_element(By.ID, "dashboard").is_displayed()
    assert "behind-the-login" not in browser.page_source
    assert browser.get_cookies() == []  # no session
    assert browser.find_element(By.ID, "login-password").get_attribute("value") == ""
    assert "not-the-password" not in browser.current_url and "password" not in browser.current_url
    log_in(browser, "default", PASSWORD)
    assert wait_rows(browser, lambda names: names == ["behind-the-login"]) == ["behind-the-login"]
    cookie = browser.get_cookie("pion_dashboard")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie") == ""  # the page's script cannot read it
    assert errors_besides_refusals(browser) == []
