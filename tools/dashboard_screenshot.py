"""Take the dashboard's screenshot (docs/images/dashboard.png) from a populated server.

    python tools/dashboard_screenshot.py [--out docs/images/dashboard.png]

Starts a server in-process with ``--dashboard-port``, a password and a tenant; stores prefixes
of two models over the wire (the test tooling's ``tests/support/dashboard_data.py``), looks some
of them up for a minute of charts (the history sampled every 0.5 s instead of 2 s), makes a
search index and a few slow-log entries, then logs in through the page in headless Chromium
(``tests/support/browser.py``) and saves the whole page as PNG.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from tests.support.browser import browser_missing, chromium  # noqa: E402
from tests.support.dashboard_data import store_prefix  # noqa: E402
from tests.support.servers import ThreadServer, free_port, make_settings  # noqa: E402

PASSWORD = "screenshot-pass"
MODELS = ("LlamaForCausalLM", "Qwen2ForCausalLM")


def look_up(r: redis.Redis, names: list[str], rng: random.Random, hit_share: float) -> None:
    weights = [1.0 / (k + 1) for k in range(len(names))]
    for _ in range(6):
        if rng.random() < hit_share:
            r.execute_command("KV.PREFIX.LOOKUP", rng.choices(names, weights)[0])
        else:
            r.execute_command("KV.PREFIX.LOOKUP", f"cold:{rng.randrange(10**6)}")


def populate(r: redis.Redis, srv: ThreadServer, seconds: float) -> list[str]:
    rng = random.Random(7)
    names = []
    for i in range(36):
        model = MODELS[i % 2]
        ns = f"{'chat' if i % 3 else 'rag'}:{model[:5].lower()}:{i:03d}"
        tokens = rng.choice((128, 256, 512, 1024, 2048))
        codec = ("fp16", "int8", "turbo4")[i % 3]
        store_prefix(r, ns, tokens, layers=4, dim=64, codec=codec, model=model, prefill_ms=tokens // 2)
        names.append(ns)
    for ns in names[:4]:
        r.execute_command("KV.PREFIX.PIN", ns)
    r.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "0")  # a few entries for the slow log
    store_prefix(r, "rag:llama:long", 8192, layers=4, dim=64, codec="fp16", model=MODELS[0], prefill_ms=4100)
    r.execute_command("KV.PREFIX.LOOKUP", "rag:llama:long")
    r.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "10000")
    names.append("rag:llama:long")
    tenant = redis.Redis(port=srv.port, username="acme", password="acme-pass")
    for i in range(3):
        store_prefix(tenant, f"support:{i:03d}", 512, layers=4, dim=64, codec="int8", model=MODELS[1], prefill_ms=300)
        for _ in range(60 - 20 * i):
            tenant.execute_command("KV.PREFIX.LOOKUP", f"support:{i:03d}")
    tenant.close()
    r.execute_command("FT.CREATE", "docs", "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "title", "TEXT",
                      "embedding", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "COSINE")
    for i in range(120):
        r.hset(f"doc:{i}", mapping={"title": f"document {i}", "embedding": bytes(16)})
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        step += 1
        look_up(r, names, rng, 0.55 + 0.35 * min(1.0, step / 200))  # the cache warms up: the hit rate climbs
        time.sleep(0.1)
    return names


def keep_looking_up(port: int, names: list[str], stop: threading.Event) -> None:
    """Lookups while the browser renders, so the charts run to their right edge."""
    rng = random.Random(11)
    with redis.Redis(port=port, password=PASSWORD) as r:
        while not stop.is_set():
            look_up(r, names, rng, 0.9)
            time.sleep(0.1)


def shoot(url: str, out: str, width: int = 1360) -> None:
    """Log in through the page and save all of it (the viewport set to the page's height)."""
    from selenium.webdriver.support.ui import Select

    with chromium(width, 1000) as driver:
        driver.get(url)
        time.sleep(1)
        driver.find_element("id", "login-password").send_keys(PASSWORD)
        driver.find_element("id", "login-submit").click()
        time.sleep(2)
        Select(driver.find_element("id", "page-size")).select_by_value("25")
        driver.execute_script("document.activeElement.blur()")
        time.sleep(4)
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        time.sleep(3.5)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "dashboard.png"))
    parser.add_argument("--seconds", type=float, default=40.0, help="how long lookups run (the charts)")
    args = parser.parse_args(argv)
    missing = browser_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        settings = make_settings(Path(tmp), dashboard_port=free_port(), requirepass=PASSWORD,
                                 tenants=("acme:acme-pass",), appendonly=False, maxmemory=1 << 30,
                                 kv_maxmemory=64 << 20)
        srv = ThreadServer(settings).start()
        try:
            srv.server.parts.dashboard.history.interval = 0.5
            r = redis.Redis(port=srv.port, password=PASSWORD)
            names = populate(r, srv, args.seconds)
            stop = threading.Event()
            looker = threading.Thread(target=keep_looking_up, args=(srv.port, names, stop), daemon=True)
            looker.start()
            try:
                shoot(f"http://127.0.0.1:{settings.dashboard_port}/", args.out)
            finally:
                stop.set()
                looker.join(10)
            r.close()
        finally:
            srv.stop()
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
