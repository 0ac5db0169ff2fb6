"""The web console in a real browser: Debian's Chromium, headless, driven by Playwright, with
every host name but loopback made unresolvable, against a spawned `research-ledger serve` on
the data directory `research-ledger demo` leaves, with a reviewer's token in force.

The tests run in order on one server: the list, a task page, the review queue resolving the
Qingchuan conflict (which the demo's assistant decided) while a second tab on the task updates
live, the proofs checked in the page (and a doctored one failing), GraphiQL, and last, that no
request the browser made left the server's origin. Screenshots of every page go to a folder the
first test prints (`$RESEARCH_LEDGER_ARTIFACTS`, or a fresh one under the cache folder).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import blake3
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("RESEARCH_LEDGER_CHROMIUM", "/usr/bin/chromium")
QINGCHUAN = "gongxiang-danche-qingchuan"
QINGCHUAN_QUESTION = "共享单车是否减少了青川市的短途汽车出行？"


def binary() -> str:
    explicit = os.environ.get("RESEARCH_LEDGER_BIN")
    if explicit:
        return explicit
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    path = target / "debug" / "research-ledger"
    if not path.exists():
        pytest.exit(f"no research-ledger binary at {path}; build it or set RESEARCH_LEDGER_BIN", 2)
    return str(path)


@pytest.fixture(scope="module")
def artifacts() -> Path:
    explicit = os.environ.get("RESEARCH_LEDGER_ARTIFACTS")
    if explicit:
        folder = Path(explicit)
    else:
        cache = Path(os.environ.get("RESEARCH_LEDGER_CACHE", Path.home() / ".cache" / "research-ledger"))
        folder = cache / "console-screenshots" / time.strftime("%Y%m%d-%H%M%S")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    print(f"\nscreenshots of the console: {folder}")
    return folder


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    """The demo's data directory, a reviewer's token, and `serve` on it."""
    data = tmp_path_factory.mktemp("console-data")
    out = subprocess.run([binary(), "--data-dir", str(data), "demo", "--json"],
                         check=True, capture_output=True, text=True, timeout=300)
    outcome = json.loads(out.stdout)
    tasks = {t["question_id"]: t for t in outcome["tasks"]}
    made = subprocess.run([binary(), "--data-dir", str(data), "token", "add", "rita", "--role", "reviewer"],
                          check=True, capture_output=True, text=True, timeout=60)
    token = re.search(r"rl_[0-9a-f]{64}", made.stdout + made.stderr).group(0)
    shown = subprocess.run([binary(), "--data-dir", str(data), "key", "show"],
                           check=True, capture_output=True, text=True, timeout=60)
    public_key = shown.stdout.splitlines()[0].strip()
    verifier_key = shown.stdout.splitlines()[1].strip()
    # A witness that cosigns the server's checkpoints, whose cosignatures the pages check.
    witness = subprocess.Popen([binary(), "witness", "serve", "--listen", "127.0.0.1:0",
                                "--name", "witness.example/console", "--dir", str(tmp_path_factory.mktemp("witness")),
                                "--log", verifier_key],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    witness_url = witness.stdout.readline().strip().removeprefix("listening on ")
    witness_key = witness.stdout.readline().strip().removeprefix("witness ")
    assert witness_url.startswith("http://") and witness_key.startswith("witness.example/console+"), \
        (witness_url, witness_key)
    server = subprocess.Popen([binary(), "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0",
                               "--witness", f"{witness_url},{witness_key}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if line.startswith("listening on "):
            url = line.split(" ", 2)[2].strip()
            break
        if server.poll() is not None:
            break
    if url is None:
        server.kill()
        witness.kill()
        pytest.fail(f"the server did not start: {server.stderr.read()}")
    yield {"url": url, "token": token, "tasks": tasks, "outcome": outcome, "public_key": public_key,
           "witness_key": witness_key}
    for process in (server, witness):
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


class Recorder:
    """Every request, WebSocket and console message of the pages of one browser context."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.sockets: list[str] = []
        self.problems: list[str] = []
        self.refused: list[tuple[str, str, int]] = []

    def watch(self, page: Page) -> Page:
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("websocket", lambda ws: self.sockets.append(ws.url))
        page.on("response", lambda r: self.refused.append((r.request.method, r.url, r.status)) if r.status >= 400 else None)
        # Network failures are checked from the responses; every other error is a problem.
        page.on("console", lambda m: self.problems.append(m.text)
                if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
        page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
        return page


@pytest.fixture(scope="module")
def browser() -> Browser:
    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM}: install Debian's chromium (scripts/test does, as root)"
        if os.environ.get("RESEARCH_LEDGER_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    args = [
        # Every name but loopback fails to resolve: a page that reached for a CDN would break.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
        "--lang=en-GB",
    ]
    if os.geteuid() == 0:
        args.append("--no-sandbox")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        yield b
        b.close()


@pytest.fixture(scope="module")
def session(browser: Browser):
    recorder = Recorder()
    context = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
    context.set_default_timeout(20_000)
    yield context, recorder
    context.close()


def sign_in(page: Page, url: str, token: str) -> None:
    page.goto(f"{url}/#/signin")
    page.get_by_label("Access token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Research tasks")).to_be_visible()
    expect(page.locator("#live")).to_have_text("live: connected")


def flip(hex_text: str) -> str:
    """`hex_text` with its first digit changed."""
    return ("0" if hex_text[0] != "0" else "1") + hex_text[1:]


def shot(page: Page, folder: Path, name: str) -> None:
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def main_page(session, demo) -> Page:
    context, recorder = session
    page = recorder.watch(context.new_page())
    sign_in(page, demo["url"], demo["token"])
    return page


def test_the_list_shows_the_demos_tasks_filters_and_pages(main_page: Page, demo, artifacts: Path) -> None:
    page = main_page
    rows = page.locator("#task-results tbody tr")
    expect(rows).to_have_count(3)
    for task in demo["tasks"].values():
        expect(page.locator(f'tr[data-task="{task["task_id"]}"]')).to_be_visible()
    expect(page.get_by_role("link", name=QINGCHUAN_QUESTION)).to_be_visible()
    shot(page, artifacts, "01-tasks")
    page.get_by_label("Text").fill("青川")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(QINGCHUAN_QUESTION)
    shot(page, artifacts, "02-tasks-filtered-chinese")
    page.get_by_label("Text").fill("")
    page.get_by_label("Verdict").select_option("OPPOSING")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Lake Varden")
    page.get_by_label("Verdict").select_option("")
    page.get_by_label("Status").select_option("ACTIVE")
    expect(page.get_by_text("No task matches.")).to_be_visible()
    page.get_by_label("Status").select_option("")
    expect(rows).to_have_count(3)


def test_a_task_page_shows_its_verdict_confidence_and_checks_its_texts(main_page: Page, demo, artifacts: Path) -> None:
    page = main_page
    task = demo["tasks"][QINGCHUAN]
    card = task["card"]
    page.get_by_role("link", name=QINGCHUAN_QUESTION).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(QINGCHUAN_QUESTION)
    expect(page.get_by_test_id("verdict")).to_have_text(card["stance"].replace("_", " "))
    expect(page.get_by_test_id("confidence")).to_have_text(f"{card['confidence']:.4f}")
    for component in ["relevance", "consistency", "recency", "diversity"]:
        meter = page.get_by_role("meter", name=component)
        expect(meter).to_have_attribute("aria-valuenow", f"{card['components'][component]:.4f}")
    # The why-graph is drawn; the explanation links its lines to events.
    expect(page.locator(".why svg .node").first).to_be_visible()
    page.locator(".why svg .node").first.focus()
    page.keyboard.press("Enter")
    expect(page.locator(".graph-detail h4")).to_contain_text("cl-1")
    # A full text, checked against its content hash in the page.
    page.get_by_role("button", name="Full text of ev-1", exact=True).click()
    expect(page.get_by_test_id("content-check").first).to_have_attribute("data-verdict", "matches")
    # The task's last event is in the signed tree: the proof is checked in the page.
    proof = page.locator("#proof-out [data-testid=proof-result]")
    expect(proof).to_have_attribute("data-verdict", "verified")
    expect(proof).to_contain_text("the task's last event")
    # Time travel: the state after the first version holds the question and nothing else.
    page.get_by_role("spinbutton", name="State after version").fill("1")
    page.get_by_role("button", name="Show", exact=True).click()
    expect(page.get_by_test_id("state-at")).to_contain_text("after its first 1 events")
    expect(page.get_by_test_id("state-at")).to_contain_text("conclusion none")
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(artifacts / "03-task-top.png"))
    for part in ["conclusion", "history-of-conclusions", "evidence", "conflicts", "explanation", "why-graph", "timeline", "verification"]:
        page.locator(f'section[aria-labelledby="s-{part}"]').screenshot(path=str(artifacts / f"03-task-{part}.png"))


def test_a_reviewer_resolves_the_qingchuan_conflict_and_an_open_task_page_updates_live(session, main_page: Page, demo, artifacts: Path) -> None:
    context, recorder = session
    task = demo["tasks"][QINGCHUAN]
    watcher = recorder.watch(context.new_page())
    sign_in(watcher, demo["url"], demo["token"])
    watcher.goto(f"{demo['url']}/#/task/{task['task_id']}")
    expect(watcher.get_by_test_id("task-status")).to_have_text("CONCLUDED")
    item = watcher.locator('article.conflict[data-conflict="cf-1"]')
    expect(item).to_contain_text("assistant")

    page = main_page
    page.goto(f"{demo['url']}/#/review")
    queued = page.locator(f'article.queue-item[data-task="{task["task_id"]}"][data-conflict="cf-1"]')
    expect(queued).to_be_visible()
    expect(queued).to_contain_text("demo-assistant")
    expect(queued).to_contain_text("assistant")
    shot(page, artifacts, "04-review-queue")
    queued.get_by_label("The opposing side wins").check()
    queued.get_by_label("Reason").fill("复核：规划研究院的出行调查是一手数据，比报道更可靠。")
    queued.get_by_role("button", name="Record the resolution").click()
    expect(queued.locator(".note.ok")).to_contain_text("Recorded")

    # The other tab heard it over its WebSocket and read the task again.
    expect(watcher.get_by_test_id("live-banner")).to_contain_text("conflict_resolved")
    expect(watcher.get_by_test_id("task-status")).to_have_text("STALE")
    expect(item).to_contain_text("rita")
    expect(item.locator(".badge.v-person").first).to_be_visible()
    expect(watcher.locator(".warnings")).to_contain_text("Stale")
    watcher.evaluate("window.scrollTo(0, 0)")
    watcher.screenshot(path=str(artifacts / "05-task-updated-live.png"))
    item.screenshot(path=str(artifacts / "05-task-updated-live-conflict.png"))
    # The queue no longer holds it.
    page.goto(f"{demo['url']}/#/review")
    expect(page.get_by_text("Nothing waits for a person.")).to_be_visible()
    shot(page, artifacts, "06-review-queue-empty")
    watcher.close()


def test_proofs_are_checked_in_the_page_and_a_doctored_one_fails(main_page: Page, demo, artifacts: Path) -> None:
    page = main_page
    page.goto(f"{demo['url']}/#/ledger")
    expect(page.get_by_role("heading", name="Ledger and verification")).to_be_visible()
    # The newest checkpoints, with how many there are in all.
    expect(page.get_by_test_id("checkpoints-shown")).to_have_text(re.compile(r"^The newest \d+ of \d+;"))
    page.get_by_role("button", name="Verify now").click()
    expect(page.locator("#verify-result")).to_contain_text("intact")
    expect(page.locator("#verify-result")).to_contain_text("all hold")
    shot(page, artifacts, "07-ledger")
    proof = page.evaluate("""async () => {
        const token = sessionStorage.getItem('research-ledger.token');
        const r = await fetch('/graphql', {method: 'POST', headers: {'Content-Type': 'application/json', Authorization: `Bearer ${token}`},
          body: JSON.stringify({query: '{ inclusionProof(seq: 100) { file } }'})});
        return (await r.json()).data.inclusionProof.file;
    }""")
    assert proof["kind"] == "inclusion", proof
    area = page.get_by_label("Inclusion proof file", exact=False)
    result = page.locator("#proof-file-result [data-testid=proof-result]")
    area.fill(json.dumps(proof))
    page.get_by_role("button", name="Check the proof").click()
    expect(result).to_have_attribute("data-verdict", "verified")
    doctored = json.loads(json.dumps(proof))
    first = doctored["path"][0]
    doctored["path"][0] = ("1" if first[0] == "0" else "0") + first[1:]
    area.fill(json.dumps(doctored))
    page.get_by_role("button", name="Check the proof").click()
    expect(result).to_have_attribute("data-verdict", "failed")
    expect(result).to_contain_text("FAILED")
    shot(page, artifacts, "08-doctored-proof-fails")
    for doctor in [
        # The first digit changed: "00" put in its place is no change at all for 1 in 256 keys.
        lambda p: p["checkpoint"].__setitem__("signature", flip(p["checkpoint"]["signature"])),
        lambda p: p.__setitem__("event_hash", "ab" + p["event_hash"][2:]),
        lambda p: p["checkpoint"].__setitem__("tree_size", p["checkpoint"]["tree_size"] + 1),
        lambda p: p.__setitem__("leaf_index", p["leaf_index"] + 1),
    ]:
        doctored = json.loads(json.dumps(proof))
        doctor(doctored)
        area.fill(json.dumps(doctored))
        page.get_by_role("button", name="Check the proof").click()
        expect(result).to_have_attribute("data-verdict", "failed")


def test_the_key_an_auditor_pastes_is_the_one_every_check_starts_from(main_page: Page, demo, artifacts: Path) -> None:
    page = main_page
    page.goto(f"{demo['url']}/#/ledger")
    trusted = page.locator("section[aria-labelledby=s-trusted-key] p").first
    expect(trusted).to_contain_text("named by the server")
    proof = page.evaluate("""async () => {
        const token = sessionStorage.getItem('research-ledger.token');
        const r = await fetch('/graphql', {method: 'POST', headers: {'Content-Type': 'application/json', Authorization: `Bearer ${token}`},
          body: JSON.stringify({query: '{ inclusionProof(seq: 40) { file } }'})});
        return (await r.json()).data.inclusionProof.file;
    }""")

    def use(key: str) -> None:
        page.locator("#trusted-key").fill(key)
        page.get_by_role("button", name="Use this key").click()

    def verify_and_check_the_proof() -> None:
        page.get_by_role("button", name="Verify now").click()
        page.get_by_label("Inclusion proof file", exact=False).fill(json.dumps(proof))
        page.get_by_role("button", name="Check the proof").click()

    # A key that never signed here: no checkpoint, and no proof, holds from it.
    stranger = "ab" * 32
    use(stranger)
    expect(trusted).to_contain_text("given by you")
    expect(trusted.locator("code")).to_have_text(stranger[:16])
    refused = page.locator("td.bad", has_text="not in the chain of the key trusted")
    expect(refused.first).to_be_visible()
    expect(refused).to_have_count(page.locator("section[aria-labelledby=s-signed-checkpoints] tbody tr").count())
    verify_and_check_the_proof()
    expect(page.locator("#verify-result")).to_contain_text("does not hold")
    result = page.locator("#proof-file-result [data-testid=proof-result]")
    expect(result).to_have_attribute("data-verdict", "failed")
    shot(page, artifacts, "09-a-stranger-key-trusted")

    # The key the auditor holds (`key show`): everything holds from it.
    use(demo["public_key"].upper())
    expect(trusted).to_contain_text("given by you")
    expect(trusted.locator("code")).to_have_text(demo["public_key"][:16])
    expect(page.locator("td.bad")).to_have_count(0)
    expect(page.get_by_role("cell", name="the key trusted")).to_have_count(1)
    verify_and_check_the_proof()
    expect(page.locator("#verify-result")).to_contain_text("all hold")
    expect(result).to_have_attribute("data-verdict", "verified")

    # Not a key: refused in place, and the key trusted stays the one given.
    use("not a key")
    expect(page.locator("#trusted-key")).to_have_attribute("aria-invalid", "true")
    expect(trusted.locator("code")).to_have_text(demo["public_key"][:16])

    # Emptied: the server's key again.
    use("")
    expect(trusted).to_contain_text("named by the server")
    assert page.evaluate("sessionStorage.getItem('research-ledger.trusted-key')") is None


def test_a_hand_over_and_a_cosignature_are_checked_in_the_page(main_page: Page, demo, artifacts: Path,
                                                              tmp_path: Path) -> None:
    """The checks the server's data passes are made to fail: a key hand-over in a proof file
    signed by anyone but the key before, and a witness cosignature that is not the witness's."""
    page = main_page
    # A ledger whose key was handed over, and a proof of one of its events from its first key.
    data = tmp_path / "rotated"
    run = lambda *args: subprocess.run([binary(), "--data-dir", str(data), *args],  # noqa: E731
                                       check=True, capture_output=True, text=True, timeout=300)
    run("demo", "--question", "four-day-week-eastvale", "--json")
    first_key = run("key", "show").stdout.splitlines()[0].strip()
    run("key", "rotate")
    run("checkpoint")
    proof = json.loads(run("prove", "3").stdout)
    assert len(proof["key_rotations"]) == 1, proof

    page.goto(f"{demo['url']}/#/ledger")
    expect(page.get_by_role("heading", name="Ledger and verification")).to_be_visible()
    trusted = page.locator("section[aria-labelledby=s-trusted-key] p").first
    page.locator("#trusted-key").fill(first_key)
    page.get_by_role("button", name="Use this key").click()
    expect(trusted.locator("code")).to_have_text(first_key[:16])
    area = page.get_by_label("Inclusion proof file", exact=False)
    result = page.locator("#proof-file-result [data-testid=proof-result]")

    def check(file: dict) -> None:
        area.fill(json.dumps(file))
        page.get_by_role("button", name="Check the proof").click()

    check(proof)
    expect(result).to_have_attribute("data-verdict", "verified", timeout=20_000)
    expect(result).to_contain_text("hand-over to")
    shot(page, artifacts, "10-a-proof-across-a-hand-over")
    rotation = proof["key_rotations"][0]
    for field, value in [
        ("signature", flip(rotation["signature"])),
        # A key the old one never named: the checkpoint's signer is then not in the chain.
        ("new_public_key", "ab" * 32),
        ("tree_size", rotation["tree_size"] + 1),
    ]:
        doctored = json.loads(json.dumps(proof))
        doctored["key_rotations"][0][field] = value
        check(doctored)
        expect(result).to_have_attribute("data-verdict", "failed")
    # Without the hand-over the first key does not reach the key that signed the checkpoint.
    doctored = json.loads(json.dumps(proof))
    doctored["key_rotations"] = []
    check(doctored)
    expect(result).to_have_attribute("data-verdict", "failed")
    page.locator("#trusted-key").fill("")
    page.get_by_role("button", name="Use this key").click()
    expect(trusted).to_contain_text("named by the server")

    # The demo's server is cosigned by a witness: its cosignature holds in the page, and any
    # change to it does not.
    query = """async () => {
        const token = sessionStorage.getItem('research-ledger.token');
        const r = await fetch('/graphql', {method: 'POST', headers: {'Content-Type': 'application/json', Authorization: `Bearer ${token}`},
          body: JSON.stringify({query: '{ ledger { checkpoints(last: 1) { json cosignatures { witness timestamp signature } } } }'})});
        const answer = await r.json();
        if (!answer.data) throw new Error(JSON.stringify(answer.errors));
        return answer.data.ledger.checkpoints;
    }"""
    deadline = time.monotonic() + 30
    while True:
        latest = page.evaluate(query)[-1]
        if latest["cosignatures"]:
            break
        assert time.monotonic() < deadline, f"no cosignature came: {latest}"
        time.sleep(0.5)
    cosignature = latest["cosignatures"][0]
    assert cosignature["witness"] == demo["witness_key"], cosignature
    checked = """async ([cosignature, checkpoint]) => {
        const {checkCosignature} = await import('/console/js/verify.js');
        return await checkCosignature(cosignature, checkpoint);
    }"""
    held = page.evaluate(checked, [cosignature, latest["json"]])
    assert held["ok"], held
    name, key_id, key = demo["witness_key"].split("+", 2)
    other_checkpoint = dict(latest["json"], tree_size=latest["json"]["tree_size"] + 1)
    for doctored, checkpoint in [
        (dict(cosignature, signature=flip(cosignature["signature"])), latest["json"]),
        (dict(cosignature, timestamp=cosignature["timestamp"] + 1), latest["json"]),
        (cosignature, other_checkpoint),
        # The key ID no longer matches the key it names.
        (dict(cosignature, witness=f"{name}+{flip(key_id)}+{key}"), latest["json"]),
    ]:
        failed = page.evaluate(checked, [doctored, checkpoint])
        assert not failed["ok"], (doctored, failed)
    # The ledger page shows the cosignature as checked here.
    page.goto(f"{demo['url']}/#/ledger")
    expect(page.get_by_text("cosigned by witness.example/console").first).to_be_visible()


def test_the_pages_blake3_is_blake3(main_page: Page) -> None:
    lengths = [0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 3073, 8193, 31744, 102400]
    got = main_page.evaluate("""async (lengths) => {
        const {blake3Hex} = await import('/console/js/blake3.js');
        return lengths.map((n) => blake3Hex(Uint8Array.from({length: n}, (_, i) => i % 251)));
    }""", lengths)
    want = [blake3.blake3(bytes(i % 251 for i in range(n))).hexdigest() for n in lengths]
    assert got == want
    chinese = "共享单车是否减少了青川市的短途汽车出行？"
    assert main_page.evaluate("async (t) => (await import('/console/js/blake3.js')).blake3Hex(t)", chinese) \
        == blake3.blake3(chinese.encode()).hexdigest()


def test_graphiql_runs_from_the_server_alone_with_the_consoles_token(main_page: Page, demo, artifacts: Path) -> None:
    page = main_page
    page.goto(f"{demo['url']}/graphql")
    expect(page.locator(".graphiql-container")).to_be_visible()
    expect(page.locator(".graphiql-container")).to_contain_text("tasks(first: 10)")
    page.get_by_role("button", name="Execute query").click()
    expect(page.locator(".result-window")).to_contain_text(QINGCHUAN_QUESTION)
    shot(page, artifacts, "09-graphiql")


def test_no_request_left_the_origin(session, demo) -> None:
    _, recorder = session
    origin = demo["url"]
    assert len(recorder.requests) > 20, recorder.requests
    foreign = [u for u in recorder.requests if not (u.startswith(origin + "/") or u.startswith(("blob:", "data:")))]
    assert foreign == [], foreign
    ws_origin = origin.replace("http://", "ws://")
    assert recorder.sockets and all(s.startswith(ws_origin + "/graphql/ws") for s in recorder.sockets), recorder.sockets
    # No script error and no refusal by the Content-Security-Policy on any page.
    assert recorder.problems == [], recorder.problems
    # The only refusals were the sign-in page asking, before a token was given, whether the
    # server wants one.
    assert all(r == ("POST", f"{origin}/graphql", 401) for r in recorder.refused), recorder.refused
    assert len(recorder.refused) <= 2, recorder.refused
