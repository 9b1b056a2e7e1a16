"""The live-caption page's session handling in real headless Chromium, against a scripted stand-in for `/v1/listen`
(pagekit.MockListen: each connection plays the scenario its `?api_key=` names), so that connection drops, server
refusals, a Stop at each stage of the start, a server that never closes and Clear in the middle of a line are
reproducible and fast. The fake microphone plays a tone over and over; the mock ignores the audio."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from pagekit import Connection, MockListen, chromium, fake_mic_wav

pytestmark = [pytest.mark.browser]


async def plain(c: Connection) -> None:
    """ready, then nothing until the page's close."""
    await c.ready()
    await c.until_close()
    await c.finish()


async def drop(c: Connection) -> None:
    """The first connection ends mid-line: the server restarts (1012) after two finals and no `line`."""
    await c.ready()
    if c.number == 1:
        await c.final(0, "First session words", 0.5, 1.5)
        await c.final(1, "still open", 1.5, 2.5)
        await c.ws.close(1012)
        return
    await c.final(0, "Second session.", 0.2, 1.0)
    await c.line(0, "Second session.", 0.2, 1.0)
    await c.until_close()
    await c.finish()


async def busy(c: Connection) -> None:
    await c.send(type="busy", message="the server is still loading its model; try again shortly", max_clients=2,
                 reason="loading")
    await c.ws.close(1013)


async def bad_config(c: Connection) -> None:
    await c.ws.recv()
    await c.send(type="error", code="invalid_config", message="language 'xx' is not one the model knows", fatal=True)
    await c.ws.close(4002)


async def no_close_frame(c: Connection) -> None:
    """After the page's close the network is gone: nothing more is read, no close frame comes back."""
    await c.ready()
    await c.until_close()
    c.ws.transport.pause_reading()
    await c.ws.wait_closed()


async def clear_mid_line(c: Connection) -> None:
    """A line of two finals, the page's Clear between them; the `line` event's text holds both."""
    await c.ready()
    await c.final(0, "Before clear", 0.5, 1.5)
    await c.gate("cleared")
    await c.final(1, "after clear.", 1.5, 2.5)
    await c.line(1, "Before clear after clear.", 0.5, 2.5)
    await c.until_close()
    await c.finish()


SCENARIOS = {"plain": plain, "escape": plain, "worklet": plain, "slow": plain, "query": plain, "drop": drop,
             "busy": busy, "badcfg": bad_config, "noclose": no_close_frame, "clearline": clear_mid_line}


@pytest.fixture(scope="module")
def mock():
    with MockListen(SCENARIOS, slow_handshake={"slow": 3.0}) as server:
        yield server


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    folder = tmp_path_factory.mktemp("page-sessions")
    tone = 0.2 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32)
    browser = chromium(fake_mic_wav(tone, folder / "tone.wav"), folder / "profile", loop=True)
    browser.set_script_timeout(10)
    yield browser
    browser.quit()


def _open(driver, mock: MockListen, key: str, query: str = "") -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{mock.url}?api_key={key}{query}")
    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return !!window.specscribe"))


def _state(driver) -> dict:
    return driver.execute_script("""const $ = (id) => document.getElementById(id);
        return {state: $("status").dataset.state, status: $("status-text").textContent, error: $("error").textContent,
                error_hidden: $("error").hidden, button: $("start").textContent, disabled: $("start").disabled,
                pressed: $("start").getAttribute("aria-pressed")};""")


def _wait(driver, what: str, cond, timeout: float = 6) -> None:
    """Until cond(the page's state) holds; else fail with `what` and the state at the end."""
    deadline = time.monotonic() + timeout
    while not cond(_state(driver)):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: {_state(driver)}")
        time.sleep(0.1)


def _click_start(driver) -> None:
    driver.find_element("id", "start").click()


def _lines(driver) -> list[dict]:
    return driver.execute_script("""return [...document.querySelectorAll("#transcript .line")].map((p) =>
        ({text: p.textContent.replace(/^\\d+:\\d\\d\\s*/, ""), closed: p.dataset.closed === "true"}));""")


def _srt_cues(srt: str) -> list[tuple[float, float, str]]:
    def seconds(t: str) -> float:
        h, m, s = t.replace(",", ".").split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)

    cues = []
    for block in srt.strip().split("\n\n"):
        _, times, text = block.split("\n", 2)
        start, end = re.fullmatch(r"(\S+) --> (\S+)", times).groups()
        cues.append((seconds(start), seconds(end), text))
    return cues


def _live(driver, mock, key: str, query: str = "") -> None:
    _open(driver, mock, key, query)
    _click_start(driver)
    _wait(driver, "never live", lambda s: s["state"] == "live")


def _stop(driver) -> None:
    _click_start(driver)
    _wait(driver, "never stopped", lambda s: s["status"] == "Stopped" and not s["disabled"])


def test_a_dropped_connection_keeps_its_open_line_and_the_next_session_continues_the_times(driver, mock):
    _open(driver, mock, "drop")
    _click_start(driver)
    _wait(driver, "the drop", lambda s: s["status"] == "Disconnected")
    dropped = _state(driver)
    assert _lines(driver) == [{"text": "First session words still open", "closed": True}]
    _click_start(driver)
    _wait(driver, "second session", lambda s: s["state"] == "live")
    _wait(driver, "second final", lambda s: "Second session." in driver.find_element("id", "transcript").text)
    _stop(driver)
    assert _lines(driver) == [{"text": "First session words still open", "closed": True},
                              {"text": "Second session.", "closed": True}]
    assert driver.execute_script("return window.specscribe.transcriptText()") == \
        "First session words still open\nSecond session."
    cues = _srt_cues(driver.execute_script("return window.specscribe.transcriptSrt()"))
    assert [c[2] for c in cues] == ["First session words still open", "Second session."]
    assert cues[0][:2] == (0.5, 2.5) and cues[0][1] <= cues[1][0] < cues[1][1], cues  # the times go on
    assert "restart" in dropped["error"], dropped  # 1012 has a reason of its own


@pytest.mark.parametrize(("key", "message"), [
    ("busy", "The server is still loading its model; try again shortly."),
    ("badcfg", "language 'xx' is not one the model knows"),
])
def test_the_servers_reason_for_a_refusal_stays_on_the_page(driver, mock, key, message):
    _open(driver, mock, key)
    _click_start(driver)
    _wait(driver, "no refusal", lambda s: s["status"] == "Disconnected" and not s["disabled"])
    state = _state(driver)
    assert message in state["error"] and not state["error_hidden"], state
    assert "server is busy" not in state["error"] and "invalid settings" not in state["error"], state


def test_escape_while_the_microphone_opens_cancels_the_start(driver, mock):
    _open(driver, mock, "escape")
    driver.execute_script("""window._errors = [];
        window.addEventListener("error", (e) => window._errors.push(String(e.message)));
        window.addEventListener("unhandledrejection", (e) => window._errors.push(String(e.reason)));
        const open = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
        window._streams = [];
        navigator.mediaDevices.getUserMedia = async (c) => {
          await new Promise((resolve) => setTimeout(resolve, 1500));
          const stream = await open(c);
          window._streams.push(stream);
          return stream;
        };""")
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    _click_start(driver)
    _wait(driver, "opening", lambda s: s["status"].startswith("Opening microphone"))
    ActionChains(driver).send_keys(Keys.ESCAPE).perform()
    _wait(driver, "not cancelled", lambda s: s["status"] == "Stopped" and not s["disabled"], timeout=1)
    _wait(driver, "microphone kept", lambda s: driver.execute_script(
        "return window._streams.length === 1 && window._streams[0].getTracks().every((t) => t.readyState === 'ended')"))
    state = _state(driver)
    assert state["status"] == "Stopped" and state["button"] == "Start" and state["pressed"] == "false", state
    assert driver.execute_script("return window._errors") == []
    assert mock.connections["escape"] == []  # it never connected
    _click_start(driver)  # and Start works again
    _wait(driver, "a second start", lambda s: s["state"] == "live")
    _stop(driver)


def test_a_worklet_that_fails_to_load_releases_the_microphone(driver, mock):
    _open(driver, mock, "worklet")
    driver.execute_script("""const open = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
        window._streams = []; window._contexts = [];
        navigator.mediaDevices.getUserMedia = async (c) => {
          const s = await open(c); window._streams.push(s); return s; };
        const Context = window.AudioContext;
        window.AudioContext = class extends Context {
          constructor(...args) { super(...args); window._contexts.push(this); } };
        const failure = new DOMException("simulated failure", "AbortError");
        AudioWorklet.prototype.addModule = () => Promise.reject(failure);""")
    _click_start(driver)
    _wait(driver, "no error", lambda s: s["status"] == "Microphone unavailable")
    assert "simulated failure" in _state(driver)["error"]
    _wait(driver, "microphone or context kept", lambda s: driver.execute_script("""return window._streams.length === 1
        && window._streams[0].getTracks().every((t) => t.readyState === "ended")
        && window._contexts.length > 0 && window._contexts.every((c) => c.state === "closed")"""), timeout=3)


def test_stop_before_the_socket_opens_is_a_stop(driver, mock):
    _open(driver, mock, "slow")  # its handshake waits 3 s
    _click_start(driver)
    _wait(driver, "connecting", lambda s: s["status"].startswith("Connecting") and s["button"] == "Stop")
    _stop(driver)
    state = _state(driver)
    assert state["state"] == "idle" and state["error_hidden"], state


def test_a_server_that_never_closes_does_not_hang_the_page(driver, mock):
    _open(driver, mock, "noclose")
    driver.execute_script("if (window.specscribe.settings) window.specscribe.settings.closeTimeoutMs = 1500;")
    _click_start(driver)
    _wait(driver, "never live", lambda s: s["state"] == "live")
    _click_start(driver)
    _wait(driver, "finishing", lambda s: s["state"] == "finishing")
    _wait(driver, "stuck finishing",
          lambda s: s["status"] == "Stopped" and not s["disabled"] and s["button"] == "Start")
    assert "may be missing" in _state(driver)["error"]
    _click_start(driver)  # a new session starts
    _wait(driver, "never live again", lambda s: s["state"] == "live")
    assert len(mock.connections["noclose"]) == 2


def test_clear_in_the_middle_of_a_line_keeps_the_cleared_text_out_of_the_exports(driver, mock):
    _live(driver, mock, "clearline")
    _wait(driver, "first final", lambda s: "Before clear" in driver.find_element("id", "transcript").text)
    driver.find_element("id", "clear").click()
    mock.open_gate("cleared")
    _wait(driver, "line event", lambda s: _lines(driver) and _lines(driver)[-1]["closed"])
    assert _lines(driver) == [{"text": "after clear.", "closed": True}]
    assert driver.execute_script("return window.specscribe.transcriptText()") == "after clear."
    assert [c[2] for c in _srt_cues(driver.execute_script("return window.specscribe.transcriptSrt()"))] == \
        ["after clear."]
    _stop(driver)


def test_the_lag_is_not_announced(driver, mock):
    _open(driver, mock, "plain")
    assert driver.execute_script("""const lag = document.getElementById("lag");
        return !lag.closest('[aria-live]:not([aria-live="off"]), [role="status"], [role="alert"], [role="log"]')
            || !!lag.closest('[aria-hidden="true"]');""")


@pytest.mark.parametrize(("query", "language", "task"), [
    ("&language=sv&task=bogus", "sv", "transcribe"),  # a code with no <option>: kept; the server checks it
    ("&language=%3Cx%3E&task=translate", None, "translate"),  # not a code: detection
])
def test_query_settings_without_an_option(driver, mock, query, language, task):
    _live(driver, mock, "query", query)
    _stop(driver)
    config = mock.connections["query"][-1].config
    assert (config["language"], config["task"]) == (language, task), config
